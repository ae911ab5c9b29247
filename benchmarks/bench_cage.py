"""What the cage costs: programs from files run confined against the same run in-process.

    python benchmarks/bench_cage.py [--rounds 5]

Two measurements, each alternating the caged and the in-process run (``IDAUDIT_CAGE=off``
with ``--trust-code``) so that the machine's drift cancels, medians printed with the ratio:

* a whole ``idaudit audit`` command of a TorchScript encoder on the spiral world (10 000
  evaluation rows): process start, the zygote, the fork, the transfers, the metrics;
* the embedding step alone, in one process: a TorchScript Linear 2 → 1024 on 10 000 inputs,
  so that 10 000 × 1 024 float32 embeddings (41 MB) cross the pipe, the cage already started.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _audit(path: Path, caged: bool) -> float:
    env = dict(os.environ)
    args = [sys.executable, "-m", "idaudit", "audit", str(path), "--world", "spiral",
            "--floor-draws", "0"]
    if not caged:
        env["IDAUDIT_CAGE"] = "off"
        args.append("--trust-code")
    start = time.perf_counter()
    subprocess.run(args, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    import torch

    from idaudit.loading.loaders import load_target
    from idaudit.models.encoders import embed

    work = Path(tempfile.mkdtemp())
    torch.manual_seed(0)
    small = work / "spiral.pt"
    torch.jit.script(torch.nn.Sequential(torch.nn.Linear(2, 64), torch.nn.Tanh(),
                                         torch.nn.Linear(64, 2))).save(str(small))
    wide = work / "wide.pt"
    net = torch.jit.script(torch.nn.Linear(2, 1024))
    net.save(str(wide))
    times: dict[str, list[float]] = {"caged": [], "in-process": []}
    for _ in range(rounds):
        times["caged"].append(_audit(small, True))
        times["in-process"].append(_audit(small, False))
    c, p = (statistics.median(times[k]) for k in ("caged", "in-process"))
    print(f"idaudit audit (TorchScript, spiral, 10 000 rows), median of {rounds}: caged "
          f"{c:.2f} s, in-process {p:.2f} s: +{c - p:.2f} s ({c / p:.2f}x)")

    x = torch.randn(10_000, 2)
    loaded = load_target(wide)
    embed(loaded.module, x[:2])  # started, loaded
    step: dict[str, list[float]] = {"caged": [], "in-process": []}
    for _ in range(rounds):
        t = time.perf_counter()
        h = embed(loaded.module, x)
        step["caged"].append(time.perf_counter() - t)
        t = time.perf_counter()
        h0 = embed(net, x)
        step["in-process"].append(time.perf_counter() - t)
    assert torch.allclose(h, h0, rtol=1e-5, atol=1e-6)
    c, p = (statistics.median(step[k]) for k in ("caged", "in-process"))
    print(f"embed 10 000 x 1 024 (float32, 41 MB back), median of {rounds}: caged {c:.3f} s, "
          f"in-process {p:.3f} s: +{c - p:.3f} s")


if __name__ == "__main__":
    main()
