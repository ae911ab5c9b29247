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

import math
from typing import Any

import numpy as np

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


def _pinv_psd(s: np.ndarray, rtol: float = 1e-10) -> np.ndarray:
    """Pseudo-inverse of a symmetric PSD matrix (directions below rtol·max eigenvalue dropped)."""
    evals, evecs = np.linalg.eigh(s)
    top = float(evals.max()) if evals.size else 0.0
    keep = evals > rtol * max(top, 0.0)
    if top <= 0.0 or not keep.any():
        return np.zeros_like(s)
    inv = np.where(keep, 1.0 / np.where(keep, evals, 1.0), 0.0)
    return (evecs * inv) @ evecs.T


def solve_psd(s_aa: np.ndarray, s_ab: np.ndarray, rtol: float = 1e-10) -> np.ndarray:
    """Σ_aa⁺ Σ_ab: a Cholesky solve when Σ_aa is well conditioned, else the pseudo-inverse."""
    from scipy.linalg import LinAlgError, cho_solve, cholesky

    if s_aa.size == 0:
        return np.zeros_like(s_ab)
    try:
        chol = cholesky(s_aa, lower=True, check_finite=False)
    except LinAlgError:
        chol = None
    if chol is not None:
        d = np.diagonal(chol)
        if float(d.min()) ** 2 > rtol * float(d.max()) ** 2:
            return cho_solve((chol, True), s_ab, check_finite=False)
    return _pinv_psd(s_aa, rtol) @ s_ab


def r2_from_cov(s_aa: np.ndarray, s_ab: np.ndarray, s_bb: np.ndarray,
                w: np.ndarray | None = None) -> np.ndarray:
    """Per-output R² of the least-squares fit b ≈ W a + c, from covariance blocks
    (``w`` = Σ_aa⁺ Σ_ab when already solved)."""
    var = np.diagonal(s_bb)
    resid = var - (s_ab * (solve_psd(s_aa, s_ab) if w is None else w)).sum(0)
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
    return float(np.linalg.norm(q.T @ q - np.eye(n)) / math.sqrt(n))


def nuclear_norm(a: np.ndarray) -> float:
    """Σ singular values; for large matrices via the eigenvalues of aᵀa."""
    if min(a.shape) <= 256:
        return float(np.linalg.svd(a, compute_uv=False).sum())
    g = (a.T @ a) if a.shape[0] >= a.shape[1] else (a @ a.T)
    ev = np.linalg.eigvalsh(g)
    return float(np.sqrt(np.clip(ev, 0.0, None)).sum())


def procrustes_from_cov(s_zz: np.ndarray, s_zh: np.ndarray, s_hh: np.ndarray) -> float:
    nuc = nuclear_norm(s_zh)
    return max(float(np.trace(s_hh) + np.trace(s_zz)) - 2.0 * nuc, 0.0)


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
    return float(np.linalg.norm(s - np.eye(s.shape[0])))


def alignment_gap(h: ArrayLike, h_prime: ArrayLike, rho: float) -> float:
    """δ = max(E‖h(z′) − h(z)‖² − 2(1 − ρ) tr Cov(h), 0)."""
    h, hp = as_f64(h), as_f64(h_prime)
    _, s = covariance(h)
    return _gap(h, hp, float(np.trace(s)), rho)


def _gap(h: np.ndarray, hp: np.ndarray, tr_cov: float, rho: float) -> float:
    d = hp.astype(np.float64) - h.astype(np.float64)
    sq = float(np.einsum("ij,ij->", d, d)) / h.shape[0]
    return max(sq - 2.0 * (1.0 - rho) * float(tr_cov), 0.0)


def approximate_bound(epsilon: float, delta: float, rho: float) -> tuple[float, float]:
    """(D, D + (ε + D)²) with D = δ / (2ρ(1 − ρ)) — the bound on E‖h − Qz‖² (Theorem 3)."""
    d = delta / (2.0 * rho * (1.0 - rho))
    return d, d + (epsilon + d) ** 2


def identifiability_metrics(z: ArrayLike, h: ArrayLike, h_prime: ArrayLike | None = None,
                            rho: float | None = None, x: ArrayLike | None = None,
                            **kwargs: Any) -> dict[str, Any]:
    """The in-sample core of :func:`audit_metrics` (R², orthogonality, Procrustes, ε, δ, D,
    bound, held-out R²), from the same code: what the training curve logs."""
    return audit_metrics(z, h, h_prime, rho, x, core=True, **kwargs)


