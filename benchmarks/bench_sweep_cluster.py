"""Sweep throughput (runs per minute) on Ray clusters of 1, 2 and 3 one-CPU worker nodes
(``--nodes``), side by side with the local pool of 1 and 2 workers, in one invocation (root
only: the nodes live in network namespaces of their own, tests/netns_cluster.py). On a 2-core
machine three one-CPU nodes share two cores: their figure shows the scheduling's overhead, not
a third core's gain.

Each measurement is one whole ``idaudit sweep`` command on a fresh OUT (the Ray ones include
connecting and the node check, the pool ones spawning its workers), of the same small 2D suite;
the setups alternate within each round and the figure is the median over rounds. The
clusters stay up across rounds (their start-up is printed, not counted). The ratios are each
setup's runs/min against the local pool of 1 worker.

    python benchmarks/bench_sweep_cluster.py --runs 6 --steps 600 --rounds 3 [--nodes 1,2,3]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from netns_cluster import Cluster, unavailable  # noqa: E402
from spiral_suite import write_suite  # noqa: E402

IDAUDIT = [sys.executable, "-m", "idaudit"]


def _timed(run, argv: list[str]) -> float:
    t0 = time.perf_counter()
    res = run(argv)
    seconds = time.perf_counter() - t0
    if res.returncode != 0 or " ok, 0 failed" not in res.stdout:
        sys.exit(f"sweep failed (exit {res.returncode}): {res.stdout[-500:]} {res.stderr[-1500:]}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=6, help="runs in the suite")
    ap.add_argument("--steps", type=int, default=600, help="training steps per run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nodes", default="1,2,3", help="the clusters' sizes: one-CPU worker "
                    "nodes, comma-separated")
    args = ap.parse_args()
    if (why := unavailable()) is not None:
        sys.exit(f"no namespace cluster here: {why}")
    work = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    suite = write_suite(work / "suite.toml", args.steps, str(list(range(args.runs))), n_eval=1000)
    counts = sorted({int(n) for n in args.nodes.split(",")})
    with contextlib.ExitStack() as stack:
        clusters = {n: stack.enter_context(Cluster(workers=n, cpus_per_worker=1)) for n in counts}
        print("cluster start-up: " + ", ".join(f"{n} node(s) {c.startup_s:.1f} s"
                                               for n, c in clusters.items()))

        def local(workers: int):
            def go(r: int) -> float:
                out = work / f"pool{workers}-{r}"
                return _timed(lambda a: subprocess.run(a, capture_output=True, text=True),
                              [*IDAUDIT, "sweep", str(suite), "--out", str(out),
                               "--workers", str(workers)])
            return go

        def on(cluster: Cluster, nodes: int):
            def go(r: int) -> float:
                out = work / f"ray{nodes}-{r}"
                return _timed(lambda a: cluster.run_driver(a, timeout=3600),
                              [*IDAUDIT, "sweep", str(suite), "--out", str(out),
                               "--executor", "ray", "--address", cluster.address])
            return go

        setups = {"local pool, 1 worker": local(1), "local pool, 2 workers": local(2),
                  **{f"Ray, {n} node{'s' if n > 1 else ''} x 1 CPU": on(c, n)
                     for n, c in clusters.items()}}
        times: dict[str, list[float]] = {k: [] for k in setups}
        for r in range(args.rounds):
            order = list(setups) if r % 2 == 0 else list(reversed(setups))
            for name in order:
                times[name].append(setups[name](r))
            print(f"round {r + 1}: " + ", ".join(f"{k} {times[k][-1]:.1f} s" for k in setups),
                  flush=True)
    base = args.runs * 60 / statistics.median(times["local pool, 1 worker"])
    print(f"\n{args.runs} runs of {args.steps} steps (2D spiral), median of {args.rounds} rounds")
    print(f"{'setup':<24} {'s per sweep':>12} {'runs/min':>9} {'vs pool of 1':>13}")
    for name, ts in times.items():
        rpm = args.runs * 60 / statistics.median(ts)
        print(f"{name:<24} {statistics.median(ts):>12.1f} {rpm:>9.2f} {rpm / base:>12.2f}x"
              f"   (rounds {', '.join(f'{t:.1f}' for t in ts)})")


if __name__ == "__main__":
    main()
