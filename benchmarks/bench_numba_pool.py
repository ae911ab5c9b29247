"""Training speed in a process that has run numba's parallel SIGReg kernel against one that has
not, beside one busy process, in one invocation.

Each measurement is a fresh process that trains the spiral world (LeJEPA, the train command's
step) for ``--steps`` steps and prints ms per step. The "numba" process first runs one SIGReg
large enough for the parallel kernel (8 192 samples × 256 slices, as an audit's Gaussianity
test does), which starts numba's thread pool; the "plain" one does not. A busy process (a pure
Python loop) runs beside both, as on a shared machine. The two kinds alternate in both orders
(plain first, then numba first), so drift of the machine hits both; the ratio is the median
of the per-round ratios (1.0: the pool costs nothing afterwards).

    python benchmarks/bench_numba_pool.py [--rounds 4] [--steps 300] [--src DIR] [--alone|--busy N]

``--src DIR`` runs another checkout's ``src`` (before/after comparisons).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

CHILD = r"""
import sys, time
mode, steps, torch_first = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
if torch_first:
    import torch  # as a test suite or a user's script may: OpenMP starts with its defaults
import idaudit
idaudit.share_cpu()  # its thread settings first, as the idaudit command applies them
import torch
from idaudit.models.encoders import build_encoder
from idaudit.maths.losses import random_directions, sigreg
from idaudit.training import TrainConfig, resolve_config
from idaudit.training.loop import Stepper
from idaudit.worlds import KINDS, build_world, make_spec

if mode == "numba":
    from idaudit.maths import _ep_numba
    import numpy as np
    assert _ep_numba._parallel_ok(np.empty((256, 8192))), "the parallel kernel would not run"
    g = torch.Generator().manual_seed(0)
    sigreg(torch.randn(8192, 2, generator=g), random_directions(2, 256, g)).item()
world = build_world(make_spec("spiral", rho=0.95))
cfg = resolve_config(world, TrainConfig(steps=1_000_000, seed=0))
torch.manual_seed(0)
source = world.pair_source(cfg.views, cfg.batch, torch.Generator().manual_seed(1),
                           torch.device("cpu"))
stepper = Stepper(source, build_encoder(*KINDS.get(world.name).default_encoder(world)), cfg,
                  cfg.steps, 1.0, source.gen, torch.device("cpu"))
for i in range(20):
    float(stepper.step(i))
t0 = time.perf_counter()
for i in range(steps):
    float(stepper.step(20 + i))
print(1000 * (time.perf_counter() - t0) / steps)
"""


def measure(mode: str, steps: int, env: dict[str, str], torch_first: bool) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, mode, str(steps), str(int(torch_first))],
                         env=env,
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"{mode} child failed ({out.returncode}): {out.stderr[-400:]}")
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4, help="rounds of both kinds (even: both orders)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--src", help="another checkout's src directory to run")
    ap.add_argument("--alone", action="store_true", help="no busy process beside")
    ap.add_argument("--busy", type=int, default=1, help="busy processes beside (default 1)")
    ap.add_argument("--torch-first", action="store_true",
                    help="import torch before idaudit (as a test suite's conftest does)")
    args = ap.parse_args()
    env = dict(os.environ)
    if args.src:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (args.src, env.get("PYTHONPATH")) if p)
    busy = [] if args.alone else [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                                  for _ in range(args.busy)]
    times: dict[str, list[float]] = {"plain": [], "numba": []}
    ratios = []
    try:
        for r in range(args.rounds):
            order = ("plain", "numba") if r % 2 == 0 else ("numba", "plain")
            got = {m: measure(m, args.steps, env, args.torch_first) for m in order}
            for m, t in got.items():
                times[m].append(t)
            ratios.append(got["numba"] / got["plain"])
            print(f"round {r + 1} ({order[0]} first): plain {got['plain']:.2f} ms/step, "
                  f"after numba's pool {got['numba']:.2f} ms/step, ratio {ratios[-1]:.2f}",
                  flush=True)
    finally:
        for b in busy:
            b.kill()
            b.wait()
    import torch

    beside = "alone" if args.alone else f"beside {args.busy} busy process(es)"
    if args.torch_first:
        beside += ", torch imported before idaudit"
    print(f"\ntorch {torch.__version__}, {os.cpu_count()} CPUs, {beside}, {args.steps} steps; "
          f"medians of {args.rounds} rounds")
    print(f"plain {statistics.median(times['plain']):.2f} ms/step, after numba's parallel "
          f"kernel {statistics.median(times['numba']):.2f} ms/step: ratio "
          f"{statistics.median(ratios):.2f} (per round {min(ratios):.2f}–{max(ratios):.2f})")


if __name__ == "__main__":
    main()
