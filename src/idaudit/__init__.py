"""idaudit: did your self-supervised encoder learn the world (its latents up to a rotation)?

The Python API::

    import idaudit

    report = idaudit.audit(z, h, min_r2=0.9)              # arrays, or encoder=…, world=…
    report.passed, report.verdict, report.metrics["r2_h_to_z_heldout"]
    plans = idaudit.plan("encoder.pt", world="spiral")     # any encoder form audit takes
    record = idaudit.run({"world": "spiral", "steps": 2000})  # train, like `idaudit train`

and, in another project's tests, ``idaudit.testing.assert_identifiable(z, h, min_r2=0.9)``.
Heavy modules (torch) load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__
from .errors import IdauditError

if TYPE_CHECKING:  # pragma: no cover
    from .audit import AuditReport
    from .plan import PlanReport
    from .runs import RunRecord

__all__ = ["AuditReport", "IdauditError", "PlanReport", "RunRecord", "__version__", "audit",
           "plan", "run"]


def audit(*args: Any, **kwargs: Any) -> AuditReport:
    """Audit arrays or an encoder; see :func:`idaudit.audit.audit`."""
    from .audit import audit as _audit

    return _audit(*args, **kwargs)


def plan(*args: Any, **kwargs: Any) -> PlanReport:
    """Plan with an encoder or a gallery of arrays; see :func:`idaudit.plan.plan`."""
    from .plan import plan as _plan

    return _plan(*args, **kwargs)


def run(*args: Any, **kwargs: Any) -> RunRecord:
    """Train one run from options; see :func:`idaudit.runs.run`."""
    from .runs import run as _run

    return _run(*args, **kwargs)


def __getattr__(name: str) -> Any:
    if name in ("AuditReport",):
        from .audit import AuditReport

        return AuditReport
    if name == "PlanReport":
        from .plan import PlanReport

        return PlanReport
    if name == "RunRecord":
        from .runs import RunRecord

        return RunRecord
    raise AttributeError(f"module 'idaudit' has no attribute {name!r}")
