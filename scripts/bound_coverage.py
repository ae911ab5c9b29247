"""The Theorem 3 upper bound's coverage by simulation, as the Markdown table in docs/metrics.md.

    python scripts/bound_coverage.py [--rows 10000] [--confidence 0.95]

tests/test_bounds.py checks the stated rates with :func:`coverage_simulation`.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from idaudit.maths.bounds import alignment_gap_from_rows, approximate_bound, pair_rows, upper_bound


def coverage_simulation(dim: int, n_rows: int, reps: int, rho: float = 0.95,
                        confidence: float = 0.95, seed: int = 0) -> dict[str, float]:
    """How often the population ε, δ and Procrustes error exceed their upper bounds over
    ``reps`` simulated data sets, alternating two encoders with known population values:
    h = 0.97·Qz (ε = 0.0591·√N, δ = 0, error 0.0009·N) and h = Qz + 0.3·e with independent
    noise in each view (ε = 0.09·√N, δ = 0.18ρN, error 0.09·N); OU pairs with ``rho``.
    Also the rate for the old floor-corrected plug-in value D̂ + (√(ε̂² − floor²) + D̂)²."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
    miss = {"whitening_error": 0, "alignment_gap": 0, "bound": 0, "floor_corrected": 0}
    for rep in range(reps):
        scale, noise = ((0.97, 0.0), (1.0, 0.3))[rep % 2]
        var = scale**2 + noise**2
        eps_pop = abs(var - 1.0) * math.sqrt(dim)
        delta_pop = max(2 * dim * ((1 - rho) * scale**2 + noise**2 - (1 - rho) * var), 0.0)
        err_pop = ((1 - scale) ** 2 + noise**2) * dim
        z = rng.standard_normal((n_rows, dim))
        zp = rho * z + math.sqrt(1 - rho**2) * rng.standard_normal(z.shape)
        h = scale * z @ q.T + noise * rng.standard_normal(z.shape)
        hp = scale * zp @ q.T + noise * rng.standard_normal(z.shape)
        hc = h - h.mean(0)
        cov = hc.T @ hc / (n_rows - 1)
        eps = float(np.linalg.norm(cov - np.eye(dim)))
        rows = pair_rows(h, hp, h.mean(0))
        up = upper_bound(eps, float(np.sum(cov * cov)), rows, rho, confidence)
        floor_sq = dim * (dim + 1) / (n_rows - 1)
        _, corrected = approximate_bound(math.sqrt(max(eps**2 - floor_sq, 0.0)),
                                         alignment_gap_from_rows(rows, rho), rho)
        miss["whitening_error"] += eps_pop > up.whitening_error
        miss["alignment_gap"] += delta_pop > up.alignment_gap
        miss["bound"] += err_pop > up.bound
        miss["floor_corrected"] += err_pop > corrected
    return {k: v / reps for k, v in miss.items()}


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
