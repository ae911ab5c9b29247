"""What every evaluation reduces an encoder to, :class:`AuditInputs` (the arrays z, h, h′, x, ρ
and where they came from), and its checks: shapes, values (NaN/Inf, a collapsed embedding),
enough rows for the split, and the options of an embedding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from idaudit.core import limits
from idaudit.core.errors import IdauditError, Inconclusive
from idaudit.loading.arrays import Arrays

__all__ = ["AuditInputs", "TooFewRows", "as_matrix", "check_counts", "check_embedding_options",
           "check_shapes", "checked_pair", "frame_sample", "inconclusive_reason", "min_rows", "rows_reason",
           "split_reason", "split_reason_rows", "value_problem", "values_reason"]


@dataclass
class AuditInputs(Arrays):
    """What every route reduces to: the arrays, and where they came from."""

    world: dict[str, Any] | None = None
    seed: int | None = None  # the evaluation set's seed (a checkpoint's: its training seed)
    frames: np.ndarray | None = None  # a few of the evaluation images (image worlds), drawn
    frame_rows: np.ndarray | None = None  # by the audit's page, and their rows


def frame_sample(x: Any, rows: Any, k: int = 6) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(``k`` images of ``x`` at rows spread evenly over ``rows`` — all rows where None —,
    those rows) where ``x`` holds images (uint8 N × H × W × 3), else (None, None)."""
    if getattr(x, "dtype", None) != np.uint8 or getattr(x, "ndim", 0) != 4 or x.shape[-1] != 3:
        return None, None
    rows = np.arange(x.shape[0]) if rows is None else np.sort(np.asarray(rows, dtype=np.int64))
    pick = rows[np.unique(np.linspace(0, rows.size - 1, min(k, rows.size)).round().astype(int))]
    return np.asarray(x[pick]), pick


# ---- checks -----------------------------------------------------------------------------


def values_reason(items: list[tuple[str, np.ndarray | None, str]]) -> str | None:
    """The one check of whether arrays can support a verdict: the first of NaN/Inf or values
    that overflow float64 moments (in any array), then a collapsed embedding, then constant
    true latents; None when there is none. ``items`` are (name, array or None, kind), kind
    ``"embedding"`` (collapse is inconclusive), ``"latents"`` (constant is inconclusive) or
    ``"values"`` (only the values are checked)."""
    same: dict[str, list[str]] = {"embedding": [], "latents": []}
    for name, arr, kind in items:
        if arr is None:
            continue
        problem, constant = value_problem(arr, name, spread=kind != "values")
        if problem:
            return problem
        if constant:
            same[kind].append(name)
    if same["embedding"]:
        return (f"the embedding collapsed: {same['embedding'][0]} has (near-)zero variance, "
                "every input maps to one point")
    if same["latents"]:
        return (f"the true latents {same['latents'][0]} are constant: every row is the same, "
                "so there is nothing for h to recover (check that it holds the latents of "
                "these inputs)")
    return None


def min_rows(n: int, m: int) -> int:
    """The fewest evaluation rows an audit of an n-dimensional latent and an m-dimensional
    embedding takes: 2(n + m) + 10 (both held-out fits need more rows than parameters)."""
    return 2 * (n + m) + 10


def rows_reason(rows: int, n: int, m: int, label_free: bool = False) -> str | None:
    """Why ``rows`` evaluation rows cannot support an audit of an n-dimensional latent and an
    m-dimensional embedding (:func:`min_rows`; a label-free audit, which fits nothing on z:
    m + 10), or None. Known once the encoder's width is (its probe, before the evaluation set
    is made: :func:`~idaudit.evaluations.pipeline.tried_then_set`)."""
    if label_free:
        if rows < m + 10:
            return (f"too few samples: {rows} rows for a {m}-dimensional embedding (need at "
                    f"least {m + 10})")
        return None
    need = min_rows(n, m)
    if rows < need:
        return (f"too few samples: {rows} rows for a {n}-dimensional latent and a "
                f"{m}-dimensional embedding (need at least {need} for held-out fits)")
    return None


