"""The one pass of moments every metric group reads: :class:`Fit` (the audit's arrays as
moment blocks [z | sin/cos z_circ | h | x], the train/test split's moments, the pooled
covariance and the linear map Q̂ fitted from z to h) and :func:`make_fit`, which builds it as
:func:`~idaudit.maths.metrics.audit_metrics` does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from idaudit.maths.bounds import whitening_terms
from idaudit.maths.linalg import psd_solver, solve_psd
from idaudit.maths.linear import ArrayLike, procrustes_from_cov, to_numpy, unit_scales
from idaudit.maths.moments import CHUNK_ROWS, Moments, heldout_r2_from_moments, split_rows

__all__ = ["Fit", "fit_dtype", "make_fit"]


@dataclass
class Fit:
    """What every metric group reads: the audit's arrays as moment blocks
    [z | sin/cos z_circ | h | x] (their slices ``iz``, ``ic``, ``ih``, ``ix``), the split's
    moments, the pooled covariance ``s`` and the linear map Q̂ (``q``) fitted from z to h."""

    blocks: list[np.ndarray]
    shift: np.ndarray
    iz: slice
    ic: slice
    ih: slice
    ix: slice
    circ: list[int]
    train_rows: np.ndarray
    test_rows: np.ndarray
    m_tr: Moments
    m_te: Moments
    m_pool: Moments
    s: np.ndarray
    q: np.ndarray
    w_zh: np.ndarray
    white: dict[str, Any]
    h: np.ndarray
    h_prime: np.ndarray | None
    rho: float | None
    has_x: bool
    options: dict[str, Any]  # confidence, seed, bootstrap, gauss_sims, gauss_slices, core, …

    @property
    def rows(self) -> int:
        return int(self.blocks[0].shape[0])

    @property
    def pop(self) -> float:
        """(n − 1)/n: the covariance's population scale."""
        return (self.rows - 1) / self.rows

    @functools.cached_property
    def solve_hh(self) -> Callable[[np.ndarray], np.ndarray]:
        """b ↦ Cov(h)⁺ b over all rows, Cov(h) factored once (the in-sample fits, the floor)."""
        return psd_solver(self.s[self.ih, self.ih])

    @functools.cached_property
    def solve_hh_train(self) -> Callable[[np.ndarray], np.ndarray]:
        """b ↦ S⁺ b for the scatter S of h over the train rows, factored once (the held-out
        fits, the ceiling's rows, the floor)."""
        return psd_solver(self.m_tr.scatter[self.ih, self.ih])

    @functools.cached_property
    def r2_h_to_z_heldout(self) -> np.ndarray:
        """Held-out R²(h → z) per latent: fitted on the train rows, scored on the test rows."""
        return heldout_r2_from_moments(self.m_tr, self.m_te, self.ih, self.iz,
                                       self.solve_hh_train)

    @functools.cached_property
    def z_scales(self) -> np.ndarray:
        """1/σ per latent, σ its standard deviation as a mean over these rows: z_s = (z − z̄)/σ
        has unit variances whatever units z came in — or ones where z's law is white already
        (``options["z_white"]``: a world that draws it so, used as it is)."""
        if self.options.get("z_white"):
            return np.ones(self.iz.stop)
        return unit_scales(self.pop * self.s[self.iz, self.iz])

    @functools.cached_property
    def z_unit_cov(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(Ĉ(z_s), Ĉ(z_s, h), Ĉ(h)): covariances as means over these rows, z standardised."""
        w, p, s = self.z_scales, self.pop, self.s  # the blocks scaled, never all of Σ copied
        return p * s[self.iz, self.iz] * np.outer(w, w), p * s[self.iz, self.ih] * w[:, None], \
            p * s[self.ih, self.ih]

    @functools.cached_property
    def q_unit(self) -> np.ndarray:
        """The least-squares map (m × n) from the standardised latents z_s to h: Q̂ σ."""
        w = self.z_scales
        return self.q * np.divide(1.0, w, out=np.zeros_like(w), where=w > 0)

    @functools.cached_property
    def procrustes_mse(self) -> float:
        """min over (semi-)orthogonal R of E‖(h − h̄) − R z_s‖², E the mean over these rows
        (:func:`~idaudit.maths.linear.procrustes_mse` on the same arrays)."""
        return procrustes_from_cov(*self.z_unit_cov) if self.iz.stop else 0.0


def fit_dtype(z_dtype: Any, h_dtype: Any) -> np.dtype:
    """The dtype of the audit's one pass of moments, which z, h and x are copied to where they
    are of another: float32 where z and h both are, else float64."""
    f32 = np.dtype(np.float32)
    return f32 if np.dtype(z_dtype) == f32 and np.dtype(h_dtype) == f32 else np.dtype(np.float64)


def _fit(zt: np.ndarray, ht: np.ndarray, h_prime: Any, rho: float | None, x: Any,
         circular: Any, test_fraction: float, seed: int, test_rows: Any,
         options: dict[str, Any]) -> Fit:
    """One pass of moments over [z | sin/cos z_circ | h | x] on the split's rows."""
    dtype = fit_dtype(zt.dtype, ht.dtype)
    rows, n, m = zt.shape[0], zt.shape[1], ht.shape[1]
    blocks = [zt.astype(dtype, copy=False)]
    circ = [int(i) for i in circular]
    if circ:  # (sin z_i, cos z_i) side by side for each circular latent i
        ang = zt[:, circ].astype(dtype)
        blocks.append(np.stack([np.sin(ang), np.cos(ang)], axis=2).reshape(rows, 2 * len(circ)))
    blocks.append(ht.astype(dtype, copy=False))
    if x is not None:
        blocks.append(to_numpy(x).reshape(rows, -1).astype(dtype, copy=False))
    # any point near the mean keeps the moments' sums small: the mean of the first rows will do
    shift = np.concatenate([blk[:CHUNK_ROWS].mean(0, dtype=np.float64) for blk in blocks])
    ic = slice(n, n + 2 * len(circ))
    ih = slice(ic.stop, ic.stop + m)
    if test_rows is None:
        test_rows, train_rows = split_rows(rows, test_fraction, seed)
    else:
        mask = np.zeros(rows, dtype=bool)
        mask[to_numpy(test_rows).astype(np.int64)] = True
        test_rows, train_rows = np.flatnonzero(mask), np.flatnonzero(~mask)
    m_tr, m_te = Moments.of_row_sets(blocks, [train_rows, test_rows], shift)
    m_pool = Moments.pooled(m_tr, m_te)
    s = m_pool.scatter
    s /= max(rows - 1, 1)  # the covariance, in place
    iz = slice(0, n)
    w_zh = solve_psd(s[iz, iz], s[iz, ih])  # one solve serves Q̂ and R²(z → h)
    hp = None if h_prime is None else to_numpy(h_prime).reshape(rows, -1)
    return Fit(blocks, shift, iz, ic, ih, slice(ih.stop, shift.size), circ, train_rows,
               test_rows, m_tr, m_te, m_pool, s, w_zh.T, w_zh, whitening_terms(s[ih, ih], rows),
               ht, hp, rho, x is not None, options)


def make_fit(z: ArrayLike, h: ArrayLike, h_prime: ArrayLike | None = None,
             rho: float | None = None, x: ArrayLike | None = None, *,
             circular: tuple[int, ...] | list[int] = (), test_fraction: float = 0.5,
             seed: int = 0, test_rows: ArrayLike | None = None, bootstrap: int = 0,
             confidence: float = 0.95, gauss_sims: int = 0, gauss_slices: int = 64,
             core: bool = False, angle_sigma: float | None = None,
             floor_draws: int = 0, z_white: bool = False) -> Fit:
    """The :class:`Fit` every metric group reads, as :func:`audit_metrics` makes it (a
    plugin's metric group, or its conformance check, computes on the same).

    Args:
        z, h, h_prime, rho, x: the audit's arrays (rows first).
        circular, test_fraction, seed, test_rows: as :func:`audit_metrics` takes them.
        bootstrap, confidence, gauss_sims, gauss_slices, core, angle_sigma, floor_draws,
            z_white (z's law is white: used as it is, else standardised on the rows):
            the options the groups read (``fit.options``).

    Returns:
        The fit.

    Example:
        >>> import numpy as np
        >>> z = np.random.default_rng(0).standard_normal((100, 2))
        >>> make_fit(z, z).rows
        100
    """
    zt, ht = to_numpy(z), to_numpy(h)
    zt = zt.reshape(zt.shape[0], -1)
    ht = ht.reshape(ht.shape[0], -1)
    options = {"confidence": confidence, "seed": seed, "bootstrap": bootstrap,
               "gauss_sims": gauss_sims, "gauss_slices": gauss_slices, "core": core,
               "angle_sigma": angle_sigma, "floor_draws": floor_draws, "z_white": z_white}
    return _fit(zt, ht, h_prime, rho, x, circular, test_fraction, seed, test_rows, options)
