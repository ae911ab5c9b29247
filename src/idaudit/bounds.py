"""The Theorem 3 bound on E‖h − Qz‖², from the sample and as a high-probability upper bound.

The theorem bounds the *population* Procrustes error by D + (ε + D)², with ε = ‖Cov(h) − I‖_F
and D = δ / (2ρ(1 − ρ)) population quantities. The plug-in ``bound`` puts the sample ε̂ and δ̂
in their place: a point estimate, which can fall on either side. :func:`upper_bound` instead
bounds ε and δ from above, each with probability ≥ 1 − (1 − confidence)/2, and — the bound being
increasing in ε and D — gives a value that bounds the population Procrustes error with
probability ≥ ``confidence`` (a union bound):

* ε ≤ ε̂ + ‖Ĉ − C‖_F (triangle inequality) and, by Markov's inequality on ‖Ĉ − C‖²_F, whose
  mean is (E‖h − μ‖⁴ − ‖C‖²_F)/n, ‖Ĉ − C‖_F ≤ √(E‖Ĉ − C‖²_F / β) with probability ≥ 1 − β;
* δ̂ is the mean of the per-pair terms d_k = ‖h′_k − h_k‖² − 2(1 − ρ)‖h_k − h̄‖²·n/(n − 1), so
  by Cantelli's inequality δ ≤ δ̂ + s_d/√n · √((1 − β)/β) with probability ≥ 1 − β.

The moments in these two inequalities are estimated from the same rows (the fourth moment of
‖h − h̄‖, the variance of d_k); tests check the stated rate by simulation
(``scripts/bound_coverage.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def approximate_bound(epsilon: float, delta: float, rho: float) -> tuple[float, float]:
    """(D, D + (ε + D)²) with D = δ / (2ρ(1 − ρ)) — the bound on E‖h − Qz‖² (Theorem 3)."""
    d = delta / (2.0 * rho * (1.0 - rho))
    return d, d + (epsilon + d) ** 2


@dataclass(frozen=True)
class PairRows:
    """Per-row quantities of the positive pairs: a_k = ‖h′_k − h_k‖², b_k = ‖h_k − h̄‖²."""

    gap_sq: np.ndarray
    centred_sq: np.ndarray

    @property
    def n(self) -> int:
        return int(self.gap_sq.size)

    def delta_terms(self, rho: float) -> np.ndarray:
        """d_k, whose mean is E‖h′ − h‖² − 2(1 − ρ) tr Ĉ (Ĉ with n − 1)."""
        n = self.n
        return self.gap_sq - 2.0 * (1.0 - rho) * self.centred_sq * (n / max(n - 1, 1))


def pair_rows(h: np.ndarray, hp: np.ndarray, mean: np.ndarray, chunk: int = 2048) -> PairRows:
    """:class:`PairRows` a block of rows at a time (differences in the input's precision, the
    row sums in float64)."""
    rows = h.shape[0]
    gap, cen = np.empty(rows), np.empty(rows)
    mu = np.asarray(mean).astype(h.dtype)
    for i in range(0, rows, chunk):
        d = hp[i:i + chunk] - h[i:i + chunk]
        gap[i:i + chunk] = np.einsum("ij,ij->i", d, d, dtype=np.float64)
        np.subtract(h[i:i + chunk], mu, out=d)
        cen[i:i + chunk] = np.einsum("ij,ij->i", d, d, dtype=np.float64)
    return PairRows(gap, cen)


def alignment_gap_from_rows(p: PairRows, rho: float) -> float:
    """δ̂ = max(E‖h′ − h‖² − 2(1 − ρ) tr Ĉ, 0)."""
    return max(float(p.delta_terms(rho).mean()), 0.0) if p.n else 0.0


@dataclass(frozen=True)
class UpperBound:
    """ε, δ and the Theorem 3 bound from above, each holding with the stated probability."""

    whitening_error: float
    alignment_gap: float
    d: float
    bound: float
    confidence: float


def upper_bound(epsilon: float, frob_sq: float, p: PairRows, rho: float,
                confidence: float = 0.95) -> UpperBound:
    """The high-probability upper bound of the module docstring, from the sample ε̂ = ``epsilon``,
    ``frob_sq`` = ‖Ĉ‖²_F and the pair rows."""
    n = p.n
    beta = (1.0 - confidence) / 2.0
    fourth = float(np.mean(np.square(p.centred_sq))) if n else 0.0
    cov_err_sq = max(fourth - frob_sq, 0.0) / max(n, 1)  # E‖Ĉ − C‖²_F
    eps_up = epsilon + math.sqrt(cov_err_sq / beta)
    terms = p.delta_terms(rho)
    sd = float(terms.std(ddof=1)) if n > 1 else math.inf
    delta_up = max(float(terms.mean()) + sd / math.sqrt(max(n, 1)) * math.sqrt((1 - beta) / beta),
                   0.0)
    d_up, bound = approximate_bound(eps_up, delta_up, rho)
    return UpperBound(eps_up, delta_up, d_up, bound, confidence)
