"""What the best encoder can reach where the world hides part of a latent.

An image shows a joint angle θ only mod 2π. For θ ~ N(0, σ²) the best mean-square guess of θ
from anything that sees only w = θ mod 2π is the posterior mean

    E[θ | w] = Σ_k c_k φ(c_k/σ) / Σ_k φ(c_k/σ),   c_k = w + 2πk,

so no encoder of the images beats it in expectation. The *ceiling* of the audit's held-out
R²(h → z) is that predictor's held-out R², fitted and scored as the audit scores (the same
rows, the same split; latents that are not angles predicted exactly). On a finite evaluation
set another encoder can land a little above it by chance, as any two estimates can differ.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["angle_posterior_mean", "ceiling_predictor", "unwrapped_rows", "wrap_angle"]


def wrap_angle(z: np.ndarray) -> np.ndarray:
    """z mod 2π in [−π, π): all an image shows of a joint angle."""
    return (np.asarray(z) + math.pi) % (2 * math.pi) - math.pi


def angle_posterior_mean(z: np.ndarray, sigma: float = 1.0, turns: int | None = None
                         ) -> np.ndarray:
    """E[θ | θ mod 2π] for θ ~ N(0, σ²), at the wrapped values of ``z``: with c_k = wrap(z) +
    2πk, Σ_k c_k φ(c_k/σ) / Σ_k φ(c_k/σ) over |k| ≤ ``turns`` (None: enough turns that the
    terms left out weigh below e^{−32} of the largest)."""
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    turns = max(4, math.ceil(8 * sigma / (2 * math.pi)) + 1) if turns is None else turns
    k = np.arange(-turns, turns + 1)[:, None]
    c = wrap_angle(np.ravel(z))[None] + 2 * math.pi * k
    e = 0.5 * (c / sigma) ** 2
    w = np.exp(-(e - e.min(0)))
    return ((w * c).sum(0) / w.sum(0)).reshape(np.shape(z))


def ceiling_predictor(z: np.ndarray, circular: list[int] | tuple[int, ...], sigma: float
                      ) -> np.ndarray:
    """The best guess of z from the observations: its angles (``circular``) by their posterior
    mean given the wrapped value, every other latent as it is."""
    out = np.array(z, dtype=np.float64, copy=True)
    for i in circular:
        out[:, i] = angle_posterior_mean(out[:, i], sigma)
    return out


def unwrapped_rows(z: np.ndarray, circular: list[int] | tuple[int, ...]) -> np.ndarray:
    """The rows whose angles need no wrapping (each circular latent in [−π, π))."""
    z = np.asarray(z)
    if not len(circular):
        return np.ones(z.shape[0], dtype=bool)
    ang = z[:, list(circular)]
    return np.all((ang >= -math.pi) & (ang < math.pi), axis=1)
