"""Numba kernels for the Epps–Pulley sweeps on CPU (optional; torch is the fallback).

For each slice j (in parallel) the rotation recurrence
(cos, sin)((k+1)θ) = (cos kθ cos θ − sin kθ sin θ, sin kθ cos θ + cos kθ sin θ)
runs over the samples of that slice, which stay in L1 cache for all knots.
"""

from __future__ import annotations

import numba as nb
import numpy as np


def _sums_impl(c1, s1, knots_minus_one, out_c, out_s):  # pragma: no cover - compiled
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


def _grad_impl(c1, s1, a, b, out):  # pragma: no cover - compiled
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


_parallel = nb.njit(parallel=True, fastmath=True, cache=True)
_serial = nb.njit(fastmath=True, cache=True)
ep_sums, ep_sums_serial = _parallel(_sums_impl), _serial(_sums_impl)
ep_grad, ep_grad_serial = _parallel(_grad_impl), _serial(_grad_impl)


def _threads() -> int:
    """Use no more threads than torch does (e.g. one per run in a process pool); without
    torch loaded (an arrays-only audit), numba's own count."""
    import sys

    torch = sys.modules.get("torch")
    wanted = torch.get_num_threads() if torch is not None else nb.config.NUMBA_NUM_THREADS
    n = max(1, min(wanted, nb.config.NUMBA_NUM_THREADS))
    if n > 1:
        nb.set_num_threads(n)
    return n


PARALLEL_MIN = 1 << 20  # samples × slices below which one thread is faster than waking more


def _parallel_ok(c1: np.ndarray) -> bool:
    """The parallel kernel only for large problems and more than one thread: a small sweep
    takes about a millisecond, less than waking (and afterwards idling) a second pool."""
    return c1.size >= PARALLEL_MIN and _threads() > 1


def sums(c1: np.ndarray, s1: np.ndarray, knots_minus_one: int) -> np.ndarray:
    """With one thread, or a small problem, the serial kernel runs: it never wakes the
    OpenMP pool, whose idle threads would otherwise spin beside other processes."""
    kernel = ep_sums if _parallel_ok(c1) else ep_sums_serial
    m = c1.shape[0]
    out = np.empty((2, knots_minus_one, m), dtype=c1.dtype)
    kernel(c1, s1, knots_minus_one, out[0], out[1])
    return out


def grad(c1: np.ndarray, s1: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    kernel = ep_grad if _parallel_ok(c1) else ep_grad_serial
    out = np.empty(c1.shape, dtype=c1.dtype)
    kernel(c1, s1, a.astype(c1.dtype), b.astype(c1.dtype), out)
    return out
