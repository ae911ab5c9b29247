"""Training speed alone and beside two other trainings: idaudit's process settings against
the same loop with the OpenMP runtime's defaults, in one invocation.

Each measurement is a fresh process that trains the spiral world (LeJEPA, the train command's
step) for a fixed time with torch's default thread count and prints its steps/s. "beside two"
runs three such processes at once and reports the median of the three. The baseline imports
torch before idaudit, so the OpenMP runtime starts with its own defaults (its threads spin
while they wait); idaudit's row calls ``idaudit.share_cpu()`` first, as the ``idaudit``
command does (``import idaudit`` alone changes nothing: a library user opts in).
The fair share beside two others is 1/3 of the idle speed.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

CHILD = r"""
import sys, time
mode, seconds = sys.argv[1], float(sys.argv[2])
if mode == "baseline":
    import torch  # the OpenMP runtime reads its settings now, before idaudit can set any
import idaudit
idaudit.share_cpu()  # the idaudit command's settings (too late to matter for the baseline)
import torch
from idaudit.models.encoders import build_encoder
from idaudit.training import TrainConfig, resolve_config
from idaudit.training.loop import Stepper
from idaudit.worlds import KINDS, build_world, make_spec

world = build_world(make_spec("spiral", rho=0.95))
cfg = resolve_config(world, TrainConfig(steps=1_000_000, seed=0))
torch.manual_seed(0)
source = world.pair_source(cfg.views, cfg.batch, torch.Generator().manual_seed(1),
                           torch.device("cpu"))
stepper = Stepper(source, build_encoder(*KINDS.get(world.name).default_encoder(world)), cfg, cfg.steps, 1.0,
                  source.gen, torch.device("cpu"))
for i in range(30):
    float(stepper.step(i))
n, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < seconds:
    float(stepper.step(30 + n))
    n += 1
print(n / (time.perf_counter() - t0))
"""


def measure(mode: str, copies: int, seconds: float) -> list[float]:
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, mode, str(seconds)],
                              stdout=subprocess.PIPE, text=True) for _ in range(copies)]
    out = []
    for p in procs:
        text, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"child failed ({p.returncode})")
        out.append(float(text.strip().splitlines()[-1]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="timed training per process")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    modes = ("baseline", "idaudit")
    alone: dict[str, list[float]] = {m: [] for m in modes}
    beside: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(args.repeats):  # interleaved, so that drifts of the machine hit both alike
        for mode in modes:
            alone[mode] += measure(mode, 1, args.seconds)
        for mode in modes:
            beside[mode].append(statistics.median(measure(mode, 3, args.seconds)))
    rows = {m: (statistics.median(alone[m]), statistics.median(beside[m])) for m in modes}
    print(f"spiral training step, {args.seconds:g} s per process, median of {args.repeats}:")
    for mode, label in (("baseline", "OpenMP defaults (torch imported first)"),
                        ("idaudit", "idaudit's settings")):
        a, b = rows[mode]
        print(f"  {label:40s} alone {a:6.1f} steps/s   beside two {b:6.1f} steps/s   "
              f"share {b / a:.2f} (fair: 0.33)")
    ratios = [i / b for i, b in zip(alone["idaudit"], alone["baseline"], strict=True)]
    print(f"  idle speed, idaudit / baseline: {rows['idaudit'][0] / rows['baseline'][0]:.2f}x "
          f"(ratio of medians; per-repeat ratios {min(ratios):.2f}–{max(ratios):.2f})")


if __name__ == "__main__":
    main()
