"""Audit any encoder: reduce it to arrays (z, h, h′, ρ), compute the metrics, apply a gate.

Every route ends in :class:`AuditInputs` before a metric is computed: an idaudit checkpoint,
plain safetensors weights with a ``module:factory`` architecture, TorchScript or torch.export
programs, an encoder object in Python, or precomputed arrays (``.npz`` / ``.safetensors``
holding ``z``, ``h`` and optionally ``h_prime`` and ``rho``). Encoders are embedded on their
world's evaluation set (:meth:`World.eval_set`), the one training used.
"""

from __future__ import annotations

import math
import os
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from idaudit.core import limits
from idaudit.core.defaults import TEST_FRACTION
from idaudit.core.errors import (
    EXIT_GATE_FAILED,
    EXIT_INCONCLUSIVE,
    EXIT_OK,
    IdauditError,
    check_seed,
    latent_indices,
)
from idaudit.core.requests import AuditRequest, EmbedRequest, EncoderOptions, unknown_options
from idaudit.loading.loaders import (
    Arrays,
    LoadedEncoder,
    numeric_array,
    open_target,
    where_to_embed,
)
from idaudit.maths.catalogue import gate_keys, missing_need
from idaudit.maths.linear import to_numpy
from idaudit.maths.metrics import audit_metrics

# "ungated": no threshold was given, so nothing was checked (a report only, exit 0); never
# shown as a pass, so a CI step that forgot its gate cannot pass for ever unnoticed.
Verdict = Literal["pass", "fail", "inconclusive", "ungated"]

# Every key an audit (with or without z) reports as one number or flag: a gate may name any.
KNOWN_METRICS = gate_keys("audit", "label_free")


@dataclass
class AuditInputs(Arrays):
    """What every route reduces to: the arrays, and where they came from."""

    world: dict[str, Any] | None = None
    seed: int | None = None  # the evaluation set's seed (a checkpoint's: its training seed)


@dataclass
class Threshold:
    metric: str
    op: str  # "min" or "max"
    value: float
    actual: float | None = None
    passed: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "op": self.op, "value": self.value,
                "actual": self.actual, "passed": self.passed}


@dataclass
class AuditReport:
    """Metrics, the gate's thresholds (each with its actual value) and the verdict.

    ``passed`` is True only for a pass (not for "ungated": no threshold, nothing checked);
    ``exit_code`` is what ``idaudit audit`` exits with (0 for pass and ungated);
    ``to_dict()`` is its ``--json``; in a notebook the report shows as a Markdown table.
    """

    metrics: dict[str, Any]
    thresholds: list[Threshold] = field(default_factory=list)
    verdict: Verdict = "pass"
    reason: str | None = None
    source: str = ""
    world: dict[str, Any] | None = None
    runs: list[dict[str, Any]] | None = None  # several runs gated together: each one's report

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    @property
    def failed(self) -> list[Threshold]:
        return [t for t in self.thresholds if t.passed is False]

    @property
    def exit_code(self) -> int:
        return {"pass": EXIT_OK, "ungated": EXIT_OK,
                "fail": EXIT_GATE_FAILED}.get(self.verdict, EXIT_INCONCLUSIVE)

    def markdown(self) -> str:
        from idaudit.evaluations.report import audit_markdown

        return audit_markdown(self)

    def _repr_markdown_(self) -> str:
        return self.markdown()

    def to_dict(self) -> dict[str, Any]:
        out = {"verdict": self.verdict, "reason": self.reason, "source": self.source,
               "world": self.world, "metrics": self.metrics,
               "gate": [t.to_dict() for t in self.thresholds]}
        if self.runs is not None:
            out["runs"] = self.runs
        return out


# ---- thresholds -------------------------------------------------------------------------


def parse_threshold(text: str, op: str, known: Collection[str] = KNOWN_METRICS) -> Threshold:
    """``KEY=VALUE`` → Threshold (metric names outside ``known`` are an input error)."""
    key, sep, value = text.partition("=")
    if not sep:
        raise IdauditError(f"--{op} expects METRIC=VALUE, got {text!r}")
    try:
        number = float(value.strip())
    except ValueError:
        raise IdauditError(f"--{op} {key.strip()}: the value must be a number, got "
                           f"{value.strip()!r}") from None
    return make_threshold(key.strip(), op, number, known)


