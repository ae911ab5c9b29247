"""Identifiability metrics: pure functions of arrays (z, h, h′, x, ρ).

Moments are accumulated in float64, except for wide float32 inputs (more than 256 columns),
whose centred second moments are accumulated in float32 and then converted; every solve,
decomposition and reported number is float64.

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


def solve_psd(s_aa: torch.Tensor, s_ab: torch.Tensor, rtol: float = 1e-10) -> torch.Tensor:
    """Σ_aa⁺ Σ_ab: a Cholesky solve when Σ_aa is well conditioned, else the pseudo-inverse."""
    if s_aa.numel() == 0:
        return torch.zeros_like(s_ab)
    chol, info = torch.linalg.cholesky_ex(s_aa)
    if int(info) == 0:
        d = torch.diagonal(chol)
        if float(d.min()) ** 2 > rtol * float(d.max()) ** 2:
            return torch.cholesky_solve(s_ab, chol)
    return _pinv_psd(s_aa, rtol) @ s_ab


def r2_from_cov(s_aa: torch.Tensor, s_ab: torch.Tensor, s_bb: torch.Tensor) -> torch.Tensor:
    """Per-output R² of the least-squares fit b ≈ W a + c, from covariance blocks."""
    resid = torch.diagonal(s_bb) - (s_ab * solve_psd(s_aa, s_ab)).sum(0)
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
    return solve_psd(s_zz, s_zh).T


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


def nuclear_norm(a: torch.Tensor) -> float:
    """Σ singular values; for large matrices via the eigenvalues of aᵀa (numpy's LAPACK)."""
    if min(a.shape) <= 256:
        return float(torch.linalg.svdvals(a).sum())
    g = (a.T @ a) if a.shape[0] >= a.shape[1] else (a @ a.T)
    ev = np.linalg.eigvalsh(g.numpy())
    return float(np.sqrt(np.clip(ev, 0.0, None)).sum())


def procrustes_from_cov(s_zz: torch.Tensor, s_zh: torch.Tensor, s_hh: torch.Tensor) -> float:
    nuc = nuclear_norm(s_zh)
    return max(float(torch.trace(s_hh) + torch.trace(s_zz)) - 2.0 * nuc, 0.0)


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
    sq = float((hp - h).square().sum(dtype=torch.float64)) / h.shape[0]
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

    def __init__(self, x: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        xs = x if rows is None else x[rows]
        self.n = xs.shape[0]
        work = torch.float32 if (x.shape[1] > _F32_MIN_COLS and x.dtype == torch.float32) \
            else torch.float64
        self.mean = xs.mean(0, dtype=torch.float64)
        xc = xs.to(work) - self.mean.to(work)
        self.scatter = (xc.T @ xc).to(torch.float64)  # Σ (x − x̄)(x − x̄)ᵀ

    def cov(self, ddof: int = 1) -> torch.Tensor:
        return self.scatter / max(self.n - ddof, 1)

    def restricted(self, cols: torch.Tensor) -> Moments:
        """The same moments for a subset of the columns (no pass over the data)."""
        out = Moments.__new__(Moments)
        out.n, out.mean, out.scatter = self.n, self.mean[cols], self.scatter[cols][:, cols]
        return out

    @staticmethod
    def pooled(a: Moments, b: Moments) -> Moments:
        out = Moments.__new__(Moments)
        out.n = a.n + b.n
        out.mean = (a.n * a.mean + b.n * b.mean) / out.n
        d = (a.mean - b.mean).unsqueeze(1)
        out.scatter = a.scatter + b.scatter + (a.n * b.n / out.n) * (d @ d.T)
        return out


def heldout_r2_from_moments(train: Moments, test: Moments, a: slice, b: slice) -> torch.Tensor:
    """Per-output R² on the test rows of the least-squares fit b ≈ W a + c fitted on train.

    SST is taken about the test mean (scikit-learn's r2_score on the test split).
    """
    s_tr = train.cov(ddof=0)
    w = solve_psd(s_tr[a, a], s_tr[a, b])
    c = train.mean[b] - train.mean[a] @ w
    s_te = test.cov(ddof=0)
    sbb, sab, saa = s_te[b, b], s_te[a, b], s_te[a, a]
    bias = test.mean[b] - test.mean[a] @ w - c
    sse = torch.diagonal(sbb) - 2.0 * (w * sab).sum(0) + (w * (saa @ w)).sum(0) + bias**2
    var = torch.diagonal(sbb)
    scale = float(var.abs().max()) if var.numel() else 0.0
    ok = var > 1e-12 * max(scale, 1e-300)
    r2 = 1.0 - sse / torch.where(ok, var, torch.ones_like(var))
    return torch.where(ok, r2, torch.zeros_like(r2))


def mcc_from_cov(s_zz: torch.Tensor, s_zh: torch.Tensor, s_hh: torch.Tensor) -> float:
    """Mean absolute Pearson correlation of latents and embedding dims after Hungarian matching."""
    from scipy.optimize import linear_sum_assignment

    dz = torch.sqrt(torch.diagonal(s_zz).clamp_min(0))
    dh = torch.sqrt(torch.diagonal(s_hh).clamp_min(0))
    denom = dz[:, None] * dh[None, :]
    corr = torch.where(denom > 0, s_zh / torch.where(denom > 0, denom, torch.ones_like(denom)),
                       torch.zeros_like(s_zh)).abs().numpy()
    rows, cols = linear_sum_assignment(-corr)
    return float(corr[rows, cols].mean())


def mcc(z: ArrayLike, h: ArrayLike) -> float:
    z, h = as_f64(z), as_f64(h)
    _, s = covariance(z, h)
    n = z.shape[1]
    return mcc_from_cov(s[:n, :n], s[:n, n:], s[n:, n:])


def effective_rank_from_eigs(evals: torch.Tensor) -> float:
    """exp(entropy of the normalised eigenvalue spectrum) (Roy & Vetterli)."""
    ev = evals.clamp_min(0)
    total = float(ev.sum())
    if total <= 0:
        return 0.0
    p = ev / total
    p = p[p > 0]
    return float(torch.exp(-(p * torch.log(p)).sum()))


def whitening_floor(n_samples: int, dim: int) -> float:
    """E‖Ĉov − I‖_F for n samples of a truly white dim-dimensional h: ≈ √(dim(dim+1)/n)."""
    return math.sqrt(dim * (dim + 1) / max(n_samples, 1))


def principal_angles_deg(a: torch.Tensor, b: torch.Tensor) -> list[float]:
    """Principal angles (degrees) between the column spaces of a and b."""
    from scipy.linalg import subspace_angles

    return [float(np.degrees(v)) for v in subspace_angles(a.numpy(), b.numpy())]


def sliced_gaussianity(h: ArrayLike, n_slices: int = 64, sims: int = 50, seed: int = 0
                       ) -> dict[str, Any]:
    """Sliced Epps–Pulley test that h is Gaussian (any mean and covariance).

    Projections on random unit directions are standardised slice by slice, the SIGReg
    statistic (n · mean over slices of the weighted CF distance) is computed, and the p-value
    comes from ``sims`` simulated Gaussian data sets of the same size whose projections have the
    same correlation structure (what the projections of a Gaussian with Cov(h) would have).
    """
    from .losses import random_directions, sigreg

    ht = h.detach().cpu() if isinstance(h, torch.Tensor) else torch.as_tensor(np.asarray(h))
    ht = ht.reshape(ht.shape[0], -1)
    if ht.dtype not in (torch.float32, torch.float64):
        ht = ht.double()
    n, m = ht.shape
    gen = torch.Generator().manual_seed(seed)
    a = random_directions(m, n_slices, gen, dtype=torch.float64)
    proj = (ht @ a.to(ht.dtype)).double()
    proj = proj - proj.mean(0)
    sd = proj.std(0)
    keep = sd > 1e-12 * max(float(sd.max()), 1e-300)
    if not bool(keep.any()):
        return {"gaussianity_statistic": None, "gaussianity_p_value": None}
    proj = proj[:, keep] / sd[keep]
    eye = torch.eye(proj.shape[1], dtype=torch.float64)

    eye32 = eye.float()

    def stat(p: torch.Tensor) -> float:
        p = (p - p.mean(0)) / p.std(0)
        return float(sigreg(p.float(), eye32))

    observed = stat(proj)
    corr = torch.corrcoef(proj.T) if proj.shape[1] > 1 else torch.ones(1, 1, dtype=torch.float64)
    evals, evecs = torch.linalg.eigh(corr)
    root = evecs * evals.clamp_min(0).sqrt()  # corr = root rootᵀ
    null = []
    root32 = root.float()
    for _ in range(sims):
        g = torch.randn(n, root.shape[1], generator=gen) @ root32.T
        null.append(stat(g))
    null_t = torch.tensor(null) if null else torch.zeros(0)
    p_value = (1.0 + float((null_t >= observed).sum())) / (1.0 + len(null)) if null else None
    return {"gaussianity_statistic": observed, "gaussianity_p_value": p_value,
            "gaussianity_null_median": float(null_t.median()) if null else None}


def split_rows(rows: int, test_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(test rows, train rows): a seeded random split with round(rows·test_fraction) test rows."""
    perm = torch.randperm(rows, generator=torch.Generator().manual_seed(seed))
    n_test = max(1, min(rows - 1, int(round(rows * test_fraction))))
    return perm[:n_test], perm[n_test:]


def _r2_block(s: torch.Tensor, a: slice, b: slice) -> torch.Tensor:
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
    zt = torch.as_tensor(np.asarray(z)) if not isinstance(z, torch.Tensor) else z.detach().cpu()
    ht = torch.as_tensor(np.asarray(h)) if not isinstance(h, torch.Tensor) else h.detach().cpu()
    zt = zt.reshape(zt.shape[0], -1)
    ht = ht.reshape(ht.shape[0], -1)
    dtype = torch.float32 if (zt.dtype == torch.float32 and ht.dtype == torch.float32) \
        else torch.float64
    rows, n, m = zt.shape[0], zt.shape[1], ht.shape[1]
    blocks = [zt.to(dtype)]
    circ = [int(i) for i in circular]
    if circ:
        ang = zt[:, circ].to(dtype)
        blocks += [torch.sin(ang), torch.cos(ang)]
    blocks.append(ht.to(dtype))
    if x is not None:
        xt = torch.as_tensor(np.asarray(x)) if not isinstance(x, torch.Tensor) else x.detach()
        blocks.append(xt.reshape(rows, -1).to(dtype))
    data = torch.cat(blocks, 1)
    iz = slice(0, n)
    ic = slice(n, n + 2 * len(circ))
    ih = slice(ic.stop, ic.stop + m)
    ix = slice(ih.stop, data.shape[1])

    gen = torch.Generator().manual_seed(seed)
    if test_rows is None:
        test_rows, train_rows = split_rows(rows, test_fraction, seed)
    else:
        mask = torch.zeros(rows, dtype=torch.bool)
        mask[torch.as_tensor(np.asarray(test_rows), dtype=torch.long)] = True
        test_rows, train_rows = mask.nonzero().squeeze(1), (~mask).nonzero().squeeze(1)
    m_tr, m_te = Moments(data, train_rows), Moments(data, test_rows)
    full = Moments.pooled(m_tr, m_te)
    s = full.cov()
    s_zz, s_zh, s_hh = s[iz, iz], s[iz, ih], s[ih, ih]
    pop = (rows - 1) / rows

    q = linear_map_from_cov(s_zz, s_zh)
    eps = float(torch.linalg.matrix_norm(s_hh - torch.eye(m, dtype=s.dtype)))
    floor = whitening_floor(rows, m)
    r2_hz = _r2_block(s, ih, iz)
    r2_hz_ho = heldout_r2_from_moments(m_tr, m_te, ih, iz)
    r2_zh_ho = heldout_r2_from_moments(m_tr, m_te, iz, ih)
    out: dict[str, Any] = {
        "r2_h_to_z": float(r2_hz.mean()),
        "r2_z_to_h": float(_r2_block(s, iz, ih).mean()),
        "r2_h_to_z_per_dim": [float(v) for v in r2_hz],
        "r2_h_to_z_heldout": float(r2_hz_ho.mean()),
        "r2_z_to_h_heldout": float(r2_zh_ho.mean()),
        "r2_h_to_z_heldout_per_dim": [float(v) for v in r2_hz_ho],
        "orthogonality_error": orthogonality_error(q),
        "procrustes_mse": procrustes_from_cov(pop * s_zz, pop * s_zh, pop * s_hh),
        "whitening_error": eps,
        "whitening_floor": floor,
        "whitening_error_corrected": math.sqrt(max(eps**2 - floor**2, 0.0)),
        "total_variance_h": float(torch.trace(s_hh)),
        "n_samples": rows,
        "n_train": int(train_rows.numel()),
        "n_test": int(test_rows.numel()),
        "latent_dim": n,
        "embed_dim": m,
    }
    if not core:
        out["mcc"] = mcc_from_cov(s_zz, s_zh, s_hh)
        out["effective_rank"] = effective_rank_from_eigs(
            torch.from_numpy(np.linalg.eigvalsh(s_hh.numpy())))
    if m != n and not core:
        k = min(m, n)
        top = torch.from_numpy(np.linalg.eigh(s_hh.numpy())[1][:, -k:])  # top-k subspace of h
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
        hp = torch.as_tensor(np.asarray(h_prime)) if not isinstance(h_prime, torch.Tensor) \
            else h_prime.detach().cpu()
        delta = _gap(ht.double(), hp.reshape(rows, -1).double(), torch.trace(s_hh), float(rho))
        d, bound = approximate_bound(eps, delta, float(rho))
        _, bound_c = approximate_bound(out["whitening_error_corrected"], delta, float(rho))
        trivial = float(torch.trace(pop * s_zz))  # E‖z − z̄‖²: what a constant h achieves
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
        out.update(_bootstrap_r2(data, m_tr, test_rows, ih, iz, bootstrap, confidence, gen))
    return out


def _bootstrap_r2(data: torch.Tensor, train: Moments, test_rows: torch.Tensor, a: slice,
                  b: slice, reps: int, confidence: float, gen: torch.Generator
                  ) -> dict[str, Any]:
    """Percentile interval of the held-out R²(h → z) over resamples of the test rows."""
    vals = []
    per_dim = []
    cols = torch.cat([torch.arange(a.start, a.stop), torch.arange(b.start, b.stop)])
    sub = data[:, cols]
    na = a.stop - a.start
    aa, bb = slice(0, na), slice(na, sub.shape[1])
    train_sub = train.restricted(cols)
    for _ in range(reps):
        idx = test_rows[torch.randint(0, test_rows.numel(), (test_rows.numel(),), generator=gen)]
        r2 = heldout_r2_from_moments(train_sub, Moments(sub, idx), aa, bb)
        vals.append(float(r2.mean()))
        per_dim.append(r2)
    lo_q, hi_q = (1 - confidence) / 2, 1 - (1 - confidence) / 2
    v = torch.tensor(vals, dtype=torch.float64)
    pd = torch.stack(per_dim)
    return {
        "bootstrap": reps,
        "r2_h_to_z_heldout_ci": [float(torch.quantile(v, lo_q)), float(torch.quantile(v, hi_q))],
        "r2_h_to_z_heldout_per_dim_ci": [[float(torch.quantile(pd[:, i], lo_q)),
                                          float(torch.quantile(pd[:, i], hi_q))]
                                         for i in range(pd.shape[1])],
    }
