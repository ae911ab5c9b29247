"""What an uninformative encoder of the same width scores on the same rows: R²'s floor.

A linear fit of z on a wide h finds something even when h knows nothing of z. With n rows and
an m-wide h, the in-sample R² of each latent is then Beta(m/2, (n − 1 − m)/2) distributed
when z is Gaussian (mean m/(n − 1) whatever z and h are, over shuffles of all the rows), and the
held-out R² falls below 0 by about (m + 1)/(n_train − m − 2). An audit's R² means something only
above that band.

The control is the encoder's own h with its rows shuffled against z — same width, same
distribution, no information — within the train rows and within the test rows, so the audit's
split is kept. Each shuffle's R²s come from the audit's own moments of h (its scatter within
the train rows, the test rows and both) and one product hᵀ z_π per shuffle: the shuffles cost
O(n·m·d) each, no new pass of m² work over the rows.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from idaudit.maths.linalg import psd_solver

__all__ = ["band", "band_rank", "floor_latents", "heldout_floor_mean", "in_sample_floor_mean", "shuffled_r2",
           "simulated_heldout_r2"]

GATHER_ROWS = 8192  # rows of h gathered per product
#: latents × columns of h the shuffles fit at most: each latent costs a product over every row
#: and column of h, so with many latents and a wide h (N = m = 512) the band is that of the
#: mean over a seeded subset of max(2, LATENT_COLUMNS // m) latents — centred where the mean
#: over all is, and wider, so a gate it warns about is not missed
LATENT_COLUMNS = 2048
MAX_CELLS = 4_000_000  # shuffled z values held at once (rows × draws × latents)


def _cross(h: np.ndarray, rows: np.ndarray, mean_h: np.ndarray, z: np.ndarray,
           perms: np.ndarray) -> np.ndarray:
    """Σ_i (h_i − h̄) z_{π(i)}ᵀ over ``rows`` of h for each shuffle π (a row of ``perms``) of
    ``z`` (one row per entry of ``rows``): the centred cross-products as an m × (k·d) matrix,
    draw-major (draw i's latents at columns [i·d, (i + 1)·d)); one product per block of
    ``GATHER_ROWS`` rows of h. A float32 h is multiplied in float32 (a band needs no more)."""
    k, d = perms.shape[0], z.shape[1]
    work = np.float32 if h.dtype == np.float32 else np.float64
    # (d·k) × rows, latent-major: row j·k + i is latent j under shuffle i
    shuffled = np.take(np.ascontiguousarray(z.T, dtype=work), perms, axis=1).reshape(d * k, -1)
    mean_w = mean_h.astype(work)
    out = np.zeros((d * k, h.shape[1]))
    for i in range(0, rows.size, GATHER_ROWS):
        block = h[rows[i:i + GATHER_ROWS]].astype(work, copy=False) - mean_w
        out += shuffled[:, i:i + GATHER_ROWS] @ block
    return out.reshape(d, k, -1).transpose(2, 1, 0).reshape(h.shape[1], k * d)


Solver = Callable[[np.ndarray], np.ndarray]


def shuffled_r2(h: np.ndarray, z: np.ndarray, train_rows: np.ndarray, test_rows: np.ndarray,
                s_tr: np.ndarray, s_te: np.ndarray, draws: int, seed: int,
                identity: bool = False, solvers: tuple[Solver, Solver] | None = None,
                h_means: tuple[np.ndarray, np.ndarray] | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """(in-sample, held-out) R²(h → z), each the mean over the latents, for ``draws`` shuffles
    of z's rows against h's within ``train_rows`` and within ``test_rows``.

    ``s_tr``/``s_te``: the scatter Σ (h − h̄)(h − h̄)ᵀ of h over the train and test rows (the
    audit's moments). In-sample: R²_j = c_jᵀ S⁻¹ c_j / Σ(z_j − z̄_j)² with c_j the centred
    cross-product of h and the shuffled z_j over all rows and S the pooled scatter. Held-out:
    W = S_tr⁻¹ C_tr fitted on the train rows, scored on the test rows about their mean (as the
    audit scores). ``identity``: no shuffle (the audit's own R², for checks). ``solvers``:
    b ↦ S⁻¹b for the pooled and the train scatter, and ``h_means`` h's means over the train and
    test rows, when the caller has them already (no pass over h for them)."""
    z = np.asarray(z, dtype=np.float64)
    d = z.shape[1]
    tr, te = np.sort(train_rows), np.sort(test_rows)
    n_tr, n_te = tr.size, te.size
    z_tr, z_te = z[tr], z[te]
    mu_z_tr, mu_z_te = z_tr.mean(0), z_te.mean(0)
    mu_h_tr, mu_h_te = h_means or (h[tr].mean(0, dtype=np.float64),
                                   h[te].mean(0, dtype=np.float64))
    n = n_tr + n_te
    w_between = n_tr * n_te / n
    sst = ((z_tr - mu_z_tr) ** 2).sum(0) + ((z_te - mu_z_te) ** 2).sum(0) \
        + w_between * (mu_z_tr - mu_z_te) ** 2
    var_te = ((z_te - mu_z_te) ** 2).sum(0) / n_te
    # a latent constant on these rows has no R² (0, as the audit reports it)
    sst, var_te = np.where(sst > 0, sst, np.inf), np.where(var_te > 0, var_te, np.inf)
    # factored once for every draw (or by the caller, for its own fits)
    if solvers is None:
        dh = mu_h_tr - mu_h_te
        solvers = (psd_solver(s_tr + s_te + w_between * np.outer(dh, dh)), psd_solver(s_tr))
    solve_pool, solve_tr = solvers
    rng = np.random.default_rng([seed, 0x5EED])
    per_chunk = max(1, MAX_CELLS // max(n * d, 1))
    ins, held = [], []
    for start in range(0, draws, per_chunk):
        k = min(per_chunk, draws - start)
        if identity:
            p_tr, p_te = np.tile(np.arange(n_tr), (k, 1)), np.tile(np.arange(n_te), (k, 1))
        else:
            p_tr = rng.permuted(np.tile(np.arange(n_tr), (k, 1)), axis=1)
            p_te = rng.permuted(np.tile(np.arange(n_te), (k, 1)), axis=1)
        c_tr = _cross(h, tr, mu_h_tr, z_tr - mu_z_tr, p_tr)
        c_te = _cross(h, te, mu_h_te, z_te - mu_z_te, p_te)
        dz = np.tile(mu_z_tr - mu_z_te, k)
        c_pool = c_tr + c_te + w_between * np.outer(mu_h_tr - mu_h_te, dz)
        explained = (c_pool * solve_pool(c_pool)).sum(0)
        ins.append((explained / np.tile(sst, k)).reshape(k, d))
        w = solve_tr(c_tr)  # m × k·d, the fits on the train rows
        bias = dz - (mu_h_tr - mu_h_te) @ w  # the test mean's offset from the fitted intercept
        fit = (w * (s_te @ w)).sum(0) - 2.0 * (w * c_te).sum(0)
        sse = np.tile(var_te, k) + fit / n_te + bias**2
        held.append((1.0 - sse / np.tile(var_te, k)).reshape(k, d))
    return np.concatenate(ins).mean(1), np.concatenate(held).mean(1)


def floor_latents(d: int, m: int, seed: int) -> np.ndarray:
    """The latents the floor's shuffles fit for an m-wide h: all d of them up to
    max(2, :data:`LATENT_COLUMNS` // m), else that many drawn without replacement from
    ``seed`` (sorted)."""
    cap = max(2, LATENT_COLUMNS // max(m, 1))
    if d <= cap:
        return np.arange(d)
    return np.sort(np.random.default_rng([seed, 0x1A7E]).choice(d, cap, replace=False))


def band_rank(draws: int, confidence: float) -> int:
    """j of :func:`band`: ⌊(1 − c)(K + 1)/2⌋, at least 1."""
    return max(1, int(np.floor((1.0 - confidence) * (draws + 1) / 2 + 1e-9)))


def band(values: np.ndarray, confidence: float) -> tuple[float, float]:
    """The j-th smallest and the j-th largest of K draws, j = :func:`band_rank`: one more draw
    exchangeable with them lands inside with probability (K + 1 − 2j)/(K + 1) — at least
    ``confidence`` where j ≥ 1 allows it (at c = 0.95: 39/41 for K = 40, 97/101 for 100)."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    j = band_rank(v.size, confidence)
    return float(v[j - 1]), float(v[v.size - j])


def in_sample_floor_mean(n: int, m: int) -> float:
    """E R²(h → z_j) in-sample for h independent of z: m/(n − 1) (exact over shuffles of all
    the rows, for any h of rank m and any z; the mean of Beta(m/2, (n − 1 − m)/2). The audit
    shuffles within each side of its split, which tests/test_floors.py finds equal within
    Monte Carlo error)."""
    return m / (n - 1)


def heldout_floor_mean(n_train: int, n_test: int, m: int) -> float:
    """About E R²(h → z_j) held-out for a Gaussian h of width m independent of z, fitted on
    ``n_train`` rows and scored on ``n_test`` about their own mean:
    1 − (1 + 1/n_tr)(n_tr − 2)/(n_tr − m − 2) · n_te/(n_te − 1) — the expected squared error of
    a least-squares prediction at a new Gaussian point (Stein), over the test variance's mean."""
    return 1.0 - (1 + 1 / n_train) * (n_train - 2) / (n_train - m - 2) * n_test / (n_test - 1)


def simulated_heldout_r2(m: int, n_fit: int, n_test: int | None = None, latents: int = 2,
                         reps: int = 100, seed: int = 0, r2: float = 0.0) -> np.ndarray:
    """The held-out R²(h → z) (the mean over ``latents`` latents) of ``reps`` simulated
    encoders of width ``m``, fitted on ``n_fit`` rows and scored on ``n_test`` (default
    ``n_fit``: the audit's half-and-half split) as the audit fits and scores (least squares with
    an intercept; the test rows' R² about their own mean). z ~ N(0, I), h ~ N(0, I) independent
    of z (``r2`` = 0: an uninformative encoder), or with its first ``latents`` columns
    √r2·z + √(1 − r2)·noise, so that the population R² of each latent is ``r2``. What the
    rows-versus-width advice of docs/metrics.md ("How many rows") rests on."""
    n_test = n_fit if n_test is None else n_test
    rng = np.random.default_rng([seed, m, n_fit, n_test, latents])
    out = np.empty(reps)
    for r in range(reps):
        z = rng.standard_normal((n_fit + n_test, latents))
        h = rng.standard_normal((n_fit + n_test, m))
        if r2 > 0:
            h[:, :latents] = np.sqrt(r2) * z + np.sqrt(1 - r2) * h[:, :latents]
        tr, te = slice(0, n_fit), slice(n_fit, None)
        mu_h, mu_z = h[tr].mean(0), z[tr].mean(0)
        hc = h[tr] - mu_h
        w = np.linalg.solve(hc.T @ hc, hc.T @ (z[tr] - mu_z))
        pred = (h[te] - mu_h) @ w + mu_z
        sse = ((z[te] - pred) ** 2).sum(0)
        sst = ((z[te] - z[te].mean(0)) ** 2).sum(0)
        out[r] = float((1 - sse / sst).mean())
    return out
