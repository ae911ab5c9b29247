"""The metric catalogue: every metric idaudit reports, once.

Each :class:`Metric` says what its key means, how reports label it, which way is better, what
an audit needs to report it (:data:`NEEDS`) and which reports hold it (``reports``: an
audit with z, a label-free audit, the consistency check, the training table, the sweep
tables). Each metric group declares the entries of the keys it computes beside its function
(:data:`idaudit.maths.metrics.METRIC_GROUPS`; a plugin's group likewise); the metrics no group
computes are declared here (:data:`ELSEWHERE`), each with where it is computed.
:data:`CATALOGUE` is idaudit's own entries in :data:`ORDER`, the order of every table's rows.
Everything else that names metrics — the keys a gate accepts and its "it needs …" messages,
the rows of the audit, consistency and training tables, the sweep tables' columns, ``idaudit
metrics`` — is a view of :func:`catalogue`. Adding a metric is its key in a group's function,
its entry beside it, and its place in :data:`ORDER`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any

from idaudit.core.errors import UsageError
from idaudit.maths.metrics import DIRECTIONS, METRIC_GROUPS, NEEDS, REPORTS, Metric, MetricGroup

__all__ = ["BUILTIN_KEYS", "BY_KEY", "CATALOGUE", "ELSEWHERE", "Metric", "NEEDS", "NEED_TEXT",
           "ORDER", "accept_group", "catalogue", "catalogue_json", "entries", "gate_keys",
           "missing_need", "table_rows"]

# how an error message names each need
NEED_TEXT = {"z": "the true latents z", "h_prime": "h′", "rho": "ρ", "bootstrap": "--bootstrap B",
             "angle_law": "angles seen mod 2π (a world that declares them, or --circular)",
             "floor": "--floor-draws K > 0"}

#: the metrics no metric group computes, each declared here with where it is computed
ELSEWHERE: tuple[Metric, ...] = (
    # the label-free signals of (h, h′): maths/labelfree.py, in a label-free audit
    # (evaluations/)
    Metric.of("rho_estimated", "ρ̂, top canonical correlation of (h, h′)", None, "h_prime",
              "label_free",
              "the largest canonical correlation of (h, h′): ρ estimated from the pairs"),
    Metric.of("canonical_min", "smallest canonical correlation", "higher", "h_prime",
              "label_free", "the smallest canonical correlation of (h, h′)", row=False),
    Metric.of("canonical_mean", "mean canonical correlation", "higher", "h_prime", "label_free",
              "the mean canonical correlation of (h, h′): ρ when identified, below ρ otherwise",
              row=False),
    Metric.of("canonical_spread", "ρ̂ − mean canonical correlation", "lower", "h_prime",
              "label_free", "0 when identified: every canonical correlation equals ρ"),
    Metric.of("canonical_shortfall", "ρ − mean canonical correlation", "lower", "h_prime rho",
              "label_free", "0 when identified, with ρ given"),
    Metric.of("alignment_gap_rho_estimated", "δ at ρ̂", "lower", "h_prime", "label_free",
              "the alignment gap δ at the estimated ρ̂"),
    Metric.of("D_rho_estimated", "D at ρ̂", "lower", "h_prime", "label_free",
              "δ(ρ̂) / (2ρ̂(1−ρ̂))", row=False),
    # the consistency check's: evaluations/consistency.py
    Metric.of("consistency_r2", "R² of the worst pair, held-out", "higher", "", "consistency",
              "min over ordered pairs of runs of the held-out R² of the map between them"),
    Metric.of("consistency_r2_in_sample", "R² of the worst pair, in-sample", "higher", "",
              "consistency", "the same, in-sample"),
    Metric.of("consistency_orthogonality_error", "orthogonality error, worst pair", "lower", "",
              "consistency", "max over pairs of the orthogonality error of the map between them"),
    Metric.of("consistency_procrustes_mse", "Procrustes MSE, worst pair", "lower", "",
              "consistency", "max over pairs of the Procrustes error after centring"),
    # several runs gated together (evaluations/audit.py, combine_reports) or compared
    # (evaluations/consistency.py)
    Metric.of("n_runs", "runs gated together", None, "", "audit label_free consistency",
              "runs gated together (several targets) or compared"),
    # set by a label-free audit: evaluations/audit.py
    Metric.of("label_free", "label-free", None, "", "label_free",
              "set on a label-free audit: its verdict came from h (and h′, ρ) alone", row=False),
    # the sweep tables' own: R² per latent of 2-D latents (experiments/aggregate.py, from
    # r2_h_to_z_per_dim), a Reacher trajectory world's per-joint ρ (worlds/reacher/data.py,
    # logged by train)
    Metric.of("r2_h_to_z0", "R²(h → z₀)", "higher", "z", "sweep",
              "R²(h → z) of the first latent (2-D latents)", row=False, gate=False),
    Metric.of("r2_h_to_z1", "R²(h → z₁)", "higher", "z", "sweep",
              "R²(h → z) of the second latent (2-D latents)", row=False, gate=False),
    Metric.of("rho_0", "ρ₀", None, "", "sweep",
              "per-joint autocorrelation of joint 0 (Reacher trajectory pairs)", row=False,
              gate=False),
    Metric.of("rho_1", "ρ₁", None, "", "sweep",
              "per-joint autocorrelation of joint 1 (Reacher trajectory pairs)", row=False,
              gate=False),
)

#: the order of every table's rows and of ``idaudit metrics``: each key of idaudit's own
#: entries (the groups' and :data:`ELSEWHERE`) once
ORDER: tuple[str, ...] = (
    # the linear fits: held-out R² first, its bootstrap interval beside it
    "r2_h_to_z_heldout", "r2_h_to_z_heldout_ci", "r2_h_to_z_heldout_ci_low", "r2_z_to_h_heldout",
    "r2_h_to_z", "r2_z_to_h", "mcc", "orthogonality_error", "procrustes_mse",
    "latent_cov_error", "latent_cov_floor", "latents_standardized",
    # ε, δ, D and the Theorem 3 bound
    "whitening_error", "whitening_floor", "whitening_error_corrected", "whitening_error_upper",
    "total_variance_h", "alignment_gap", "alignment_gap_upper", "D", "D_upper", "bound",
    "bound_holds", "bound_upper", "bound_upper_confidence", "bound_upper_vacuous",
    "bound_trivial", "bound_vacuous", "bound_floor", "bound_floor_dominated", "rho",
    # the label-free signals
    "effective_rank", "rho_estimated", "canonical_min", "canonical_mean", "canonical_spread",
    "canonical_shortfall", "alignment_gap_rho_estimated", "D_rho_estimated",
    # subspaces, circular latents, the ceiling, the floor
    "principal_angle_max_deg", "r2_h_to_sincos", "r2_h_to_z_ceiling", "r2_h_to_z_of_ceiling",
    "r2_h_to_z_heldout_unwrapped", "unwrapped_test_rows", "ceiling_law", "angle_sigma",
    "r2_h_to_z_heldout_floor_high", "r2_h_to_z_heldout_above_floor",
    "r2_h_to_z_heldout_floor_mean", "r2_h_to_z_heldout_floor_band", "r2_h_to_z_floor_high",
    "r2_h_to_z_floor_mean", "r2_h_to_z_floor_band", "floor_draws", "floor_latents",
    # Gaussianity, the raw mixing, the consistency check
    "gaussianity_statistic", "gaussianity_p_value", "gaussianity_null_mean", "mixing_r2_x_to_z",
    "consistency_r2", "consistency_r2_in_sample", "consistency_orthogonality_error",
    "consistency_procrustes_mse",
    # sizes and flags
    "n_runs", "n_samples", "n_train", "n_test", "bootstrap", "latent_dim", "embed_dim",
    "label_free",
    # the sweep tables' own columns
    "r2_h_to_z0", "r2_h_to_z1", "rho_0", "rho_1",
)


def _check(catalogue: tuple[Metric, ...]) -> None:
    """Fail at import on an entry that cannot be right: a duplicate key, an unknown need,
    report or direction, or no report at all."""
    seen: set[str] = set()
    for m in catalogue:
        if m.key in seen:
            raise ValueError(f"metric catalogue: duplicate key {m.key!r}")
        if not m.needs <= set(NEEDS) or not m.reports or not m.reports <= set(REPORTS) \
                or m.direction not in DIRECTIONS:
            raise ValueError(f"metric catalogue: {m.key}: needs {sorted(m.needs)}, reports "
                             f"{sorted(m.reports)}, direction {m.direction!r}")
        seen.add(m.key)


def _builtin() -> tuple[Metric, ...]:
    """idaudit's own entries — its groups', then :data:`ELSEWHERE` — in :data:`ORDER`,
    checked: each declared once and placed once."""
    declared = (*(m for group in METRIC_GROUPS for m in group.metrics), *ELSEWHERE)
    _check(declared)
    by_key = {m.key: m for m in declared}
    unplaced = [k for k in by_key if k not in ORDER]
    undeclared = [k for k in ORDER if k not in by_key]
    if unplaced or undeclared or len(set(ORDER)) != len(ORDER):
        raise ValueError(f"metric catalogue: ORDER leaves out {unplaced}, names {undeclared} "
                         "that no entry declares, or names a key twice")
    return tuple(by_key[k] for k in ORDER)


#: idaudit's own entries, in the order of every table's rows
CATALOGUE: tuple[Metric, ...] = _builtin()

#: the keys of idaudit's own metrics (a plugin's metric group may not report one)
BUILTIN_KEYS = frozenset(m.key for m in CATALOGUE)


def accept_group(name: str, obj: Any) -> MetricGroup:
    """What a plugin's ``idaudit.metrics`` entry point names, checked: a
    :class:`~idaudit.maths.metrics.MetricGroup` that declares the catalogue entries of its
    keys, none of them a key idaudit has."""
    if not isinstance(obj, MetricGroup):
        raise TypeError(f"got {type(obj).__name__}, not an idaudit.maths.metrics.MetricGroup")
    if not obj.metrics or not all(isinstance(m, Metric) for m in obj.metrics):
        raise TypeError("its `metrics` must declare a catalogue entry (Metric) for each key")
    taken = sorted(m.key for m in obj.metrics if m.key in BUILTIN_KEYS)
    if taken:
        raise TypeError(f"it declares {', '.join(taken)}, which idaudit reports already")
    return obj


@functools.cache
def catalogue() -> tuple[Metric, ...]:
    """Every metric: :data:`CATALOGUE`, then the entries plugins' metric groups declare
    (``idaudit.metrics`` entry points, loaded on the first call; a process reads its plugins
    once), in their groups' order.

    Returns:
        The entries, in the order of every table's rows.

    Example:
        >>> catalogue()[0].key
        'r2_h_to_z_heldout'
    """
    from idaudit.core.registered import METRICS

    plugged = [m for name in sorted(METRICS.plugins()) for m in METRICS.get(name).metrics]
    if not plugged:
        return CATALOGUE
    every = (*CATALOGUE, *plugged)
    try:
        _check(every)
    except ValueError as exc:
        raise UsageError(f"plugins' {exc}") from None
    return every


class _ByKey(Mapping[str, Metric]):
    """Every entry of :func:`catalogue` by key (plugins' read when first asked)."""

    @staticmethod
    @functools.cache
    def _all() -> dict[str, Metric]:
        return {m.key: m for m in catalogue()}

    def __getitem__(self, key: str) -> Metric:
        return self._all()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __contains__(self, key: object) -> bool:
        return key in self._all()


BY_KEY: Mapping[str, Metric] = _ByKey()


def entries(*reports: str) -> list[Metric]:
    """The entries any of ``reports`` holds, in catalogue order."""
    return [m for m in catalogue() if m.reports.intersection(reports)]


def gate_keys(*reports: str) -> frozenset[str]:
    """The keys a gate over ``reports`` may name."""
    return frozenset(m.key for m in entries(*reports) if m.gate)


def table_rows(report: str) -> list[tuple[str, str]]:
    """(key, label) of a report's table rows, in order: ``audit`` (with or without z),
    ``consistency``, or ``train`` (its short labels)."""
    if report == "train":
        return [(m.key, m.short or m.label) for m in entries("train")]
    held = ("audit", "label_free") if report == "audit" else (report,)
    return [(m.key, m.label) for m in entries(*held) if m.row]


def missing_need(key: str, label_free: bool) -> str:
    """Why ``key`` is missing from an audit's metrics, as `` (it needs …)``, or ""."""
    m = BY_KEY.get(key)
    if m is None:
        return ""
    if label_free and "z" in m.needs:
        return f" (it needs {NEED_TEXT['z']})"
    if not label_free and "audit" not in m.reports and "label_free" in m.reports:
        return " (only a label-free audit reports it: --label-free)"
    rest = [NEED_TEXT[n] for n in NEEDS if n in m.needs and n != "z"]
    return f" (it needs {' and '.join(rest)})" if rest else ""


def catalogue_json() -> list[dict[str, Any]]:
    """The catalogue as a JSON list (``idaudit metrics --json``)."""
    return [m.to_dict() for m in catalogue()]
