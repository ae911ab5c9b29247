"""The Theorem 3 bound on E‖h − Qz‖², from the sample and as a high-probability upper bound, and
its terms: ε = ‖Cov(h) − I‖_F (and its floor on n rows), δ = max(E‖h(z′) − h(z)‖² −
2(1 − ρ) tr Cov(h), 0), D = δ / (2ρ(1 − ρ)).

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
from typing import Any

import numpy as np

from idaudit.maths.linear import ArrayLike, as_f64, covariance

__all__ = ["alignment_gap", "alignment_gap_from_rows", "approximate_bound", "bound_terms",
           "distance_to_identity", "pair_rows", "upper_bound", "whitening_error", "whitening_floor",
           "whitening_terms"]


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


def whitening_error(h: ArrayLike) -> float:
    """ε = ‖Cov(h) − I‖_F."""
    h = as_f64(h)
    _, s = covariance(h)
    return distance_to_identity(s)


def distance_to_identity(s: np.ndarray, rows: int = 256) -> float:
    """‖S − I‖_F for a square S, a block of rows at a time (no full-size temporary)."""
    total = 0.0
    for i in range(0, s.shape[0], rows):
        block = np.array(s[i:i + rows], dtype=np.float64)
        k = np.arange(block.shape[0])
        block[k, i + k] -= 1.0
        total += float(np.einsum("ij,ij->", block, block))
    return math.sqrt(total)


def alignment_gap(h: ArrayLike, h_prime: ArrayLike, rho: float) -> float:
    """δ = max(E‖h(z′) − h(z)‖² − 2(1 − ρ) tr Cov(h), 0)."""
    h, hp = as_f64(h), as_f64(h_prime)
    return alignment_gap_from_rows(pair_rows(h, hp, h.mean(0)), rho)


def whitening_floor(n_samples: int, dim: int) -> float:
    """The root-mean-square of ε = ‖Ĉov − I‖_F over samples of n rows of a truly white (Gaussian)
    m-dimensional h: √(E ε²) = √(m(m+1)/(n−1)) exactly (Var Ĉov_ii = 2/(n−1), Var Ĉov_ij =
    1/(n−1)). The mean of ε lies a little below it (E ε ≤ √(E ε²))."""
    return math.sqrt(dim * (dim + 1) / max(n_samples - 1, 1))


def whitening_terms(cov_h: np.ndarray, rows: int) -> dict[str, float]:
    """ε = ‖Ĉov(h) − I‖_F, its floor √(m(m+1)/(n−1)), the floor-corrected √(max(ε² − floor², 0))
    and tr Ĉov(h): the whitening block of every audit, with or without z."""
    m = cov_h.shape[0]
    eps = distance_to_identity(cov_h)
    floor = whitening_floor(rows, m)
    return {"whitening_error": eps, "whitening_floor": floor,
            "whitening_error_corrected": math.sqrt(max(eps**2 - floor**2, 0.0)),
            "total_variance_h": float(np.trace(cov_h))}


def bound_terms(white: dict[str, float], m: int, pairs: Any, rho: float,
                confidence: float | None) -> dict[str, Any]:
    """δ, D and the Theorem 3 bound D + (ε + D)² from the whitening block and the pair rows;
    with ``confidence``, their upper bounds too (‖Ĉ‖²_F = ε² + 2 tr Ĉ − m)."""
    eps = white["whitening_error"]
    delta = alignment_gap_from_rows(pairs, rho)
    d, bound = approximate_bound(eps, delta, rho)
    out: dict[str, Any] = {"alignment_gap": delta, "D": d, "bound": bound, "rho": rho}
    if confidence is not None:
        frob_sq = eps**2 + 2.0 * white["total_variance_h"] - m
        up = upper_bound(eps, frob_sq, pairs, rho, confidence)
        out.update(whitening_error_upper=up.whitening_error, alignment_gap_upper=up.alignment_gap,
                   D_upper=up.d, bound_upper=up.bound, bound_upper_confidence=up.confidence)
    return out