def make_threshold(key: str, op: str, value: Any, known: Collection[str] = KNOWN_METRICS) -> Threshold:
    """One threshold; ``value`` must be a number (a string such as ``"0.9"`` in a gate file or
    dictionary is refused, not read as one: a quoted value is usually a mistake)."""
    if key not in known:
        raise IdauditError(f"unknown metric {key!r} in the gate; valid: "
                           f"{', '.join(sorted(known))}")
    if op not in ("min", "max"):
        raise IdauditError(f"gate operator must be min or max, got {op!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise IdauditError(f"gate value for {key} must be a number, got {value!r} "
                           f"({type(value).__name__})")
    v = float(value)
    if math.isnan(v):
        raise IdauditError(f"gate value for {key} is NaN")
    return Threshold(key, op, v)


def table_thresholds(gate: Any, where: str = "gate",
                     known: Collection[str] = KNOWN_METRICS) -> list[Threshold]:
    """``{"min": {metric: value}, "max": {...}}`` (a TOML gate file or a dict) → thresholds."""
    if not isinstance(gate, dict):
        raise IdauditError(f"{where} must be a table with min and max tables, got "
                           f"{type(gate).__name__}")
    extra = set(gate) - {"min", "max"}
    if extra:
        raise IdauditError(f"{where}: unknown tables {sorted(extra)}; use [min] and [max]")
    out = []
    for op in ("min", "max"):
        table = gate.get(op, {})
        if not isinstance(table, dict):
            raise IdauditError(f"{where}: [{op}] must be a table of metric = value")
        out += [make_threshold(k, op, v, known) for k, v in table.items()]
    return out


def load_gate_file(path: str | Path, known: Collection[str] = KNOWN_METRICS) -> list[Threshold]:
    """A TOML gate: ``[min]`` and ``[max]`` tables of ``metric = value``."""
    from idaudit.core.io import load_toml

    return table_thresholds(load_toml(path, "gate"), f"gate file {path}", known)


def evaluate_gate(metrics: dict[str, Any], thresholds: list[Threshold]) -> list[Threshold]:
    """Each threshold's actual value and pass/fail; a gated metric these inputs do not give is
    an input error naming what it needs (from the catalogue)."""
    for t in thresholds:
        if t.metric not in metrics or metrics[t.metric] is None:
            need = missing_need(t.metric, bool(metrics.get("label_free")))
            raise IdauditError(f"metric {t.metric!r} is not available for these inputs{need}")
        actual = float(metrics[t.metric])
        t.actual = actual
        t.passed = bool(actual >= t.value) if t.op == "min" else bool(actual <= t.value)
    return thresholds


# ---- checks -----------------------------------------------------------------------------


def values_reason(items: list[tuple[str, np.ndarray | None, str]]) -> str | None:
    """The one check of whether arrays can support a verdict: the first of NaN/Inf or values
    that overflow float64 moments (in any array), then a collapsed embedding, then constant
    true latents; None when there is none. ``items`` are (name, array or None, kind), kind
    ``"embedding"`` (collapse is inconclusive), ``"latents"`` (constant is inconclusive) or
    ``"values"`` (only the values are checked)."""
    same: dict[str, list[str]] = {"embedding": [], "latents": []}
    for name, arr, kind in items:
        if arr is None:
            continue
        problem, constant = value_problem(arr, name, spread=kind != "values")
        if problem:
            return problem
        if constant:
            same[kind].append(name)
    if same["embedding"]:
        return (f"the embedding collapsed: {same['embedding'][0]} has (near-)zero variance, "
                "every input maps to one point")
    if same["latents"]:
        return (f"the true latents {same['latents'][0]} are constant: every row is the same, "
                "so there is nothing for h to recover (check that it holds the latents of "
                "these inputs)")
    return None


def inconclusive_reason(inp: AuditInputs) -> str | None:
    """Why no verdict can be given (:func:`values_reason` of z, h, h′; too few samples), or
    None."""
    reason = values_reason([("z", inp.z, "latents"), ("h", inp.h, "embedding"),
                            ("h_prime", inp.h_prime, "values")])
    if reason is not None:
        return reason
    n_rows, n, m = inp.h.shape[0], inp.z.shape[1], inp.h.shape[1]
    need = 2 * (n + m) + 10
    if n_rows < need:
        return (f"too few samples: {n_rows} rows for a {n}-dimensional latent and a "
                f"{m}-dimensional embedding (need at least {need} for held-out fits)")
    return None


