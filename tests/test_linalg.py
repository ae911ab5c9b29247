"""The dense linear algebra behind the metrics, against numpy/scipy on the same arrays."""

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment as scipy_lsap

from idaudit.maths import linalg
from idaudit.maths.bounds import distance_to_identity
from idaudit.maths.linear import orthogonality_error


def _cov(seed: int, n: int = 40, rows: int = 400) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((rows, n)) @ np.diag(np.linspace(0.2, 3, n))
    return np.cov(x.T)


@pytest.mark.parametrize("lapack", [True, False])
def test_solve_and_explained_variance_match_numpy(monkeypatch, lapack):
    if not lapack:  # the numpy-only path, as when SciPy's layout is not the expected one
        monkeypatch.setattr(linalg, "_lapack", lambda: None)
    s = _cov(0, 60)
    a, b = s[:40, :40], s[:40, 40:]  # blocks of a larger matrix: strided views, as in audits
    want = np.linalg.solve(a, b)
    np.testing.assert_allclose(linalg.solve_psd(a, b), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(linalg.explained_psd(a, b), (b * want).sum(0), rtol=1e-10)


def test_singular_matrices_fall_back_to_the_pseudo_inverse():
    s = _cov(1, 10)
    p = np.zeros((12, 12))
    p[:10, :10] = s  # two directions with no variance
    b = np.random.default_rng(2).standard_normal((12, 3))
    b[10:] = 0.0
    assert linalg.cholesky_lower(p) is None
    np.testing.assert_allclose(linalg.solve_psd(p, b), np.linalg.pinv(p) @ b, atol=1e-9)
    np.testing.assert_allclose(linalg.explained_psd(p, b),
                               (b * (np.linalg.pinv(p) @ b)).sum(0), rtol=1e-9)


def test_cholesky_factor_and_assignment():
    s = _cov(3, 30)
    chol = linalg.cholesky_lower(s)
    np.testing.assert_allclose(chol @ chol.T, s, rtol=1e-12, atol=1e-12)
    assert np.allclose(np.triu(chol, 1), 0.0)
    c = np.random.default_rng(4).random((25, 25))
    for maximize in (False, True):
        got = linalg.linear_sum_assignment(c, maximize)
        want = scipy_lsap(c, maximize=maximize)
        assert c[got].sum() == pytest.approx(c[want].sum(), rel=1e-12)


def test_distances_to_the_identity():
    s = _cov(5, 300)  # more rows than one block of the row loop
    assert distance_to_identity(s) == pytest.approx(np.linalg.norm(s - np.eye(300)), rel=1e-12)
    assert distance_to_identity(np.eye(7)) == 0.0
    q = np.random.default_rng(6).standard_normal((9, 4))
    want = np.linalg.norm(q.T @ q - np.eye(4)) / 2.0
    assert orthogonality_error(q) == pytest.approx(want, rel=1e-12)


def test_solve_psd_leaves_a_fortran_ordered_right_hand_side_alone():
    """LAPACK overwrites its right-hand side: the solver must hand it a copy, also when the
    caller's array is already Fortran-ordered float64 (a transposed view), which a solve
    once overwrote with the solution."""
    from idaudit.maths.linalg import psd_solver, solve_psd

    rng = np.random.default_rng(0)
    a = rng.normal(size=(50, 6))
    s = a.T @ a
    b = np.asfortranarray(rng.normal(size=(6, 9)))
    kept = b.copy()
    x = solve_psd(s, b)
    np.testing.assert_array_equal(b, kept)
    np.testing.assert_allclose(s @ x, b, atol=1e-10)
    x2 = psd_solver(s)(b)
    np.testing.assert_array_equal(b, kept)
    np.testing.assert_array_equal(x, x2)
