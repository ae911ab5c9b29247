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
‖h − h̄‖, the variance of d_k); tests check the stated rate by simulation.
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
