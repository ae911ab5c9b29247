"""What the base install (``pip install idaudit``, no extras) promises works without the extras.

Imports every module of src/idaudit, then runs the CLI on what the base install promises: its
version and help, an audit of arrays and a short training on a synthetic world. With
``--block-extras`` the packages that only an extra brings (computed from the installed
metadata: every distribution outside the closure of idaudit's base requirements) are made
unimportable first, so an environment with the extras (the test venv) checks the same thing a
fresh base venv does: an import that only an extra satisfies, as ``click`` was (ray brought it),
fails here. Exit 1 and a line per problem when a check fails.

    python scripts/check_base_install.py                 # in a base venv (CI, README command 1)
    python scripts/check_base_install.py --block-extras  # anywhere (tests/test_base_install.py)
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.metadata as md
import pkgutil
import re
import sys
import tempfile
from pathlib import Path

VENV_TOOLS = {"pip", "setuptools", "wheel"}  # in every fresh venv, whatever idaudit requires


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_class():
    try:  # pip's own copy: every venv has pip, and a base venv may have no packaging
        from pip._vendor.packaging.requirements import Requirement
    except ImportError:
        from packaging.requirements import Requirement
    return Requirement


def base_closure(root: str = "idaudit") -> set[str]:
    """Normalised names of the distributions idaudit's base requirements pull in."""
    Requirement = _requirement_class()
    seen: set[tuple[str, frozenset[str]]] = set()
    todo: list[tuple[str, frozenset[str]]] = [(root, frozenset())]
    while todo:
        name, extras = todo.pop()
        key = _normal(name)
        if (key, extras) in seen:
            continue
        seen.add((key, extras))
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for text in reqs:
            req = Requirement(text)
            envs = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((req.name, frozenset(req.extras)))
    return {k for k, _ in seen}


def extras_only_modules() -> set[str]:
    """Top-level import names that only distributions outside the base closure provide."""
    base = base_closure() | VENV_TOOLS
    blocked = set()
    for module, dists in md.packages_distributions().items():
        if not any(_normal(d) in base for d in dists):
            blocked.add(module)
    blocked.discard("idaudit")
    return blocked


class _Hide(importlib.abc.MetaPathFinder):
    """Every finder of ``sys.meta_path`` behind one that does not see the blocked names, so
    they read as not installed: ``find_spec`` gives None (as probes such as torch's expect) and
    ``import`` raises ModuleNotFoundError."""

    def __init__(self, names: set[str], finders: list) -> None:
        self.names, self.finders = names, finders

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in self.names:
            return None
        for finder in self.finders:
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") \
                else None
            if spec is not None:
                return spec
        return None

    def invalidate_caches(self) -> None:
        for finder in self.finders:
            if hasattr(finder, "invalidate_caches"):
                finder.invalidate_caches()


def import_all() -> list[str]:
    import idaudit

    problems = []
    names = sorted(m.name for m in pkgutil.walk_packages(idaudit.__path__, "idaudit."))
    for name in names:
        if name.endswith(".__main__"):
            continue  # runs the CLI (idaudit.__main__, idaudit.cli.__main__)
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - report every failure
            problems.append(f"import {name}: {type(exc).__name__}: {exc}")
    print(f"imported {sum(not n.endswith('.__main__') for n in names)} modules of idaudit")
    return problems


def run_cli() -> list[str]:
    """The CLI on what the base install promises: version, help, audit of arrays, a short
    training on the spiral world, its audit and its plans."""
    import numpy as np
    from typer.testing import CliRunner

    from idaudit.cli import app

    runner = CliRunner()
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(0)
        z = rng.standard_normal((2000, 3))
        q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
        np.savez(Path(tmp) / "a.npz", z=z, h=z @ q)
        cases = [
            (["--version"], 0, "idaudit "),
            (["-h"], 0, "audit"),
            (["audit", str(Path(tmp) / "a.npz"), "--min-r2", "0.99"], 0, "PASS"),
            (["audit", str(Path(tmp) / "a.npz")], 0, "NO GATE"),
            (["train", "--world", "spiral", "--steps", "30", "--n-eval", "500", "--eval-every",
              "0", "--quiet", "--out", str(Path(tmp) / "s.safetensors")], 0, "checkpoint"),
            (["audit", str(Path(tmp) / "s.safetensors"), "--n-eval", "500"], 0, "NO GATE"),
            (["plan", str(Path(tmp) / "s.safetensors"), "--pairs", "5", "--gallery", "500"], 0,
             "cost ratio"),
        ]
        for args, code, fragment in cases:
            res = runner.invoke(app, args)
            text = res.output
            if res.exit_code != code or fragment not in text:
                problems.append(f"idaudit {' '.join(args)}: exit {res.exit_code} (expected "
                                f"{code}), output {text[-300:]!r}")
            else:
                print(f"idaudit {' '.join(args[:2])} …: exit {code}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--block-extras", action="store_true",
                    help="make the packages that only an extra brings unimportable first")
    args = ap.parse_args()
    if args.block_extras:
        blocked = extras_only_modules()
        loaded = sorted(m for m in blocked if m in sys.modules)
        if loaded:
            print(f"already imported before blocking: {loaded}")
            return 1
        sys.meta_path[:] = [_Hide(blocked, list(sys.meta_path))]
        print(f"blocked {len(blocked)} modules of the extras' packages")
    problems = import_all()
    try:
        problems += run_cli()
    except Exception as exc:  # noqa: BLE001 - e.g. the CLI itself does not import
        problems.append(f"the CLI: {type(exc).__name__}: {exc}")
    for p in problems:
        print(p)
    print("base install: " + ("OK" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
