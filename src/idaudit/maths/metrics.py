"""The audit's metrics, composed: pure functions of arrays (z, h, h′, x, ρ), each group of
them declared with the catalogue entries of the keys it returns.

NumPy and SciPy only (torch tensors are accepted and converted), so an arrays-only audit never
imports torch. :func:`audit_metrics` makes one pass of moments over the rows
(:func:`~idaudit.maths.fit.make_fit`), then each entry of :data:`METRIC_GROUPS` reads that one
:class:`Fit`: the linear fits (``linear``: R², Q̂, orthogonality, Procrustes, MCC), the
Theorem 3 bound (``bounds``: ε = ‖Cov(h) − I‖_F, δ = max(E‖h(z′) − h(z)‖² − 2(1 − ρ) tr
Cov(h), 0), D = δ / (2ρ(1 − ρ)), bound = D + (ε + D)²), the Gaussianity test
(``gaussianity``), subspaces, circular latents, the raw mixing and bootstrap intervals.
Every reported number is float64. Each :class:`MetricGroup` declares, beside its function,
the :class:`Metric` of every key it reports (its label, which way is better, what it needs,
which reports hold it); :mod:`idaudit.maths.catalogue` makes the catalogue of them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from idaudit.core.registered import METRICS
from idaudit.maths.bounds import bound_terms, distance_to_identity, pair_rows, whitening_floor
from idaudit.maths.ceilings import EMPIRICAL_FIT_ROWS, ceiling_predictor, unwrapped_rows
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
from idaudit.maths.metric_types import DIRECTIONS, NEEDS, REPORTS, Metric, MetricGroup
from idaudit.maths.moments import Moments, heldout_r2_from_moments

#: Fit and make_fit are :mod:`idaudit.maths.fit`'s, Metric and MetricGroup (with NEEDS, REPORTS,
#: DIRECTIONS) :mod:`idaudit.maths.metric_types`', named here too: a plugin's metric group reads
#: the Fit its compute gets (docs/plugins.md)
__all__ = ["DIRECTIONS", "Fit", "METRIC_GROUPS", "NEEDS", "REPORTS", "Metric", "MetricGroup",
           "audit_metrics", "identifiability_metrics", "make_fit", "metric_groups"]


# ---- idaudit's own groups, each with the catalogue entries of its keys ---------------


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
        "orthogonality_error": orthogonality_error(f.q_unit),
        "procrustes_mse": f.procrustes_mse,
        "latent_cov_error": distance_to_identity(s_zz),
        "latent_cov_floor": whitening_floor(f.rows, n),
        "latent_scale": [float(v) for v in np.sqrt(np.clip(np.diagonal(s_zz), 0, None))],
        "latents_standardized": not f.options.get("z_white"),
        **f.white,
        "n_samples": f.rows,
        "n_train": int(f.train_rows.size),
        "n_test": int(f.test_rows.size),
        "latent_dim": n,
        "embed_dim": ih.stop - ih.start,
    }


_LINEAR = MetricGroup("linear", lambda f: True, _linear, core=True, metrics=(
    Metric.of("r2_h_to_z_heldout", "R²(h → z), held-out", "higher", "z", "audit sweep",
              "R² of z ≈ Wh + c fitted on the train rows, scored on the held-out rows"),
    Metric.of("r2_z_to_h_heldout", "R²(z → h), held-out", "higher", "z", "audit",
              "R² of h ≈ Wz + c fitted on the train rows, scored on the held-out rows"),
    Metric.of("r2_h_to_z", "R²(h → z), in-sample", "higher", "z", "audit train sweep",
              "linear recovery of the latents from the embedding", short="R²(h → z)"),
    Metric.of("r2_z_to_h", "R²(z → h), in-sample", "higher", "z", "audit train sweep",
              "how linear the embedding is in the latents", row=False, short="R²(z → h)"),
    Metric.of("orthogonality_error", "orthogonality error", "lower", "z", "audit train sweep",
              "‖Q̂ᵀQ̂ − I‖_F/√n of the fitted map z → h, z standardised on these rows"),
    Metric.of("procrustes_mse", "Procrustes MSE", "lower", "z", "audit train sweep",
              "min over rotations of E‖h − Qz‖², z standardised on these rows"),
    Metric.of("latent_cov_error", "‖Cov(z) − I‖_F", None, "z", "audit",
              "how far the latents' covariance is from the identity (their units); "
              "Procrustes, orthogonality and the bound's comparison use z standardised on "
              "these rows", row=False),
    Metric.of("latent_cov_floor", "‖Cov(z) − I‖_F floor", None, "z", "audit",
              "the ‖Cov(z) − I‖_F white latents of this size show by chance", row=False),
    Metric.of("latents_standardized", "z standardised on these rows", None, "z", "audit",
              "whether each latent was scaled to unit variance on these rows (its law unknown) "
              "or z used as it is (a world that draws it white)", row=False),
    Metric.of("whitening_error", "ε = ‖Cov(h) − I‖_F", "lower", "",
              "audit label_free train sweep", "‖Cov(h) − I‖_F", short="ε"),
    Metric.of("whitening_floor", "ε floor √(m(m+1)/(n−1))", None, "", "audit label_free",
              "the ε a white h of this size shows by chance"),
    Metric.of("whitening_error_corrected", "ε, floor-corrected", "lower", "", "audit label_free",
              "√max(ε² − floor², 0)"),
    Metric.of("total_variance_h", "tr Cov(h)", None, "", "audit label_free",
              "total variance of the embedding", row=False),
    Metric.of("n_samples", "samples", None, "", "audit label_free consistency",
              "rows (inputs) audited"),
    Metric.of("n_train", "train rows", None, "z", "audit", "rows the held-out fits fit on",
              row=False),
    Metric.of("n_test", "test rows", None, "z", "audit", "rows the held-out fits score on",
              row=False),
    Metric.of("latent_dim", "latent dimension n", None, "z", "audit", "columns of z"),
    Metric.of("embed_dim", "embedding dimension m", None, "", "audit label_free", "columns of h"),
))


def _identification(f: Fit) -> dict[str, Any]:
    s_zz, s_zh, s_hh = f.s[f.iz, f.iz], f.s[f.iz, f.ih], f.s[f.ih, f.ih]
    return {"mcc": mcc_from_cov(s_zz, s_zh, s_hh),
            "effective_rank": effective_rank_from_eigs(np.linalg.eigvalsh(s_hh))}


_IDENTIFICATION = MetricGroup("identification", lambda f: True, _identification, metrics=(
    Metric.of("mcc", "MCC", "higher", "z", "audit", "mean |correlation| of z's and h's axes "
              "after Hungarian matching (not rotation invariant)"),
    Metric.of("effective_rank", "effective rank of h", "higher", "", "audit label_free",
              "exp(entropy of Cov(h)'s normalised eigenvalues)"),
))


def _subspace(f: Fit) -> dict[str, Any]:
    k = min(f.ih.stop - f.ih.start, f.iz.stop)
    top = np.linalg.eigh(f.s[f.ih, f.ih])[1][:, -k:]  # top-k subspace of h
    angles = principal_angles_deg(f.q, top)
    return {"principal_angles_deg": angles, "principal_angle_max_deg": max(angles)}


_SUBSPACE = MetricGroup("subspace", lambda f: f.ih.stop - f.ih.start != f.iz.stop, _subspace,
                        metrics=(
    Metric.of("principal_angle_max_deg", "largest principal angle (°)", "lower", "z", "audit",
              "largest angle between the fitted map's range and h's top subspace (m ≠ n only)"),
))


def _circular(f: Fit) -> dict[str, Any]:
    r2c = _r2_block(f.s, f.ih, f.ic)
    return {"circular_latents": f.circ, "r2_h_to_sincos": float(r2c.mean()),
            "r2_h_to_sincos_per_target": [float(v) for v in r2c],
            "sincos_targets": [f"{c} z{i}" for i in f.circ for c in ("sin", "cos")]}


_CIRCULAR = MetricGroup("circular", lambda f: bool(f.circ), _circular, core=True, metrics=(
    Metric.of("r2_h_to_sincos", "R²(h → sin/cos of angles)", "higher", "z", "audit",
              "R²(h → (sin z_i, cos z_i)) of the circular latents (--circular only)"),
))


def _ceiling(f: Fit) -> dict[str, Any]:
    """Where the observations show an angle only mod 2π: the held-out R²(→ z) of the best guess
    from them (:func:`~idaudit.maths.ceilings.ceiling_predictor`, under the angles' law
    N(0, σ²) where it is known, else the law its fit rows show) on the audit's own split, the
    share of it the encoder reaches, and the encoder's held-out R²(h → z) on the test rows whose
    angles need no wrapping."""
    z = np.asarray(f.blocks[0], dtype=np.float64)
    n = z.shape[1]
    sigma = f.options["angle_sigma"]
    best = ceiling_predictor(z, f.circ, sigma, f.train_rows)
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
        "ceiling_law": "empirical" if sigma is None else "normal",
        **({} if sigma is None else {"angle_sigma": float(sigma)}),
    }
    if keep.size > n + 1:  # enough rows to score an R² on
        nowrap = heldout_r2_from_moments(f.m_tr, Moments(f.blocks, keep, f.shift), f.ih, f.iz,
                                         f.solve_hh_train)
        out["r2_h_to_z_heldout_unwrapped"] = float(nowrap.mean())
    return out


def _has_ceiling(f: Fit) -> bool:
    """Angles, and their law known or enough fit rows to estimate it."""
    return bool(f.circ) and (f.options["angle_sigma"] is not None
                             or len(f.train_rows) >= EMPIRICAL_FIT_ROWS)


_CEILING = MetricGroup("ceiling", _has_ceiling, _ceiling, metrics=(
    Metric.of("r2_h_to_z_ceiling", "ceiling of R²(h → z), held-out", None, "z angle_law",
              "audit sweep", "held-out R² of the best guess of z from angles seen mod 2π (their "
              "posterior mean), fitted and scored as the audit scores: what the world allows on "
              "this evaluation set"),
    Metric.of("r2_h_to_z_of_ceiling", "R²(h → z) / its ceiling", "higher", "z angle_law", "audit",
              "held-out R²(h → z) over its ceiling: 1 for an encoder as good as the images allow "
              "(a little above 1 by chance on a finite set)", short="of ceiling"),
    Metric.of("r2_h_to_z_heldout_unwrapped", "R²(h → z), held-out, unwrapped rows", "higher",
              "z angle_law", "audit", "held-out R²(h → z) on the test rows whose angles lie in "
              "[−π, π) (need no wrapping)"),
    Metric.of("unwrapped_test_rows", "test rows needing no wrapping", None, "z angle_law",
              "audit", "how many test rows r2_h_to_z_heldout_unwrapped is scored on", row=False),
    Metric.of("ceiling_law", "the angles' law the ceiling uses", None, "z angle_law", "audit",
              "normal: N(0, σ²) with σ = angle_sigma, known; empirical: estimated from the fit "
              "rows' turns (no law given)", row=False, gate=False),
    Metric.of("angle_sigma", "σ of the angles' law N(0, σ²)", None, "z angle_law", "audit",
              "the law the ceiling assumes for the unwrapped angles, where it is known",
              row=False),
))


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


_FLOOR = MetricGroup("floor", lambda f: f.options["floor_draws"] > 0, _floor, metrics=(
    Metric.of("r2_h_to_z_heldout_floor_high", "R²(h → z), held-out, uninformative (band top)",
              None, "z floor", "audit", "upper end of the band of held-out R²(h → z) that h "
              "scores with its rows shuffled against z: what an encoder of this width that knows "
              "nothing of z reaches on these rows", short="floor"),
    Metric.of("r2_h_to_z_heldout_above_floor", "R²(h → z), held-out, above that band", "higher",
              "z floor", "audit", "held-out R²(h → z) minus r2_h_to_z_heldout_floor_high: > 0 "
              "where the encoder beats the uninformative ones of its width"),
    Metric.of("r2_h_to_z_heldout_floor_mean", "R²(h → z), held-out, uninformative (mean)", None,
              "z floor", "audit", "mean held-out R²(h → z) over the shuffles", row=False),
    Metric.of("r2_h_to_z_heldout_floor_band", "R²(h → z), held-out, uninformative band", None,
              "z floor", "audit", "band of the shuffles' held-out R² (holds one more with "
              "probability ≥ the confidence)", row=False, gate=False),
    Metric.of("r2_h_to_z_floor_high", "R²(h → z), in-sample, uninformative (band top)", None,
              "z floor", "audit", "upper end of the band of in-sample R²(h → z) that h scores "
              "with its rows shuffled against z (about m/(n − 1) in the mean)"),
    Metric.of("r2_h_to_z_floor_mean", "R²(h → z), in-sample, uninformative (mean)", None,
              "z floor", "audit", "mean in-sample R²(h → z) over the shuffles", row=False),
    Metric.of("r2_h_to_z_floor_band", "R²(h → z), in-sample, uninformative band", None, "z floor",
              "audit", "band of the shuffles' in-sample R²", row=False, gate=False),
    Metric.of("floor_draws", "shuffles for the uninformative band", None, "z floor", "audit",
              "K, the seeded shuffles of z's rows against h's", row=False),
    Metric.of("floor_latents", "latents the uninformative band averages", None, "z floor",
              "audit", "all latents up to max(2, 2048 / m), else a seeded subset that size (a "
              "wider band, centred alike)", row=False),
))


def _mixing(f: Fit) -> dict[str, Any]:
    return {"mixing_r2_x_to_z": float(_r2_block(f.s, f.ix, f.iz).mean())}


_MIXING = MetricGroup("mixing", lambda f: f.has_x, _mixing, core=True, metrics=(
    Metric.of("mixing_r2_x_to_z", "R²(x → z) raw mixing", None, "z", "audit train sweep",
              "raw-mixing baseline", short="R²(x → z)"),
))


def _bound(f: Fit) -> dict[str, Any]:
    core = f.options["core"]
    m = f.ih.stop - f.ih.start
    pairs = pair_rows(f.h, f.h_prime, f.m_pool.mean[f.ih])
    out = bound_terms(f.white, m, pairs, float(f.rho), None if core else f.options["confidence"])
    bound = out["bound"]
    floor = f.white["whitening_floor"]
    trivial = float(np.trace(f.z_unit_cov[0]))  # E‖z_s − z̄_s‖²: a constant h's
    out.update(bound_holds=bool(f.procrustes_mse <= bound), bound_trivial=trivial,
               bound_vacuous=bool(bound >= trivial), bound_floor=floor**2,
               bound_floor_dominated=bool(floor**2 >= 0.5 * bound))
    if not core:
        out["bound_upper_vacuous"] = bool(out["bound_upper"] >= trivial)
    return out


_BOUND = MetricGroup("bound", lambda f: f.h_prime is not None and f.rho is not None, _bound,
                     core=True, metrics=(
    Metric.of("whitening_error_upper", "ε, upper", "lower", "h_prime rho", "audit label_free",
              "ε bounded from above with probability ≥ 1 − (1 − c)/2", row=False),
    Metric.of("alignment_gap", "δ", "lower", "h_prime rho", "audit label_free train",
              "E‖h(z′) − h(z)‖² − 2(1−ρ) tr Cov(h), floored at 0"),
    Metric.of("alignment_gap_upper", "δ, upper", "lower", "h_prime rho", "audit label_free",
              "δ bounded from above with probability ≥ 1 − (1 − c)/2", row=False),
    Metric.of("D", "D = δ/(2ρ(1−ρ))", "lower", "h_prime rho", "audit label_free train",
              "δ / (2ρ(1−ρ))", short="D"),
    Metric.of("D_upper", "D, upper", "lower", "h_prime rho", "audit label_free",
              "δ_upper / (2ρ(1−ρ))", row=False),
    Metric.of("bound", "bound D + (ε+D)²", "lower", "h_prime rho", "audit label_free train sweep",
              "D + (ε + D)² (Theorem 3)", short="bound"),
    Metric.of("bound_holds", "bound holds", None, "z h_prime rho", "audit train",
              "Procrustes MSE ≤ bound"),
    Metric.of("bound_upper", "bound, upper (holds w.p. ≥ 95 %)", "lower", "h_prime rho",
              "audit label_free",
              "D_upper + (ε_upper + D_upper)²: bounds E‖h − Qz‖² with probability ≥ c"),
    Metric.of("bound_upper_confidence", "confidence c of bound, upper", None, "h_prime rho",
              "audit label_free", "the probability c with which bound_upper holds", row=False),
    Metric.of("bound_upper_vacuous", "bound, upper, vacuous", None, "z h_prime rho", "audit",
              "bound_upper ≥ bound_trivial: it says nothing", row=False),
    Metric.of("bound_trivial", "trivial bound E‖z − z̄‖²", None, "z h_prime rho", "audit",
              "the error of a constant embedding", row=False),
    Metric.of("bound_vacuous", "bound vacuous", None, "z h_prime rho", "audit",
              "bound ≥ bound_trivial: it says nothing", row=False),
    Metric.of("bound_floor", "bound floor", None, "z h_prime rho", "audit",
              "floor², the share of the bound a perfect encoder of this size would get",
              row=False),
    Metric.of("bound_floor_dominated", "bound floor-dominated", None, "z h_prime rho", "audit",
              "bound_floor ≥ bound / 2: the finite-sample floor dominates the bound", row=False),
    Metric.of("rho", "ρ", None, "h_prime rho", "audit label_free",
              "the OU correlation of the pairs (h, h′), as given", row=False),
))


def _gaussianity(f: Fit) -> dict[str, Any]:
    return sliced_gaussianity(f.h, n_slices=f.options["gauss_slices"],
                              sims=f.options["gauss_sims"], seed=f.options["seed"])


_GAUSSIANITY = MetricGroup("gaussianity", lambda f: f.options["gauss_slices"] > 0, _gaussianity,
                           metrics=(
    Metric.of("gaussianity_statistic", "sliced Epps–Pulley statistic", "lower", "",
              "audit label_free", "distance of h's projections from a Gaussian law"),
    Metric.of("gaussianity_p_value", "Gaussianity p-value", "higher", "", "audit label_free",
              "p-value of the sliced Epps–Pulley test that h is Gaussian"),
    Metric.of("gaussianity_null_mean", "Epps–Pulley null mean", None, "", "audit label_free",
              "mean of the statistic under the Gaussian null", row=False),
))


def _bootstrap(f: Fit) -> dict[str, Any]:
    h_block = f.blocks[2 if f.circ else 1]  # [z, sin/cos z_circ?, h, x?]
    rng = np.random.default_rng(f.options["seed"])
    return _bootstrap_r2([h_block, f.blocks[0]], np.concatenate([f.shift[f.ih], f.shift[f.iz]]),
                         f.m_tr.restricted(np.r_[f.ih, f.iz]), f.test_rows,
                         f.options["bootstrap"], f.options["confidence"], rng)


_BOOTSTRAP = MetricGroup("bootstrap", lambda f: f.options["bootstrap"] > 0, _bootstrap, metrics=(
    Metric.of("r2_h_to_z_heldout_ci", "  bootstrap interval", None, "z bootstrap", "audit",
              "percentile interval of the held-out R²(h → z) over B resamples of the test rows",
              gate=False),
    Metric.of("r2_h_to_z_heldout_ci_low", "R²(h → z), held-out, interval low", "higher",
              "z bootstrap", "audit",
              "lower end of the bootstrap interval of the held-out R²(h → z)", row=False),
    Metric.of("bootstrap", "bootstrap resamples", None, "z bootstrap", "audit",
              "B, the bootstrap resamples of the test rows", row=False),
))


#: idaudit's own groups of :func:`audit_metrics`, in the order of its keys (registered in
#: :data:`~idaudit.core.registered.METRICS`, after which plugins' groups run); adding a metric
#: is a key in one group's function and its entry beside it (or a new group here), its place
#: in :data:`~idaudit.maths.catalogue.ORDER` and its docs line
METRIC_GROUPS: tuple[MetricGroup, ...] = (
    _LINEAR, _IDENTIFICATION, _SUBSPACE, _CIRCULAR, _CEILING, _FLOOR, _MIXING, _BOUND,
    _GAUSSIANITY, _BOOTSTRAP,
)


for _group in METRIC_GROUPS:
    METRICS.add(_group.name, _group)


def metric_groups() -> list[MetricGroup]:
    """Every group the audit computes: idaudit's own in order, then plugins' by name."""
    return [METRICS.get(name) for name in METRICS.ordered()]


def identifiability_metrics(z: ArrayLike, h: ArrayLike, h_prime: ArrayLike | None = None,
                            rho: float | None = None, x: ArrayLike | None = None,
                            **kwargs: Any) -> dict[str, Any]:
    """The in-sample core of :func:`audit_metrics` (R², orthogonality, Procrustes, ε, δ, D,
    bound, held-out R²), from the same code: what the training curve logs."""
    return audit_metrics(z, h, h_prime, rho, x, core=True, **kwargs)


def audit_metrics(z: ArrayLike, h: ArrayLike, h_prime: ArrayLike | None = None,
                  rho: float | None = None, x: ArrayLike | None = None, *,
                  circular: tuple[int, ...] | list[int] = (), test_fraction: float = 0.5,
                  seed: int = 0, bootstrap: int = 0, confidence: float = 0.95,
                  gauss_sims: int = 0, gauss_slices: int = 64,
                  test_rows: ArrayLike | None = None, core: bool = False,
                  angle_sigma: float | None = None, floor_draws: int = 0,
                  z_white: bool = False) -> dict[str, Any]:
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

    **Units.** Procrustes, the orthogonality of the fitted map and the bound's comparison
    are about white latents (Cov(z) = I, Theorem 3). ``z_white``: z's law is white (a world
    that draws it so: synthetic worlds, Reacher's OU angles), so z is used as it is; else
    (arrays of unknown law, a recording) each latent is scaled to unit variance on these rows
    first, so that no verdict depends on the units z was recorded in
    (``latents_standardized`` says which).
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
