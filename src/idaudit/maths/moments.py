"""One pass of moments over the rows: means and the joint covariance of [z | h | x], accumulated in
float64 (wide float32 inputs, above 256 columns, in float32 and then converted) a block of rows at
a time, and the held-out R² of a train/test split from the two sets of moments.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from idaudit.maths.linalg import solve_psd

__all__ = ["CHUNK_ROWS", "Moments", "heldout_r2_from_moments", "split_rows"]

F32_MIN_COLS = 256  # wider than this, moments are accumulated in float32 (centred), then float64
CHUNK_ROWS = 2048  # rows gathered per BLAS update: one reused buffer, no copy of the data


class Moments:
    """Means and centred second moments (the scatter Σ (x − x̄)(x − x̄)ᵀ, float64) of the
    column blocks [b₀ | b₁ | …] over a subset of rows, without concatenating the blocks.

    Rows are gathered a chunk at a time into one reused buffer, shifted by ``shift`` (any
    vector near the mean: the result is exact whatever it is, it only keeps the sums small),
    and their products are added into a float64 scatter (the product in float32 for wide
    float32 inputs). No full-size temporaries: fresh memory is slow to fault in.
    """

    def __init__(self, blocks: list[np.ndarray], rows: np.ndarray,
                 shift: np.ndarray | None = None) -> None:
        (self.n, self.mean, self.scatter), = Moments._accumulate(blocks, [rows], shift)

    @staticmethod
    def of_row_sets(blocks: list[np.ndarray], row_sets: list[np.ndarray],
                    shift: np.ndarray | None = None) -> list[Moments]:
        """The moments of several row subsets, sharing one set of work buffers."""
        out = []
        for n, mean, scatter in Moments._accumulate(blocks, row_sets, shift):
            m = Moments.__new__(Moments)
            m.n, m.mean, m.scatter = n, mean, scatter
            out.append(m)
        return out

    @staticmethod
    def _accumulate(blocks: list[np.ndarray], row_sets: list[np.ndarray],
                    shift: np.ndarray | None) -> list[tuple[int, np.ndarray, np.ndarray]]:
        widths = [blk.shape[1] for blk in blocks]
        cols = int(sum(widths))
        wide32 = cols > F32_MIN_COLS and all(blk.dtype == np.float32 for blk in blocks)
        work = np.float32 if wide32 else np.float64
        shift = np.zeros(cols) if shift is None else np.asarray(shift, dtype=np.float64)
        shift_w = shift.astype(work)
        most = max((int(np.size(r)) for r in row_sets), default=0)
        product = np.empty((cols, cols), dtype=work)
        buf = np.empty((min(CHUNK_ROWS, max(most, 1)), cols), dtype=work)
        results = []
        for rows in row_sets:
            rows = np.sort(np.asarray(rows, dtype=np.int64))
            n = int(rows.size)
            scatter = np.zeros((cols, cols))
            total = np.zeros(cols)
            for i in range(0, n, CHUNK_ROWS):
                idx = rows[i:i + CHUNK_ROWS]
                part = buf[: idx.size]
                start = 0
                for blk, wdt in zip(blocks, widths):
                    part[:, start:start + wdt] = blk[idx]
                    start += wdt
                part -= shift_w
                total += part.sum(0, dtype=np.float64)
                if cols:  # xᵀx (numpy hands a product of a matrix with its transpose to syrk)
                    np.matmul(part.T, part, out=product)
                    scatter += product
            offset = total / max(n, 1)  # the subset mean minus the shift
            if n:  # Σ(x − s)(x − s)ᵀ − n(x̄ − s)(x̄ − s)ᵀ
                _rank1_update(scatter, -float(n), offset)
            results.append((n, shift + offset, scatter))
        return results

    def restricted(self, cols: np.ndarray) -> Moments:
        """The same moments for a subset of the columns (no pass over the data)."""
        out = Moments.__new__(Moments)
        out.n, out.mean, out.scatter = self.n, self.mean[cols], self.scatter[np.ix_(cols, cols)]
        return out

    @staticmethod
    def pooled(a: Moments, b: Moments) -> Moments:
        """The moments of the union of two disjoint row sets (Chan et al.)."""
        out = Moments.__new__(Moments)
        out.n = a.n + b.n
        out.mean = (a.n * a.mean + b.n * b.mean) / max(out.n, 1)
        out.scatter = np.add(a.scatter, b.scatter)
        if a.n and b.n:
            _rank1_update(out.scatter, a.n * b.n / out.n, a.mean - b.mean)
        return out


def _rank1_update(s: np.ndarray, alpha: float, d: np.ndarray) -> None:
    """s += α d dᵀ in place, a block of rows at a time."""
    for i in range(0, s.shape[0], 256):
        s[i:i + 256] += (alpha * d[i:i + 256])[:, None] * d[None, :]


def heldout_r2_from_moments(train: Moments, test: Moments, a: slice, b: slice,
                            solve: Callable[[np.ndarray], np.ndarray] | None = None
                            ) -> np.ndarray:
    """Per-output R² on the test rows of the least-squares fit b ≈ W a + c fitted on train.

    SST is taken about the test mean (scikit-learn's r2_score on the test split). ``solve``:
    x ↦ (train scatter of a)⁺ x, when the caller has it factored already.
    """
    rhs = train.scatter[a, b]  # the scatter's 1/n cancels
    w = solve_psd(train.scatter[a, a], rhs) if solve is None else solve(rhs)
    c = train.mean[b] - train.mean[a] @ w
    bias = test.mean[b] - test.mean[a] @ w - c
    s, n_te = test.scatter, max(test.n, 1)  # test covariances are these scatter blocks / n_te
    var = np.diagonal(s[b, b]) / n_te
    fit = np.einsum("ij,ij->j", w, s[a, a] @ w) - 2.0 * np.einsum("ij,ij->j", w, s[a, b])
    sse = var + fit / n_te + bias**2
    scale = float(np.abs(var).max()) if var.size else 0.0
    ok = var > 1e-12 * max(scale, 1e-300)
    return np.where(ok, 1.0 - sse / np.where(ok, var, 1.0), 0.0)


def split_rows(rows: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(test rows, train rows): a seeded random split with round(rows·test_fraction) test rows."""
    perm = np.random.default_rng(seed).permutation(rows)
    n_test = max(1, min(rows - 1, int(round(rows * test_fraction))))
    return perm[:n_test], perm[n_test:]
