"""Whole-run cost per training step of the 2D spiral LeJEPA run: idaudit against the paper's
own code, same config (ρ = 0.95, λ = 1e-3, batch 256, lr 3e-3, seed 1337), same machine, in one
invocation.

Each side runs as a fresh process for 500 and for 2 500 steps; the per-step cost is the
difference of the two wall times over 2 000 steps, so start-up, data generation and the final
evaluation cancel while periodic logging and evaluation stay in. The paper's code is not part
of idaudit: give a directory holding its ``experiments/run.py`` (a checkout of the authors'
repository; this script writes a config beside nothing of theirs, in a temporary directory).
Rounds alternate which side runs first; the ratio is the median of the per-round ratios.

    python benchmarks/bench_vs_paper.py --paper DIR [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIG = """experiment: 2d
out: {out}
N: 2
source_dist: gaussian
num_eval: 10000
steps: {steps}
lr: 3.0e-3
batch_size: 256
rho: 0.95
log_every: 500
runs:
  spiral_lejepa: {{mixing: spiral, encoder: mlp, hidden: 256, mode: lejepa, lamb: 1.0e-3}}
seeds: [1337]
"""


def wall(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} … failed ({proc.returncode}): {proc.stderr[-500:]}")
    return time.perf_counter() - t0


def paper(steps: int, code: Path, tmp: Path, env: dict[str, str]) -> float:
    cfg = tmp / f"spiral-{steps}.yaml"
    cfg.write_text(CONFIG.format(out=tmp / f"paper-{steps}", steps=steps))
    return wall([sys.executable, "run.py", "--config", str(cfg), "--run", "spiral_lejepa",
                 "--seed", "1337"], code / "experiments", env)


def idaudit(steps: int, tmp: Path, env: dict[str, str]) -> float:
    return wall([sys.executable, "-m", "idaudit", "train", "--world", "spiral", "--rho", "0.95",
                 "--objective", "lejepa", "--lamb", "1e-3", "--steps", str(steps), "--seed",
                 "1337", "--out", str(tmp / f"idaudit-{steps}.safetensors"), "-q"], tmp, env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--paper", required=True, type=Path,
                    help="a directory holding the paper's experiments/run.py")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if not (args.paper / "experiments" / "run.py").is_file():
        raise SystemExit(f"{args.paper} holds no experiments/run.py")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # both on the CPU, whatever the machine
    tmp = Path(tempfile.mkdtemp(prefix="bench-vs-paper-"))
    ratios, per = [], {"paper": [], "idaudit": []}
    try:
        for r in range(args.rounds):
            sides = ["paper", "idaudit"] if r % 2 == 0 else ["idaudit", "paper"]
            got = {}
            for side in sides:
                run = (lambda s: paper(s, args.paper, tmp, env)) if side == "paper" \
                    else (lambda s: idaudit(s, tmp, env))
                short, long = run(500), run(2500)
                got[side] = 1000 * (long - short) / 2000
                per[side].append(got[side])
            ratios.append(got["paper"] / got["idaudit"])
            print(f"round {r + 1} ({sides[0]} first): paper {got['paper']:.1f} ms/step, idaudit "
                  f"{got['idaudit']:.1f} ms/step: {ratios[-1]:.2f}×", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    import torch

    print(f"\ntorch {torch.__version__}, {os.cpu_count()} CPUs; medians of {args.rounds} rounds: "
          f"paper {statistics.median(per['paper']):.1f} ms/step, idaudit "
          f"{statistics.median(per['idaudit']):.1f} ms/step: {statistics.median(ratios):.2f}× "
          f"(per round {min(ratios):.2f}–{max(ratios):.2f}×)")


if __name__ == "__main__":
    main()
