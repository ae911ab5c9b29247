"""The simulation behind docs/metrics.md's "How many rows": the held-out R²(h → z) an encoder
of width m scores at a number of fit rows, uninformative (h independent of z) or with a
population R² of 0.9, against Stein's expectation (maths/floors.heldout_floor_mean).

    python scripts/few_fit_rows.py            # the table of docs/metrics.md (≈ 2 CPU-min)
    python scripts/few_fit_rows.py --quick    # fewer repetitions

n = 2 latents; the audit's default split (half the rows fit, half score), so total rows are
twice the fit rows; the rule's minimum 2(n + m) + 10 total rows is n + m + 5 fit rows.
"""

from __future__ import annotations

import sys

from idaudit.maths.floors import heldout_floor_mean, simulated_heldout_r2

N = 2


def fit_rows(m: int) -> list[tuple[str, int]]:
    return [("n + m + 5 (the 2(n + m) + 10 rule)", N + m + 5), ("2(n + m) + 10", 2 * (N + m) + 10),
            ("5·m", 5 * m), ("10·m", 10 * m), ("20·m", 20 * m), ("40·m", 40 * m)]


def main(quick: bool = False) -> None:
    print("| m | fit rows | n_fit | uninformative: mean ± sd (max) | Stein | R² 0.9 encoder: mean |")
    print("|---|---|---|---|---|---|")
    for m in (32, 128, 512):
        reps = (40 if quick else 200) if m < 512 else (8 if quick else 40)
        for label, n_fit in fit_rows(m):
            null = simulated_heldout_r2(m, n_fit, latents=N, reps=reps, seed=1)
            good = simulated_heldout_r2(m, n_fit, latents=N, reps=max(8, reps // 4), seed=2,
                                        r2=0.9)
            stein = heldout_floor_mean(n_fit, n_fit, m)
            print(f"| {m} | {label} | {n_fit} | {null.mean():.3g} ± {null.std(ddof=1):.2g} "
                  f"({null.max():.3g}) | {stein:.3g} | {good.mean():.3f} |", flush=True)


if __name__ == "__main__":
    main("--quick" in sys.argv)
