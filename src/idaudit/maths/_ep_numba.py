"""Numba kernels for the Epps–Pulley sweeps on CPU (optional; torch is the fallback).

For each slice j the rotation recurrence
(cos, sin)((k+1)θ) = (cos kθ cos θ − sin kθ sin θ, sin kθ cos θ + cos kθ sin θ)
runs over the samples of that slice, which stay in L1 cache for all knots. A large problem
splits its slices across threads started for the call and joined before it returns (the
kernels release the GIL); no thread pool outlives a call.
"""

from __future__ import annotations

import os

import numba as nb
import numpy as np

__all__ = ["grad", "sums"]


def _sums_impl(c1, s1, knots_minus_one, out_c, out_s):  # pragma: no cover - compiled
    """out_c[k, j] = Σ_i cos((k+1)θ_ji), out_s likewise, from c1 = cos θ, s1 = sin θ (m, n)."""
    m, n = c1.shape
    zero = np.zeros(1, c1.dtype)[0]  # accumulate in the arrays' dtype: float32 stays 8-wide
    c = np.empty(n, c1.dtype)
    s = np.empty(n, c1.dtype)
    for j in range(m):
        cj = c1[j]
        sj = s1[j]
        c[:] = cj
        s[:] = sj
        out_c[0, j] = c.sum()
        out_s[0, j] = s.sum()
        for k in range(1, knots_minus_one):
            acc_c = zero
            acc_s = zero
            for i in range(n):
                x, y, cc, ss = cj[i], sj[i], c[i], s[i]
                cn = cc * x - ss * y
                sn = ss * x + cc * y
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
    for j in range(m):
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


_serial = nb.njit(fastmath=True, cache=True, nogil=True)  # nogil: threads run it side by side
ep_sums_serial = _serial(_sums_impl)
ep_grad_serial = _serial(_grad_impl)


def _threads() -> int:
    """Use no more threads than torch does (e.g. one per run in a process pool); without
    torch loaded (an arrays-only audit), one per CPU."""
    import sys

    torch = sys.modules.get("torch")
    return max(1, torch.get_num_threads() if torch is not None else (os.cpu_count() or 1))


PARALLEL_MIN = 1 << 20  # samples × slices below which one thread is faster than starting more


def _chunks(m: int, parts: int) -> list[slice]:
    bounds = np.linspace(0, m, parts + 1).round().astype(int)
    return [slice(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]


def _run(m: int, work) -> None:
    """``work(rows)`` over the slices, split across threads for a large problem.

    The threads are started for this call and joined before it returns, so nothing idles or
    polls afterwards: numba's own parallel pool (``parallel=True``) stays alive for the life
    of the process, and beside busy neighbours a process that had woken it trained up to 10×
    slower (benchmarks/bench_numba_pool.py).
    """
    threads = min(_threads(), m)
    if threads <= 1:
        work(slice(0, m))
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(threads, thread_name_prefix="idaudit-ep") as pool:
        for f in [pool.submit(work, rows) for rows in _chunks(m, threads)]:
            f.result()


def _parallel_ok(c1: np.ndarray) -> bool:
    """Threads only for large problems and more than one thread: a small sweep takes about a
    millisecond, less than starting a second thread."""
    return c1.size >= PARALLEL_MIN and _threads() > 1


def sums(c1: np.ndarray, s1: np.ndarray, knots_minus_one: int) -> np.ndarray:
    m = c1.shape[0]
    out = np.empty((2, knots_minus_one, m), dtype=c1.dtype)

    def work(rows: slice) -> None:  # the kernel writes contiguous blocks, copied into place
        part = np.empty((2, knots_minus_one, rows.stop - rows.start), c1.dtype)
        ep_sums_serial(c1[rows], s1[rows], knots_minus_one, part[0], part[1])
        out[:, :, rows] = part

    if _parallel_ok(c1):
        _run(m, work)
    else:  # one thread, in place (a training step's size: no copies)
        ep_sums_serial(c1, s1, knots_minus_one, out[0], out[1])
    return out


def grad(c1: np.ndarray, s1: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.empty(c1.shape, dtype=c1.dtype)
    a, b = a.astype(c1.dtype), b.astype(c1.dtype)

    def work(rows: slice) -> None:
        ep_grad_serial(c1[rows], s1[rows], np.ascontiguousarray(a[:, rows]),
                       np.ascontiguousarray(b[:, rows]), out[rows])

    if _parallel_ok(c1):
        _run(c1.shape[0], work)
    else:
        ep_grad_serial(c1, s1, a, b, out)
    return out
