"""Prove that two source trees of idaudit give the same audit metrics, number for number.

    python scripts/compare_trees.py --before OLD/src --after NEW/src [--work DIR] [--skip-demo]

Every case runs ``python -m idaudit.cli …`` twice with the same interpreter (sys.executable):
once with PYTHONPATH=<before>, once with PYTHONPATH=<after> (which overrides an editable
install; each child reports ``idaudit.__file__`` and the script checks it lies in that tree).
The inputs are made once and audited by both trees; each tree renders its own Reacher images
and trains its own demo checkpoint, in its own cache folders. The two ``--json`` reports are
then walked together: the same keys everywhere, strings, bools and None equal, every number
within 1e-12 (NaN equal to NaN), and the same exit code. One line per case; exit 0 when every
case is OK, 1 otherwise.

Cases: ``demo`` (world → train → audit of the trained spiral checkpoint, its audit.json and
plan.json; minutes per tree, --skip-demo leaves it out), and audits of arrays (.npz, with the
bootstrap, circular and simulated-Gaussianity groups; also label-free), of a torch.save state
dict with ``--arch module:factory`` on the spiral world, and of a Hugging Face ViT directory on
the Reacher world at 32 px.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOL = 1e-12
EXCLUDED: set[str] = set()  # keys holding paths or timings; none of the reports here has one
CHILD = ("import runpy, sys, idaudit; print('idaudit.__file__ =', idaudit.__file__, "
         "file=sys.stderr, flush=True); runpy.run_module('idaudit.cli', run_name='__main__', "
         "alter_sys=True)")
FACTORY = '''"""The user's network for the .pt case: a small MLP on 2-d inputs."""

from torch import nn


def make_mlp(hidden: int = 32, out: int = 4) -> nn.Module:
    return nn.Sequential(nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, out))