def as_matrix(arr: np.ndarray, name: str) -> np.ndarray:
    """``arr`` as a samples × dims array (a 1-D array is one column), or a one-line error
    (exit 2): another number of dimensions, no rows or no columns."""
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise IdauditError(f"{name} must be a 2-D array (samples × dims), got shape "
                           f"{tuple(arr.shape)}")
    if arr.shape[0] == 0:
        raise IdauditError(f"{name} has no rows (shape {tuple(arr.shape)})")
    if arr.shape[1] == 0:
        raise IdauditError(f"{name} has no columns (shape {tuple(arr.shape)}); it needs at "
                           "least one column")
    return arr


def value_problem(arr: np.ndarray, name: str, spread: bool = True) -> tuple[str | None, bool]:
    """(what is wrong with the values of the 2-D array ``arr`` for the float64 moments every
    metric comes from, or None; whether its rows are all (nearly) the same).

    Wrong: NaN or Inf, or values too large to sum or (with ``spread``) to square in float64.
    The same: (near-)zero total variance relative to its scale — a collapsed embedding, or
    constant latents (only judged with ``spread``). One pass for the column sums, one for
    the spread, a block of rows at a time (no copy of ``arr``)."""
    sums = arr.sum(0, dtype=np.float64)
    if not np.isfinite(sums).all():
        if not bool(np.isfinite(arr).all()):
            return f"{name} contains NaN or Inf values", False
        return f"{name} holds values too large to sum in float64", False
    if not spread:
        return None, False
    with np.errstate(over="ignore", invalid="ignore"):
        var, scale = _column_spread(arr, sums)
    if not (math.isfinite(var) and math.isfinite(scale)):
        big = max(abs(float(arr.max())), abs(float(arr.min())))
        return (f"{name} holds values too large for float64 second moments (up to {big:.3g} "
                "in magnitude: their squares overflow)"), False
    return None, var <= 1e-12 * max(scale, 1e-30) or var == 0.0


def _column_spread(h: np.ndarray, sums: np.ndarray) -> tuple[float, float]:
    """(Σ_j Var(h_j), m · mean(h²)) in float64 from h and its column sums, a block of rows at
    a time."""
    rows = h.shape[0]
    if rows < 2:
        return 0.0, 0.0
    mean = sums / rows
    ss = sq = 0.0
    for i in range(0, rows, 2048):
        c = h[i:i + 2048].astype(np.float64)
        sq += float(np.einsum("ij,ij->", c, c))
        c -= mean
        ss += float(np.einsum("ij,ij->", c, c))
    return ss / rows, sq / rows


def split_reason(inp: AuditInputs, test_fraction: float) -> str | None:
    """Why the held-out split cannot support the fits (too few rows on one side), or None."""
    width = max(inp.z.shape[1], inp.h.shape[1])
    if inp.test_rows is not None:
        n, n_test = inp.h.shape[0], int(np.asarray(inp.test_rows).size)
        if n - n_test < width + 2 or n_test < 2:
            return (f"the fixed held-out rows leave {n - n_test} rows to fit and {n_test} to "
                    f"test; the fits need at least {width + 2} and 2")
        return None
    return split_reason_rows(inp.h.shape[0], width, test_fraction)


def split_reason_rows(rows: int, width: int, test_fraction: float) -> str | None:
    """Why a held-out split of ``rows`` rows cannot support fits on ``width`` columns, or None."""
    n_test = max(1, min(rows - 1, int(round(rows * test_fraction))))
    need = width + 2
    if rows - n_test < need or n_test < 2:
        return (f"--test-fraction {test_fraction:g} leaves {rows - n_test} rows to fit and "
                f"{n_test} to test; the fits need at least {need} and 2 (choose a fraction "
                "nearer 0.5)")
    return None


