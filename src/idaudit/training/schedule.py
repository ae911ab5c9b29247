"""Learning-rate schedules: ``fn(step, total_steps, lr, steps_per_epoch) → lr``."""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["SCHEDULES", "constant_then_cosine"]


def constant_then_cosine(step: int, total: int, lr: float, steps_per_epoch: int | None = None
                         ) -> float:
    """lr for ``step`` of ``total``: lr while step < total/2, then lr·½(1 + cos(π·p)), p ∈ [0, 1]."""
    half = total / 2.0
    if step < half:
        return lr
    p = min(1.0, (step - half) / max(total - half, 1.0))
    return lr * 0.5 * (1.0 + math.cos(math.pi * p))


def cosine_over_epochs(step: int, total: int, lr: float, steps_per_epoch: int | None = None
                       ) -> float:
    """Cosine annealing stepped once per epoch: lr·½(1 + cos(π·e/E)) in epoch e of E."""
    per = steps_per_epoch or 1
    epochs = max(1, math.ceil(total / per))
    return lr * 0.5 * (1.0 + math.cos(math.pi * (step // per) / epochs))


SCHEDULES: dict[str, Callable[..., float]] = {
    "constant_cosine": constant_then_cosine,
    "cosine_epochs": cosine_over_epochs,
}