class TooFewRows(Inconclusive):
    """The evaluation set an encoder would be embedded on has too few rows for its width
    (:func:`rows_reason`), found from its probe before the set is made or embedded: the audit
    is inconclusive (exit 3), with the reason it would give after embedding the whole set."""

    def __init__(self, reason: str, rows: int, n: int, m: int, source: str = "",
                 world: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.rows, self.n, self.m, self.source, self.world = rows, n, m, source, world
        self.encoder_id: int | None = None  # id() of the encoder refused, where known
        self.sources: list[str] = []  # every target's name, where several were given


def inconclusive_reason(inp: AuditInputs) -> str | None:
    """Why no verdict can be given (:func:`values_reason` of z, h, h′; too few samples), or
    None."""
    reason = values_reason([("z", inp.z, "latents"), ("h", inp.h, "embedding"),
                            ("h_prime", inp.h_prime, "values")])
    if reason is not None:
        return reason
    return rows_reason(inp.h.shape[0], inp.z.shape[1], inp.h.shape[1])


def as_matrix(arr: np.ndarray, name: str) -> np.ndarray:
    """``arr`` as a samples × dims array (a 1-D array is one column), or a one-line error
    (exit 2): another number of dimensions, no rows or no columns."""
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise IdauditError(f"{name} must be a 2-D array (samples × dims), got shape "
                           f"{tuple(arr.shape)}")
    if arr.shape[0] == 0:
        raise IdauditError(f"{name} has no rows (shape {tuple(arr.shape)})")
    if arr.shape[1] == 0:
        raise IdauditError(f"{name} has no columns (shape {tuple(arr.shape)}); it needs at "
                           "least one column")
    return arr


def value_problem(arr: np.ndarray, name: str, spread: bool = True) -> tuple[str | None, bool]:
    """(what is wrong with the values of the 2-D array ``arr`` for the float64 moments every
    metric comes from, or None; whether its rows are all (nearly) the same).

    Wrong: NaN or Inf, or values too large to sum or (with ``spread``) to square in float64.
    The same: (near-)zero total variance relative to its scale — a collapsed embedding, or
    constant latents (only judged with ``spread``). One pass for the column sums, one for
    the spread, a block of rows at a time (no copy of ``arr``)."""
    sums = arr.sum(0, dtype=np.float64)
    if not np.isfinite(sums).all():
        if not bool(np.isfinite(arr).all()):
            return f"{name} contains NaN or Inf values", False
        return f"{name} holds values too large to sum in float64", False
    if not spread:
        return None, False
    with np.errstate(over="ignore", invalid="ignore"):
        var, scale = _column_spread(arr, sums)
    if not (math.isfinite(var) and math.isfinite(scale)):
        big = max(abs(float(arr.max())), abs(float(arr.min())))
        return (f"{name} holds values too large for float64 second moments (up to {big:.3g} "
                "in magnitude: their squares overflow)"), False
    return None, var <= 1e-12 * max(scale, 1e-30) or var == 0.0


def _column_spread(h: np.ndarray, sums: np.ndarray) -> tuple[float, float]:
    """(Σ_j Var(h_j), m · mean(h²)) in float64 from h and its column sums, a block of rows at
    a time."""
    rows = h.shape[0]
    if rows < 2:
        return 0.0, 0.0
    mean = sums / rows
    ss = sq = 0.0
    for i in range(0, rows, 2048):
        c = h[i:i + 2048].astype(np.float64)
        sq += float(np.einsum("ij,ij->", c, c))
        c -= mean
        ss += float(np.einsum("ij,ij->", c, c))
    return ss / rows, sq / rows


def split_reason(inp: AuditInputs, test_fraction: float) -> str | None:
    """Why the held-out split cannot support the fits (too few rows on one side), or None."""
    width = max(inp.z.shape[1], inp.h.shape[1])
    if inp.test_rows is not None:
        n, n_test = inp.h.shape[0], int(np.asarray(inp.test_rows).size)
        if n - n_test < width + 2 or n_test < 2:
            return (f"the fixed held-out rows leave {n - n_test} rows to fit and {n_test} to "
                    f"test; the fits need at least {width + 2} and 2")
        return None
    return split_reason_rows(inp.h.shape[0], width, test_fraction)


def split_reason_rows(rows: int, width: int, test_fraction: float) -> str | None:
    """Why a held-out split of ``rows`` rows cannot support fits on ``width`` columns, or None."""
    n_test = max(1, min(rows - 1, int(round(rows * test_fraction))))
    need = width + 2
    if rows - n_test < need or n_test < 2:
        return (f"--test-fraction {test_fraction:g} leaves {rows - n_test} rows to fit and "
                f"{n_test} to test; the fits need at least {need} and 2 (choose a fraction "
                "nearer 0.5)")
    return None


def check_shapes(inp: AuditInputs) -> AuditInputs:
    """Shape and type checks that are input errors (exit 2), not inconclusive audits."""
    z, h = as_matrix(inp.z, "z"), as_matrix(inp.h, "h")
    if z.shape[0] != h.shape[0]:
        raise IdauditError(f"z has {z.shape[0]} rows but h has {h.shape[0]}")
    if inp.x is not None and (inp.x.ndim == 0 or inp.x.shape[0] != z.shape[0]):
        rows = f"{inp.x.shape[0]} rows" if inp.x.ndim else "no rows (a 0-d array)"
        raise IdauditError(f"x has {rows} but z has {z.shape[0]}: x holds the observations "
                           "of the same inputs, one row each")
    hp = checked_pair(inp, h)
    for i in inp.circular:
        if not 0 <= i < z.shape[1]:
            raise IdauditError(f"circular latent index {i} is out of range for {z.shape[1]} latents")
    inp.z, inp.h, inp.h_prime = z, h, hp
    return inp


def checked_pair(inp: AuditInputs, h: np.ndarray) -> np.ndarray | None:
    """h′ as a 2-D array of h's shape (or None), with ρ checked to lie in (0, 1)."""
    hp = inp.h_prime
    if hp is not None:
        hp = hp[:, None] if hp.ndim == 1 else hp
        if hp.shape != h.shape:
            raise IdauditError(f"h_prime has shape {tuple(hp.shape)} but h has {tuple(h.shape)}")
    if inp.rho is not None:
        limits.check("rho", inp.rho, "rho")
    return hp


def check_embedding_options(n_eval: Any, normalize: str | None = None) -> None:
    """``--n-eval``, where given, is an integer ≥ 10, and ``--normalize`` parses (audit,
    consistency, embed): checked before any encoder is loaded."""
    if n_eval is not None:
        limits.check("n_eval", n_eval)
    if normalize is not None:
        from idaudit.loading.image_input import parse_normalize

        parse_normalize(normalize)


def check_counts(bootstrap: Any, gauss_sims: Any, test_fraction: Any,
                 floor_draws: Any = None) -> None:
    """The audit's counts and split share, checked before any work."""
    limits.check("bootstrap", bootstrap)
    limits.check("gauss_sims", gauss_sims)
    if floor_draws is not None:
        limits.check("floor_draws", floor_draws)
    if test_fraction is not None:
        limits.check("test_fraction", test_fraction)
