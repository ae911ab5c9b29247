"""Learning-rate schedule: constant for the first half, then cosine to 0."""

from __future__ import annotations

import math


def constant_then_cosine(step: int, total: int, lr: float) -> float:
    """lr for ``step`` of ``total``: lr while step < total/2, then lr·½(1 + cos(π·p)), p ∈ [0, 1]."""
    half = total / 2.0
    if step < half:
        return lr
    p = min(1.0, (step - half) / max(total - half, 1.0))
    return lr * 0.5 * (1.0 + math.cos(math.pi * p))
