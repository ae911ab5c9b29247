"""Gate another project's tests on identifiability in one line.

    from idaudit.testing import assert_identifiable

    def test_encoder_recovers_the_latents():
        assert_identifiable(z, h, min_r2=0.95, max_orthogonality_error=0.1)

A failure raises ``AssertionError`` whose message is the audit's Markdown table, so pytest
shows every metric and which threshold failed.
"""

from __future__ import annotations

from typing import Any

from idaudit.core.errors import IdauditError
from idaudit.evaluations.audit import AuditReport, audit

__all__ = ["assert_identifiable"]


def assert_identifiable(z: Any, h: Any, h_prime: Any = None, rho: float | None = None, *,
                        min_r2: float | None = 0.9,
                        max_orthogonality_error: float | None = None,
                        gate: dict[str, dict[str, float]] | None = None,
                        allow_inconclusive: bool = False, **kwargs: Any) -> AuditReport:
    """Assert that embeddings ``h`` recover latents ``z`` up to a rotation.

    Passes when held-out R²(h → z) ≥ ``min_r2`` and, if given, the orthogonality error of
    the fitted map ≤ ``max_orthogonality_error`` (plus any ``gate`` of other metrics). An
    inconclusive audit (collapsed embedding, NaN/Inf, too few rows) fails unless
    ``allow_inconclusive``. Extra keyword arguments go to :func:`idaudit.audit`.
    Returns the report. At least one threshold is needed: an assertion that checks nothing
    is refused (``ValueError``).
    """
    __tracebackhide__ = True  # pytest shows the caller's line and the table, not idaudit's frames
    if min_r2 is None and max_orthogonality_error is None and not gate:
        raise IdauditError("assert_identifiable needs a threshold (min_r2, "
                           "max_orthogonality_error or gate): without one nothing is checked")
    report = audit(z, h, h_prime, rho, min_r2=min_r2,
                   max_orthogonality_error=max_orthogonality_error, gate=gate,
                   gauss_sims=kwargs.pop("gauss_sims", 0), **kwargs)
    if report.passed or (allow_inconclusive and report.verdict == "inconclusive"):
        return report
    what = ", ".join(f"{t.metric} = {t.actual:.4g} (needs {'≥' if t.op == 'min' else '≤'} "
                     f"{t.value:g})" for t in report.failed) or report.reason or report.verdict
    raise AssertionError(f"embedding is not identifiable: {what}\n\n{report.markdown()}")
