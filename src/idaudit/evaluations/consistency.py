"""Consistency across runs: do embeddings of the same inputs differ by a rotation?

If every run recovered the latents up to a rotation (h_i = Q_i z + c_i), any two runs differ by
one: h_j = Q_j Q_iᵀ (h_i − c_i) + c_j. For every ordered pair (i → j) of runs this measures the
held-out R² of the least-squares map h_i → h_j, the orthogonality error of that map and the
orthogonal-Procrustes error after centring — the audit's own metrics with (z, h) = (h_i, h_j),
so no true latents are needed. The worst pair is the verdict's: ``consistency_r2`` (the minimum
R² over pairs and directions), ``consistency_orthogonality_error`` and
``consistency_procrustes_mse`` (maxima).
"""

from __future__ import annotations

from itertools import permutations
from pathlib import Path
from typing import Any

import numpy as np

from idaudit.core.request_parts import EncoderOptions
from idaudit.core.requests import ConsistencyRequest, unknown_options
from idaudit.evaluations.audit import AuditReport, gated_report
from idaudit.evaluations.gate import Threshold, collect_thresholds
from idaudit.evaluations.inputs import as_matrix, check_embedding_options, split_reason_rows, values_reason
from idaudit.maths.catalogue import gate_keys
from idaudit.maths.linear import to_numpy
from idaudit.maths.metrics import audit_metrics

__all__ = ["CONSISTENCY_METRICS", "check_consistency", "consistency", "run_consistency"]

# what a consistency gate may name (the catalogue's consistency entries)
CONSISTENCY_METRICS = gate_keys("consistency")


def inconclusive_runs(embeddings: list[np.ndarray], names: list[str],
                      test_fraction: float) -> str | None:
    """Why the runs cannot be compared (row counts differ, NaN/Inf, a collapsed run, too few
    rows for the held-out fits), or None."""
    rows = {h.shape[0] for h in embeddings}
    if len(rows) > 1:
        counts = ", ".join(f"{n}: {h.shape[0]}" for n, h in zip(names, embeddings))
        return f"the runs embed different numbers of inputs ({counts}); they must be the same"
    reason = values_reason([(name, h, "embedding") for name, h in zip(names, embeddings)])
    if reason is not None:
        return reason
    widest = max(h.shape[1] for h in embeddings)
    return split_reason_rows(embeddings[0].shape[0], widest, test_fraction)


def consistency_metrics(embeddings: list[np.ndarray], names: list[str],
                        test_fraction: float = 0.5, seed: int = 0) -> dict[str, Any]:
    """Pairwise metrics for both directions of every pair, and the worst values."""
    pairs = []
    for i, j in permutations(range(len(embeddings)), 2):
        # one run's embedding in its own units: the question is a rotation of it as it is
        m = audit_metrics(embeddings[i], embeddings[j], core=True, test_fraction=test_fraction,
                          seed=seed, z_white=True)
        pairs.append({"from": names[i], "to": names[j], "r2": m["r2_z_to_h_heldout"],
                      "r2_in_sample": m["r2_z_to_h"],
                      "orthogonality_error": m["orthogonality_error"],
                      "procrustes_mse": m["procrustes_mse"]})
    return {
        "consistency_r2": min(p["r2"] for p in pairs),
        "consistency_r2_in_sample": min(p["r2_in_sample"] for p in pairs),
        "consistency_orthogonality_error": max(p["orthogonality_error"] for p in pairs),
        "consistency_procrustes_mse": max(p["procrustes_mse"] for p in pairs),
        "n_runs": len(embeddings), "n_samples": int(embeddings[0].shape[0]),
        "embed_dims": [int(h.shape[1]) for h in embeddings], "runs": list(names),
        "pairs": pairs,
    }