'''


@dataclass
class Case:
    name: str
    args: list[str]  # after `python -m idaudit.cli`; the audits get `--json FILE` appended
    reports: tuple[str, ...] = ()  # demo: the files it writes under --out, else the --json file


CASES = [
    Case("npz", ["audit", "a.npz", "--bootstrap", "200", "--circular", "0", "--gauss-sims", "20",
                 "--test-fraction", "0.4"]),
    Case("npz-label-free", ["audit", "a.npz", "--label-free", "--gauss-sims", "20"]),
    Case("pt-arch", ["audit", "mlp.pt", "--arch", "mlpfactory:make_mlp", "--arch-kwargs",
                     '{"hidden": 32, "out": 4}', "--world", "spiral", "--n-eval", "4000",
                     "--bootstrap", "50", "--seed", "5"]),
    Case("hf-vit", ["audit", "vit", "--pool", "cls", "--normalize", "imagenet", "--world",
                    "reacher", "--image-size", "32", "--n-eval", "200", "--bootstrap", "30"]),
]
DEMO = Case("demo", ["demo", "--out", "demo"], ("demo/audit.json", "demo/plan.json"))


def make_inputs(folder: Path) -> None:
    """The audited files, made once: arrays (numpy, a fixed seed), an MLP's state dict and its
    factory module, a random-weight ViT directory (torch.manual_seed)."""
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # save_pretrained's bar
    import numpy as np
    import torch
    from transformers import ViTConfig, ViTModel

    rng = np.random.default_rng(20240)
    n, d, m, rho = 2000, 3, 5, 0.9
    z = rng.standard_normal((n, d))
    z[:, 0] = rng.uniform(-math.pi, math.pi, n)  # latent 0 is an angle (--circular 0)
    z_prime = rho * z + math.sqrt(1 - rho**2) * rng.standard_normal((n, d))
    mix = rng.standard_normal((d, m))
    h, h_prime = (np.tanh(v @ mix) + 0.05 * rng.standard_normal((n, m)) for v in (z, z_prime))
    np.savez(folder / "a.npz", z=z, h=h, h_prime=h_prime, rho=np.float64(rho))

    (folder / "mlpfactory.py").write_text(FACTORY)
    sys.path.insert(0, str(folder))
    from mlpfactory import make_mlp  # type: ignore[import-not-found]

    torch.manual_seed(7)
    torch.save(make_mlp(32, 4).state_dict(), folder / "mlp.pt")
    torch.manual_seed(3)
    ViTModel(ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1,
                       num_attention_heads=2, intermediate_size=64)).save_pretrained(folder / "vit")


def run_child(case: Case, src: Path, tree: str, work: Path) -> tuple[int, list[Path]]:
    """Run the case with PYTHONPATH=src: in work/inputs (the demo: in work/TREE, where it
    writes); its exit code and report files."""
    out = work / tree
    out.mkdir(exist_ok=True)
    cwd = out if case.reports else work / "inputs"
    args = list(case.args)
    reports = [cwd / r for r in case.reports]
    if not case.reports:
        reports = [out / f"{case.name}.json"]
        args += ["--json", str(reports[0])]
    env = dict(os.environ, PYTHONPATH=str(src), PYTHONDONTWRITEBYTECODE="1", MUJOCO_GL="egl",
               IDAUDIT_CACHE=str(out / "cache"), NUMBA_CACHE_DIR=str(out / "numba"),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    log = out / f"{case.name}.log"
    start = time.perf_counter()
    with log.open("w") as f:
        code = subprocess.run([sys.executable, "-c", CHILD, *args], cwd=cwd, env=env, stdout=f,
                              stderr=subprocess.STDOUT).returncode
    seconds = time.perf_counter() - start
    origin = next((line.split("= ", 1)[1] for line in log.read_text().splitlines()
                   if line.startswith("idaudit.__file__ = ")), "?")
    print(f"  {tree:6} exit {code}, {seconds:6.1f} s, idaudit from {origin}")
    if not Path(origin).resolve().is_relative_to(src.resolve()):
        sys.exit(f"{case.name}: the {tree} child imported idaudit from {origin}, not {src}")
    missing = [str(r) for r in reports if not r.is_file()]
    if missing:
        sys.exit(f"{case.name}: the {tree} child wrote no {', '.join(missing)}; see {log}")
    return code, reports


def walk(a: Any, b: Any, path: str, diffs: list[str], numbers: list[float]) -> None:
    """Compare two JSON values; append each difference to ``diffs``, each |a − b| to
    ``numbers``."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(a.keys() ^ b.keys()):
            diffs.append(f"{path}/{key}: only in {'before' if key in a else 'after'}")
        for key in a.keys() & b.keys():
            if key not in EXCLUDED:
                walk(a[key], b[key], f"{path}/{key}", diffs, numbers)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            walk(x, y, f"{path}[{i}]", diffs, numbers)
    elif (isinstance(a, (int, float)) and isinstance(b, (int, float))
          and not isinstance(a, bool) and not isinstance(b, bool)):
        nans = math.isnan(a) + math.isnan(b)
        diff = 0.0 if a == b or nans == 2 else math.inf if nans else abs(a - b)
        numbers.append(diff)
        if diff > TOL or type(a) is not type(b):
            diffs.append(f"{path}: {a!r} vs {b!r}")
    elif type(a) is not type(b) or a != b:
        diffs.append(f"{path}: {a!r} vs {b!r}")


def compare(case: Case, before: Path, after: Path, work: Path) -> bool:
    """Run the case in both trees and compare exit codes and reports; print a line per report;
    whether all are equal."""
    print(f"{case.name}: {' '.join(case.args)}")
    (code_b, reports_b), (code_a, reports_a) = (run_child(case, src, tree, work) for src, tree
                                                in ((before, "before"), (after, "after")))
    ok = code_b == code_a
    if not ok:
        print(f"  exit codes differ: before {code_b}, after {code_a}")
    for rb, ra in zip(reports_b, reports_a):
        diffs: list[str] = []
        numbers: list[float] = []
        walk(json.loads(rb.read_text()), json.loads(ra.read_text()), "", diffs, numbers)
        keys_equal = not any("only in" in d for d in diffs)
        label = f"{case.name}/{rb.name}" if case.reports else case.name
        print(f"{label}: {len(numbers)} numbers compared, max |diff| = "
              f"{max(numbers, default=0.0):.3g}, keys equal: {'yes' if keys_equal else 'no'} -> "
              f"{'DIFF' if diffs else 'OK'}")
        for d in diffs[:50]:
            print(f"    {d}")
        ok = ok and not diffs
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the old tree's src folder")
    parser.add_argument("--after", type=Path, required=True, help="the new tree's src folder")
    parser.add_argument("--work", type=Path, help="an empty or new folder (default: a temp one)")
    parser.add_argument("--skip-demo", action="store_true", help="leave the demo out")
    args = parser.parse_args()
    for src in (args.before, args.after):
        if not (src / "idaudit" / "__init__.py").is_file():
            parser.error(f"{src} holds no idaudit package")
    work = (args.work or Path(tempfile.mkdtemp(prefix="compare-trees-"))).resolve()
    if work.exists() and any(work.iterdir()):
        parser.error(f"--work {work} is not empty")
    (work / "inputs").mkdir(parents=True)
    print(f"work folder {work}; tolerance {TOL}; excluded keys: {sorted(EXCLUDED) or 'none'}")
    make_inputs(work / "inputs")
    cases = CASES if args.skip_demo else [*CASES, DEMO]
    results = [compare(case, args.before.resolve(), args.after.resolve(), work) for case in cases]
    print("all cases OK" if all(results) else "SOME CASES DIFFER")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
