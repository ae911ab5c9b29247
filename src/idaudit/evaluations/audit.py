"""Audit any encoder: reduce it to arrays (z, h, h′, ρ), compute the metrics, apply a gate.

Every route ends in :class:`AuditInputs` before a metric is computed: an idaudit checkpoint,
plain safetensors weights with a ``module:factory`` architecture, TorchScript or torch.export
programs, an encoder object in Python, or precomputed arrays (``.npz`` / ``.safetensors``
holding ``z``, ``h`` and optionally ``h_prime`` and ``rho``). Encoders are embedded on their
world's evaluation set (:meth:`World.eval_set`), the one training used.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from idaudit.core.defaults import FLOOR_DRAWS, TEST_FRACTION
from idaudit.core.errors import (
    EXIT_GATE_FAILED,
    EXIT_INCONCLUSIVE,
    EXIT_OK,
    IdauditError,
    check_seed,
    latent_indices,
)
from idaudit.core.limits import check
from idaudit.core.request_parts import LoadOptions
from idaudit.core.requests import AuditRequest, unknown_options
from idaudit.evaluations.gate import KNOWN_METRICS, Threshold, collect_thresholds, evaluate_gate
from idaudit.evaluations.inputs import (
    AuditInputs,
    TooFewRows,
    as_matrix,
    check_counts,
    check_embedding_options,
    check_shapes,
    checked_pair,
    inconclusive_reason,
    rows_reason,
    split_reason,
    values_reason,
)
from idaudit.evaluations.pipeline import (
    embed_targets,
    inputs_for_encoder,
    inputs_from_arrays,
    try_encoders,
)
from idaudit.loading.arrays import Arrays, numeric_array
from idaudit.loading.loaders import open_target
from idaudit.maths.metrics import audit_metrics

__all__ = ["AuditReport", "audit", "audit_inputs", "combine_reports", "gated_report", "run_audit"]

# "ungated": no threshold was given, so nothing was checked (a report only, exit 0); never
# shown as a pass, so a CI step that forgot its gate cannot pass for ever unnoticed.
Verdict = Literal["pass", "fail", "inconclusive", "ungated"]


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

    def summary(self) -> str:
        """What the verdict rests on, in words (the CLI's first lines): the gated metrics'
        values against their thresholds, R²(h → z)'s ceiling where there is one."""
        from idaudit.evaluations.report import verdict_lines

        return "\n".join(verdict_lines(self))

    def side_by_side(self, keys: list[str] | None = None) -> str:
        """Several targets (seeds; a model's backbone and projector) side by side, as a
        Markdown table: a column each, ``keys`` the rows (None: every row of the table)."""
        from idaudit.evaluations.report import side_by_side_markdown

        if not self.runs:
            raise IdauditError("side_by_side needs several targets; this audit has one")
        return side_by_side_markdown(self, keys)

    def to_dict(self) -> dict[str, Any]:
        from idaudit.evaluations.report import notes

        out = {"verdict": self.verdict, "reason": self.reason, "source": self.source,
               "world": self.world, "metrics": self.metrics,
               "gate": [t.to_dict() for t in self.thresholds],
               "notes": notes(self.metrics, self.thresholds)}
        if self.runs is not None:
            out["runs"] = self.runs
        return out


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
    hp = checked_pair(inp, h)
    thresholds = list(thresholds or [])
    reason = values_reason([("h", h, "embedding"), ("h_prime", hp, "values")])
    if reason is None:
        reason = rows_reason(h.shape[0], 0, h.shape[1], label_free=True)
    if reason is not None:
        return AuditReport(metrics={"n_samples": int(h.shape[0]), "embed_dim": int(h.shape[1]),
                                    "label_free": True},
                           thresholds=thresholds, verdict="inconclusive", reason=reason,
                           source=inp.source, world=inp.world)
    metrics = {**label_free_metrics(h, hp, inp.rho, seed=seed, gauss_sims=gauss_sims),
               "label_free": True}
    return gated_report(metrics, thresholds, inp.source, inp.world)


def audit_inputs(inp: AuditInputs, thresholds: list[Threshold] | None = None, *,
                 circular: tuple[int, ...] | list[int] = (), bootstrap: int = 0,
                 test_fraction: float | None = None, seed: int = 0, gauss_sims: int = 0,
                 label_free: bool = False, angle_sigma: float | None = None,
                 floor_draws: int | None = None) -> AuditReport:
    """Metrics and verdict for arrays already reduced to (z, h, h′, ρ); without z (or with
    ``label_free``) from h, h′ and ρ alone (:func:`audit_label_free`), where the user's
    ``circular``, ``bootstrap`` and ``test_fraction`` are refused, and so are ``circular`` or
    ``x`` stored in an array file that has no z (a world's own angle indices, and a file's own
    with its z set aside by ``label_free``, simply do not apply). ``test_fraction`` (default
    0.5) is also refused where the world fixes the held-out rows. ``floor_draws``: the
    shuffles behind the uninformative floor (None: the default; 0: none)."""
    check_counts(bootstrap, gauss_sims, test_fraction, floor_draws)
    if inp.z is None or label_free:
        given = [flag for flag, v in (("--circular", circular), ("--bootstrap", bootstrap),
                                      ("--test-fraction", test_fraction is not None),
                                      ("--floor-draws", floor_draws is not None)) if v]
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
    if angle_sigma is not None:
        if inp.angle_sigma is not None:
            raise IdauditError("--angle-sigma does not apply: these inputs bring their angles' "
                               f"law (σ = {inp.angle_sigma:g})")
        if not inp.circular:
            raise IdauditError("--angle-sigma goes with --circular (the angles it is the law of)")
        check("angle_sigma", angle_sigma)
        inp.angle_sigma = float(angle_sigma)
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
                            gauss_sims=gauss_sims, test_rows=inp.test_rows,
                            angle_sigma=inp.angle_sigma if inp.circular else None,
                            z_white=inp.z_white,
                            floor_draws=FLOOR_DRAWS if floor_draws is None else floor_draws)
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