# ---- the full audit: held-out fits, MCC, floors, subspaces, circular latents, Gaussianity ----

_F32_MIN_COLS = 256  # wider than this, moments are accumulated in float32 (centred), then float64


class Moments:
    """Sums and centred second moments of the column blocks of a row subset.

    ``cov()`` is the unbiased covariance; blocks are addressed by the slices in ``cols``.
    """

    def __init__(self, x: np.ndarray, rows: np.ndarray | None = None) -> None:
        xs = x if rows is None else x[rows]
        self.n = xs.shape[0]
        work = np.float32 if (x.shape[1] > _F32_MIN_COLS and x.dtype == np.float32) \
            else np.float64
        self.mean = xs.mean(0, dtype=np.float64)
        if rows is not None and xs.dtype == work:
            xs -= self.mean.astype(work)  # xs is already a copy: centre it in place
            xc = xs
        else:
            xc = xs.astype(work) - self.mean.astype(work)
        self.scatter = _gram(xc)  # Σ (x − x̄)(x − x̄)ᵀ, float64

    def cov(self, ddof: int = 1) -> np.ndarray:
        return self.scatter / max(self.n - ddof, 1)

    def restricted(self, cols: np.ndarray) -> Moments:
        """The same moments for a subset of the columns (no pass over the data)."""
        out = Moments.__new__(Moments)
        out.n, out.mean, out.scatter = self.n, self.mean[cols], self.scatter[np.ix_(cols, cols)]
        return out

    @staticmethod
    def pooled(a: Moments, b: Moments) -> Moments:
        out = Moments.__new__(Moments)
        out.n = a.n + b.n
        out.mean = (a.n * a.mean + b.n * b.mean) / out.n
        d = (a.mean - b.mean)[:, None]
        out.scatter = a.scatter + b.scatter + (a.n * b.n / out.n) * (d @ d.T)
        return out


def _gram(xc: np.ndarray) -> np.ndarray:
    """xcᵀ xc in float64 through BLAS syrk (half the work of a general product)."""
    from scipy.linalg import blas

    if xc.shape[0] == 0 or xc.shape[1] == 0:
        return np.zeros((xc.shape[1], xc.shape[1]))
    syrk = blas.ssyrk if xc.dtype == np.float32 else blas.dsyrk
    if xc.flags.c_contiguous:  # xcᵀ is then a Fortran-ordered view: no copy
        upper = syrk(1.0, xc.T, trans=0, lower=0)
    else:
        upper = syrk(1.0, np.asfortranarray(xc), trans=1, lower=0)
    g = upper.astype(np.float64)
    g += np.triu(g, 1).T  # syrk fills the upper triangle only
    return g


def heldout_r2_from_moments(train: Moments, test: Moments, a: slice, b: slice) -> np.ndarray:
    """Per-output R² on the test rows of the least-squares fit b ≈ W a + c fitted on train.

    SST is taken about the test mean (scikit-learn's r2_score on the test split).
    """
    s_tr = train.cov(ddof=0)
    w = solve_psd(s_tr[a, a], s_tr[a, b])
    c = train.mean[b] - train.mean[a] @ w
    s_te = test.cov(ddof=0)
    sbb, sab, saa = s_te[b, b], s_te[a, b], s_te[a, a]
    bias = test.mean[b] - test.mean[a] @ w - c
    var = np.diagonal(sbb)
    sse = var - 2.0 * (w * sab).sum(0) + (w * (saa @ w)).sum(0) + bias**2
    scale = float(np.abs(var).max()) if var.size else 0.0
    ok = var > 1e-12 * max(scale, 1e-300)
    return np.where(ok, 1.0 - sse / np.where(ok, var, 1.0), 0.0)


def mcc_from_cov(s_zz: np.ndarray, s_zh: np.ndarray, s_hh: np.ndarray) -> float:
    """Mean absolute Pearson correlation of latents and embedding dims after Hungarian matching."""
    from scipy.optimize import linear_sum_assignment

    dz = np.sqrt(np.clip(np.diagonal(s_zz), 0, None))
    dh = np.sqrt(np.clip(np.diagonal(s_hh), 0, None))
    denom = dz[:, None] * dh[None, :]
    corr = np.abs(np.where(denom > 0, s_zh / np.where(denom > 0, denom, 1.0), 0.0))
    rows, cols = linear_sum_assignment(-corr)
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
    """E‖Ĉov − I‖_F for n samples of a truly white dim-dimensional h: ≈ √(dim(dim+1)/n)."""
    return math.sqrt(dim * (dim + 1) / max(n_samples, 1))


