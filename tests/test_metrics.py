"""Metrics: known answers and agreement with scikit-learn / scipy on the same arrays."""

import math

import numpy as np
import pytest
import torch
from scipy.linalg import orthogonal_procrustes
from scipy.stats import ortho_group
from sklearn.linear_model import LinearRegression
from sklearn.metrics import r2_score

from idaudit.maths.bounds import alignment_gap, approximate_bound, whitening_error
from idaudit.maths.linear import (
    fit_linear_map,
    linear_r2,
    orthogonality_error,
    per_dim_r2,
    procrustes_mse,
    standardize,
)
from idaudit.maths.metrics import identifiability_metrics


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def test_orthogonal_encoder_is_perfect(rng):
    z = rng.standard_normal((4000, 5))
    q = ortho_group.rvs(5, random_state=1)
    h = z @ q.T
    hp = (0.9 * z + math.sqrt(1 - 0.81) * rng.standard_normal(z.shape)) @ q.T
    m = identifiability_metrics(z, h, hp, rho=0.9, z_white=True)  # z drawn white: as it is
    assert m["r2_h_to_z"] == pytest.approx(1.0, abs=1e-12)
    assert m["r2_z_to_h"] == pytest.approx(1.0, abs=1e-12)
    assert m["procrustes_mse"] == pytest.approx(0.0, abs=1e-9)
    # Q̂ is exact; only the sample covariance of z enters the orthogonality error
    assert orthogonality_error(fit_linear_map(z, h)[0]) == pytest.approx(0.0, abs=1e-10)
    assert m["orthogonality_error"] == pytest.approx(0.0, abs=1e-10)
    assert m["bound_holds"] is True
    # of unknown law, z is standardised on the rows: h = Q(standardised z) is the exact rotation
    w = identifiability_metrics(3.0 * z, standardize(z) @ q.T, rho=0.9)
    assert w["procrustes_mse"] == pytest.approx(0.0, abs=1e-9)
    assert w["orthogonality_error"] == pytest.approx(0.0, abs=1e-9)


def test_constant_encoder_scores_zero(rng):
    z = rng.standard_normal((1000, 3))
    h = np.full((1000, 3), 2.5)
    m = identifiability_metrics(z, h, h, rho=0.8)
    assert m["r2_h_to_z"] == 0.0
    assert m["r2_z_to_h"] == 0.0
    for key in ("orthogonality_error", "procrustes_mse", "whitening_error", "alignment_gap",
                "D", "bound"):
        assert math.isfinite(m[key]), key
    assert m["whitening_error"] == pytest.approx(math.sqrt(3.0))
    assert m["procrustes_mse"] == pytest.approx(3.0 * 999 / 1000, rel=0.05)


@pytest.mark.parametrize("shape", [(500, 2, 2), (800, 6, 3), (300, 4, 9)])
def test_r2_matches_sklearn(rng, shape):
    n, p, q = shape
    a = rng.standard_normal((n, p))
    b = np.tanh(a @ rng.standard_normal((p, q))) + 0.3 * rng.standard_normal((n, q)) + 5.0
    expected = LinearRegression().fit(a, b).score(a, b)
    assert linear_r2(a, b) == pytest.approx(expected, abs=1e-9)
    raw = r2_score(b, LinearRegression().fit(a, b).predict(a), multioutput="raw_values")
    np.testing.assert_allclose(per_dim_r2(a, b), raw, atol=1e-9)


def test_orthogonality_error_matches_lstsq(rng):
    z = rng.standard_normal((600, 4))
    h = np.sinh(z @ rng.standard_normal((4, 4))) + 1.0
    zc = np.hstack([z, np.ones((600, 1))])
    coef, *_ = np.linalg.lstsq(zc, h, rcond=None)
    q = coef[:4].T  # h ≈ q z + c
    expected = np.linalg.norm(q.T @ q - np.eye(4)) / 2.0
    assert orthogonality_error(fit_linear_map(z, h)[0]) == pytest.approx(expected, rel=1e-9)


def test_procrustes_matches_scipy(rng):
    z = rng.standard_normal((700, 3))
    h = z @ rng.standard_normal((3, 3)) + 0.2 * rng.standard_normal((700, 3)) ** 2
    zc, hc = z - z.mean(0), h - h.mean(0)
    r, _ = orthogonal_procrustes(zc, hc)
    expected = np.square(zc @ r - hc).sum(1).mean()
    assert procrustes_mse(z, h, z_white=True) == pytest.approx(expected, rel=1e-9)
    assert identifiability_metrics(z, h, z_white=True)["procrustes_mse"] == \
        pytest.approx(expected, rel=1e-9)
    zw = zc / zc.std(0)  # each latent scaled to unit variance (NumPy's population σ)
    r, _ = orthogonal_procrustes(zw, hc)
    expected = np.square(zw @ r - hc).sum(1).mean()
    assert procrustes_mse(z, h) == pytest.approx(expected, rel=1e-9)
    assert identifiability_metrics(z, h)["procrustes_mse"] == pytest.approx(expected, rel=1e-9)


def test_whitening_and_gap_match_numpy(rng):
    h = rng.standard_normal((900, 3)) @ np.diag([1.0, 2.0, 0.5])
    hp = h + 0.1 * rng.standard_normal(h.shape)
    cov = np.cov(h.T)
    assert whitening_error(h) == pytest.approx(np.linalg.norm(cov - np.eye(3)), rel=1e-12)
    sq = np.square(hp - h).sum(1).mean()
    expected = max(sq - 2 * (1 - 0.9) * np.trace(cov), 0.0)
    assert alignment_gap(h, hp, 0.9) == pytest.approx(expected, abs=1e-12)
    gap_pos = alignment_gap(h, h + 2.0 * rng.standard_normal(h.shape), 0.9)
    assert gap_pos > 0
    d, bound = approximate_bound(0.3, gap_pos, 0.9)
    assert d == pytest.approx(gap_pos / (2 * 0.9 * 0.1))
    assert bound == pytest.approx(d + (0.3 + d) ** 2)


def test_mixing_r2_and_torch_inputs(rng):
    z = torch.randn(2000, 2, generator=torch.Generator().manual_seed(0))
    x = torch.stack([z[:, 0], z[:, 1] + z[:, 0] ** 2], 1)
    m = identifiability_metrics(z, z, z, rho=0.5, x=x)
    expected = LinearRegression().fit(x.numpy(), z.numpy()).score(x.numpy(), z.numpy())
    assert m["mixing_r2_x_to_z"] == pytest.approx(expected, abs=1e-6)
    assert m["r2_h_to_z"] == pytest.approx(1.0)
