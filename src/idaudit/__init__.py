"""idaudit: did your self-supervised encoder learn the world (its latents up to a rotation)?

The Python API::

    import idaudit

    report = idaudit.audit(z, h, min_r2=0.9)              # arrays, or encoder=…, world=…
    report.passed, report.verdict, report.metrics["r2_h_to_z_heldout"]
    plans = idaudit.plan("encoder.pt", world="spiral")     # any encoder form audit takes
    record = idaudit.train(world="spiral", steps=2000)     # every `idaudit train` option
    x, x2, z, z2 = idaudit.world_pairs("spiral", n=10_000)  # pairs for a loop of your own

One public name per action: ``audit``, ``consistency``, ``plan``, ``embed``, ``train`` and
``write_world`` (each takes its command's options as keywords, or its request:
``idaudit.audit(idaudit.AuditRequest(...))``), ``world_pairs``; and, in another project's tests,
``idaudit.testing.assert_identifiable(z, h, min_r2=0.9)``. The names below load on first
use (``import idaudit`` alone does not import torch, so render workers and ``idaudit
doctor`` start quickly); each is the real function or class.
"""

from __future__ import annotations

import importlib
from typing import Any

#: every public name → where it is defined: "module" (the same name there) or "module:attribute",
#: under idaudit. One name per action; each action takes its keyword options or its request
#: (``idaudit.audit(AuditRequest(...))``). ``__all__`` and ``__getattr__`` derive from this
#: table, and so does ``__init__.pyi`` (the names for type checkers: scripts/public_stub.py
#: writes it, tests/test_structure.py checks it is current).
_PUBLIC: dict[str, str] = {
    # the actions, one per command
    "audit": "evaluations.audit",
    "consistency": "evaluations.consistency",
    "plan": "evaluations.plan",
    "embed": "evaluations.pipeline",
    "train": "training.runs:train_encoder",
    "write_world": "worlds.write",
    "world_pairs": "worlds.user_pairs",
    "WorldPairs": "worlds.user_pairs",
    # what they take and return
    "AuditRequest": "core.requests",
    "ConsistencyRequest": "core.requests",
    "PlanRequest": "core.requests",
    "EmbedRequest": "core.requests",
    "TrainRequest": "core.requests",
    "WorldRequest": "core.requests",
    "SweepRequest": "core.requests",
    "AuditReport": "evaluations.audit",
    "PlanReport": "evaluations.plan",
    "RunRecord": "training.runs",
    "IdauditError": "core.errors",
    "UsageError": "core.errors",
    "GateFailed": "core.errors",
    "Inconclusive": "core.errors",
    "RunsFailed": "core.errors",
    "__version__": "core.version",
    # worlds, and the losses for a training loop of your own
    "World": "worlds",
    "WorldSpec": "worlds",
    "build_world": "worlds",
    "make_spec": "worlds",
    "ArrayWorld": "worlds.recorded",
    "Pairs": "worlds.base",
    "sigreg": "maths.losses",
    "alignment": "maths.losses",
    "random_directions": "maths.losses",
    # a good neighbour on a shared machine (the idaudit command applies it; a library opts in)
    "share_cpu": "core.threads",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        module, _, attr = _PUBLIC[name].partition(":")
        value = getattr(importlib.import_module(f".{module}", __name__), attr or name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'idaudit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