def principal_angles_deg(a: np.ndarray, b: np.ndarray) -> list[float]:
    """Principal angles (degrees) between the column spaces of a and b."""
    from scipy.linalg import subspace_angles

    return [float(np.degrees(v)) for v in subspace_angles(a, b)]


def unit_directions(dim: int, n_slices: int, rng: np.random.Generator) -> np.ndarray:
    """``n_slices`` random unit vectors in R^dim, as the columns of a (dim, n_slices) matrix."""
    a = rng.standard_normal((dim, n_slices))
    return a / np.linalg.norm(a, axis=0, keepdims=True)


EP_KNOTS, EP_T_MAX = 17, 3.0  # as the training loss SIGReg


def epps_pulley(p: np.ndarray) -> float:
    """The SIGReg statistic of standardised projections p (n × M):
    n · mean_j Σ_k w_k |φ̂_j(t_k) − e^{−t_k²/2}|², t_k = kΔt on [0, 3], trapezoid weights."""
    return epps_pulley_rows(np.ascontiguousarray(p.T))


def epps_pulley_rows(pt: np.ndarray) -> float:
    """:func:`epps_pulley` of projections given slice by slice, pt of shape (M, n)."""
    m, n = pt.shape
    knots, t_max = EP_KNOTS, EP_T_MAX
    dt = t_max / (knots - 1)
    t = np.linspace(0.0, t_max, knots)
    w = np.full(knots, 2.0 * dt)
    w[0] = w[-1] = dt
    phi = np.exp(-0.5 * t * t)
    w = w * phi
    theta = pt.astype(np.float32) * np.float32(dt)
    c1, s1 = np.cos(theta), np.sin(theta)
    try:
        from . import _ep_numba

        sums = _ep_numba.sums(c1, s1, knots - 1)
        cm, sm = sums[0].astype(np.float64) / n, sums[1].astype(np.float64) / n
    except ImportError:  # numba is optional: the same recurrence in numpy
        cm, sm = np.empty((knots - 1, m)), np.empty((knots - 1, m))
        c, s = c1.astype(np.float64), s1.astype(np.float64)
        cb, sb = c.copy(), s.copy()
        for k in range(knots - 1):
            cm[k], sm[k] = c.mean(1), s.mean(1)
            c, s = c * cb - s * sb, s * cb + c * sb
    err = (cm - phi[1:, None]) ** 2 + sm**2
    return float((w[1:] @ err).sum() * n / m)  # k = 0 adds 0


def sliced_gaussianity(h: ArrayLike, n_slices: int = 64, sims: int = 50, seed: int = 0
                       ) -> dict[str, Any]:
    """Sliced Epps–Pulley test that h is Gaussian (any mean and covariance).

    Projections on random unit directions are standardised slice by slice, the SIGReg
    statistic (n · mean over slices of the weighted CF distance) is computed, and the p-value
    comes from ``sims`` simulated Gaussian data sets of the same size whose projections have the
    same correlation structure (what the projections of a Gaussian with Cov(h) would have).
    """
    ht = to_numpy(h)
    ht = ht.reshape(ht.shape[0], -1)
    if ht.dtype not in (np.float32, np.float64):
        ht = ht.astype(np.float64)
    n, m = ht.shape
    rng = np.random.default_rng(seed)
    a = unit_directions(m, n_slices, rng)
    proj = (ht @ a.astype(ht.dtype)).astype(np.float64)
    proj -= proj.mean(0)
    sd = proj.std(0, ddof=1)
    keep = sd > 1e-12 * max(float(sd.max()), 1e-300)
    if not keep.any():
        return {"gaussianity_statistic": None, "gaussianity_p_value": None}
    proj = proj[:, keep] / sd[keep]

    def stat(pt: np.ndarray) -> float:  # slices in rows
        pt = pt - pt.mean(1, keepdims=True)
        return epps_pulley_rows(pt / pt.std(1, ddof=1, keepdims=True))

    observed = stat(np.ascontiguousarray(proj.T))
    corr = np.corrcoef(proj.T) if proj.shape[1] > 1 else np.ones((1, 1))
    evals, evecs = np.linalg.eigh(corr)
    root = (evecs * np.sqrt(np.clip(evals, 0, None))).astype(np.float32)  # corr = root rootᵀ
    null = np.array([stat(root @ rng.standard_normal((root.shape[1], n), dtype=np.float32))
                     for _ in range(sims)])
    p_value = (1.0 + float((null >= observed).sum())) / (1.0 + len(null)) if sims else None
    return {"gaussianity_statistic": observed, "gaussianity_p_value": p_value,
            "gaussianity_null_median": float(np.median(null)) if sims else None}