def check_shapes(inp: AuditInputs) -> AuditInputs:
    """Shape and type checks that are input errors (exit 2), not inconclusive audits."""
    z, h = as_matrix(inp.z, "z"), as_matrix(inp.h, "h")
    if z.shape[0] != h.shape[0]:
        raise IdauditError(f"z has {z.shape[0]} rows but h has {h.shape[0]}")
    if inp.x is not None and (inp.x.ndim == 0 or inp.x.shape[0] != z.shape[0]):
        rows = f"{inp.x.shape[0]} rows" if inp.x.ndim else "no rows (a 0-d array)"
        raise IdauditError(f"x has {rows} but z has {z.shape[0]}: x holds the observations "
                           "of the same inputs, one row each")
    hp = _checked_pair(inp, h)
    for i in inp.circular:
        if not 0 <= i < z.shape[1]:
            raise IdauditError(f"circular latent index {i} is out of range for {z.shape[1]} latents")
    inp.z, inp.h, inp.h_prime = z, h, hp
    return inp


def _checked_pair(inp: AuditInputs, h: np.ndarray) -> np.ndarray | None:
    """h′ as a 2-D array of h's shape (or None), with ρ checked to lie in (0, 1)."""
    hp = inp.h_prime
    if hp is not None:
        hp = hp[:, None] if hp.ndim == 1 else hp
        if hp.shape != h.shape:
            raise IdauditError(f"h_prime has shape {tuple(hp.shape)} but h has {tuple(h.shape)}")
    if inp.rho is not None:
        limits.check("rho", inp.rho, "rho")
    return hp


def gated_report(metrics: dict[str, Any], thresholds: list[Threshold], source: str = "",
                 world: dict[str, Any] | None = None,
                 runs: list[dict[str, Any]] | None = None) -> AuditReport:
    """The report of metrics under a gate: each threshold evaluated, pass unless one fails;
    "ungated" when there is no threshold (a report only)."""
    evaluate_gate(metrics, thresholds)
    failed = [t for t in thresholds if not t.passed]
    verdict = "fail" if failed else "pass" if thresholds else "ungated"
    return AuditReport(metrics=metrics, thresholds=thresholds, verdict=verdict, source=source,
                       world=world, runs=runs)


# ---- the audit --------------------------------------------------------------------------


def audit_label_free(inp: AuditInputs, thresholds: list[Threshold] | None = None, *,
                     seed: int = 0, gauss_sims: int = 0) -> AuditReport:
    """The verdict from h (and h′, ρ) alone: :func:`idaudit.maths.labelfree.label_free_metrics`."""
    from idaudit.maths.labelfree import label_free_metrics

    h = as_matrix(inp.h, "h")
    hp = _checked_pair(inp, h)
    thresholds = list(thresholds or [])
    reason = values_reason([("h", h, "embedding"), ("h_prime", hp, "values")])
    if reason is None and h.shape[0] < h.shape[1] + 10:
        reason = (f"too few samples: {h.shape[0]} rows for a {h.shape[1]}-dimensional "
                  f"embedding (need at least {h.shape[1] + 10})")
    if reason is not None:
        return AuditReport(metrics={"n_samples": int(h.shape[0]), "embed_dim": int(h.shape[1]),
                                    "label_free": True},
                           thresholds=thresholds, verdict="inconclusive", reason=reason,
                           source=inp.source, world=inp.world)
    metrics = {**label_free_metrics(h, hp, inp.rho, seed=seed, gauss_sims=gauss_sims),
               "label_free": True}
    return gated_report(metrics, thresholds, inp.source, inp.world)


def check_embedding_options(n_eval: Any, normalize: str | None = None) -> None:
    """``--n-eval``, where given, is an integer ≥ 10, and ``--normalize`` parses (audit,
    consistency, embed): checked before any encoder is loaded."""
    if n_eval is not None:
        limits.check("n_eval", n_eval)
    if normalize is not None:
        from idaudit.loading.image_input import parse_normalize

        parse_normalize(normalize)


def _check_counts(bootstrap: Any, gauss_sims: Any, test_fraction: Any) -> None:
    """The audit's counts and split share, checked before any work."""
    limits.check("bootstrap", bootstrap)
    limits.check("gauss_sims", gauss_sims)
    if test_fraction is not None:
        limits.check("test_fraction", test_fraction)


