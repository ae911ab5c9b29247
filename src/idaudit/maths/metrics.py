"""The audit's metrics, composed: pure functions of arrays (z, h, h′, x, ρ).

NumPy and SciPy only (torch tensors are accepted and converted), so an arrays-only audit never
imports torch. :func:`audit_metrics` makes one pass of moments over the rows (``moments``),
then each entry of :data:`METRIC_GROUPS` reads that one :class:`Fit`: the linear fits
(``linear``: R², Q̂, orthogonality, Procrustes, MCC), the Theorem 3 bound (``bounds``:
ε = ‖Cov(h) − I‖_F, δ = max(E‖h(z′) − h(z)‖² − 2(1 − ρ) tr Cov(h), 0), D = δ / (2ρ(1 − ρ)),
bound = D + (ε + D)²), the Gaussianity test (``gaussianity``), subspaces, circular latents,
the raw mixing and bootstrap intervals. Every reported number is float64.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from idaudit.core.registered import METRICS
from idaudit.maths.bounds import (
    bound_terms,
    distance_to_identity,
    pair_rows,
    whitening_floor,
    whitening_terms,
)
from idaudit.maths.catalogue import Metric
from idaudit.maths.ceilings import ceiling_predictor, unwrapped_rows
from idaudit.maths.floors import band, floor_latents, shuffled_r2
from idaudit.maths.gaussianity import sliced_gaussianity
from idaudit.maths.linalg import psd_solver, solve_psd
from idaudit.maths.linear import (
    ArrayLike,
    effective_rank_from_eigs,
    inverse_sqrt_psd,
    mcc_from_cov,
    orthogonality_error,
    principal_angles_deg,
    procrustes_from_cov,
    r2_from_cov,
    to_numpy,
)
from idaudit.maths.moments import CHUNK_ROWS, Moments, heldout_r2_from_moments, split_rows

__all__ = ["Fit", "MetricGroup", "accept_group", "audit_metrics", "fit_dtype", "identifiability_metrics",
           "make_fit"]


def identifiability_metrics(z: ArrayLike, h: ArrayLike, h_prime: ArrayLike | None = None,
                            rho: float | None = None, x: ArrayLike | None = None,
                            **kwargs: Any) -> dict[str, Any]:
    """The in-sample core of :func:`audit_metrics` (R², orthogonality, Procrustes, ε, δ, D,
    bound, held-out R²), from the same code: what the training curve logs."""
    return audit_metrics(z, h, h_prime, rho, x, core=True, **kwargs)


# ---- the full audit: held-out fits, MCC, floors, subspaces, circular latents, Gaussianity ----


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
    options: dict[str, Any]  # confidence, seed, bootstrap, gauss_sims, gauss_slices, core, …

    @property
    def rows(self) -> int:
        return int(self.blocks[0].shape[0])

    @property
    def pop(self) -> float:
        """(n − 1)/n: the covariance's population scale."""
        return (self.rows - 1) / self.rows

    @functools.cached_property
    def solve_hh(self) -> Callable[[np.ndarray], np.ndarray]:
        """b ↦ Cov(h)⁺ b over all rows, Cov(h) factored once (the in-sample fits, the floor)."""
        return psd_solver(self.s[self.ih, self.ih])

    @functools.cached_property
    def solve_hh_train(self) -> Callable[[np.ndarray], np.ndarray]:
        """b ↦ S⁺ b for the scatter S of h over the train rows, factored once (the held-out
        fits, the ceiling's rows, the floor)."""
        return psd_solver(self.m_tr.scatter[self.ih, self.ih])

    @functools.cached_property
    def r2_h_to_z_heldout(self) -> np.ndarray:
        """Held-out R²(h → z) per latent: fitted on the train rows, scored on the test rows."""
        return heldout_r2_from_moments(self.m_tr, self.m_te, self.ih, self.iz,
                                       self.solve_hh_train)

    @functools.cached_property
    def z_whitener(self) -> np.ndarray:
        """W with W Ĉ_zz W = I for Ĉ the covariance of z as a mean over these rows: z_w =
        W(z − z̄) is white, the latents Theorem 3 is about, whatever units z came in — or I
        where z's law is white already (``options["z_white"]``: a world that draws it so)."""
        n = self.iz.stop
        if self.options.get("z_white"):
            return np.eye(n)
        return inverse_sqrt_psd(self.pop * self.s[self.iz, self.iz])

    @functools.cached_property
    def z_white_cov(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(Ĉ(z_w), Ĉ(z_w, h), Ĉ(h)): covariances as means over these rows, z whitened."""
        w, c = self.z_whitener, self.pop * self.s
        return w @ c[self.iz, self.iz] @ w, w @ c[self.iz, self.ih], c[self.ih, self.ih]

    @functools.cached_property
    def q_white(self) -> np.ndarray:
        """The least-squares map (m × n) from the whitened latents z_w to h."""
        if self.options.get("z_white"):
            return self.q
        return self.z_white_cov[1].T  # Ĉ(h, z_w) Ĉ(z_w)⁻¹ with Ĉ(z_w) = I

    @functools.cached_property
    def procrustes_mse(self) -> float:
        """min over (semi-)orthogonal R of E‖(h − h̄) − R z_w‖², E the mean over these rows
        (:func:`~idaudit.maths.linear.procrustes_mse` on the same arrays)."""
        return procrustes_from_cov(*self.z_white_cov) if self.iz.stop else 0.0


def fit_dtype(z_dtype: Any, h_dtype: Any) -> np.dtype:
    """The dtype of the audit's one pass of moments, which z, h and x are copied to where they
    are of another: float32 where z and h both are, else float64."""
    f32 = np.dtype(np.float32)
    return f32 if np.dtype(z_dtype) == f32 and np.dtype(h_dtype) == f32 else np.dtype(np.float64)


def _fit(zt: np.ndarray, ht: np.ndarray, h_prime: Any, rho: float | None, x: Any,
         circular: Any, test_fraction: float, seed: int, test_rows: Any,
         options: dict[str, Any]) -> Fit:
    """One pass of moments over [z | sin/cos z_circ | h | x] on the split's rows."""
    dtype = fit_dtype(zt.dtype, ht.dtype)
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
    shift = np.concatenate([blk[:CHUNK_ROWS].mean(0, dtype=np.float64) for blk in blocks])
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
    r2_hz = r2_from_cov(s_hh, s[ih, iz], s_zz, f.solve_hh(s[ih, iz]))
    r2_hz_ho = f.r2_h_to_z_heldout
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
        "orthogonality_error": orthogonality_error(f.q_white),
        "procrustes_mse": f.procrustes_mse,
        "latent_cov_error": distance_to_identity(s_zz),
        "latent_cov_floor": whitening_floor(f.rows, n),
        "latent_scale": [float(v) for v in np.sqrt(np.clip(np.diagonal(s_zz), 0, None))],
        "latents_whitened": not f.options.get("z_white"),
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


def _ceiling(f: Fit) -> dict[str, Any]:
    """Where the observations show an angle only mod 2π: the held-out R²(→ z) of the best guess
    from them (:func:`~idaudit.maths.ceilings.ceiling_predictor`, under the angles' law
    N(0, σ²)) on the audit's own split, the share of it the encoder reaches, and the encoder's
    held-out R²(h → z) on the test rows whose angles need no wrapping."""
    z = np.asarray(f.blocks[0], dtype=np.float64)
    n = z.shape[1]
    best = ceiling_predictor(z, f.circ, f.options["angle_sigma"])
    pair = [best, z]
    shift = np.concatenate([f.shift[f.iz], f.shift[f.iz]])
    m_tr, m_te = Moments.of_row_sets(pair, [f.train_rows, f.test_rows], shift)
    ceiling = heldout_r2_from_moments(m_tr, m_te, slice(0, n), slice(n, 2 * n))
    ours = float(f.r2_h_to_z_heldout.mean())
    keep = f.test_rows[unwrapped_rows(z[f.test_rows], f.circ)]
    out: dict[str, Any] = {
        "r2_h_to_z_ceiling": float(ceiling.mean()),
        "r2_h_to_z_ceiling_per_dim": [float(v) for v in ceiling],
        "r2_h_to_z_of_ceiling": ours / float(ceiling.mean()) if ceiling.mean() > 0 else 0.0,
        "unwrapped_test_rows": int(keep.size),
        "angle_sigma": float(f.options["angle_sigma"]),
    }
    if keep.size > n + 1:  # enough rows to score an R² on
        nowrap = heldout_r2_from_moments(f.m_tr, Moments(f.blocks, keep, f.shift), f.ih, f.iz,
                                         f.solve_hh_train)
        out["r2_h_to_z_heldout_unwrapped"] = float(nowrap.mean())
    return out


def _floor(f: Fit) -> dict[str, Any]:
    """What an uninformative encoder of h's width scores on these rows and this split: R²(h → z)
    in-sample and held-out for ``floor_draws`` shuffles of z's rows against h's (within the
    train and within the test rows; :func:`~idaudit.maths.floors.shuffled_r2`), their mean and
    ``confidence`` band (:func:`~idaudit.maths.floors.band`), and how far the held-out R² lies
    above that band."""
    draws, conf, seed = f.options["floor_draws"], f.options["confidence"], f.options["seed"]
    ih, scale = f.ih, max(f.rows - 1, 1)  # the pooled scatter is (n − 1)·Cov(h)
    cols = floor_latents(f.iz.stop, ih.stop - ih.start, seed)
    ins, held = shuffled_r2(f.blocks[2 if f.circ else 1], f.blocks[0][:, cols], f.train_rows,
                            f.test_rows, f.m_tr.scatter[ih, ih], f.m_te.scatter[ih, ih], draws,
                            seed, solvers=(lambda b: f.solve_hh(b) / scale, f.solve_hh_train),
                            h_means=(f.m_tr.mean[ih], f.m_te.mean[ih]))
    in_band, held_band = band(ins, conf), band(held, conf)
    return {"r2_h_to_z_floor_mean": float(ins.mean()), "r2_h_to_z_floor_band": list(in_band),
            "r2_h_to_z_floor_high": in_band[1],
            "r2_h_to_z_heldout_floor_mean": float(held.mean()),
            "r2_h_to_z_heldout_floor_band": list(held_band),
            "r2_h_to_z_heldout_floor_high": held_band[1],
            "r2_h_to_z_heldout_above_floor": float(f.r2_h_to_z_heldout.mean()) - held_band[1],
            "floor_draws": int(draws), "floor_latents": int(cols.size)}


def _mixing(f: Fit) -> dict[str, Any]:
    return {"mixing_r2_x_to_z": float(_r2_block(f.s, f.ix, f.iz).mean())}


def _bound(f: Fit) -> dict[str, Any]:
    core = f.options["core"]
    m = f.ih.stop - f.ih.start
    pairs = pair_rows(f.h, f.h_prime, f.m_pool.mean[f.ih])
    out = bound_terms(f.white, m, pairs, float(f.rho), None if core else f.options["confidence"])
    bound = out["bound"]
    floor = f.white["whitening_floor"]
    trivial = float(np.trace(f.z_white_cov[0]))  # E‖z_w − z̄_w‖²: a constant h's
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
    and the function that computes them. ``core``: kept by a training curve's audit.
    ``metrics``: the catalogue entries of the keys ``compute`` returns — a plugin's group
    declares them here (idaudit's own are in :data:`~idaudit.maths.catalogue.CATALOGUE`).

    A plugin registers one under the ``idaudit.metrics`` entry-point group; its ``compute``
    reads the :class:`Fit` (``fit.z``-side and ``fit.h``-side blocks of the covariance
    ``fit.cov``, the train/test split …) and returns ``{key: value}`` for its entries.

    Example:
        >>> from idaudit.maths.catalogue import Metric
        >>> g = MetricGroup("width", lambda f: True, lambda f: {"width": 3}, metrics=(
        ...     Metric("width", "embedding width", None, frozenset(), frozenset({"audit"}),
        ...            "how many dimensions h has"),))
        >>> [m.key for m in g.metrics]
        ['width']
    """

    name: str
    applies: Callable[[Fit], bool]
    compute: Callable[[Fit], dict[str, Any]]
    core: bool = False
    metrics: tuple[Metric, ...] = ()


#: idaudit's own groups of :func:`audit_metrics`, in the order of its keys (registered in
#: :data:`~idaudit.core.registered.METRICS`, after which plugins' groups run); adding a metric
#: is an entry here (or a key in one group's function), its catalogue entry and its docs line
METRIC_GROUPS: tuple[MetricGroup, ...] = (
    MetricGroup("linear", lambda f: True, _linear, core=True),
    MetricGroup("identification", lambda f: True, _identification),
    MetricGroup("subspace", lambda f: f.ih.stop - f.ih.start != f.iz.stop, _subspace),
    MetricGroup("circular", lambda f: bool(f.circ), _circular, core=True),
    MetricGroup("ceiling", lambda f: bool(f.circ) and f.options["angle_sigma"] is not None,
                _ceiling),
    MetricGroup("floor", lambda f: f.options["floor_draws"] > 0, _floor),
    MetricGroup("mixing", lambda f: f.has_x, _mixing, core=True),
    MetricGroup("bound", lambda f: f.h_prime is not None and f.rho is not None, _bound,
                core=True),
    MetricGroup("gaussianity", lambda f: f.options["gauss_slices"] > 0, _gaussianity),
    MetricGroup("bootstrap", lambda f: f.options["bootstrap"] > 0, _bootstrap),
)


for _group in METRIC_GROUPS:
    METRICS.add(_group.name, _group)


def accept_group(name: str, obj: Any) -> MetricGroup:
    """What a plugin's ``idaudit.metrics`` entry point names, checked: a :class:`MetricGroup`
    that declares the catalogue entries of its keys, none of them a key idaudit has."""
    from idaudit.maths.catalogue import BUILTIN_KEYS

    if not isinstance(obj, MetricGroup):
        raise TypeError(f"got {type(obj).__name__}, not an idaudit.maths.metrics.MetricGroup")
    if not obj.metrics or not all(isinstance(m, Metric) for m in obj.metrics):
        raise TypeError("its `metrics` must declare a catalogue entry (Metric) for each key")
    taken = sorted(m.key for m in obj.metrics if m.key in BUILTIN_KEYS)
    if taken:
        raise TypeError(f"it declares {', '.join(taken)}, which idaudit reports already")
    return obj


def metric_groups() -> list[MetricGroup]:
    """Every group the audit computes: idaudit's own in order, then plugins' by name."""
    return [METRICS.get(name) for name in METRICS.ordered()]


def make_fit(z: ArrayLike, h: ArrayLike, h_prime: ArrayLike | None = None,
             rho: float | None = None, x: ArrayLike | None = None, *,
             circular: tuple[int, ...] | list[int] = (), test_fraction: float = 0.5,
             seed: int = 0, test_rows: ArrayLike | None = None, bootstrap: int = 0,
             confidence: float = 0.95, gauss_sims: int = 0, gauss_slices: int = 64,
             core: bool = False, angle_sigma: float | None = None,
             floor_draws: int = 0, z_white: bool = False) -> Fit:
    """The :class:`Fit` every metric group reads, as :func:`audit_metrics` makes it (a
    plugin's metric group, or its conformance check, computes on the same).

    Args:
        z, h, h_prime, rho, x: the audit's arrays (rows first).
        circular, test_fraction, seed, test_rows: as :func:`audit_metrics` takes them.
        bootstrap, confidence, gauss_sims, gauss_slices, core, angle_sigma, floor_draws,
            z_white: the options the groups read (``fit.options``).

    Returns:
        The fit.

    Example:
        >>> import numpy as np
        >>> z = np.random.default_rng(0).standard_normal((100, 2))
        >>> make_fit(z, z).rows
        100
    """
    zt, ht = to_numpy(z), to_numpy(h)
    zt = zt.reshape(zt.shape[0], -1)
    ht = ht.reshape(ht.shape[0], -1)
    options = {"confidence": confidence, "seed": seed, "bootstrap": bootstrap,
               "gauss_sims": gauss_sims, "gauss_slices": gauss_slices, "core": core,
               "angle_sigma": angle_sigma, "floor_draws": floor_draws, "z_white": z_white}
    return _fit(zt, ht, h_prime, rho, x, circular, test_fraction, seed, test_rows, options)


def audit_metrics(z: ArrayLike, h: ArrayLike, h_prime: ArrayLike | None = None,
                  rho: float | None = None, x: ArrayLike | None = None, *,
                  circular: tuple[int, ...] | list[int] = (), test_fraction: float = 0.5,
                  seed: int = 0, bootstrap: int = 0, confidence: float = 0.95,
                  gauss_sims: int = 0, gauss_slices: int = 64,
                  test_rows: ArrayLike | None = None, core: bool = False,
                  angle_sigma: float | None = None, floor_draws: int = 0,
                  z_white: bool = False) -> dict[str, Any]:
    """Every audit metric, from one pass of moments over [z | sin/cos z_circ | h | x]
    (:func:`_fit`), then each :data:`METRIC_GROUPS` entry that applies.

    This is the one metrics function: ``train`` logs its values on the world's evaluation
    set and ``audit`` reports them. ``*_heldout`` keys fit on a random ``1 − test_fraction``
    of the rows and score on the rest (or, with ``test_rows``, fit on the other rows and
    score on those). With ``bootstrap`` B > 0 the held-out R² gets a percentile interval over
    B resamples of the test rows. ``core`` keeps the groups the training curve needs (linear
    fits, circular latents, mixing, bound); the keys it keeps have the same values. With
    ``angle_sigma`` σ, the circular latents are angles drawn N(0, σ²) that the observations
    show mod 2π: the ceiling group reports what the best encoder could reach. With
    ``floor_draws`` K > 0, the floor group reports what an uninformative encoder of h's width
    reaches on the same rows (K seeded shuffles of z against h), with a ``confidence`` band.

    **Units.** Procrustes, the orthogonality of the fitted map and the bound's comparison
    are about white latents (Cov(z) = I, Theorem 3). ``z_white``: z's law is white (a world
    that draws it so: synthetic worlds, Reacher's OU angles), so z is used as it is; else
    (arrays of unknown law, a recording) z is whitened on these rows first, so that no verdict
    depends on the units z was recorded in (``latents_whitened`` says which).
    """
    fit = make_fit(z, h, h_prime, rho, x, circular=circular, test_fraction=test_fraction,
                   seed=seed, test_rows=test_rows, bootstrap=bootstrap, confidence=confidence,
                   gauss_sims=gauss_sims, gauss_slices=gauss_slices, core=core,
                   angle_sigma=angle_sigma, floor_draws=floor_draws, z_white=z_white)
    out: dict[str, Any] = {}
    for group in metric_groups():
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