def embed_runs(targets: list[Any], opts: EncoderOptions, n_eval: int | None = None,
               seed: int | None = None) -> tuple[list[np.ndarray], dict[str, Any] | None, int]:
    """Each target's embedding of the same inputs: arrays as they are; every encoder on one
    evaluation set — of ``opts.world``/``opts.data`` when given (``n_eval`` inputs from
    ``seed``), else of the first encoder's own world (a checkpoint's eval-set size and
    seed). Returns (embeddings, that world, its seed)."""
    from idaudit.core.errors import IdauditError
    from idaudit.evaluations.pipeline import input_adapter, tried_then_set
    from idaudit.loading.opened import LoadedEncoder
    from idaudit.models.encoders import embed

    encoders = [t for t in targets if isinstance(t, LoadedEncoder)]
    if not encoders:
        if opts.placement_flags(n_eval):
            raise IdauditError("arrays are compared as they are: --world, --data, --n-eval and "
                               "world options apply only to encoders")
        return [to_numpy(t) for t in targets], None, seed or 0
    spec, ev, seed = tried_then_set(encoders, opts, n_eval, seed)  # each tried on a few inputs first
    out = []
    for t in targets:
        if isinstance(t, LoadedEncoder):  # a misfit is a one-line error
            out.append(to_numpy(embed(input_adapter(t, ev.x, opts.normalize), ev.x)))
        else:
            out.append(to_numpy(t))
    return out, spec.to_dict(), seed


def check_consistency(embeddings: list[np.ndarray], names: list[str],
                      thresholds: list[Threshold] | None = None, *, test_fraction: float = 0.5,
                      seed: int = 0, source: str = "",
                      world: dict[str, Any] | None = None) -> AuditReport:
    """The consistency metrics of two or more runs' embeddings of the same inputs, gated."""
    from idaudit.core.errors import IdauditError
    from idaudit.core.limits import check, check_runs

    check_runs(len(embeddings))
    check("test_fraction", test_fraction)
    if len(names) != len(embeddings):
        raise IdauditError(f"{len(embeddings)} runs but {len(names)} names")
    embeddings = [as_matrix(to_numpy(e), name) for e, name in zip(embeddings, names)]
    thresholds = list(thresholds or [])
    reason = inconclusive_runs(embeddings, names, test_fraction)
    if reason is not None:
        return AuditReport(metrics={"n_runs": len(embeddings), "runs": list(names)},
                           thresholds=thresholds, verdict="inconclusive", reason=reason,
                           source=source, world=world)
    return gated_report(consistency_metrics(embeddings, names, test_fraction, seed),
                        thresholds, source, world)


def run_consistency(req: ConsistencyRequest) -> AuditReport:
    """The consistency report of :class:`ConsistencyRequest` ``req`` (bad input raises
    :class:`~idaudit.core.errors.IdauditError` before any work)."""
    from idaudit.core.errors import check_seed
    from idaudit.loading.loaders import open_target

    check_seed(req.seed)
    from idaudit.core.limits import check, check_runs

    check_runs(len(req.targets))
    thresholds = collect_thresholds(req.gate, CONSISTENCY_METRICS, "consistency_r2",
                                    "consistency_orthogonality_error")
    check_embedding_options(req.n_eval, req.encoder.normalize)
    check("test_fraction", req.test_fraction)
    loaded = [open_target(t, req.encoder.load, embedding=True) for t in req.targets]
    embeddings, world, seed = embed_runs(loaded, req.encoder, req.n_eval, req.seed)
    names = [Path(t).name if isinstance(t, (str, Path)) else f"run{i}"
             for i, t in enumerate(req.targets)]
    if len(set(names)) < len(names):
        names = [str(t) if isinstance(t, (str, Path)) else f"run{i}"
                 for i, t in enumerate(req.targets)]
    return check_consistency(embeddings, names, thresholds, test_fraction=req.test_fraction,
                             seed=seed, source=", ".join(map(str, req.targets))
                             if all(isinstance(t, (str, Path)) for t in req.targets) else
                             ", ".join(names), world=world)


def consistency(*targets: Any, **options: Any) -> AuditReport:
    """Do two or more runs agree up to a rotation? Everything ``idaudit consistency`` takes,
    under its option names (:class:`ConsistencyRequest`); returns the gated report.
    ``consistency(ConsistencyRequest(...))`` takes a request as it is
    (:func:`run_consistency`), with no other argument."""
    if any(isinstance(t, ConsistencyRequest) for t in targets):
        if len(targets) > 1 or options:
            from idaudit.core.errors import IdauditError

            raise IdauditError("give a ConsistencyRequest alone, or targets and options, "
                               "not both")
        return run_consistency(targets[0])
    unknown_options(ConsistencyRequest, options, "consistency", positional=("targets",))
    return run_consistency(ConsistencyRequest.from_options(targets=list(targets), **options))