def audit_inputs(inp: AuditInputs, thresholds: list[Threshold] | None = None, *,
                 circular: tuple[int, ...] | list[int] = (), bootstrap: int = 0,
                 test_fraction: float | None = None, seed: int = 0, gauss_sims: int = 0,
                 label_free: bool = False) -> AuditReport:
    """Metrics and verdict for arrays already reduced to (z, h, h′, ρ); without z (or with
    ``label_free``) from h, h′ and ρ alone (:func:`audit_label_free`), where the user's
    ``circular``, ``bootstrap`` and ``test_fraction`` are refused, and so are ``circular`` or
    ``x`` stored in an array file that has no z (a world's own angle indices, and a file's own
    with its z set aside by ``label_free``, simply do not apply). ``test_fraction`` (default
    0.5) is also refused where the world fixes the held-out rows."""
    _check_counts(bootstrap, gauss_sims, test_fraction)
    if inp.z is None or label_free:
        given = [flag for flag, v in (("--circular", circular), ("--bootstrap", bootstrap),
                                      ("--test-fraction", test_fraction is not None)) if v]
        if given:
            raise IdauditError(f"{given[0]} needs the true latents z; a label-free audit has "
                               "none")
        # arrays a file holds beside h that only mean something with its z (a world's own
        # angle indices, or a file's z set aside by --label-free, simply do not apply)
        stored = ["circular"] * bool(inp.circular) + ["x"] * (inp.x is not None)
        if stored and inp.z is None and inp.world is None:
            them = " and ".join(stored)
            raise IdauditError(f"{inp.source}: {them} need{'s' if len(stored) == 1 else ''} the "
                               "true latents z, which this file does not hold (a label-free "
                               f"audit); remove {them} from the file or add z")
        return audit_label_free(inp, thresholds, seed=seed, gauss_sims=gauss_sims)
    if test_fraction is not None and inp.test_rows is not None:
        raise IdauditError("--test-fraction does not apply: this world fixes the held-out rows "
                           "(its evaluation images)")
    test_fraction = TEST_FRACTION if test_fraction is None else test_fraction
    if circular:
        inp.circular = latent_indices(circular, "--circular")
    inp = check_shapes(inp)
    thresholds = list(thresholds or [])
    reason = inconclusive_reason(inp) or split_reason(inp, test_fraction)
    if reason is not None:
        return AuditReport(metrics={"n_samples": int(inp.h.shape[0]),
                                    "latent_dim": int(inp.z.shape[1]),
                                    "embed_dim": int(inp.h.shape[1])},
                           thresholds=thresholds, verdict="inconclusive", reason=reason,
                           source=inp.source, world=inp.world)

    metrics = audit_metrics(inp.z, inp.h, inp.h_prime, inp.rho, inp.x, circular=inp.circular,
                            test_fraction=test_fraction, seed=seed, bootstrap=bootstrap,
                            gauss_sims=gauss_sims, test_rows=inp.test_rows)
    return gated_report(metrics, thresholds, inp.source, inp.world)


REDUCTIONS = ("worst", "median")


def combine_reports(reports: list[AuditReport], thresholds: list[Threshold] | None = None,
                    reduce: str = "worst") -> AuditReport:
    """One verdict for several runs of one recipe (seeds, checkpoints), so a gate does not
    flake on one run's noise: every numeric metric is the median over the runs, and a gated
    metric is the median (``reduce="median"``) or the worst run's value (``"worst"``: the
    smallest for a ``--min`` gate, the largest for a ``--max`` one). Any inconclusive run makes
    the whole inconclusive."""
    if reduce not in REDUCTIONS:
        raise IdauditError(f"--reduce must be one of {', '.join(REDUCTIONS)}, got {reduce!r}")
    thresholds = list(thresholds or [])
    runs = [r.to_dict() for r in reports]
    source = ", ".join(r.source for r in reports)
    bad = next((r for r in reports if r.verdict == "inconclusive"), None)
    if bad is not None:
        return AuditReport(metrics={"n_runs": len(reports)}, thresholds=thresholds,
                           verdict="inconclusive", reason=f"{bad.source}: {bad.reason}",
                           source=source, world=reports[0].world, runs=runs)
    keys = [k for k, v in reports[0].metrics.items()
            if isinstance(v, (int, float)) and all(k in r.metrics for r in reports)]
    metrics: dict[str, Any] = {}
    for k in keys:
        vals = [r.metrics[k] for r in reports]
        if any(v is None for v in vals):
            continue
        if isinstance(vals[0], bool):
            metrics[k] = sum(vals) * 2 > len(vals)  # the majority
        elif all(isinstance(v, int) for v in vals) and len(set(vals)) == 1:
            metrics[k] = vals[0]  # sizes the runs share stay integers
        else:
            metrics[k] = float(np.median(np.asarray(vals, dtype=np.float64)))
    if reduce == "worst":
        for t in thresholds:
            vals = [r.metrics.get(t.metric) for r in reports]
            if all(v is not None for v in vals):
                pick = min if t.op == "min" else max
                metrics[t.metric] = pick(vals)
    metrics.update(n_runs=len(reports), reduce=reduce)
    return gated_report(metrics, thresholds, source, reports[0].world, runs)


