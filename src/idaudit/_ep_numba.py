"""Numba kernels for the Epps–Pulley sweeps on CPU (optional; torch is the fallback).

For each slice j (in parallel) the rotation recurrence
(cos, sin)((k+1)θ) = (cos kθ cos θ − sin kθ sin θ, sin kθ cos θ + cos kθ sin θ)
runs over the samples of that slice, which stay in L1 cache for all knots.
"""

from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(parallel=True, fastmath=True, cache=True)
def ep_sums(c1, s1, knots_minus_one, out_c, out_s):  # pragma: no cover - compiled
    """out_c[k, j] = Σ_i cos((k+1)θ_ji), out_s likewise, from c1 = cos θ, s1 = sin θ (m, n)."""
    m, n = c1.shape
    for j in nb.prange(m):
        cj = c1[j]
        sj = s1[j]
        c = cj.copy()
        s = sj.copy()
        out_c[0, j] = c.sum()
        out_s[0, j] = s.sum()
        for k in range(1, knots_minus_one):
            acc_c = c[0] * 0
            acc_s = c[0] * 0
            for i in range(n):
                cn = c[i] * cj[i] - s[i] * sj[i]
                sn = s[i] * cj[i] + c[i] * sj[i]
                c[i] = cn
                s[i] = sn
                acc_c += cn
                acc_s += sn
            out_c[k, j] = acc_c
            out_s[k, j] = acc_s


@nb.njit(parallel=True, fastmath=True, cache=True)
def ep_grad(c1, s1, a, b, out):  # pragma: no cover - compiled
    """out[j, i] = Σ_k a[k, j] cos((k+1)θ_ji) + b[k, j] sin((k+1)θ_ji)."""
    m, n = c1.shape
    kk = a.shape[0]
    for j in nb.prange(m):
        cj = c1[j]
        sj = s1[j]
        c = cj.copy()
        s = sj.copy()
        g = out[j]
        a0 = a[0, j]
        b0 = b[0, j]
        for i in range(n):
            g[i] = a0 * c[i] + b0 * s[i]
        for k in range(1, kk):
            ak = a[k, j]
            bk = b[k, j]
            for i in range(n):
                cn = c[i] * cj[i] - s[i] * sj[i]
                sn = s[i] * cj[i] + c[i] * sj[i]
                c[i] = cn
                s[i] = sn
                g[i] += ak * cn + bk * sn


def _threads() -> None:
    """Use no more threads than torch does (e.g. one per run in a process pool)."""
    import torch

    nb.set_num_threads(max(1, min(torch.get_num_threads(), nb.config.NUMBA_NUM_THREADS)))


def sums(c1: np.ndarray, s1: np.ndarray, knots_minus_one: int) -> np.ndarray:
    _threads()
    m = c1.shape[0]
    out = np.empty((2, knots_minus_one, m), dtype=c1.dtype)
    ep_sums(c1, s1, knots_minus_one, out[0], out[1])
    return out


def grad(c1: np.ndarray, s1: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    _threads()
    out = np.empty(c1.shape, dtype=c1.dtype)
    ep_grad(c1, s1, a.astype(c1.dtype), b.astype(c1.dtype), out)
    return out
