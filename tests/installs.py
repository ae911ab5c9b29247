"""Run a doc's example on exactly the install it states: ``idaudit`` with the named extras.

The test venv holds every extra (dev). A subprocess given :func:`env_for` sees only the
distributions ``pip install "idaudit[EXTRAS]"`` would bring: the others' modules are not found
(``import matplotlib`` raises ModuleNotFoundError, ``importlib.util.find_spec`` gives None) and
their metadata is gone (``importlib.metadata.version`` raises PackageNotFoundError), as on a
fresh install without them. The closure is computed from pyproject.toml's requirements (the
one declaration of the extras) and each installed distribution's own requirements; the hiding
is a ``sitecustomize`` module on ``PYTHONPATH``, so every Python the example starts (the
``idaudit`` command, ``python -c``, workers that inherit the environment) hides the same.

Example:
    >>> env = env_for({"plot"})                                         # doctest: +SKIP
    >>> subprocess.run(["idaudit", "audit", "s.safetensors", "--plot", "a.png"], env=env)
"""

from __future__ import annotations

import atexit
import functools
import importlib.metadata as md
import os
import re
import shutil
import tempfile
import tomllib
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
#: what a fresh ``python3 -m venv`` holds beside the install
VENV_OWN = frozenset({"pip", "setuptools", "wheel"})


def norm(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_extras() -> dict[str, list[str]]:
    """pyproject.toml's optional dependencies: extra → requirement strings."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return dict(project["optional-dependencies"])


def _base() -> list[str]:
    return list(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])


@functools.cache
def _installed() -> dict[str, md.Distribution]:
    return {norm(d.metadata["Name"]): d for d in md.distributions()}


def closure(extras: Iterable[str]) -> frozenset[str]:
    """The installed distributions ``idaudit[extras]`` brings (normalised names), idaudit too.

    Args:
        extras: extra names declared in pyproject.toml.

    Returns:
        The set of distribution names reachable from idaudit's base requirements and those
        extras', following each installed distribution's requirements (markers evaluated).
    """
    table = declared_extras()
    unknown = set(extras) - set(table)
    if unknown:
        raise ValueError(f"no such extra in pyproject.toml: {sorted(unknown)}")
    todo = [(Requirement(r), frozenset()) for r in _base()]
    todo += [(Requirement(r), frozenset()) for e in extras for r in table[e]]
    seen: set[tuple[str, frozenset[str]]] = set()
    found = {"idaudit"}
    installed = _installed()
    while todo:
        req, _ = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = norm(req.name)
        key = (name, frozenset(req.extras))
        if key in seen or name not in installed:
            continue
        seen.add(key)
        found.add(name)
        for sub in installed[name].requires or []:
            r = Requirement(sub)
            if r.marker is None or r.marker.evaluate({"extra": ""}) or any(
                    r.marker.evaluate({"extra": e}) for e in req.extras):
                todo.append((r, frozenset()))
    return frozenset(found)


def hidden(extras: Iterable[str]) -> tuple[frozenset[str], frozenset[str]]:
    """(distributions, top-level modules) the install of ``idaudit[extras]`` would not have."""
    keep = closure(extras) | VENV_OWN
    dists = frozenset(set(_installed()) - keep)
    providers: dict[str, set[str]] = {}
    for module, names in md.packages_distributions().items():
        providers.setdefault(module, set()).update(norm(n) for n in names)
    modules = frozenset(m for m, names in providers.items() if names and names <= dists)
    return dists, modules


HIDER = '''\
"""Written by tests/installs.py: this interpreter sees the install idaudit[{extras}] only."""
import importlib.machinery as _machinery
import re as _re

_DISTS = frozenset({dists!r})
_MODULES = frozenset({modules!r})
_find_spec = _machinery.PathFinder.find_spec
_find_distributions = _machinery.PathFinder.find_distributions


def _spec(fullname, path=None, target=None):
    if path is None and fullname in _MODULES:
        return None
    return _find_spec(fullname, path, target)


def _distributions(*args, **kwargs):
    for dist in _find_distributions(*args, **kwargs):
        name = dist.metadata["Name"] or ""
        if _re.sub(r"[-_.]+", "-", name).lower() not in _DISTS:
            yield dist


_machinery.PathFinder.find_spec = staticmethod(_spec)
_machinery.PathFinder.find_distributions = staticmethod(_distributions)
'''


@functools.cache
def _hider_dir(extras: tuple[str, ...]) -> str:
    dists, modules = hidden(extras)
    where = Path(tempfile.mkdtemp(prefix="idaudit-install-"))
    atexit.register(shutil.rmtree, where, True)  # this test process's own, removed at its exit
    (where / "sitecustomize.py").write_text(HIDER.format(
        extras=",".join(extras), dists=sorted(dists), modules=sorted(modules)))
    return str(where)


def env_for(extras: Iterable[str], base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment whose Pythons see exactly ``idaudit[extras]``'s distributions.

    Args:
        extras: the extras the example states (an empty set: the base install).
        base: the environment to start from (default: this process's).

    Returns:
        A copy of ``base`` with the hiding ``sitecustomize`` first on ``PYTHONPATH``.
    """
    env = dict(os.environ if base is None else base)
    where = _hider_dir(tuple(sorted(set(extras))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (where, env.get("PYTHONPATH")) if p)
    return env