def _world_options_refusal(req: AuditRequest, with_rho: bool) -> str | None:
    """The line refusing arrays where options that say where an encoder is embedded are
    given (``rho`` among them only where the arrays bring their own), or None.

    Args:
        req: the audit's request.
        with_rho: whether ``--rho`` counts (arrays that store their own).

    Returns:
        The line, or None where arrays apply.
    """
    given = req.encoder.placement_flags(req.n_eval, with_rho)
    return f"arrays are audited as they are: {', '.join(given)} " \
        f"{'does' if len(given) == 1 else 'do'} not apply" if given else None


def _refuse_world_options(req: AuditRequest, with_rho: bool) -> None:
    """Arrays are audited as they are: the options that say where an encoder is embedded do
    not apply to them (:func:`_world_options_refusal`)."""
    refusal = _world_options_refusal(req, with_rho)
    if refusal is not None:
        raise IdauditError(refusal)


def _checked_thresholds(req: AuditRequest) -> list[Threshold]:
    """The gate's thresholds of ``req``, once its seed, counts, embedding options and
    reduction are checked."""
    check_seed(req.seed)
    check_counts(req.bootstrap, req.gauss_sims, req.test_fraction, req.floor_draws)
    thresholds = collect_thresholds(req.gate, KNOWN_METRICS, "r2_h_to_z_heldout",
                                    "orthogonality_error")
    check_embedding_options(req.n_eval, req.encoder.normalize)
    if req.reduce not in REDUCTIONS:
        raise IdauditError(f"--reduce must be one of {', '.join(REDUCTIONS)}, got {req.reduce!r}")
    return thresholds


def _checked_targets(req: AuditRequest, arrays_given: bool
                     ) -> list[tuple[Any, LoadOptions, str | None]]:
    """The targets of ``req`` (:func:`~idaudit.evaluations.pipeline.embed_targets`: several
    embed functions, one target each), once arrays or targets are given (not both), a
    reduction only for several, and the figures and page it asks for can be written."""
    if arrays_given and req.targets:
        raise IdauditError("give either arrays (z, h) or an encoder, not both")
    if not arrays_given and not req.targets:
        raise IdauditError("audit needs either z and h arrays or an encoder")
    targets = embed_targets(req.targets, req.encoder.load)  # several embed functions: targets
    if len(targets) <= 1 and req.reduce != "worst":
        raise IdauditError("--reduce applies to several targets; one was given")
    if req.plot is not None or req.html is not None:  # matplotlib there, outputs writable
        from idaudit.evaluations.page import check_views
        from idaudit.evaluations.pipeline import files_read

        check_views(req, files_read(list(req.targets), req.encoder, req.gate.gate))
    return targets


