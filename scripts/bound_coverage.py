"""The Theorem 3 upper bound's coverage by simulation, as the Markdown table in docs/metrics.md.

    python scripts/bound_coverage.py [--rows 10000] [--confidence 0.95]
"""

from __future__ import annotations

import argparse

from idaudit.bounds import coverage_simulation


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--confidence", type=float, default=0.95)
    args = ap.parse_args()
    alpha = 1 - args.confidence
    print(f"| N | data sets | ε above ε_upper (stated ≤ {alpha / 2:g}) | δ above δ_upper "
          f"(≤ {alpha / 2:g}) | error above bound_upper (≤ {alpha:g}) | error above the old "
          "floor-corrected value |")
    print("|---|---|---|---|---|---|")
    for dim, reps in ((8, 200), (64, 100), (256, 40), (1024, 10)):
        m = coverage_simulation(dim, args.rows, reps, confidence=args.confidence, seed=dim)
        print(f"| {dim} | {reps} | {m['whitening_error']:.3f} | {m['alignment_gap']:.3f} | "
              f"{m['bound']:.3f} | {m['floor_corrected']:.3f} |")


if __name__ == "__main__":
    main()
