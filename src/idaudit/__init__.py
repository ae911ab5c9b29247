"""idaudit: did your self-supervised encoder learn the world (its latents up to a rotation)?

The Python API::

    import idaudit

    report = idaudit.audit(z, h, min_r2=0.9)              # arrays, or encoder=…, world=…
    report.passed, report.verdict, report.metrics["r2_h_to_z_heldout"]
    plans = idaudit.plan("encoder.pt", world="spiral")     # any encoder form audit takes
    record = idaudit.train(world="spiral", steps=2000)     # every `idaudit train` option
    x, x2, z, z2 = idaudit.world_pairs("spiral", n=10_000)  # pairs for a loop of your own

and, in another project's tests, ``idaudit.testing.assert_identifiable(z, h, min_r2=0.9)``.
The names below load on first use (``import idaudit`` alone does not import torch, so
render workers and ``idaudit doctor`` start quickly); each is the real function or class.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

# Be a good neighbour on a shared machine: OpenMP threads that wait spin only briefly before
# they sleep (by default GNU OpenMP spins 300 000 times, which starves every other process on a
# busy machine; sleeping at once costs a third of the idle speed of a small model's training
# step). Set before torch or numba load the OpenMP runtime; a value the user set wins.
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "2000"
os.environ.setdefault("KMP_BLOCKTIME", "1")  # the same for Intel's OpenMP runtime (ms)
# OpenBLAS (numpy's and SciPy's, two separate libraries) keeps its threads spinning for 2^28
# cycles (≈ 0.1 s) after every call: on 2 cores the spinning threads of one library halve the
# speed of the other's next call, and of any neighbour. 2^4 cycles: they sleep at once.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

from idaudit.core.errors import GateFailed, IdauditError, Inconclusive, RunsFailed, UsageError
from idaudit.core.version import __version__

if TYPE_CHECKING:  # pragma: no cover
    from idaudit.core.requests import (
        AuditRequest,
        ConsistencyRequest,
        PlanRequest,
        SweepRequest,
        TrainRequest,
        WorldRequest,
    )
    from idaudit.evaluations.audit import AuditReport, audit, run_audit
    from idaudit.evaluations.consistency import consistency, run_consistency
    from idaudit.evaluations.plan import PlanReport, plan, run_plan
    from idaudit.maths.losses import alignment, random_directions, sigreg
    from idaudit.training.runs import RunRecord, run, run_train
    from idaudit.training.runs import train_encoder as train
    from idaudit.worlds import World, WorldSpec, build_world, make_spec
    from idaudit.worlds.base import Pairs
    from idaudit.worlds.user_pairs import WorldPairs, world_pairs
    from idaudit.worlds.write import world, write_world

_LAZY = {
    "audit": "evaluations.audit", "AuditReport": "evaluations.audit",
    "run_audit": "evaluations.audit", "consistency": "evaluations.consistency",
    "run_consistency": "evaluations.consistency", "plan": "evaluations.plan",
    "PlanReport": "evaluations.plan", "run_plan": "evaluations.plan",
    "AuditRequest": "core.requests", "ConsistencyRequest": "core.requests",
    "PlanRequest": "core.requests", "TrainRequest": "core.requests",
    "WorldRequest": "core.requests", "SweepRequest": "core.requests",
    "run": "training.runs", "RunRecord": "training.runs", "run_train": "training.runs",
    "train": "training.runs:train_encoder",
    "World": "worlds", "WorldSpec": "worlds", "build_world": "worlds", "make_spec": "worlds",
    "world": "worlds.write", "write_world": "worlds.write",
    "world_pairs": "worlds.user_pairs", "WorldPairs": "worlds.user_pairs",
    "Pairs": "worlds.base",
    "sigreg": "maths.losses", "alignment": "maths.losses", "random_directions": "maths.losses",
}

__all__ = ["AuditReport", "AuditRequest", "ConsistencyRequest", "GateFailed", "IdauditError",
           "Inconclusive", "Pairs", "PlanReport", "PlanRequest", "RunRecord", "RunsFailed",
           "SweepRequest", "TrainRequest", "UsageError", "World", "WorldPairs", "WorldRequest",
           "WorldSpec", "__version__", "alignment", "audit",
           "build_world", "consistency", "make_spec", "plan", "random_directions", "run",
           "run_audit", "run_consistency", "run_plan", "run_train", "sigreg", "train", "world",
           "world_pairs", "write_world"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:  # "module" or "module:attribute"
        module, _, attr = _LAZY[name].partition(":")
        value = getattr(importlib.import_module(f".{module}", __name__), attr or name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'idaudit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