def _given_arrays(req: AuditRequest) -> AuditInputs:
    """The arrays ``req`` gives (z, h, h′, ρ, x), audited as they are: no option that says
    where or how an encoder is embedded or loaded applies (``rho`` is theirs)."""
    if req.h is None:
        raise IdauditError("audit needs the embeddings h")
    _refuse_world_options(req, with_rho=False)  # with arrays, rho is theirs
    req.encoder.load.refuse_all("arrays z, h (audited as they are)")
    return AuditInputs(
        z=None if req.z is None else numeric_array(req.z, "z"), h=numeric_array(req.h, "h"),
        h_prime=None if req.h_prime is None else numeric_array(req.h_prime, "h_prime"),
        rho=None if req.rho is None else float(req.rho),
        x=None if req.x is None else numeric_array(req.x, "x"))


def _targets_inputs(req: AuditRequest, targets: list[tuple[Any, LoadOptions, str | None]]
                    ) -> list[tuple[AuditInputs, int | None]]:
    """(inputs, seed) of each target: an array file's as it stores them, an encoder's
    embeddings of its evaluation set."""
    # every target opened, and every encoder tried on a few inputs, before any is embedded: a
    # refusal for the last target never waits for the first one's evaluation set
    refusal = _world_options_refusal(req, with_rho=True)  # a caged program's arrays: from
    opened = [open_target(target, load, arrays_refused=refusal)  # its answer's header
              for target, load, _ in targets]
    if any(isinstance(loaded, Arrays) for loaded in opened):
        _refuse_world_options(req, with_rho=True)  # an array file stores its own rho
    # and every encoder's width checked against the rows it will be embedded on, as soon as
    # both are known (its probe; the set's size, before the set is made where the world knows
    # it): too few rows is inconclusive before any evaluation set is rendered or embedded
    rows = "label_free" if req.label_free else "audit"
    names = {id(loaded): name or (loaded.source if isinstance(loaded, Arrays) else str(loaded.path))
             for loaded, (_, _, name) in zip(opened, targets)}
    try:
        if len(opened) > 1:
            try_encoders([t for t in opened if not isinstance(t, Arrays)], req.encoder,
                         req.n_eval, rows)
        inputs: list[tuple[AuditInputs, int | None]] = []
        for loaded, (_, _, name) in zip(opened, targets):
            if isinstance(loaded, Arrays):
                inputs.append((inputs_from_arrays(loaded),
                               req.seed if req.seed is not None else loaded.seed))
            else:
                inp = inputs_for_encoder(loaded, req.encoder, req.n_eval, req.seed, rows)
                inp.source = name or inp.source
                inputs.append((inp, inp.seed))
    except TooFewRows as exc:  # named as the report names each target
        exc.source = names.get(exc.encoder_id, exc.source)
        exc.sources = list(names.values())
        raise
    return inputs


def _too_few_rows(req: AuditRequest, targets: list[tuple[Any, LoadOptions, str | None]],
                  exc: TooFewRows, thresholds: list[Threshold]) -> AuditReport:
    """The inconclusive report of an audit refused for too few rows before its evaluation set
    was made or embedded (:class:`~idaudit.evaluations.inputs.TooFewRows`): the reason and
    sizes the audit of the embedded set would give."""
    sources = exc.sources or [str(name or target) for target, _, name in targets]
    world = exc.world
    if len(sources) > 1:  # as combine_reports words an inconclusive run
        return AuditReport(metrics={"n_runs": len(sources)}, thresholds=thresholds,
                           verdict="inconclusive", reason=f"{exc.source}: {exc}",
                           source=", ".join(sources), world=world)
    metrics = {"n_samples": exc.rows, **({} if req.label_free else {"latent_dim": exc.n}),
               "embed_dim": exc.m}
    if req.label_free:
        metrics["label_free"] = True
    return AuditReport(metrics=metrics, thresholds=thresholds, verdict="inconclusive",
                       reason=str(exc), source=exc.source or sources[0], world=world)


