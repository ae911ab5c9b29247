"""The metric catalogue: every metric idaudit reports, once.

Each :class:`Metric` says what its key means, how reports label it, which way is better, what
an audit needs to report it, and which reports hold it. Everything else that names metrics —
the keys a gate accepts and its "it needs …" messages, the rows of the audit, consistency and
training tables, the sweep tables' columns, ``idaudit metrics`` — is a view of
:data:`CATALOGUE`. Adding a metric is one entry here plus its computation.

``needs`` (what the audit must be given): ``z`` the true latents, ``h_prime`` and ``rho`` the
positive pairs and their OU correlation, ``bootstrap`` ``--bootstrap B`` resamples,
``angle_law`` angles seen mod 2π with their law, ``floor`` the shuffles of the uninformative
floor (``--floor-draws``, on by default).

``reports``: ``audit`` an audit with z reports it (``audit_metrics``, or several runs gated
together), ``label_free`` a label-free audit does (h, h′, ρ alone), ``consistency`` the
consistency check does, ``train`` a row of the training table, ``sweep`` a column of the
sweep tables. The order of :data:`CATALOGUE` is the order of every table's rows.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from idaudit.core.errors import UsageError

__all__ = ["BUILTIN_KEYS", "BY_KEY", "CATALOGUE", "Metric", "NEEDS", "NEED_TEXT", "catalogue",
           "catalogue_json", "entries", "gate_keys", "missing_need", "table_rows"]

Direction = Literal["higher", "lower"] | None

NEEDS = ("z", "h_prime", "rho", "bootstrap", "angle_law", "floor")
REPORTS = ("audit", "label_free", "consistency", "train", "sweep")
DIRECTIONS = ("higher", "lower", None)
# how an error message names each need
NEED_TEXT = {"z": "the true latents z", "h_prime": "h′", "rho": "ρ", "bootstrap": "--bootstrap B",
             "angle_law": "angles seen mod 2π with their law (a world that knows it, or "
                          "--circular with --angle-sigma)",
             "floor": "--floor-draws K > 0"}


@dataclass(frozen=True)
class Metric:
    """One metric: its key, console/Markdown ``label``, which way is better (None: a size,
    flag or reference value), what the audit needs to report it, where it is reported.

    ``row``: a row of the audit / consistency tables when reported there (False: in the JSON
    and gates only); ``gate``: a gate may name it (False: not a single number); ``short``:
    the training table's label where it differs from ``label``."""

    key: str
    label: str
    direction: Direction
    needs: frozenset[str]
    reports: frozenset[str]
    meaning: str
    row: bool = True
    gate: bool = True
    short: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The entry as JSON: needs and reports as lists in their canonical order."""
        return {"key": self.key, "label": self.label, "direction": self.direction,
                "needs": [n for n in NEEDS if n in self.needs],
                "reports": [r for r in REPORTS if r in self.reports], "meaning": self.meaning,
                "row": self.row, "gate": self.gate, "short": self.short}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Metric:
        return cls(**{**d, "needs": frozenset(d["needs"]), "reports": frozenset(d["reports"])})


def _m(key: str, label: str, direction: Direction, needs: str, reports: str, meaning: str,
       **kw: Any) -> Metric:
    """An entry, with needs and reports as space-separated words."""
    return Metric(key, label, direction, frozenset(needs.split()), frozenset(reports.split()),
                  meaning, **kw)


_PAIRS = "h_prime rho"
_ALL = "audit label_free"

CATALOGUE: tuple[Metric, ...] = (
    _m("r2_h_to_z_heldout", "R²(h → z), held-out", "higher", "z", "audit sweep",
       "R² of z ≈ Wh + c fitted on the train rows, scored on the held-out rows"),
    _m("r2_h_to_z_heldout_ci", "  bootstrap interval", None, "z bootstrap", "audit",
       "percentile interval of the held-out R²(h → z) over B resamples of the test rows",
       gate=False),
    _m("r2_h_to_z_heldout_ci_low", "R²(h → z), held-out, interval low", "higher", "z bootstrap",
       "audit", "lower end of the bootstrap interval of the held-out R²(h → z)", row=False),
    _m("r2_z_to_h_heldout", "R²(z → h), held-out", "higher", "z", "audit",
       "R² of h ≈ Wz + c fitted on the train rows, scored on the held-out rows"),
    _m("r2_h_to_z", "R²(h → z), in-sample", "higher", "z", "audit train sweep",
       "linear recovery of the latents from the embedding", short="R²(h → z)"),
    _m("r2_z_to_h", "R²(z → h), in-sample", "higher", "z", "audit train sweep",
       "how linear the embedding is in the latents", row=False, short="R²(z → h)"),
    _m("mcc", "MCC", "higher", "z", "audit",
       "mean |correlation| of z's and h's axes after Hungarian matching (not rotation invariant)"),
    _m("orthogonality_error", "orthogonality error", "lower", "z", "audit train sweep",
       "‖Q̂ᵀQ̂ − I‖_F/√n of the fitted map z → h, z whitened on these rows"),
    _m("procrustes_mse", "Procrustes MSE", "lower", "z", "audit train sweep",
       "min over rotations of E‖h − Qz‖², z whitened on these rows"),
    _m("latent_cov_error", "‖Cov(z) − I‖_F", None, "z", "audit",
       "how far the latents' covariance is from the identity (their units); Procrustes, "
       "orthogonality and the bound's comparison use z whitened on these rows", row=False),
    _m("latent_cov_floor", "‖Cov(z) − I‖_F floor", None, "z", "audit",
       "the ‖Cov(z) − I‖_F white latents of this size show by chance", row=False),
    _m("latents_whitened", "z whitened on these rows", None, "z", "audit",
       "whether z was whitened on these rows (its law unknown) or used as it is (a world "
       "that draws it white)", row=False),
    _m("whitening_error", "ε = ‖Cov(h) − I‖_F", "lower", "", f"{_ALL} train sweep",
       "‖Cov(h) − I‖_F", short="ε"),
    _m("whitening_floor", "ε floor √(m(m+1)/n)", None, "", _ALL,
       "the ε a white h of this size shows by chance"),
    _m("whitening_error_corrected", "ε, floor-corrected", "lower", "", _ALL,
       "√max(ε² − floor², 0)"),
    _m("whitening_error_upper", "ε, upper", "lower", _PAIRS, _ALL,
       "ε bounded from above with probability ≥ 1 − (1 − c)/2", row=False),
    _m("total_variance_h", "tr Cov(h)", None, "", _ALL, "total variance of the embedding",
       row=False),
    _m("alignment_gap", "δ", "lower", _PAIRS, f"{_ALL} train",
       "E‖h(z′) − h(z)‖² − 2(1−ρ) tr Cov(h), floored at 0"),
    _m("alignment_gap_upper", "δ, upper", "lower", _PAIRS, _ALL,
       "δ bounded from above with probability ≥ 1 − (1 − c)/2", row=False),
    _m("D", "D = δ/(2ρ(1−ρ))", "lower", _PAIRS, f"{_ALL} train", "δ / (2ρ(1−ρ))", short="D"),
    _m("D_upper", "D, upper", "lower", _PAIRS, _ALL, "δ_upper / (2ρ(1−ρ))", row=False),
    _m("bound", "bound D + (ε+D)²", "lower", _PAIRS, f"{_ALL} train sweep",
       "D + (ε + D)² (Theorem 3)", short="bound"),
    _m("bound_holds", "bound holds", None, f"z {_PAIRS}", "audit train", "Procrustes MSE ≤ bound"),
    _m("bound_upper", "bound, upper (holds w.p. ≥ 95 %)", "lower", _PAIRS, _ALL,
       "D_upper + (ε_upper + D_upper)²: bounds E‖h − Qz‖² with probability ≥ c"),
    _m("bound_upper_confidence", "confidence c of bound, upper", None, _PAIRS, _ALL,
       "the probability c with which bound_upper holds", row=False),
    _m("bound_upper_vacuous", "bound, upper, vacuous", None, f"z {_PAIRS}", "audit",
       "bound_upper ≥ bound_trivial: it says nothing", row=False),
    _m("bound_trivial", "trivial bound E‖z − z̄‖²", None, f"z {_PAIRS}", "audit",
       "the error of a constant embedding", row=False),
    _m("bound_vacuous", "bound vacuous", None, f"z {_PAIRS}", "audit",
       "bound ≥ bound_trivial: it says nothing", row=False),
    _m("bound_floor", "bound floor", None, f"z {_PAIRS}", "audit",
       "floor², the share of the bound a perfect encoder of this size would get", row=False),
    _m("bound_floor_dominated", "bound floor-dominated", None, f"z {_PAIRS}", "audit",
       "bound_floor ≥ bound / 2: the finite-sample floor dominates the bound", row=False),
    _m("rho", "ρ", None, _PAIRS, _ALL, "the OU correlation of the pairs (h, h′), as given",
       row=False),
    _m("effective_rank", "effective rank of h", "higher", "", _ALL,
       "exp(entropy of Cov(h)'s normalised eigenvalues)"),
    _m("rho_estimated", "ρ̂, top canonical correlation of (h, h′)", None, "h_prime", "label_free",
       "the largest canonical correlation of (h, h′): ρ estimated from the pairs"),
    _m("canonical_min", "smallest canonical correlation", "higher", "h_prime", "label_free",
       "the smallest canonical correlation of (h, h′)", row=False),
    _m("canonical_mean", "mean canonical correlation", "higher", "h_prime", "label_free",
       "the mean canonical correlation of (h, h′): ρ when identified, below ρ otherwise",
       row=False),
    _m("canonical_spread", "ρ̂ − mean canonical correlation", "lower", "h_prime", "label_free",
       "0 when identified: every canonical correlation equals ρ"),
    _m("canonical_shortfall", "ρ − mean canonical correlation", "lower", _PAIRS, "label_free",
       "0 when identified, with ρ given"),
    _m("alignment_gap_rho_estimated", "δ at ρ̂", "lower", "h_prime", "label_free",
       "the alignment gap δ at the estimated ρ̂"),
    _m("D_rho_estimated", "D at ρ̂", "lower", "h_prime", "label_free", "δ(ρ̂) / (2ρ̂(1−ρ̂))",
       row=False),
    _m("principal_angle_max_deg", "largest principal angle (°)", "lower", "z", "audit",
       "largest angle between the fitted map's range and h's top subspace (m ≠ n only)"),
    _m("r2_h_to_sincos", "R²(h → sin/cos of angles)", "higher", "z", "audit",
       "R²(h → (sin z_i, cos z_i)) of the circular latents (--circular only)"),
    _m("r2_h_to_z_ceiling", "ceiling of R²(h → z), held-out", None, "z angle_law",
       "audit sweep",
       "held-out R² of the best guess of z from angles seen mod 2π (their posterior mean), "
       "fitted and scored as the audit scores: what the world allows on this evaluation set"),
    _m("r2_h_to_z_of_ceiling", "R²(h → z) / its ceiling", "higher", "z angle_law", "audit",
       "held-out R²(h → z) over its ceiling: 1 for an encoder as good as the images allow "
       "(a little above 1 by chance on a finite set)", short="of ceiling"),
    _m("r2_h_to_z_heldout_unwrapped", "R²(h → z), held-out, unwrapped rows", "higher",
       "z angle_law", "audit",
       "held-out R²(h → z) on the test rows whose angles lie in [−π, π) (need no wrapping)"),
    _m("unwrapped_test_rows", "test rows needing no wrapping", None, "z angle_law", "audit",
       "how many test rows r2_h_to_z_heldout_unwrapped is scored on", row=False),
    _m("angle_sigma", "σ of the angles' law N(0, σ²)", None, "z angle_law", "audit",
       "the law the ceiling assumes for the unwrapped angles", row=False),
    _m("r2_h_to_z_heldout_floor_high", "R²(h → z), held-out, uninformative (band top)", None,
       "z floor", "audit",
       "upper end of the band of held-out R²(h → z) that h scores with its rows shuffled "
       "against z: what an encoder of this width that knows nothing of z reaches on these rows",
       short="floor"),
    _m("r2_h_to_z_heldout_above_floor", "R²(h → z), held-out, above that band", "higher",
       "z floor", "audit",
       "held-out R²(h → z) minus r2_h_to_z_heldout_floor_high: > 0 where the encoder beats "
       "the uninformative ones of its width"),
    _m("r2_h_to_z_heldout_floor_mean", "R²(h → z), held-out, uninformative (mean)", None,
       "z floor", "audit", "mean held-out R²(h → z) over the shuffles", row=False),
    _m("r2_h_to_z_heldout_floor_band", "R²(h → z), held-out, uninformative band", None,
       "z floor", "audit",
       "band of the shuffles' held-out R² (holds one more with probability ≥ the confidence)",
       row=False, gate=False),
    _m("r2_h_to_z_floor_high", "R²(h → z), in-sample, uninformative (band top)", None,
       "z floor", "audit",
       "upper end of the band of in-sample R²(h → z) that h scores with its rows shuffled "
       "against z (about m/(n − 1) in the mean)"),
    _m("r2_h_to_z_floor_mean", "R²(h → z), in-sample, uninformative (mean)", None, "z floor",
       "audit", "mean in-sample R²(h → z) over the shuffles", row=False),
    _m("r2_h_to_z_floor_band", "R²(h → z), in-sample, uninformative band", None, "z floor",
       "audit", "band of the shuffles' in-sample R²", row=False, gate=False),
    _m("floor_draws", "shuffles for the uninformative band", None, "z floor", "audit",
       "K, the seeded shuffles of z's rows against h's", row=False),
    _m("floor_latents", "latents the uninformative band averages", None, "z floor", "audit",
       "all latents up to max(2, 2048 / m), else a seeded subset that size (a wider band, "
       "centred alike)",
       row=False),
    _m("gaussianity_statistic", "sliced Epps–Pulley statistic", "lower", "", _ALL,
       "distance of h's projections from a Gaussian law"),
    _m("gaussianity_p_value", "Gaussianity p-value", "higher", "", _ALL,
       "p-value of the sliced Epps–Pulley test that h is Gaussian"),
    _m("gaussianity_null_mean", "Epps–Pulley null mean", None, "", _ALL,
       "mean of the statistic under the Gaussian null", row=False),
    _m("mixing_r2_x_to_z", "R²(x → z) raw mixing", None, "z", "audit train sweep",
       "raw-mixing baseline", short="R²(x → z)"),
    _m("consistency_r2", "R² of the worst pair, held-out", "higher", "", "consistency",
       "min over ordered pairs of runs of the held-out R² of the map between them"),
    _m("consistency_r2_in_sample", "R² of the worst pair, in-sample", "higher", "", "consistency",
       "the same, in-sample"),
    _m("consistency_orthogonality_error", "orthogonality error, worst pair", "lower", "",
       "consistency", "max over pairs of the orthogonality error of the map between them"),
    _m("consistency_procrustes_mse", "Procrustes MSE, worst pair", "lower", "", "consistency",
       "max over pairs of the Procrustes error after centring"),
    _m("n_runs", "runs gated together", None, "", f"{_ALL} consistency",
       "runs gated together (several targets) or compared"),
    _m("n_samples", "samples", None, "", f"{_ALL} consistency", "rows (inputs) audited"),
    _m("n_train", "train rows", None, "z", "audit", "rows the held-out fits fit on", row=False),
    _m("n_test", "test rows", None, "z", "audit", "rows the held-out fits score on", row=False),
    _m("bootstrap", "bootstrap resamples", None, "z bootstrap", "audit",
       "B, the bootstrap resamples of the test rows", row=False),
    _m("latent_dim", "latent dimension n", None, "z", "audit", "columns of z"),
    _m("embed_dim", "embedding dimension m", None, "", _ALL, "columns of h"),
    _m("label_free", "label-free", None, "", "label_free",
       "set on a label-free audit: its verdict came from h (and h′, ρ) alone", row=False),
    _m("r2_h_to_z0", "R²(h → z₀)", "higher", "z", "sweep",
       "R²(h → z) of the first latent (2-D latents)", row=False, gate=False),
    _m("r2_h_to_z1", "R²(h → z₁)", "higher", "z", "sweep",
       "R²(h → z) of the second latent (2-D latents)", row=False, gate=False),
    _m("rho_0", "ρ₀", None, "", "sweep",
       "per-joint autocorrelation of joint 0 (Reacher trajectory pairs)", row=False, gate=False),
    _m("rho_1", "ρ₁", None, "", "sweep",
       "per-joint autocorrelation of joint 1 (Reacher trajectory pairs)", row=False, gate=False),
)

#: the keys of idaudit's own metrics (a plugin's metric group may not report one)
BUILTIN_KEYS = frozenset(m.key for m in CATALOGUE)


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


_check(CATALOGUE)


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
