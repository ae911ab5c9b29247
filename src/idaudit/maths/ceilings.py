"""What the best encoder can reach where the world hides part of a latent.

An image shows a joint angle θ only mod 2π. For θ ~ N(0, σ²) the best mean-square guess of θ
from anything that sees only w = θ mod 2π is the posterior mean

    E[θ | w] = Σ_k c_k φ(c_k/σ) / Σ_k φ(c_k/σ),   c_k = w + 2πk,

so no encoder of the images beats it in expectation. The *ceiling* of the audit's held-out
R²(h → z) is that predictor's held-out R², fitted and scored as the audit scores (the same
rows, the same split; latents that are not angles predicted exactly). On a finite evaluation
set another encoder can land a little above it by chance, as any two estimates can differ.

Where the angles' law is not known (a recording's joint angles, ``--circular`` without
``--angle-sigma``) the posterior mean is estimated from the audit's fit rows instead
(:func:`empirical_posterior_mean`): E[θ | w] = w + E[θ − w | w], the mean number of whole
turns by which the fit rows' angles leave [−π, π) in each of ``bins`` equal arcs of w. The
test rows are never looked at. Simulated on N(0, σ²) angles (σ 1 and 2.5, 20 draws each), it
falls short of the law's own ceiling by 0.017–0.020 on average at 1 000 rows and by
0.005–0.010 at 6 000 (tests/test_ceilings.py bounds it), so an encoder can score a little
above an estimated ceiling. With fewer fit rows than :data:`EMPIRICAL_FIT_ROWS` no ceiling is
estimated: at 200 fit rows single draws fell up to 0.26 short (σ 1) and 0.16 (σ 2.5).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["EMPIRICAL_FIT_ROWS", "angle_posterior_mean", "ceiling_predictor",
           "empirical_posterior_mean",
           "unwrapped_rows", "wrap_angle"]


#: the fewest fit rows an estimated ceiling is given on (500 fit rows: 1 000 rows at the
#: default half split, where simulated draws fall 0.017–0.020 short on average)
EMPIRICAL_FIT_ROWS = 500


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


def empirical_posterior_mean(reference: np.ndarray, query: np.ndarray, bins: int | None = None
                             ) -> np.ndarray:
    """E[θ | θ mod 2π] at the wrapped values of ``query``, estimated from a sample of the
    unwrapped angles (``reference``) rather than from a law.

    Args:
        reference: unwrapped angles (radians) drawn from the law; only their turns are used.
        query: angles whose wrapped value is given (any turn: only θ mod 2π is read).
        bins: equal arcs of [−π, π) to average the turns over (None: √(reference rows) / 4,
            between 8 and 256).

    Returns:
        w + 2π · (the reference's turns in w's arc summed over their count + 1), w =
        wrap(query): one made-up angle that needs no turn per arc, so an arc seen rarely (near
        ±π, where a few rows decide) is not sent a whole turn by one row.

    Example:
        >>> import numpy as np
        >>> ref = np.array([0.5, 0.5 + 2 * np.pi, 0.5 + 2 * np.pi, -1.0])
        >>> [round(float(v), 3) for v in empirical_posterior_mean(ref, np.array([0.5, -1.0]), 8)]
        [3.642, -1.0]
    """
    reference = np.ravel(np.asarray(reference, dtype=np.float64))
    bins = bins or int(min(256, max(8, math.sqrt(reference.size) / 4)))
    w_ref = wrap_angle(reference)
    turns = np.round((reference - w_ref) / (2 * math.pi))
    arc = np.minimum(((w_ref + math.pi) * bins / (2 * math.pi)).astype(np.int64), bins - 1)
    count = np.bincount(arc, minlength=bins)
    mean_turn = np.bincount(arc, weights=turns, minlength=bins) / (count + 1)
    w = wrap_angle(np.asarray(query, dtype=np.float64))
    q_arc = np.minimum(((w + math.pi) * bins / (2 * math.pi)).astype(np.int64), bins - 1)
    return w + 2 * math.pi * mean_turn[q_arc]


def ceiling_predictor(z: np.ndarray, circular: list[int] | tuple[int, ...],
                      sigma: float | None, reference_rows: np.ndarray | None = None
                      ) -> np.ndarray:
    """The best guess of z from the observations: its angles (``circular``) by their posterior
    mean given the wrapped value, every other latent as it is.

    Args:
        z: the true latents, rows × N.
        circular: the latents that are angles seen mod 2π.
        sigma: the angles' law N(0, σ²); None: the law is estimated from ``reference_rows``.
        reference_rows: the rows of z whose angles estimate the law where ``sigma`` is None
            (the audit's fit rows); None with no sigma: every row.

    Returns:
        rows × N: the guess.
    """
    out = np.array(z, dtype=np.float64, copy=True)
    for i in circular:
        if sigma is None:
            ref = out[:, i] if reference_rows is None else out[reference_rows, i]
            out[:, i] = empirical_posterior_mean(ref, out[:, i])
        else:
            out[:, i] = angle_posterior_mean(out[:, i], sigma)
    return out


def unwrapped_rows(z: np.ndarray, circular: list[int] | tuple[int, ...]) -> np.ndarray:
    """The rows whose angles need no wrapping (each circular latent in [−π, π))."""
    z = np.asarray(z)
    if not len(circular):
        return np.ones(z.shape[0], dtype=bool)
    ang = z[:, list(circular)]
    return np.all((ang >= -math.pi) & (ang < math.pi), axis=1)
