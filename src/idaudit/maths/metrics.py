"""The audit's metrics, composed: pure functions of arrays (z, h, h′, x, ρ).

NumPy and SciPy only (torch tensors are accepted and converted), so an arrays-only audit never
imports torch. :func:`audit_metrics` makes one pass of moments over the rows
(:func:`~idaudit.maths.fit.make_fit`), then each entry of :data:`METRIC_GROUPS` reads that one
:class:`Fit`: the linear fits (``linear``: R², Q̂, orthogonality, Procrustes, MCC), the
Theorem 3 bound (``bounds``: ε = ‖Cov(h) − I‖_F, δ = max(E‖h(z′) − h(z)‖² − 2(1 − ρ) tr
Cov(h), 0), D = δ / (2ρ(1 − ρ)), bound = D + (ε + D)²), the Gaussianity test
(``gaussianity``), subspaces, circular latents, the raw mixing and bootstrap intervals.
Every reported number is float64.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from idaudit.core.registered import METRICS
from idaudit.maths.bounds import bound_terms, pair_rows
from idaudit.maths.catalogue import Metric
from idaudit.maths.ceilings import ceiling_predictor, unwrapped_rows
from idaudit.maths.fit import Fit, make_fit
from idaudit.maths.floors import band, floor_latents, shuffled_r2
from idaudit.maths.gaussianity import sliced_gaussianity
from idaudit.maths.linear import (
    ArrayLike,
    effective_rank_from_eigs,
    mcc_from_cov,
    orthogonality_error,
    principal_angles_deg,
    r2_from_cov,
)
from idaudit.maths.moments import Moments, heldout_r2_from_moments

#: Fit and make_fit are :mod:`idaudit.maths.fit`'s, named here too: a plugin's metric group
#: reads the Fit its compute gets (docs/plugins.md)
__all__ = ["Fit", "MetricGroup", "accept_group", "audit_metrics", "identifiability_metrics",
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


def audit_metrics(z: ArrayLike, h: ArrayLike, h_prime: ArrayLike | None = None,
                  rho: float | None = None, x: ArrayLike | None = None, *,
                  circular: tuple[int, ...] | list[int] = (), test_fraction: float = 0.5,
                  seed: int = 0, bootstrap: int = 0, confidence: float = 0.95,
                  gauss_sims: int = 0, gauss_slices: int = 64,
                  test_rows: ArrayLike | None = None, core: bool = False,
                  angle_sigma: float | None = None, floor_draws: int = 0) -> dict[str, Any]:
    """Every audit metric, from one pass of moments over [z | sin/cos z_circ | h | x]
    (:func:`~idaudit.maths.fit.make_fit`), then each :data:`METRIC_GROUPS` entry that applies.

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
    """
    fit = make_fit(z, h, h_prime, rho, x, circular=circular, test_fraction=test_fraction,
                   seed=seed, test_rows=test_rows, bootstrap=bootstrap, confidence=confidence,
                   gauss_sims=gauss_sims, gauss_slices=gauss_slices, core=core,
                   angle_sigma=angle_sigma, floor_draws=floor_draws)
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
