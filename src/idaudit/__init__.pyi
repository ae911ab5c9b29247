"""The public names of ``import idaudit`` for type checkers (the package loads them on
first use). Generated from ``_PUBLIC`` in __init__.py by scripts/public_stub.py: do not edit;
rerun it after changing the table (tests/test_structure.py checks that it is current)."""

from idaudit.core.errors import GateFailed as GateFailed
from idaudit.core.errors import IdauditError as IdauditError
from idaudit.core.errors import Inconclusive as Inconclusive
from idaudit.core.errors import RunsFailed as RunsFailed
from idaudit.core.errors import UsageError as UsageError
from idaudit.core.requests import AuditRequest as AuditRequest
from idaudit.core.requests import ConsistencyRequest as ConsistencyRequest
from idaudit.core.requests import EmbedRequest as EmbedRequest
from idaudit.core.requests import PlanRequest as PlanRequest
from idaudit.core.requests import SweepRequest as SweepRequest
from idaudit.core.requests import TrainRequest as TrainRequest
from idaudit.core.requests import WorldRequest as WorldRequest
from idaudit.core.threads import share_cpu as share_cpu
from idaudit.core.version import __version__ as __version__
from idaudit.evaluations.audit import AuditReport as AuditReport
from idaudit.evaluations.audit import audit as audit
from idaudit.evaluations.consistency import consistency as consistency
from idaudit.evaluations.pipeline import embed as embed
from idaudit.evaluations.plan import PlanReport as PlanReport
from idaudit.evaluations.plan import plan as plan
from idaudit.maths.losses import alignment as alignment
from idaudit.maths.losses import random_directions as random_directions
from idaudit.maths.losses import sigreg as sigreg
from idaudit.training.runs import RunRecord as RunRecord
from idaudit.training.runs import train_encoder as train
from idaudit.worlds import World as World
from idaudit.worlds import WorldSpec as WorldSpec
from idaudit.worlds import build_world as build_world
from idaudit.worlds import make_spec as make_spec
from idaudit.worlds.base import Pairs as Pairs
from idaudit.worlds.recorded import ArrayWorld as ArrayWorld
from idaudit.worlds.user_pairs import WorldPairs as WorldPairs
from idaudit.worlds.user_pairs import world_pairs as world_pairs
from idaudit.worlds.write import write_world as write_world

__all__ = [
    "ArrayWorld",
    "AuditReport",
    "AuditRequest",
    "ConsistencyRequest",
    "EmbedRequest",
    "GateFailed",
    "IdauditError",
    "Inconclusive",
    "Pairs",
    "PlanReport",
    "PlanRequest",
    "RunRecord",
    "RunsFailed",
    "SweepRequest",
    "TrainRequest",
    "UsageError",
    "World",
    "WorldPairs",
    "WorldRequest",
    "WorldSpec",
    "__version__",
    "alignment",
    "audit",
    "build_world",
    "consistency",
    "embed",
    "make_spec",
    "plan",
    "random_directions",
    "share_cpu",
    "sigreg",
    "train",
    "world_pairs",
    "write_world",
]
