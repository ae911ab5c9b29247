"""Is h Gaussian? The sliced Epps–Pulley test: the whitened embedding projected on random unit
directions, the mean Epps–Pulley statistic over slices, and its p-value from the asymptotic null
law (a weighted χ² mixture) or from simulated Gaussian data sets of the same size.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from idaudit.maths.epps_pulley import KNOTS as EP_KNOTS
from idaudit.maths.epps_pulley import T_MAX as EP_T_MAX
from idaudit.maths.epps_pulley import grid as ep_grid
from idaudit.maths.linear import ArrayLike, to_numpy
from idaudit.maths.moments import CHUNK_ROWS

__all__ = ["chi2_mixture_sf", "ep_null_weights", "sliced_gaussianity"]


def epps_pulley_rows(pt: np.ndarray) -> float:
    """The SIGReg statistic of standardised projections given slice by slice, pt of shape
    (M, n): n · mean_j Σ_k w_k |φ̂_j(t_k) − e^{−t_k²/2}|², t_k = kΔt on [0, 3]."""
    m, n = pt.shape
    _, phi, w = ep_grid()
    e1 = np.exp(1j * (pt.astype(np.float64) * (EP_T_MAX / (EP_KNOTS - 1))))  # e^{iΔt·x}
    ek = e1.copy()
    total = 0.0
    for k in range(1, EP_KNOTS):  # ek = e^{i t_k x}, by repeated multiplication in place
        cf = ek.mean(1)  # the empirical characteristic function of each slice at t_k
        total += w[k] * float(((cf.real - phi[k]) ** 2 + cf.imag**2).sum())
        if k < EP_KNOTS - 1:
            np.multiply(ek, e1, out=ek)
    return total * n / m  # k = 0 adds 0


def ep_null_weights(n_slices: int) -> np.ndarray:
    """Weights c of the asymptotic null law Σ_k c_k χ²_{n_slices} of :func:`epps_pulley_rows` on
    ``n_slices`` independent standardised Gaussian projections.

    With the mean and variance estimated, √n(φ̂(t) − φ(t)) tends to a Gaussian process whose
    real and imaginary parts are independent with covariances (Y ~ N(0, 1))
    Re: ½(φ(s−t) + φ(s+t)) − φ(s)φ(t)(1 + s²t²/2),  Im: ½(φ(s−t) − φ(s+t)) − st·φ(s)φ(t)
    (the influence function e^{itY} − φ(t) − itφ(t)Y + ½t²φ(t)(Y² − 1)). The statistic of one
    slice tends to Σ_k λ_k χ²_1 with λ the eigenvalues of W^{1/2} C W^{1/2}; the mean over
    M slices to Σ_k (λ_k / M) χ²_M.
    """
    t, _, w = ep_grid()
    t, w = t[1:], w[1:]

    def phi(u: np.ndarray) -> np.ndarray:
        return np.exp(-0.5 * u * u)

    s, u = t[:, None], t[None, :]
    c_re = 0.5 * (phi(s - u) + phi(s + u)) - phi(s) * phi(u) * (1.0 + 0.5 * s * s * u * u)
    c_im = 0.5 * (phi(s - u) - phi(s + u)) - s * u * phi(s) * phi(u)
    rw = np.sqrt(w)
    lam = np.concatenate([np.linalg.eigvalsh(rw[:, None] * c * rw[None, :]) for c in (c_re, c_im)])
    return lam[lam > 1e-12 * lam.max()] / n_slices


def chi2_mixture_sf(x: float, c: np.ndarray, dof: int) -> float:
    """P(Σ_k c_k χ²_dof > x) by Imhof's inversion of the characteristic function:
    ½ + (1/π) ∫₀^∞ sin θ(u) / (u ρ(u)) du, θ = ½ Σ dof·arctan(c_k u) − ½xu,
    ρ = Π (1 + c_k² u²)^{dof/4} (Gauss–Legendre panels up to where the integrand is below
    1e-13). Far in the upper tail (beyond the mean + 8 sd, where the integral loses its
    accuracy) a moment-matched scaled χ² (Satterthwaite, Wilson–Hilferty) gives the tail."""
    c = np.asarray(c, dtype=np.float64)
    mean, var = dof * float(c.sum()), 2.0 * dof * float((c * c).sum())
    if x <= 0:
        return 1.0
    if x > mean + 8.0 * math.sqrt(var):
        nu = 2.0 * mean * mean / var
        k = 2.0 / (9.0 * nu)
        zed = ((x / mean) ** (1.0 / 3.0) - (1.0 - k)) / math.sqrt(k)
        return 0.5 * math.erfc(zed / math.sqrt(2.0))

    def log_rho(u: np.ndarray) -> np.ndarray:
        return 0.25 * dof * np.log1p(np.square(np.multiply.outer(u, c))).sum(-1)

    # the integrand is below exp(−log ρ(u))/u: integrate up to where that is < 1e-13
    upper = 1.0 / float(c.max())
    while float(log_rho(np.array([upper]))[0]) + math.log(upper) < 30.0:
        upper *= 2.0
    # panels short enough for the oscillation of sin θ (θ′ ≤ ½(dof Σc + x)) and for ρ
    rate = 0.5 * (mean + x) + float(c.max())
    panels = int(min(max(64, 2.0 * upper * rate / math.pi), 20000))
    nodes, weights = np.polynomial.legendre.leggauss(16)
    edges = np.linspace(0.0, upper, panels + 1)
    half = 0.5 * np.diff(edges)
    u = ((edges[:-1] + half)[:, None] + half[:, None] * nodes[None, :]).ravel()
    theta = 0.5 * dof * np.arctan(np.multiply.outer(u, c)).sum(-1) - 0.5 * x * u
    f = np.sin(theta) * np.exp(-log_rho(u)) / u
    val = float((f.reshape(panels, 16) @ weights * half).sum())
    return min(max(0.5 + val / math.pi, 0.0), 1.0)


def _whitened_projections(h: np.ndarray, n_slices: int, rng: np.random.Generator
                          ) -> np.ndarray:
    """Projections of h on ``n_slices`` random directions, made uncorrelated and standardised
    together (P = (h − h̄)G V Λ^{−1/2} with V Λ Vᵀ their sample covariance), as (M′, n).

    For Gaussian h (any mean and covariance) P/√(n−1) is a uniformly random orthonormal
    n × M′ frame orthogonal to 1, whatever Cov(h) and dim h: the null law of the statistic
    depends on n and M′ alone. Directions with no variance are dropped (M′ ≤ M).
    """
    g = rng.standard_normal((h.shape[1], n_slices)).astype(h.dtype)
    proj = np.empty((h.shape[0], n_slices))
    buf = np.empty((min(CHUNK_ROWS, h.shape[0]), h.shape[1]), dtype=h.dtype)
    for i in range(0, h.shape[0], CHUNK_ROWS):  # through an aligned buffer: a memory-mapped h
        part = buf[: min(CHUNK_ROWS, h.shape[0] - i)]  # is often unaligned, and numpy would
        np.copyto(part, h[i:i + part.shape[0]])  # copy all of it into fresh memory first
        proj[i:i + part.shape[0]] = part @ g
    proj -= proj.mean(0)
    evals, evecs = np.linalg.eigh(proj.T @ proj / max(h.shape[0] - 1, 1))
    keep = evals > 1e-10 * max(float(evals.max()), 1e-300)
    return np.ascontiguousarray((proj @ (evecs[:, keep] / np.sqrt(evals[keep]))).T)


def sliced_gaussianity(h: ArrayLike, n_slices: int = 64, sims: int = 0, seed: int = 0
                       ) -> dict[str, Any]:
    """Sliced Epps–Pulley test that h is Gaussian (any mean and covariance).

    h is projected on ``n_slices`` random directions, the projections are whitened jointly
    (so the test is affine invariant and, under the null, they form a random orthonormal
    frame), and the SIGReg statistic n · mean_j Σ_k w_k |φ̂_j(t_k) − e^{−t_k²/2}|² is computed.
    The p-value comes from its asymptotic null law Σ_k c_k χ²_M (:func:`ep_null_weights`,
    Imhof) when ``sims`` is 0, else from ``sims`` simulated Gaussian data sets of the same
    size (P(p ≤ α) ≤ α exactly, p ≥ 1/(sims + 1)).
    """
    ht = to_numpy(h)
    ht = ht.reshape(ht.shape[0], -1)
    if ht.dtype not in (np.float32, np.float64):
        ht = ht.astype(np.float64)
    n = ht.shape[0]
    rng = np.random.default_rng(seed)
    pt = _whitened_projections(ht, n_slices, rng) if n > 2 else np.zeros((0, n))
    if pt.shape[0] == 0:
        return {"gaussianity_statistic": None, "gaussianity_p_value": None}
    m = pt.shape[0]
    weights = ep_null_weights(m)
    observed = epps_pulley_rows(pt)
    if sims > 0:
        null = [epps_pulley_rows(_whitened_projections(rng.standard_normal((n, m)), m, rng))
                for _ in range(sims)]
        p_value = (1.0 + float(np.sum(np.asarray(null) >= observed))) / (1.0 + sims)
        method = f"monte carlo ({sims} simulations)"
    else:
        p_value = chi2_mixture_sf(observed, weights, m)
        method = "asymptotic"
    return {"gaussianity_statistic": observed, "gaussianity_p_value": p_value,
            "gaussianity_null_mean": float(weights.sum() * m),
            "gaussianity_method": method}