def collect_thresholds(req: Any, known: set[str], r2_key: str, orth_key: str) -> list[Threshold]:
    """A request's thresholds from every way of giving one: ``min_r2`` (on ``r2_key``),
    ``max_orthogonality_error`` (on ``orth_key``), ``min``/``max`` (``{metric: value}`` or
    ``["METRIC=VALUE", …]``) and ``gate`` (a ``{"min": …, "max": …}`` dict or a TOML file)."""
    out = []
    if req.min_r2 is not None:
        out.append(make_threshold(r2_key, "min", req.min_r2, known))
    if req.max_orthogonality_error is not None:
        out.append(make_threshold(orth_key, "max", req.max_orthogonality_error, known))
    for op, given in (("min", req.min), ("max", req.max)):
        if isinstance(given, dict):
            out += [make_threshold(k, op, v, known) for k, v in given.items()]
        else:
            out += [parse_threshold(t, op, known) for t in given or []]
    if isinstance(req.gate, (str, Path)):
        out += load_gate_file(req.gate, known)
    elif req.gate is not None:
        out += table_thresholds(req.gate, known=known)
    return out


def _refuse_world_options(req: EncoderOptions, with_rho: bool) -> None:
    """Arrays are audited as they are: the options that say where an encoder is embedded do
    not apply to them (``rho`` among them only where the arrays bring their own)."""
    given = [f for f, v in (("--world", req.world), ("--data", req.data),
                            ("--n-eval", req.n_eval), ("--normalize", req.normalize),
                            ("--cache-dir", req.cache_dir)) if v is not None]
    given += [f"--{k.replace('_', '-')}" for k in req.world_options() if with_rho or k != "rho"]
    if given:
        raise IdauditError(f"arrays are audited as they are: {', '.join(given)} "
                           f"{'does' if len(given) == 1 else 'do'} not apply")


def run_audit(req: AuditRequest) -> AuditReport:
    """The audit of :class:`AuditRequest` ``req``: each target reduced to arrays, its metrics,
    the gate (several targets: :func:`combine_reports`). Bad input raises
    :class:`~idaudit.core.errors.IdauditError` (exit 2 in the CLI) before any work is done."""
    check_seed(req.seed)
    _check_counts(req.bootstrap, req.gauss_sims, req.test_fraction)
    thresholds = collect_thresholds(req, KNOWN_METRICS, "r2_h_to_z_heldout",
                                    "orthogonality_error")
    check_embedding_options(req.n_eval, req.normalize)
    if req.reduce not in REDUCTIONS:
        raise IdauditError(f"--reduce must be one of {', '.join(REDUCTIONS)}, got {req.reduce!r}")
    circular = req.circular_indices()
    arrays_given = req.z is not None or req.h is not None
    if arrays_given and req.targets:
        raise IdauditError("give either arrays (z, h) or an encoder, not both")
    if not arrays_given and not req.targets:
        raise IdauditError("audit needs either z and h arrays or an encoder")
    if len(req.targets) <= 1 and req.reduce != "worst":
        raise IdauditError("--reduce applies to several targets; one was given")
    inputs: list[tuple[AuditInputs, int | None]] = []
    if arrays_given:
        if req.h is None:
            raise IdauditError("audit needs the embeddings h")
        _refuse_world_options(req, with_rho=False)  # with arrays, rho is theirs
        inputs.append((AuditInputs(
            z=None if req.z is None else numeric_array(req.z, "z"), h=numeric_array(req.h, "h"),
            h_prime=None if req.h_prime is None else numeric_array(req.h_prime, "h_prime"),
            rho=None if req.rho is None else float(req.rho),
            x=None if req.x is None else numeric_array(req.x, "x")), req.seed))
    for target in req.targets:
        loaded = open_target(target, req)
        if isinstance(loaded, Arrays):
            _refuse_world_options(req, with_rho=True)  # an array file stores its own rho
            inputs.append((inputs_from_arrays(loaded),
                           req.seed if req.seed is not None else loaded.seed))
        else:
            inp = inputs_for_encoder(loaded, req)
            inputs.append((inp, inp.seed))
    several = len(inputs) > 1
    reports = [audit_inputs(inp, [] if several else thresholds, circular=circular,
                            bootstrap=req.bootstrap, test_fraction=req.test_fraction,
                            seed=seed or 0, gauss_sims=req.gauss_sims, label_free=req.label_free)
               for inp, seed in inputs]
    return combine_reports(reports, thresholds, req.reduce) if several else reports[0]


