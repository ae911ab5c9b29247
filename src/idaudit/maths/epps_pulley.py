"""The Epps–Pulley grid: one definition behind SIGReg (the training loss, in torch) and the
sliced Gaussianity test of the audit (in NumPy, without torch).

Knots t_k = kΔt on [0, T] (Δt = T/(K−1)), the standard normal characteristic function
φ(t_k) = e^{−t_k²/2}, and weights w_k·φ(t_k) with w the trapezoid rule on [−T, T] folded onto
[0, T] by symmetry (2Δt inside, Δt at both ends): the statistic of a slice is
Σ_k w_k φ(t_k) |φ̂(t_k) − φ(t_k)|².
"""

from __future__ import annotations

import numpy as np

__all__ = ["KNOTS", "T_MAX", "grid"]

KNOTS = 17
T_MAX = 3.0


def grid(knots: int = KNOTS, t_max: float = T_MAX) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t, φ(t), w·φ(t)) as float64 arrays of ``knots`` entries."""
    dt = t_max / (knots - 1)
    t = np.linspace(0.0, t_max, knots)
    w = np.full(knots, 2.0 * dt)
    w[0] = w[-1] = dt
    phi = np.exp(-0.5 * t * t)
    return t, phi, w * phi
