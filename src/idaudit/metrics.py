"""Identifiability metrics: pure functions of arrays (z, h, h′, x, ρ), computed in float64.

Every linear fit comes from one joint covariance matrix Σ of the columns [z | h | x]:

* R²(a→b)        mean over outputs i of 1 − (Σ_bb − Σ_ba Σ_aa⁺ Σ_ab)_ii / (Σ_bb)_ii
                 (least squares with intercept, in-sample; a constant target scores 0)
* Q̂              least-squares map z → h: Q̂ = Σ_hz Σ_zz⁻¹
* orthogonality  ‖Q̂ᵀQ̂ − I‖_F / √n
* Procrustes MSE min over (semi-)orthogonal R of E‖(h − h̄) − R(z − z̄)‖²
                 = tr Σ_hh + tr Σ_zz − 2 Σ svals(Σ_hz)
* ε              ‖Cov(h) − I‖_F
* δ              max(E‖h(z′) − h(z)‖² − 2(1 − ρ) tr Cov(h), 0)
* D              δ / (2ρ(1 − ρ));  bound = D + (ε + D)²;  bound_holds: Procrustes MSE ≤ bound
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

ArrayLike = Any


def as_f64(a: ArrayLike) -> torch.Tensor:
    """A 2-D float64 CPU tensor from a tensor or array (1-D becomes one column)."""
    t = a.detach() if isinstance(a, torch.Tensor) else torch.as_tensor(np.asarray(a))
    t = t.to(device="cpu", dtype=torch.float64)
    return t.reshape(-1, 1) if t.ndim == 1 else t.reshape(t.shape[0], -1)


def covariance(*blocks: torch.Tensor, ddof: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Means and the joint covariance of the column blocks (one pass over the data)."""
    x = torch.cat(blocks, dim=1)
    mean = x.mean(0)
    xc = x - mean
    return mean, xc.T @ xc / max(x.shape[0] - ddof, 1)


def _pinv_psd(s: torch.Tensor, rtol: float = 1e-10) -> torch.Tensor:
    """Pseudo-inverse of a symmetric PSD matrix (directions below rtol·max eigenvalue dropped)."""
    evals, evecs = torch.linalg.eigh(s)
    top = float(evals.max()) if evals.numel() else 0.0
    keep = evals > rtol * max(top, 0.0)
    if top <= 0.0 or not bool(keep.any()):
        return torch.zeros_like(s)
    inv = torch.where(keep, 1.0 / torch.where(keep, evals, torch.ones_like(evals)),
                      torch.zeros_like(evals))
    return (evecs * inv) @ evecs.T


def r2_from_cov(s_aa: torch.Tensor, s_ab: torch.Tensor, s_bb: torch.Tensor) -> torch.Tensor:
    """Per-output R² of the least-squares fit b ≈ W a + c, from covariance blocks."""
    resid = torch.diagonal(s_bb) - torch.einsum("ai,ab,bi->i", s_ab, _pinv_psd(s_aa), s_ab)
    var = torch.diagonal(s_bb)
    scale = float(var.abs().max()) if var.numel() else 0.0
    ok = var > 1e-12 * max(scale, 1e-300)
    r2 = 1.0 - resid / torch.where(ok, var, torch.ones_like(var))
    return torch.where(ok, r2, torch.zeros_like(r2))


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


def linear_map_from_cov(s_zz: torch.Tensor, s_zh: torch.Tensor) -> torch.Tensor:
    """Q̂ (m × n) of the least-squares fit h ≈ Q̂ z + c."""
    return (_pinv_psd(s_zz) @ s_zh).T


def fit_linear_map(z: ArrayLike, h: ArrayLike) -> tuple[torch.Tensor, torch.Tensor]:
    """(Q̂, c) with h ≈ Q̂ z + c in the least-squares sense."""
    z, h = as_f64(z), as_f64(h)
    mean, s = covariance(z, h)
    n = z.shape[1]
    q = linear_map_from_cov(s[:n, :n], s[:n, n:])
    return q, mean[n:] - q @ mean[:n]


def orthogonality_error(q: torch.Tensor) -> float:
    """‖Q̂ᵀQ̂ − I‖_F / √n for a map Q̂ of shape (m, n)."""
    n = q.shape[1]
    eye = torch.eye(n, dtype=q.dtype)
    return float(torch.linalg.matrix_norm(q.T @ q - eye) / math.sqrt(n))


