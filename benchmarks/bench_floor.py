"""What the uninformative floor costs an audit: the audit's metrics with ``floor_draws`` K
(default 100) against the same call with the floor off, same arrays, same process,
interleaved; and the whole ``idaudit audit FILE`` process with and without it. Medians.

The floor is a seeded control (h's rows shuffled against z's); the issue asks that it cost at
most 10 % of the audit.

    python benchmarks/bench_floor.py [--draws 100] [--repeats 5] [--sizes 1000x2,10000x2,...]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from idaudit.core.defaults import FLOOR_DRAWS
from idaudit.maths.metrics import audit_metrics


def arrays(n: int, m: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A 2-D latent seen through a random linear map into m float32 columns, with pairs."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 2))
    zp = 0.95 * z + np.sqrt(1 - 0.95**2) * rng.normal(size=(n, 2))
    a = rng.normal(size=(2, m)) / np.sqrt(2)
    noise = 0.1 * rng.normal(size=(n, m))
    return {"z": z, "h": (z @ a + noise).astype(np.float32),
            "h_prime": (zp @ a + noise).astype(np.float32), "rho": np.float64(0.95)}


def timed(a: dict[str, np.ndarray], draws: int) -> float:
    """Seconds of one audit_metrics call on ``a`` with ``draws`` shuffles (0: no floor)."""
    t = time.perf_counter()
    audit_metrics(a["z"], a["h"], a["h_prime"], 0.95, floor_draws=draws)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=FLOOR_DRAWS)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sizes", default="1000x2,10000x2,1100x512,10000x512",
                    help="n×m pairs (an audit of m = 512 needs n ≥ 1038 rows)")
    args = ap.parse_args()
    exe = Path(sys.executable).with_name("idaudit")
    print(f"floor: {args.draws} shuffles; medians of {args.repeats}")
    print(f"{'n × m':>12} | {'metrics off':>11} | {'metrics on':>10} | {'share':>6} | "
          f"{'process off':>11} | {'process on':>10} | {'share':>6}")
    for size in args.sizes.split(","):
        n, m = (int(v) for v in size.split("x"))
        a = arrays(n, m)
        off, on = [], []
        timed(a, args.draws)  # warm-up
        for _ in range(args.repeats):
            off.append(timed(a, 0))
            on.append(timed(a, args.draws))
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "a.npz"
            np.savez(path, **a)
            p_off, p_on = [], []
            for _ in range(args.repeats):
                for draws, out in ((0, p_off), (args.draws, p_on)):
                    cmd = [str(exe), "audit", str(path), "--floor-draws", str(draws),
                           "--json", str(Path(tmp) / "a.json")]
                    t = time.perf_counter()
                    subprocess.run(cmd, check=True, capture_output=True)
                    out.append(time.perf_counter() - t)
        mo, mn = statistics.median(off), statistics.median(on)
        po, pn = statistics.median(p_off), statistics.median(p_on)
        print(f"{n:>6} × {m:<4} | {mo:>9.3f} s | {mn:>8.3f} s | {(mn - mo) / mn:>5.1%} | "
              f"{po:>9.3f} s | {pn:>8.3f} s | {(pn - po) / pn:>5.1%}")


if __name__ == "__main__":
    main()