def audit(z: Any = None, h: Any = None, h_prime: Any = None, rho: float | None = None, *,
          encoder: Any = None, targets: list[Any] | None = None, **options: Any) -> AuditReport:
    """Audit embeddings or encoders for identifiability; return an :class:`AuditReport`.
    ``audit("a.npz", "b.npz", reduce="median")`` reads paths as the CLI does: as targets.

    Everything ``idaudit audit`` takes, under its option names (see :class:`AuditRequest`):
    arrays — ``z`` (true latents, n × d), ``h`` (embeddings, n × m), optionally ``h_prime``
    (embeddings of the OU successors z′) with their ``rho`` — or an ``encoder`` (an
    ``nn.Module``/callable, or a path to an idaudit checkpoint, TorchScript, ``torch.export``
    program, plain weights with ``arch="module:factory"``, an array file), or several
    ``targets`` gated together (``reduce``). An encoder is embedded on ``world`` (a World,
    WorldSpec or name) with world options, on ``data``, or on its checkpoint's world.

    The gate: ``min_r2`` (held-out R²(h → z) ≥), ``max_orthogonality_error`` (≤), ``min`` /
    ``max`` and ``gate``; with none, the verdict is "ungated" (a report only). The verdict is
    "inconclusive" when the data cannot support one (collapse, NaN/Inf, too few rows). Bad
    input raises :class:`~idaudit.core.errors.IdauditError` (a ``ValueError``).
    """
    unknown_options(AuditRequest, options, "audit", positional=("targets", "z", "h", "h_prime",
                                                                "rho"))
    if encoder is not None and targets is not None:
        raise IdauditError("give encoder= or targets=, not both")
    given = [v for v in (z, h, h_prime) if v is not None]
    if any(isinstance(v, (str, os.PathLike)) for v in given):  # paths, as the CLI takes them
        if not all(isinstance(v, (str, os.PathLike)) for v in given) or rho is not None:
            raise IdauditError("give paths (targets, as on the command line) or the arrays z, "
                               "h, h_prime, not both")
        targets, z, h, h_prime = [*given, *(targets or [])], None, None, None
    listed = list(targets or []) + ([encoder] if encoder is not None else [])
    return run_audit(AuditRequest(targets=listed, z=z, h=h, h_prime=h_prime, rho=rho,
                                  **options))


# ---- encoders and arrays → audit inputs -------------------------------------------------


def inputs_from_arrays(arrays: Arrays) -> AuditInputs:
    return AuditInputs(**vars(arrays))


def eval_set_for(loaded: LoadedEncoder, opts: EncoderOptions) -> tuple[Any, Any, int]:
    """(world spec, evaluation set, its seed) to embed an encoder on: ``opts.data`` or
    ``opts.world`` when given — a kind that can evaluate without building the world (Reacher
    without a dataset renders evaluation pairs) does so — else a checkpoint's own world with
    its training's eval-set size and seed."""
    from idaudit.worlds import KINDS, WorldSpec, as_world

    n_eval, seed = opts.n_eval, opts.seed
    if opts.world is None and opts.data is None and loaded.world is not None:
        n_eval = n_eval if n_eval is not None else loaded.train.get("n_eval")
        seed = seed if seed is not None else int(loaded.train.get("seed", 0))
    seed = seed or 0
    where, base_dir = where_to_embed(loaded, opts.world, opts.data, opts.world_options())
    if isinstance(where, WorldSpec):
        ev = KINDS.get(where.name).evaluation_set(where, n_eval, seed, opts.cache_dir,
                                                  opts.progress)
        if ev is not None:
            return where, ev, seed
    w = as_world(where, base_dir)
    return w.spec, w.eval_set(n_eval, seed), seed


