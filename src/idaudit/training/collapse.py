"""The one declared collapse criterion of a trained embedding: its total variance is nearly 0.

Every built-in objective asks for an h of unit scale (whitening and SIGReg: Cov(h) = I,
VICReg: every dimension's standard deviation ≥ 1), so a white m-dimensional h has
tr Cov(h) = m. A run is **collapsed** when tr Cov(h) ≤ :data:`COLLAPSE_VARIANCE` · m: every
input maps to (nearly) one point at the objective's own scale. Why 1 %:

* ε = ‖Cov(h) − I‖_F ≥ √m − tr Cov(h)/√m (Jensen over the eigenvalues), so ε lies within
  1 % of √m, a constant h's ε: the run is indistinguishable from a constant by ε.
* Theorem 3's comparison says nothing there: a constant h has δ = D = 0, bound = ε² = m and
  Procrustes MSE = E‖z‖² = m — it sits on the diagonal, and whether the run counts as
  under or above the bound is decided by sampling noise (the cross term of the Procrustes
  fit is at most √(tr Cov(h) · m) ≤ 0.1·m, the bound moves by ≈ 2 %). A collapsed run is
  therefore named and counted apart, never scored against the bound.
* The orthogonality error of the fitted map z → h is then ≈ 1 (Q̂ ≈ 0): ‖Q̂ᵀQ̂ − I‖_F/√n → 1.

Measured (spiral, m = 2, whitening, 1 000 steps, seeds 0 and 1): λ = 0.5 ends at
tr Cov(h) 1.85 and 1.87, far above 0.02; λ = 1e-3 at 3e-10 and 5e-10, far below. The
criterion names only unambiguous collapse: a run at λ = 0.1 that ended at tr Cov(h) 0.12
(6 % of m, R² 0.02) is not named — its audit's R² says what it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["COLLAPSE_VARIANCE", "collapse_reason", "embedding_collapsed", "is_collapsed",
           "record_collapsed"]

#: a run is collapsed when tr Cov(h) ≤ COLLAPSE_VARIANCE · m (a white h has tr Cov(h) = m)
COLLAPSE_VARIANCE = 0.01


def is_collapsed(total_variance: float, m: int) -> bool:
    """Whether an m-dimensional embedding of total variance tr Cov(h) = ``total_variance``
    collapsed: tr Cov(h) ≤ :data:`COLLAPSE_VARIANCE` · m (a NaN variance is not judged here:
    a diverged run is its own failure)."""
    if m < 1:
        raise ValueError(f"m must be ≥ 1, got {m}")
    return bool(total_variance <= COLLAPSE_VARIANCE * m)


def embedding_collapsed(h: Any) -> bool:
    """:func:`is_collapsed` of the rows of ``h`` (samples × m)."""
    h = np.asarray(h, dtype=np.float64)
    if h.ndim == 1:
        h = h[:, None]
    total = float(h.var(axis=0, ddof=1).sum()) if len(h) > 1 else 0.0
    return is_collapsed(total, h.shape[1])


def collapse_reason(metrics: Mapping[str, Any]) -> str | None:
    """One line saying that the run whose audit metrics are ``metrics`` collapsed (with its
    tr Cov(h), ε against √m and orthogonality error), or None when it did not or the metrics
    lack ``total_variance_h`` or ``embed_dim``."""
    total, m = metrics.get("total_variance_h"), metrics.get("embed_dim")
    if not isinstance(total, (int, float)) or not isinstance(m, int) or isinstance(m, bool) \
            or m < 1 or not math.isfinite(total) or not is_collapsed(total, m):
        return None
    parts = [f"tr Cov(h) = {total:.2g} ≤ {COLLAPSE_VARIANCE:g}·m = {COLLAPSE_VARIANCE * m:g}"]
    eps = metrics.get("whitening_error")
    if isinstance(eps, (int, float)):
        parts.append(f"ε = {eps:.4g} ≈ √m = {math.sqrt(m):.4g}")
    orth = metrics.get("orthogonality_error")
    if isinstance(orth, (int, float)):
        parts.append(f"orthogonality error {orth:.3g}")
    return ("the embedding collapsed (" + ", ".join(parts) + "): every input maps to nearly "
            "one point, so its R² and bound are not a verdict — a low loss here is not "
            "convergence; raise --lamb or change the objective")


def record_collapsed(rec: Mapping[str, Any]) -> bool:
    """Whether a run record (a sweep's, or ``train``'s log) is of a collapsed run: its
    ``collapsed`` field where it has one, else :func:`collapse_reason` of its metrics (records
    written before the field existed)."""
    flag = rec.get("collapsed")
    if isinstance(flag, bool):
        return flag
    metrics = rec.get("metrics")
    return isinstance(metrics, Mapping) and collapse_reason(metrics) is not None
