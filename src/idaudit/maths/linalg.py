"""Dense linear algebra for the metrics: solves with symmetric PSD matrices, and SciPy's compiled
routines loaded without importing the SciPy subpackages around them.

``import scipy.linalg`` costs ≈ 0.5 s and ``import scipy.optimize`` ≈ 0.4 s on a small machine
— more than the fits of a 1024-dimensional audit — while the two extension modules the
metrics need (LAPACK's Cholesky routines, the Hungarian assignment) load in ≈ 0.04 s. When
SciPy's layout is not the expected one, the public import is used instead.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import ModuleType

import numpy as np

__all__ = ["cholesky_lower", "explained_psd", "linear_sum_assignment", "psd_solver", "solve_psd"]


@cache
def scipy_extension(package: str, module: str) -> ModuleType:
    """The compiled module ``scipy.<package>.<module>``, loaded alone when possible."""
    name = f"scipy.{package}.{module}"
    if name in sys.modules:
        return sys.modules[name]
    try:
        import scipy

        path = next((Path(scipy.__file__).parent / package).glob(f"{module}.*"))
        loader = importlib.machinery.ExtensionFileLoader(name, str(path))
        spec = importlib.util.spec_from_file_location(name, path, loader=loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        return mod
    except Exception:  # any other layout: through the package
        return importlib.import_module(name)


def linear_sum_assignment(cost: np.ndarray, maximize: bool = False
                          ) -> tuple[np.ndarray, np.ndarray]:
    """scipy.optimize.linear_sum_assignment (the minimum- or maximum-cost matching of rows to
    columns)."""
    return scipy_extension("optimize", "_lsap").linear_sum_assignment(cost, maximize)


def _lapack() -> ModuleType | None:
    try:
        mod = scipy_extension("linalg", "_flapack")
        return mod if hasattr(mod, "dpotrf") else None
    except Exception:
        return None


def cholesky_lower(s: np.ndarray, rtol: float = 1e-10) -> np.ndarray | None:
    """The lower Cholesky factor L (LLᵀ = s, Fortran order) of a symmetric matrix, or None
    when s is not positive definite or its diagonal spans more than 1/rtol in squares
    (too ill conditioned for a direct solve)."""
    s = np.asarray(s, dtype=np.float64)
    lapack = _lapack()
    if lapack is None:
        try:
            chol = np.asfortranarray(np.linalg.cholesky(s))
        except np.linalg.LinAlgError:
            return None
    else:
        # s is symmetric, so sᵀ (Fortran-ordered when s is C-ordered) is the same matrix
        chol, info = lapack.dpotrf(s.T if s.flags.c_contiguous else s, lower=1, clean=1)
        if info != 0:
            return None
    d = np.diagonal(chol)
    if not np.isfinite(d).all() or float(d.min()) ** 2 <= rtol * float(d.max()) ** 2:
        return None
    return chol


def pinv_psd(s: np.ndarray, rtol: float = 1e-10) -> np.ndarray:
    """Pseudo-inverse of a symmetric PSD matrix (directions below rtol·max eigenvalue dropped)."""
    evals, evecs = np.linalg.eigh(s)
    top = float(evals.max()) if evals.size else 0.0
    keep = evals > rtol * max(top, 0.0)
    if top <= 0.0 or not keep.any():
        return np.zeros_like(s)
    inv = np.where(keep, 1.0 / np.where(keep, evals, 1.0), 0.0)
    return (evecs * inv) @ evecs.T


def solve_psd(s_aa: np.ndarray, s_ab: np.ndarray, rtol: float = 1e-10) -> np.ndarray:
    """Σ_aa⁺ Σ_ab: by Cholesky (L Lᵀ X = Σ_ab) when Σ_aa is well conditioned (see
    :func:`cholesky_lower`), else by the pseudo-inverse."""
    if s_aa.size == 0:
        return np.zeros_like(s_ab)
    return psd_solver(s_aa, rtol)(s_ab)


def psd_solver(s_aa: np.ndarray, rtol: float = 1e-10) -> Callable[[np.ndarray], np.ndarray]:
    """b ↦ Σ_aa⁺ b for many right-hand sides, Σ_aa factored once (as :func:`solve_psd`)."""
    chol = cholesky_lower(s_aa, rtol)
    if chol is None:
        pinv = pinv_psd(s_aa, rtol)
        return lambda b: pinv @ b
    lapack = _lapack()

    def solve(b: np.ndarray) -> np.ndarray:
        if lapack is None:
            return np.linalg.solve(chol.T, np.linalg.solve(chol, b))
        # a copy in Fortran order that LAPACK may overwrite (never the caller's b)
        x, info = lapack.dpotrs(chol, np.array(b, dtype=np.float64, order="F"), lower=1,
                                overwrite_b=1)
        if info != 0:  # pragma: no cover - dpotrs fails only on bad arguments
            raise np.linalg.LinAlgError(f"dpotrs returned {info}")
        return x

    return solve


def explained_psd(s_aa: np.ndarray, s_ab: np.ndarray, rtol: float = 1e-10) -> np.ndarray:
    """diag(Σ_ba Σ_aa⁺ Σ_ab), the variance of each column of b explained by a linear fit on a:
    ‖L⁻¹ Σ_ab e_i‖² with one triangular solve when Σ_aa = LLᵀ is well conditioned."""
    if s_aa.size == 0:
        return np.zeros(s_ab.shape[1])
    chol = cholesky_lower(s_aa, rtol)
    lapack = _lapack()
    if chol is None or lapack is None:
        return (s_ab * solve_psd(s_aa, s_ab, rtol)).sum(0)
    y, info = lapack.dtrtrs(chol, np.asfortranarray(s_ab, dtype=np.float64), lower=1,
                            overwrite_b=1)
    if info != 0:  # pragma: no cover - L's diagonal is checked positive above
        raise np.linalg.LinAlgError(f"dtrtrs returned {info}")
    return np.einsum("ij,ij->j", y, y)