def input_adapter(loaded: LoadedEncoder, x: Any, normalize: str | None) -> Any:
    """What embeds a world's inputs ``x`` with ``loaded``: vectors and an idaudit
    checkpoint's images (it records its own input format) go as they are; images (uint8
    N×H×W×3) reach any other encoder as float N×3×H×W in [0, 1], then ``normalize``
    (:func:`~idaudit.loading.image_input.parse_normalize`)."""
    images = getattr(x, "dtype", None) == np.uint8 and getattr(x, "ndim", 0) == 4
    if normalize is not None and not images:
        raise IdauditError("--normalize applies to image worlds (reacher); this world's inputs "
                           "are vectors")
    if not images:
        return loaded.module
    if loaded.world is not None:
        if normalize is not None:
            raise IdauditError("--normalize does not apply to an idaudit checkpoint: it records "
                               "its own input format")
        return loaded.module
    from idaudit.loading.image_input import ImageAdapter, parse_normalize
    from idaudit.models.embedding_choice import ChosenEmbedding

    module = loaded.module  # its way of being called (forward, or LeWM's encode) kept inside
    module = module if isinstance(module, ChosenEmbedding) else ChosenEmbedding(module)
    return ImageAdapter(module, parse_normalize(normalize or "none"))


def inputs_for_encoder(loaded: LoadedEncoder, opts: EncoderOptions) -> AuditInputs:
    """Embed the world's evaluation set (for a checkpoint on its own world: the set its
    training used, same size and seed) and its positive partners where it has them."""
    from idaudit.models.encoders import embed

    spec, ev, seed = eval_set_for(loaded, opts)
    module = input_adapter(loaded, ev.x, opts.normalize)
    h = embed(module, ev.x)
    hp = embed(module, ev.x_prime) if ev.x_prime is not None and ev.rho is not None else None
    arrays = {k: None if v is None else to_numpy(v) for k, v in
              (("z", ev.z), ("h", h), ("h_prime", hp), ("x", ev.baseline),
               ("test_rows", ev.test_rows))}
    return AuditInputs(**arrays, rho=ev.rho, circular=ev.circular, source=str(loaded.path),
                       world=spec.to_dict(), seed=seed)


def check_embed_out(out: str | Path | None) -> Path | None:
    """``embed --out`` must name an .npz file; checked before anything at that path is
    touched (a stale output is removed only after this)."""
    if out is None:
        return None
    if Path(out).suffix.lower() != ".npz":
        raise IdauditError(f"--out must name an .npz file, got {out}")
    return Path(out)


def run_embed(req: EmbedRequest) -> AuditInputs:
    """The embeddings of :class:`~idaudit.core.requests.EmbedRequest` ``req``: its encoder on its
    evaluation set (as an audit would embed it), written to ``req.out`` as ``.npz`` when given
    (z, h, and h_prime with rho where there are pairs; x, the raw-mixing baseline, on vector
    worlds; circular; test_rows where the world fixes the held-out rows; the seed of the
    split), atomically, so that auditing the file gives the audit's numbers. Returns the
    arrays."""
    from idaudit.core.io import atomic_write

    check_seed(req.seed)
    if req.target is None:
        raise IdauditError("embed needs an encoder")
    check_embedding_options(req.n_eval, req.normalize)
    out = check_embed_out(req.out)
    loaded = open_target(req.target, req)
    if isinstance(loaded, Arrays):
        raise IdauditError(f"{req.target} holds arrays already: audit it as it is")
    inp = inputs_for_encoder(loaded, req)
    if out is not None:
        arrays = {k: v for k, v in (("z", inp.z), ("h", inp.h), ("h_prime", inp.h_prime),
                                    ("x", inp.x), ("test_rows", inp.test_rows)) if v is not None}
        if inp.rho is not None and inp.h_prime is not None:
            arrays["rho"] = np.float64(inp.rho)
        arrays["circular"] = np.asarray(inp.circular or (), dtype=np.int64)
        arrays["seed"] = np.int64(inp.seed or 0)  # the audit's split and seed, reproduced
        atomic_write(out, lambda tmp: np.savez(tmp, **arrays))
    return inp