def run_audit(req: AuditRequest) -> AuditReport:
    """The audit of :class:`AuditRequest` ``req``: each target reduced to arrays, its metrics,
    the gate (several targets: :func:`combine_reports`). Bad input raises
    :class:`~idaudit.core.errors.IdauditError` (exit 2 in the CLI) before any work is done."""
    thresholds = _checked_thresholds(req)
    circular = req.circular_indices()
    arrays_given = req.z is not None or req.h is not None
    targets = _checked_targets(req, arrays_given)
    inputs: list[tuple[AuditInputs, int | None]] = []
    if arrays_given:
        inputs.append((_given_arrays(req), req.seed))
    try:
        inputs += _targets_inputs(req, targets)
    except TooFewRows as exc:  # known from a probe: nothing was embedded
        result = _too_few_rows(req, targets, exc, thresholds)
        if req.plot is not None or req.html is not None:
            from idaudit.evaluations.page import write_views

            write_views(result, [], req.plot, req.html)
        return result
    several = len(inputs) > 1
    reports = [audit_inputs(inp, [] if several else thresholds, circular=circular,
                            angle_sigma=req.angle_sigma,
                            bootstrap=req.bootstrap, test_fraction=req.test_fraction,
                            seed=seed or 0, gauss_sims=req.gauss_sims, label_free=req.label_free,
                            floor_draws=req.floor_draws)
               for inp, seed in inputs]
    result = combine_reports(reports, thresholds, req.reduce) if several else reports[0]
    if req.plot is not None or req.html is not None:
        from idaudit.evaluations.figures import Drawn
        from idaudit.evaluations.page import write_views

        write_views(result, [Drawn(inp, rep, seed or 0, req.test_fraction)
                             for (inp, seed), rep in zip(inputs, reports)], req.plot, req.html)
    return result


def audit(z: Any = None, h: Any = None, h_prime: Any = None, rho: float | None = None, *,
          encoder: Any = None, targets: list[Any] | None = None, **options: Any) -> AuditReport:
    """Audit embeddings or encoders for identifiability; return an :class:`AuditReport`.
    ``audit("a.npz", "b.npz", reduce="median")`` reads paths as the CLI does: as targets;
    ``audit(AuditRequest(...))`` audits a request as it is (:func:`run_audit`), with no other
    argument.

    Everything ``idaudit audit`` takes, under its option names (see :class:`AuditRequest`):
    arrays — ``z`` (true latents, n × d), ``h`` (embeddings, n × m), optionally ``h_prime``
    (embeddings of the OU successors z′) with their ``rho`` — or an ``encoder`` (an
    ``nn.Module``/callable, or a path to an idaudit checkpoint, TorchScript, ``torch.export``
    program, plain weights with ``arch="module:factory"``, an array file), or several
    ``targets`` gated together (``reduce``). An encoder is embedded on ``world`` (a World,
    WorldSpec or name) with world options, on ``data``, or on its checkpoint's world; it is
    called as it is, or through ``embed``, a function ``(model, x) → (batch, m)`` (several
    by name, ``{"backbone": f, "projector": g}``: one target each, side by side), and
    ``output`` picks a field or element of what it returns.

    The gate: ``min_r2`` (held-out R²(h → z) ≥), ``max_orthogonality_error`` (≤), ``min`` /
    ``max`` and ``gate``; with none, the verdict is "ungated" (a report only). The verdict is
    "inconclusive" when the data cannot support one (collapse, NaN/Inf, too few rows). Bad
    input raises :class:`~idaudit.core.errors.IdauditError` (a ``ValueError``).
    """
    if isinstance(z, AuditRequest):
        if h is not None or h_prime is not None or rho is not None or encoder is not None \
                or targets is not None or options:
            raise IdauditError("give an AuditRequest alone, or options, not both")
        return run_audit(z)
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
    return run_audit(AuditRequest.from_options(targets=listed, z=z, h=h, h_prime=h_prime,
                                               rho=rho, **options))
