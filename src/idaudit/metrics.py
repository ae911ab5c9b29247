"""Identifiability metrics: pure functions of arrays (z, h, h′, x, ρ).

NumPy and SciPy only (torch tensors are accepted and converted), so an arrays-only audit
never imports torch. Moments are accumulated in float64, except for wide float32 inputs (more
than 256 columns), whose centred second moments are accumulated in float32 and then
converted; every solve, decomposition and reported number is float64.

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

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .bounds import alignment_gap_from_rows, approximate_bound, pair_rows, upper_bound
from .epps_pulley import KNOTS as EP_KNOTS
from .epps_pulley import T_MAX as EP_T_MAX
from .epps_pulley import grid as ep_grid
from .linalg import explained_psd, linear_sum_assignment, solve_psd

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


def identifiability_metrics(z: ArrayLike, h: ArrayLike, h_prime: ArrayLike | None = None,
                            rho: float | None = None, x: ArrayLike | None = None,
                            **kwargs: Any) -> dict[str, Any]:
    """The in-sample core of :func:`audit_metrics` (R², orthogonality, Procrustes, ε, δ, D,
    bound, held-out R²), from the same code: what the training curve logs."""
    return audit_metrics(z, h, h_prime, rho, x, core=True, **kwargs)


# ---- the full audit: held-out fits, MCC, floors, subspaces, circular latents, Gaussianity ----

_F32_MIN_COLS = 256  # wider than this, moments are accumulated in float32 (centred), then float64
_CHUNK_ROWS = 2048  # rows gathered per BLAS update: one reused buffer, no copy of the data


class Moments:
    """Means and centred second moments (the scatter Σ (x − x̄)(x − x̄)ᵀ, float64) of the
    column blocks [b₀ | b₁ | …] over a subset of rows, without concatenating the blocks.

    Rows are gathered a chunk at a time into one reused buffer, shifted by ``shift`` (any
    vector near the mean: the result is exact whatever it is, it only keeps the sums small),
    and their products are added into a float64 scatter (the product in float32 for wide
    float32 inputs). No full-size temporaries: fresh memory is slow to fault in.
    """

    def __init__(self, blocks: list[np.ndarray], rows: np.ndarray,
                 shift: np.ndarray | None = None) -> None:
        (self.n, self.mean, self.scatter), = Moments._accumulate(blocks, [rows], shift)

    @staticmethod
    def of_row_sets(blocks: list[np.ndarray], row_sets: list[np.ndarray],
                    shift: np.ndarray | None = None) -> list[Moments]:
        """The moments of several row subsets, sharing one set of work buffers."""
        out = []
        for n, mean, scatter in Moments._accumulate(blocks, row_sets, shift):
            m = Moments.__new__(Moments)
            m.n, m.mean, m.scatter = n, mean, scatter
            out.append(m)
        return out

    @staticmethod
    def _accumulate(blocks: list[np.ndarray], row_sets: list[np.ndarray],
                    shift: np.ndarray | None) -> list[tuple[int, np.ndarray, np.ndarray]]:
        widths = [blk.shape[1] for blk in blocks]
        cols = int(sum(widths))
        wide32 = cols > _F32_MIN_COLS and all(blk.dtype == np.float32 for blk in blocks)
        work = np.float32 if wide32 else np.float64
        shift = np.zeros(cols) if shift is None else np.asarray(shift, dtype=np.float64)
        shift_w = shift.astype(work)
        most = max((int(np.size(r)) for r in row_sets), default=0)
        product = np.empty((cols, cols), dtype=work)
        buf = np.empty((min(_CHUNK_ROWS, max(most, 1)), cols), dtype=work)
        results = []
        for rows in row_sets:
            rows = np.sort(np.asarray(rows, dtype=np.int64))
            n = int(rows.size)
            scatter = np.zeros((cols, cols))
            total = np.zeros(cols)
            for i in range(0, n, _CHUNK_ROWS):
                idx = rows[i:i + _CHUNK_ROWS]
                part = buf[: idx.size]
                start = 0
                for blk, wdt in zip(blocks, widths):
                    part[:, start:start + wdt] = blk[idx]
                    start += wdt
                part -= shift_w
                total += part.sum(0, dtype=np.float64)
                if cols:  # xᵀx (numpy hands a product of a matrix with its transpose to syrk)
                    np.matmul(part.T, part, out=product)
                    scatter += product
            offset = total / max(n, 1)  # the subset mean minus the shift
            if n:  # Σ(x − s)(x − s)ᵀ − n(x̄ − s)(x̄ − s)ᵀ
                _rank1_update(scatter, -float(n), offset)
            results.append((n, shift + offset, scatter))
        return results

    def restricted(self, cols: np.ndarray) -> Moments:
        """The same moments for a subset of the columns (no pass over the data)."""
        out = Moments.__new__(Moments)
        out.n, out.mean, out.scatter = self.n, self.mean[cols], self.scatter[np.ix_(cols, cols)]
        return out

    @staticmethod
    def pooled(a: Moments, b: Moments) -> Moments:
        """The moments of the union of two disjoint row sets (Chan et al.)."""
        out = Moments.__new__(Moments)
        out.n = a.n + b.n
        out.mean = (a.n * a.mean + b.n * b.mean) / max(out.n, 1)
        out.scatter = np.add(a.scatter, b.scatter)
        if a.n and b.n:
            _rank1_update(out.scatter, a.n * b.n / out.n, a.mean - b.mean)
        return out


def _rank1_update(s: np.ndarray, alpha: float, d: np.ndarray) -> None:
    """s += α d dᵀ in place, a block of rows at a time."""
    for i in range(0, s.shape[0], 256):
        s[i:i + 256] += (alpha * d[i:i + 256])[:, None] * d[None, :]


def heldout_r2_from_moments(train: Moments, test: Moments, a: slice, b: slice) -> np.ndarray:
    """Per-output R² on the test rows of the least-squares fit b ≈ W a + c fitted on train.

    SST is taken about the test mean (scikit-learn's r2_score on the test split).
    """
    w = solve_psd(train.scatter[a, a], train.scatter[a, b])  # the scatter's 1/n cancels
    c = train.mean[b] - train.mean[a] @ w
    bias = test.mean[b] - test.mean[a] @ w - c
    s, n_te = test.scatter, max(test.n, 1)  # test covariances are these scatter blocks / n_te
    var = np.diagonal(s[b, b]) / n_te
    fit = np.einsum("ij,ij->j", w, s[a, a] @ w) - 2.0 * np.einsum("ij,ij->j", w, s[a, b])
    sse = var + fit / n_te + bias**2
    scale = float(np.abs(var).max()) if var.size else 0.0
    ok = var > 1e-12 * max(scale, 1e-300)
    return np.where(ok, 1.0 - sse / np.where(ok, var, 1.0), 0.0)


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


def principal_angles_deg(a: np.ndarray, b: np.ndarray) -> list[float]:
    """Principal angles (degrees) between the column spaces of a and b."""
    from scipy.linalg import subspace_angles

    return [float(np.degrees(v)) for v in subspace_angles(a, b)]


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
    buf = np.empty((min(_CHUNK_ROWS, h.shape[0]), h.shape[1]), dtype=h.dtype)
    for i in range(0, h.shape[0], _CHUNK_ROWS):  # through an aligned buffer: a memory-mapped h
        part = buf[: min(_CHUNK_ROWS, h.shape[0] - i)]  # is often unaligned, and numpy would
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


def split_rows(rows: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(test rows, train rows): a seeded random split with round(rows·test_fraction) test rows."""
    perm = np.random.default_rng(seed).permutation(rows)
    n_test = max(1, min(rows - 1, int(round(rows * test_fraction))))
    return perm[:n_test], perm[n_test:]


def _r2_block(s: np.ndarray, a: slice, b: slice) -> np.ndarray:
    return r2_from_cov(s[a, a], s[a, b], s[b, b])


@dataclass
class Fit:
    """What every metric group reads: the audit's arrays as moment blocks
    [z | sin/cos z_circ | h | x] (their slices ``iz``, ``ic``, ``ih``, ``ix``), the split's
    moments, the pooled covariance ``s`` and the linear map Q̂ (``q``) fitted from z to h."""

    blocks: list[np.ndarray]
    shift: np.ndarray
    iz: slice
    ic: slice
    ih: slice
    ix: slice
    circ: list[int]
    train_rows: np.ndarray
    test_rows: np.ndarray
    m_tr: Moments
    m_te: Moments
    m_pool: Moments
    s: np.ndarray
    q: np.ndarray
    w_zh: np.ndarray
    white: dict[str, Any]
    h: np.ndarray
    h_prime: np.ndarray | None
    rho: float | None
    has_x: bool
    options: dict[str, Any]  # confidence, seed, bootstrap, gauss_sims, gauss_slices, core

    @property
    def rows(self) -> int:
        return int(self.blocks[0].shape[0])

    @property
    def pop(self) -> float:
        """(n − 1)/n: the covariance's population scale."""
        return (self.rows - 1) / self.rows

    @functools.cached_property
    def procrustes_mse(self) -> float:
        """min over orthogonal R of E‖z − R h‖² (after centring), from the covariance."""
        s_zz, s_zh, s_hh = self.s[self.iz, self.iz], self.s[self.iz, self.ih], \
            self.s[self.ih, self.ih]
        return self.pop * procrustes_from_cov(s_zz, s_zh, s_hh)  # linear in Σ


def _fit(zt: np.ndarray, ht: np.ndarray, h_prime: Any, rho: float | None, x: Any,
         circular: Any, test_fraction: float, seed: int, test_rows: Any,
         options: dict[str, Any]) -> Fit:
    """One pass of moments over [z | sin/cos z_circ | h | x] on the split's rows."""
    dtype = np.float32 if (zt.dtype == np.float32 and ht.dtype == np.float32) else np.float64
    rows, n, m = zt.shape[0], zt.shape[1], ht.shape[1]
    blocks = [zt.astype(dtype, copy=False)]
    circ = [int(i) for i in circular]
    if circ:  # (sin z_i, cos z_i) side by side for each circular latent i
        ang = zt[:, circ].astype(dtype)
        blocks.append(np.stack([np.sin(ang), np.cos(ang)], axis=2).reshape(rows, 2 * len(circ)))
    blocks.append(ht.astype(dtype, copy=False))
    if x is not None:
        blocks.append(to_numpy(x).reshape(rows, -1).astype(dtype, copy=False))
    # any point near the mean keeps the moments' sums small: the mean of the first rows will do
    shift = np.concatenate([blk[:_CHUNK_ROWS].mean(0, dtype=np.float64) for blk in blocks])
    ic = slice(n, n + 2 * len(circ))
    ih = slice(ic.stop, ic.stop + m)
    if test_rows is None:
        test_rows, train_rows = split_rows(rows, test_fraction, seed)
    else:
        mask = np.zeros(rows, dtype=bool)
        mask[to_numpy(test_rows).astype(np.int64)] = True
        test_rows, train_rows = np.flatnonzero(mask), np.flatnonzero(~mask)
    m_tr, m_te = Moments.of_row_sets(blocks, [train_rows, test_rows], shift)
    m_pool = Moments.pooled(m_tr, m_te)
    s = m_pool.scatter
    s /= max(rows - 1, 1)  # the covariance, in place
    iz = slice(0, n)
    w_zh = solve_psd(s[iz, iz], s[iz, ih])  # one solve serves Q̂ and R²(z → h)
    hp = None if h_prime is None else to_numpy(h_prime).reshape(rows, -1)
    return Fit(blocks, shift, iz, ic, ih, slice(ih.stop, shift.size), circ, train_rows,
               test_rows, m_tr, m_te, m_pool, s, w_zh.T, w_zh, whitening_terms(s[ih, ih], rows),
               ht, hp, rho, x is not None, options)


def _linear(f: Fit) -> dict[str, Any]:
    s, iz, ih = f.s, f.iz, f.ih
    s_zz, s_zh, s_hh = s[iz, iz], s[iz, ih], s[ih, ih]
    r2_hz = _r2_block(s, ih, iz)
    r2_hz_ho = heldout_r2_from_moments(f.m_tr, f.m_te, ih, iz)
    r2_zh_ho = heldout_r2_from_moments(f.m_tr, f.m_te, iz, ih)
    n = iz.stop
    return {
        "r2_h_to_z": float(r2_hz.mean()),
        "r2_z_to_h": float(r2_from_cov(s_zz, s_zh, s_hh, f.w_zh).mean()),
        "r2_h_to_z_per_dim": [float(v) for v in r2_hz],
        "r2_h_to_z_heldout": float(r2_hz_ho.mean()),
        "r2_z_to_h_heldout": float(r2_zh_ho.mean()),
        "r2_h_to_z_heldout_per_dim": [float(v) for v in r2_hz_ho],
        "per_dim_targets": [f"z{i}" for i in range(n)],  # what each *_per_dim entry is
        "orthogonality_error": orthogonality_error(f.q),
        "procrustes_mse": f.procrustes_mse,
        **f.white,
        "n_samples": f.rows,
        "n_train": int(f.train_rows.size),
        "n_test": int(f.test_rows.size),
        "latent_dim": n,
        "embed_dim": ih.stop - ih.start,
    }


def _identification(f: Fit) -> dict[str, Any]:
    s_zz, s_zh, s_hh = f.s[f.iz, f.iz], f.s[f.iz, f.ih], f.s[f.ih, f.ih]
    return {"mcc": mcc_from_cov(s_zz, s_zh, s_hh),
            "effective_rank": effective_rank_from_eigs(np.linalg.eigvalsh(s_hh))}


def _subspace(f: Fit) -> dict[str, Any]:
    k = min(f.ih.stop - f.ih.start, f.iz.stop)
    top = np.linalg.eigh(f.s[f.ih, f.ih])[1][:, -k:]  # top-k subspace of h
    angles = principal_angles_deg(f.q, top)
    return {"principal_angles_deg": angles, "principal_angle_max_deg": max(angles)}


def _circular(f: Fit) -> dict[str, Any]:
    r2c = _r2_block(f.s, f.ih, f.ic)
    return {"circular_latents": f.circ, "r2_h_to_sincos": float(r2c.mean()),
            "r2_h_to_sincos_per_target": [float(v) for v in r2c],
            "sincos_targets": [f"{c} z{i}" for i in f.circ for c in ("sin", "cos")]}


def _mixing(f: Fit) -> dict[str, Any]:
    return {"mixing_r2_x_to_z": float(_r2_block(f.s, f.ix, f.iz).mean())}


def _bound(f: Fit) -> dict[str, Any]:
    core = f.options["core"]
    m = f.ih.stop - f.ih.start
    pairs = pair_rows(f.h, f.h_prime, f.m_pool.mean[f.ih])
    out = bound_terms(f.white, m, pairs, float(f.rho), None if core else f.options["confidence"])
    bound = out["bound"]
    floor = f.white["whitening_floor"]
    trivial = float(np.trace(f.pop * f.s[f.iz, f.iz]))  # E‖z − z̄‖²: a constant h's
    out.update(bound_holds=bool(f.procrustes_mse <= bound), bound_trivial=trivial,
               bound_vacuous=bool(bound >= trivial), bound_floor=floor**2,
               bound_floor_dominated=bool(floor**2 >= 0.5 * bound))
    if not core:
        out["bound_upper_vacuous"] = bool(out["bound_upper"] >= trivial)
    return out


def _gaussianity(f: Fit) -> dict[str, Any]:
    return sliced_gaussianity(f.h, n_slices=f.options["gauss_slices"],
                              sims=f.options["gauss_sims"], seed=f.options["seed"])


def _bootstrap(f: Fit) -> dict[str, Any]:
    h_block = f.blocks[2 if f.circ else 1]  # [z, sin/cos z_circ?, h, x?]
    rng = np.random.default_rng(f.options["seed"])
    return _bootstrap_r2([h_block, f.blocks[0]], np.concatenate([f.shift[f.ih], f.shift[f.iz]]),
                         f.m_tr.restricted(np.r_[f.ih, f.iz]), f.test_rows,
                         f.options["bootstrap"], f.options["confidence"], rng)


@dataclass(frozen=True)
class MetricGroup:
    """Metrics computed together: their ``name``, when they apply (``applies``, given the fit)
    and the function that computes them. ``core``: kept by a training curve's audit."""

    name: str
    applies: Callable[[Fit], bool]
    compute: Callable[[Fit], dict[str, Any]]
    core: bool = False


#: every group of :func:`audit_metrics`, in the order of its keys; adding a metric is an entry
#: here (or a key in one group's function), its catalogue entry and its docs line
METRIC_GROUPS: tuple[MetricGroup, ...] = (
    MetricGroup("linear", lambda f: True, _linear, core=True),
    MetricGroup("identification", lambda f: True, _identification),
    MetricGroup("subspace", lambda f: f.ih.stop - f.ih.start != f.iz.stop, _subspace),
    MetricGroup("circular", lambda f: bool(f.circ), _circular, core=True),
    MetricGroup("mixing", lambda f: f.has_x, _mixing, core=True),
    MetricGroup("bound", lambda f: f.h_prime is not None and f.rho is not None, _bound,
                core=True),
    MetricGroup("gaussianity", lambda f: f.options["gauss_slices"] > 0, _gaussianity),
    MetricGroup("bootstrap", lambda f: f.options["bootstrap"] > 0, _bootstrap),
)


def audit_metrics(z: ArrayLike, h: ArrayLike, h_prime: ArrayLike | None = None,
                  rho: float | None = None, x: ArrayLike | None = None, *,
                  circular: tuple[int, ...] | list[int] = (), test_fraction: float = 0.5,
                  seed: int = 0, bootstrap: int = 0, confidence: float = 0.95,
                  gauss_sims: int = 0, gauss_slices: int = 64,
                  test_rows: ArrayLike | None = None, core: bool = False) -> dict[str, Any]:
    """Every audit metric, from one pass of moments over [z | sin/cos z_circ | h | x]
    (:func:`_fit`), then each :data:`METRIC_GROUPS` entry that applies.

    This is the one metrics function: ``train`` logs its values on the world's evaluation
    set and ``audit`` reports them. ``*_heldout`` keys fit on a random ``1 − test_fraction``
    of the rows and score on the rest (or, with ``test_rows``, fit on the other rows and
    score on those). With ``bootstrap`` B > 0 the held-out R² gets a percentile interval over
    B resamples of the test rows. ``core`` keeps the groups the training curve needs (linear
    fits, circular latents, mixing, bound); the keys it keeps have the same values.
    """
    zt, ht = to_numpy(z), to_numpy(h)
    zt = zt.reshape(zt.shape[0], -1)
    ht = ht.reshape(ht.shape[0], -1)
    options = {"confidence": confidence, "seed": seed, "bootstrap": bootstrap,
               "gauss_sims": gauss_sims, "gauss_slices": gauss_slices, "core": core}
    fit = _fit(zt, ht, h_prime, rho, x, circular, test_fraction, seed, test_rows, options)
    out: dict[str, Any] = {}
    for group in METRIC_GROUPS:
        if (group.core or not core) and group.applies(fit):
            out.update(group.compute(fit))
    return out


def _bootstrap_r2(blocks: list[np.ndarray], shift: np.ndarray, train: Moments,
                  test_rows: np.ndarray, reps: int, confidence: float,
                  rng: np.random.Generator) -> dict[str, Any]:
    """Percentile interval of the held-out R²(b → c) over resamples of the test rows, for
    blocks [b, c] whose fit on the train rows has the moments ``train``."""
    vals, per_dim = [], []
    na = blocks[0].shape[1]
    aa, bb = slice(0, na), slice(na, shift.size)
    for _ in range(reps):
        idx = test_rows[rng.integers(0, test_rows.size, test_rows.size)]
        r2 = heldout_r2_from_moments(train, Moments(blocks, idx, shift), aa, bb)
        vals.append(float(r2.mean()))
        per_dim.append(r2)
    lo_q, hi_q = (1 - confidence) / 2, 1 - (1 - confidence) / 2
    v = np.asarray(vals)
    pd = np.stack(per_dim)
    return {
        "bootstrap": reps,
        "r2_h_to_z_heldout_ci": [float(np.quantile(v, lo_q)), float(np.quantile(v, hi_q))],
        "r2_h_to_z_heldout_ci_low": float(np.quantile(v, lo_q)),  # gateable: --min KEY=V
        "r2_h_to_z_heldout_per_dim_ci": [[float(np.quantile(pd[:, i], lo_q)),
                                          float(np.quantile(pd[:, i], hi_q))]
                                         for i in range(pd.shape[1])],
    }