def procrustes_from_cov(s_zz: torch.Tensor, s_zh: torch.Tensor, s_hh: torch.Tensor) -> float:
    svals = torch.linalg.svdvals(s_zh)
    return max(float(torch.trace(s_hh) + torch.trace(s_zz) - 2.0 * svals.sum()), 0.0)


def procrustes_mse(z: ArrayLike, h: ArrayLike) -> float:
    """min over (semi-)orthogonal R of E‖(h − h̄) − R(z − z̄)‖² (population covariances)."""
    z, h = as_f64(z), as_f64(h)
    _, s = covariance(z, h, ddof=0)
    n = z.shape[1]
    return procrustes_from_cov(s[:n, :n], s[:n, n:], s[n:, n:])


def whitening_error(h: ArrayLike) -> float:
    """ε = ‖Cov(h) − I‖_F."""
    h = as_f64(h)
    _, s = covariance(h)
    return float(torch.linalg.matrix_norm(s - torch.eye(s.shape[0], dtype=s.dtype)))


def alignment_gap(h: ArrayLike, h_prime: ArrayLike, rho: float) -> float:
    """δ = max(E‖h(z′) − h(z)‖² − 2(1 − ρ) tr Cov(h), 0)."""
    h, hp = as_f64(h), as_f64(h_prime)
    _, s = covariance(h)
    return _gap(h, hp, torch.trace(s), rho)


def _gap(h: torch.Tensor, hp: torch.Tensor, tr_cov: torch.Tensor, rho: float) -> float:
    sq = float((hp - h).square().sum(1).mean())
    return max(sq - 2.0 * (1.0 - rho) * float(tr_cov), 0.0)


def approximate_bound(epsilon: float, delta: float, rho: float) -> tuple[float, float]:
    """(D, D + (ε + D)²) with D = δ / (2ρ(1 − ρ)) — the bound on E‖h − Qz‖² (Theorem 3)."""
    d = delta / (2.0 * rho * (1.0 - rho))
    return d, d + (epsilon + d) ** 2


def identifiability_metrics(z: ArrayLike, h: ArrayLike, h_prime: ArrayLike | None = None,
                            rho: float | None = None, x: ArrayLike | None = None
                            ) -> dict[str, Any]:
    """Every metric train logs and audit reports, from one covariance of [z | h | x]."""
    z, h = as_f64(z), as_f64(h)
    blocks = [z, h] + ([as_f64(x)] if x is not None else [])
    _, s = covariance(*blocks)
    n, m = z.shape[1], h.shape[1]
    nz = slice(0, n)
    nh = slice(n, n + m)
    s_zz, s_zh, s_hh = s[nz, nz], s[nz, nh], s[nh, nh]
    rows = z.shape[0]
    pop = (rows - 1) / rows  # Procrustes uses population covariances
    q = linear_map_from_cov(s_zz, s_zh)
    eps = float(torch.linalg.matrix_norm(s_hh - torch.eye(m, dtype=s.dtype)))
    out: dict[str, Any] = {
        "r2_h_to_z": float(r2_from_cov(s_hh, s_zh.T, s_zz).mean()),
        "r2_z_to_h": float(r2_from_cov(s_zz, s_zh, s_hh).mean()),
        "r2_h_to_z_per_dim": [float(v) for v in r2_from_cov(s_hh, s_zh.T, s_zz)],
        "orthogonality_error": orthogonality_error(q),
        "procrustes_mse": procrustes_from_cov(pop * s_zz, pop * s_zh, pop * s_hh),
        "whitening_error": eps,
        "n_samples": rows,
        "latent_dim": n,
        "embed_dim": m,
    }
    if x is not None:
        dx = slice(n + m, s.shape[0])
        out["mixing_r2_x_to_z"] = float(r2_from_cov(s[dx, dx], s[dx, nz], s_zz).mean())
    if h_prime is not None and rho is not None:
        delta = _gap(h, as_f64(h_prime), torch.trace(s_hh), rho)
        d, bound = approximate_bound(eps, delta, rho)
        out.update(alignment_gap=delta, D=d, bound=bound,
                   bound_holds=bool(out["procrustes_mse"] <= bound), rho=rho)
    return out
