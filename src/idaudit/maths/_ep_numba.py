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

__all__ = ["loss_grad"]


def _loss_grad_impl(p, phi, w, dt, n_total, m_total, need_grad, loss_parts,
                    out):  # pragma: no cover - compiled
    """SIGReg's statistic and its gradient, slice by slice, in one pass over memory: for slice
    j, the sums S_kj = Σ_i (cos, sin)(kθ_ji) (k = 1 … K by the rotation recurrence, as
    the recurrence below), then its share of the statistic loss_parts[j] = Σ_k w_k
    [(S^c_kj/n − φ_k)² + (S^s_kj/n)²], then (``need_grad``) the row
    out[j, i] = Σ_k c_k [sm_kj cos(kθ_ji) − ec_kj sin(kθ_ji)], c_k = (2/M) w_k k Δt, while
    the slice's samples are still in cache. θ_ji = Δt·p_ji: its cos
    and sin are computed here, per slice, into buffers that stay in cache. ``n_total``,
    ``m_total``: the samples and slices of the whole problem (a thread's block has fewer
    slices)."""
    m, n = p.shape
    kk = phi.shape[0]
    zero = np.zeros(1, p.dtype)[0]
    step = p.dtype.type(dt)
    cj = np.empty(n, p.dtype)
    sj = np.empty(n, p.dtype)
    c = np.empty(n, p.dtype)
    s = np.empty(n, p.dtype)
    a = np.empty(kk, p.dtype)
    b = np.empty(kk, p.dtype)
    inv_n = 1.0 / n_total
    for j in range(m):
        pj = p[j]
        for i in range(n):
            theta = pj[i] * step
            cj[i] = np.cos(theta)
            sj[i] = np.sin(theta)
        acc_c = zero
        acc_s = zero
        for i in range(n):
            c[i] = cj[i]
            s[i] = sj[i]
            acc_c += cj[i]
            acc_s += sj[i]
        part = 0.0
        for k in range(kk):
            if k > 0:
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
            ec = acc_c * inv_n - phi[k]
            sm = acc_s * inv_n
            part += w[k] * (ec * ec + sm * sm)
            coef = 2.0 / m_total * w[k] * (k + 1) * dt
            a[k] = coef * sm
            b[k] = -coef * ec
        loss_parts[j] = part
        if not need_grad:
            continue
        g = out[j]
        for i in range(n):
            c[i] = cj[i]
            s[i] = sj[i]
            g[i] = a[0] * cj[i] + b[0] * sj[i]
        for k in range(1, kk):
            ak = a[k]
            bk = b[k]
            for i in range(n):
                cn = c[i] * cj[i] - s[i] * sj[i]
                sn = s[i] * cj[i] + c[i] * sj[i]
                c[i] = cn
                s[i] = sn
                g[i] += ak * cn + bk * sn


_serial = nb.njit(fastmath=True, cache=True, nogil=True)  # nogil: threads run it side by side
ep_loss_grad_serial = _serial(_loss_grad_impl)


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


def loss_grad(proj_t: np.ndarray, phi: np.ndarray, w: np.ndarray, dt: float,
              need_grad: bool = True) -> tuple[float, np.ndarray | None]:
    """SIGReg's statistic and its gradient from the projections Pᵀ (M slices × n samples) in
    one kernel call (:func:`_loss_grad_impl`; θ = PᵀΔt): (Σ_k w_k[(c̄_k − φ_k)² + s̄_k²]
    summed over slices × n/M, the gradient ∂/∂Pᵀ (M, n) or None). ``phi``, ``w``: the grid's
    φ(kΔt) and weights for k = 1 … K.

    Args:
        proj_t: (M, n) float32 or float64 array, C-contiguous.
        phi, w: (K,) arrays.
        dt: the knots' spacing Δt.
        need_grad: compute the gradient too.

    Returns:
        (the statistic, the gradient or None).

    Example:
        >>> import numpy as np
        >>> p = np.random.default_rng(0).standard_normal((4, 64))
        >>> k = np.arange(1, 4) * 0.25
        >>> loss, g = loss_grad(p, np.exp(-0.5 * k ** 2), np.full(3, 0.25), 0.25)
        >>> g.shape, loss > 0
        ((4, 64), True)
    """
    m, n = proj_t.shape
    phi, w = phi.astype(proj_t.dtype), w.astype(proj_t.dtype)
    parts = np.empty(m, dtype=np.float64)
    out = np.empty(proj_t.shape, proj_t.dtype) if need_grad else np.empty((m, 0), proj_t.dtype)

    def work(rows: slice) -> None:
        ep_loss_grad_serial(proj_t[rows], phi, w, dt, n, m, need_grad, parts[rows], out[rows])

    if _parallel_ok(proj_t):
        _run(m, work)
    else:
        work(slice(0, m))
    return float(parts.sum()) * n / m, (out if need_grad else None)
