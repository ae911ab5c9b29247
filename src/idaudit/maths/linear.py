"""Linear fits of one covariance: pure functions of arrays (NumPy and SciPy; torch tensors are
accepted and converted without importing torch).

Every linear fit comes from one joint covariance matrix Σ of the columns [z | h | x]:

* R²(a→b)        mean over outputs i of 1 − (Σ_bb − Σ_ba Σ_aa⁺ Σ_ab)_ii / (Σ_bb)_ii
                 (least squares with intercept, in-sample; a constant target scores 0)
* Q̂              least-squares map z → h: Q̂ = Σ_hz Σ_zz⁻¹
* orthogonality  ‖Q̂ᵀQ̂ − I‖_F / √n
* Procrustes MSE min over (semi-)orthogonal R of E‖(h − h̄) − R(z − z̄)‖²
                 = tr Σ_hh + tr Σ_zz − 2 Σ svals(Σ_hz)
* MCC            mean |corr| of latents and embedding columns matched one to one
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from idaudit.maths.linalg import explained_psd, linear_sum_assignment, solve_psd

__all__ = ["ArrayLike", "as_f64", "covariance", "effective_rank_from_eigs", "fit_linear_map",
           "linear_r2", "mcc", "mcc_from_cov", "orthogonality_error",
           "per_dim_r2", "principal_angles_deg",
           "procrustes_from_cov", "procrustes_mse", "r2_from_cov", "standardize",
           "standardized_z", "to_numpy", "unit_scales"]

ArrayLike = Any


def to_numpy(a: ArrayLike) -> np.ndarray:
    """An ndarray from an array or a (CPU or GPU) torch tensor, without importing torch."""
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    return np.asarray(a)


def as_f64(a: ArrayLike) -> np.ndarray:
    """A 2-D float64 array (1-D becomes one column)."""
    t = to_numpy(a).astype(np.float64, copy=False)
    return t.reshape(-1, 1) if t.ndim == 1 else t.reshape(t.shape[0], -1)


def covariance(*blocks: np.ndarray, ddof: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Means and the joint covariance of the column blocks (one pass over the data)."""
    x = np.concatenate(blocks, axis=1)
    mean = x.mean(0)
    xc = x - mean
    return mean, xc.T @ xc / max(x.shape[0] - ddof, 1)


def r2_from_cov(s_aa: np.ndarray, s_ab: np.ndarray, s_bb: np.ndarray,
                w: np.ndarray | None = None) -> np.ndarray:
    """Per-output R² of the least-squares fit b ≈ W a + c, from covariance blocks
    (``w`` = Σ_aa⁺ Σ_ab when already solved)."""
    var = np.diagonal(s_bb)
    resid = var - (explained_psd(s_aa, s_ab) if w is None else (s_ab * w).sum(0))
    scale = float(np.abs(var).max()) if var.size else 0.0
    ok = var > 1e-12 * max(scale, 1e-300)
    return np.where(ok, 1.0 - resid / np.where(ok, var, 1.0), 0.0)


def linear_r2(a: ArrayLike, b: ArrayLike) -> float:
    """R²(a → b): uniform average over the outputs of b (as scikit-learn's ``score``)."""
    a, b = as_f64(a), as_f64(b)
    _, s = covariance(a, b)
    p = a.shape[1]
    return float(r2_from_cov(s[:p, :p], s[:p, p:], s[p:, p:]).mean())


def per_dim_r2(a: ArrayLike, b: ArrayLike) -> list[float]:
    a, b = as_f64(a), as_f64(b)
    _, s = covariance(a, b)
    p = a.shape[1]
    return [float(v) for v in r2_from_cov(s[:p, :p], s[:p, p:], s[p:, p:])]


def linear_map_from_cov(s_zz: np.ndarray, s_zh: np.ndarray) -> np.ndarray:
    """Q̂ (m × n) of the least-squares fit h ≈ Q̂ z + c."""
    return solve_psd(s_zz, s_zh).T