def split_rows(rows: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(test rows, train rows): a seeded random split with round(rows·test_fraction) test rows."""
    perm = np.random.default_rng(seed).permutation(rows)
    n_test = max(1, min(rows - 1, int(round(rows * test_fraction))))
    return perm[:n_test], perm[n_test:]


def _r2_block(s: np.ndarray, a: slice, b: slice) -> np.ndarray:
    return r2_from_cov(s[a, a], s[a, b], s[b, b])


def audit_metrics(z: ArrayLike, h: ArrayLike, h_prime: ArrayLike | None = None,
                  rho: float | None = None, x: ArrayLike | None = None, *,
                  circular: tuple[int, ...] | list[int] = (), test_fraction: float = 0.5,
                  seed: int = 0, bootstrap: int = 0, confidence: float = 0.95,
                  gauss_sims: int = 50, gauss_slices: int = 64,
                  test_rows: ArrayLike | None = None, core: bool = False) -> dict[str, Any]:
    """Every audit metric, from one pass of moments over [z | sin/cos z_circ | h | x].

    This is the one metrics function: ``train`` logs its values on the world's evaluation
    set and ``audit`` reports them. ``*_heldout`` keys fit on a random ``1 − test_fraction``
    of the rows and score on the rest (or, with ``test_rows``, fit on the other rows and
    score on those). With ``bootstrap`` B > 0 the held-out R² gets a percentile interval over
    B resamples of the test rows. ``core`` skips what the training curve does not need (MCC,
    spectrum, principal angles, Gaussianity, bootstrap); the keys it keeps have the same
    values.
    """
    zt, ht = to_numpy(z), to_numpy(h)
    zt = zt.reshape(zt.shape[0], -1)
    ht = ht.reshape(ht.shape[0], -1)
    dtype = np.float32 if (zt.dtype == np.float32 and ht.dtype == np.float32) else np.float64
    rows, n, m = zt.shape[0], zt.shape[1], ht.shape[1]
    blocks = [zt.astype(dtype, copy=False)]
    circ = [int(i) for i in circular]
    if circ:
        ang = zt[:, circ].astype(dtype)
        blocks += [np.sin(ang), np.cos(ang)]
    blocks.append(ht.astype(dtype, copy=False))
    if x is not None:
        blocks.append(to_numpy(x).reshape(rows, -1).astype(dtype, copy=False))
    data = np.concatenate(blocks, 1)
    iz = slice(0, n)
    ic = slice(n, n + 2 * len(circ))
    ih = slice(ic.stop, ic.stop + m)
    ix = slice(ih.stop, data.shape[1])

    rng = np.random.default_rng(seed)
    if test_rows is None:
        test_rows, train_rows = split_rows(rows, test_fraction, seed)
    else:
        mask = np.zeros(rows, dtype=bool)
        mask[to_numpy(test_rows).astype(np.int64)] = True
        test_rows, train_rows = np.flatnonzero(mask), np.flatnonzero(~mask)
    m_tr, m_te = Moments(data, train_rows), Moments(data, test_rows)
    full = Moments.pooled(m_tr, m_te)
    s = full.cov()
    s_zz, s_zh, s_hh = s[iz, iz], s[iz, ih], s[ih, ih]
    pop = (rows - 1) / rows

    w_zh = solve_psd(s_zz, s_zh)  # one solve serves Q̂ and R²(z → h)
    q = w_zh.T
    eps = float(np.linalg.norm(s_hh - np.eye(m)))
    floor = whitening_floor(rows, m)
    r2_hz = _r2_block(s, ih, iz)
    r2_hz_ho = heldout_r2_from_moments(m_tr, m_te, ih, iz)
    r2_zh_ho = heldout_r2_from_moments(m_tr, m_te, iz, ih)
    out: dict[str, Any] = {
        "r2_h_to_z": float(r2_hz.mean()),
        "r2_z_to_h": float(r2_from_cov(s_zz, s_zh, s_hh, w_zh).mean()),
        "r2_h_to_z_per_dim": [float(v) for v in r2_hz],
        "r2_h_to_z_heldout": float(r2_hz_ho.mean()),
        "r2_z_to_h_heldout": float(r2_zh_ho.mean()),
        "r2_h_to_z_heldout_per_dim": [float(v) for v in r2_hz_ho],
        "orthogonality_error": orthogonality_error(q),
        "procrustes_mse": procrustes_from_cov(pop * s_zz, pop * s_zh, pop * s_hh),
        "whitening_error": eps,
        "whitening_floor": floor,
        "whitening_error_corrected": math.sqrt(max(eps**2 - floor**2, 0.0)),
        "total_variance_h": float(np.trace(s_hh)),
        "n_samples": rows,
        "n_train": int(train_rows.size),
        "n_test": int(test_rows.size),
        "latent_dim": n,
        "embed_dim": m,
    }
    if not core:
        out["mcc"] = mcc_from_cov(s_zz, s_zh, s_hh)
        out["effective_rank"] = effective_rank_from_eigs(np.linalg.eigvalsh(s_hh))
    if m != n and not core:
        k = min(m, n)
        top = np.linalg.eigh(s_hh)[1][:, -k:]  # top-k subspace of h
        out["principal_angles_deg"] = principal_angles_deg(q, top)
        out["principal_angle_max_deg"] = max(out["principal_angles_deg"])
    if circ:
        r2c = _r2_block(s, ih, ic)
        out["circular_latents"] = circ
        out["r2_h_to_sincos"] = float(r2c.mean())
        out["r2_h_to_sincos_per_target"] = [float(v) for v in r2c]
    if x is not None:
        out["mixing_r2_x_to_z"] = float(_r2_block(s, ix, iz).mean())
    if h_prime is not None and rho is not None:
        hp = to_numpy(h_prime).reshape(rows, -1)
        delta = _gap(ht, hp, float(np.trace(s_hh)), float(rho))
        d, bound = approximate_bound(eps, delta, float(rho))
        _, bound_c = approximate_bound(out["whitening_error_corrected"], delta, float(rho))
        trivial = float(np.trace(pop * s_zz))  # E‖z − z̄‖²: what a constant h achieves
        out.update(alignment_gap=delta, D=d, bound=bound,
                   bound_holds=bool(out["procrustes_mse"] <= bound),
                   bound_corrected=bound_c,
                   bound_corrected_holds=bool(out["procrustes_mse"] <= bound_c),
                   bound_trivial=trivial, bound_vacuous=bool(bound >= trivial),
                   bound_floor=floor**2,
                   bound_floor_dominated=bool(floor**2 >= 0.5 * bound), rho=float(rho))
    if gauss_slices > 0 and not core:
        out.update(sliced_gaussianity(ht, n_slices=gauss_slices, sims=gauss_sims, seed=seed))
    if bootstrap > 0 and not core:
        out.update(_bootstrap_r2(data, m_tr, test_rows, ih, iz, bootstrap, confidence, rng))
    return out


def _bootstrap_r2(data: np.ndarray, train: Moments, test_rows: np.ndarray, a: slice,
                  b: slice, reps: int, confidence: float, rng: np.random.Generator
                  ) -> dict[str, Any]:
    """Percentile interval of the held-out R²(h → z) over resamples of the test rows."""
    vals, per_dim = [], []
    cols = np.concatenate([np.arange(a.start, a.stop), np.arange(b.start, b.stop)])
    sub = data[:, cols]
    na = a.stop - a.start
    aa, bb = slice(0, na), slice(na, sub.shape[1])
    train_sub = train.restricted(cols)
    for _ in range(reps):
        idx = test_rows[rng.integers(0, test_rows.size, test_rows.size)]
        r2 = heldout_r2_from_moments(train_sub, Moments(sub, idx), aa, bb)
        vals.append(float(r2.mean()))
        per_dim.append(r2)
    lo_q, hi_q = (1 - confidence) / 2, 1 - (1 - confidence) / 2
    v = np.asarray(vals)
    pd = np.stack(per_dim)
    return {
        "bootstrap": reps,
        "r2_h_to_z_heldout_ci": [float(np.quantile(v, lo_q)), float(np.quantile(v, hi_q))],
        "r2_h_to_z_heldout_per_dim_ci": [[float(np.quantile(pd[:, i], lo_q)),
                                          float(np.quantile(pd[:, i], hi_q))]
                                         for i in range(pd.shape[1])],
    }