def fit_linear_map(z: ArrayLike, h: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """(Q̂, c) with h ≈ Q̂ z + c in the least-squares sense."""
    z, h = as_f64(z), as_f64(h)
    mean, s = covariance(z, h)
    n = z.shape[1]
    q = linear_map_from_cov(s[:n, :n], s[:n, n:])
    return q, mean[n:] - q @ mean[:n]


def orthogonality_error(q: ArrayLike) -> float:
    """‖Q̂ᵀQ̂ − I‖_F / √n for a map Q̂ of shape (m, n)."""
    q = to_numpy(q)
    n = q.shape[1]
    g = q.T @ q
    np.einsum("ii->i", g)[:] -= 1.0  # Q̂ᵀQ̂ − I, in place
    return float(np.linalg.norm(g) / math.sqrt(n))


def nuclear_norm(a: np.ndarray) -> float:
    """Σ singular values; for large matrices via the eigenvalues of aᵀa."""
    if min(a.shape) <= 256:
        return float(np.linalg.svd(a, compute_uv=False).sum())
    g = (a.T @ a) if a.shape[0] >= a.shape[1] else (a @ a.T)
    ev = np.linalg.eigvalsh(g)
    return float(np.sqrt(np.clip(ev, 0.0, None)).sum())


def procrustes_from_cov(s_zz: np.ndarray, s_zh: np.ndarray, s_hh: np.ndarray,
                        iters: int = 500, tol: float = 1e-12) -> float:
    """min over R (m × n) with orthonormal rows or columns of E‖(h − h̄) − R(z − z̄)‖²
    = tr Σ_hh − 2 tr(R Σ_zh) + tr(R Σ_zz Rᵀ).

    For m ≥ n (RᵀR = I) the last term is tr Σ_zz and the minimum is tr Σ_hh + tr Σ_zz −
    2‖Σ_zh‖_* in closed form. For m < n (RRᵀ = I, R keeps m directions of z) it depends on R:
    majorisation–minimisation from the polar factors of Σ_hz and of the least-squares map Q̂
    (the better of the two) — with c = λ_max(Σ_zz), R ← polar((Σ_zh + (cI − Σ_zz)Rᵀ)ᵀ) never
    increases the objective; exact at the start when Σ_zz ∝ I or h = Rz exactly.
    """
    n, m = s_zh.shape
    if m >= n:
        nuc = nuclear_norm(s_zh)
        return max(float(np.trace(s_hh) + np.trace(s_zz)) - 2.0 * nuc, 0.0)

    def value(r: np.ndarray) -> float:
        return float(np.trace(s_hh) - 2.0 * np.trace(r @ s_zh) + np.trace(r @ s_zz @ r.T))

    def polar_rows(a: np.ndarray) -> np.ndarray:  # the (m × n) R maximising tr(R aᵀ)
        u, _, vt = np.linalg.svd(a, full_matrices=False)
        return u @ vt

    c = float(np.linalg.eigvalsh(s_zz)[-1]) if n else 0.0
    results = []
    for start in (s_zh.T, solve_psd(s_zz, s_zh).T):  # Σ_hz, and the least-squares map Q̂
        r = polar_rows(start)
        best = value(r)
        for _ in range(iters):
            r = polar_rows((s_zh + (c * np.eye(n) - s_zz) @ r.T).T)
            v = value(r)
            if best - v <= tol * max(abs(best), 1.0):
                best = min(best, v)
                break
            best = v
        results.append(best)
    best = min(results)
    return max(best, 0.0)


def unit_scales(s_zz: np.ndarray) -> np.ndarray:
    """1/σ per latent from its covariance block (0 for a latent that does not vary): the
    diagonal scaling that gives each latent unit variance."""
    sd = np.sqrt(np.clip(np.diagonal(s_zz), 0.0, None))
    return np.divide(1.0, sd, out=np.zeros_like(sd), where=sd > 0)


def standardized_z(s_zz: np.ndarray, s_zh: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Cov(z_s), Cov(z_s, h)) for z_s = (z − z̄)/σ, each latent scaled to unit variance on
    the same rows: what Procrustes, the orthogonality of the fitted map and the bound's
    comparison read, so that no verdict depends on the units z was recorded in."""
    w = unit_scales(s_zz)
    return s_zz * np.outer(w, w), s_zh * w[:, None]


def standardize(z: ArrayLike) -> np.ndarray:
    """(z − z̄)/σ, σ each latent's standard deviation as a mean over the rows."""
    z = as_f64(z)
    zc = z - z.mean(0)
    return zc * unit_scales(np.diag((zc * zc).mean(0)))


def procrustes_mse(z: ArrayLike, h: ArrayLike, z_white: bool = False) -> float:
    """min over (semi-)orthogonal R of E‖(h − h̄) − R z_s‖² (means over the rows), z_s the
    latents standardised on these rows (:func:`standardized_z`) — or z − z̄ itself where
    ``z_white`` (z's law is white, as a world that draws it so states)."""
    z, h = as_f64(z), as_f64(h)
    _, s = covariance(z, h, ddof=0)
    n = z.shape[1]
    s_zz, s_zh = (s[:n, :n], s[:n, n:]) if z_white else standardized_z(s[:n, :n], s[:n, n:])
    return procrustes_from_cov(s_zz, s_zh, s[n:, n:])


def mcc_from_cov(s_zz: np.ndarray, s_zh: np.ndarray, s_hh: np.ndarray) -> float:
    """Mean absolute Pearson correlation of latents and embedding dims after Hungarian matching."""
    dz = np.sqrt(np.clip(np.diagonal(s_zz), 0, None))
    dh = np.sqrt(np.clip(np.diagonal(s_hh), 0, None))
    inv_z = np.where(dz > 0, 1.0 / np.where(dz > 0, dz, 1.0), 0.0)  # a constant column: 0
    inv_h = np.where(dh > 0, 1.0 / np.where(dh > 0, dh, 1.0), 0.0)
    corr = np.abs(s_zh * inv_z[:, None])
    corr *= inv_h[None, :]
    rows, cols = linear_sum_assignment(corr, maximize=True)
    return float(corr[rows, cols].mean())




def mcc(z: ArrayLike, h: ArrayLike) -> float:
    z, h = as_f64(z), as_f64(h)
    _, s = covariance(z, h)
    n = z.shape[1]
    return mcc_from_cov(s[:n, :n], s[:n, n:], s[n:, n:])


def effective_rank_from_eigs(evals: np.ndarray) -> float:
    """exp(entropy of the normalised eigenvalue spectrum) (Roy & Vetterli)."""
    ev = np.clip(np.asarray(evals, dtype=np.float64), 0, None)
    total = float(ev.sum())
    if total <= 0:
        return 0.0
    p = ev / total
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def principal_angles_deg(a: np.ndarray, b: np.ndarray) -> list[float]:
    """Principal angles (degrees) between the column spaces of a and b."""
    from scipy.linalg import subspace_angles

    return [float(np.degrees(v)) for v in subspace_angles(a, b)]
