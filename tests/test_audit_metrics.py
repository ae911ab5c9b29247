"""Audit metrics agree with independent scikit-learn / scipy computations (float64, 1e-6)."""

import math

import numpy as np
import pytest
import torch
from scipy.linalg import orthogonal_procrustes, subspace_angles
from scipy.optimize import linear_sum_assignment
from scipy.stats import ortho_group
from sklearn.linear_model import LinearRegression
from sklearn.metrics import r2_score

from idaudit.evaluations.audit import audit
from idaudit.maths.bounds import whitening_floor
from idaudit.maths.linear import standardize
from idaudit.maths.metrics import audit_metrics
from idaudit.maths.moments import split_rows


@pytest.fixture
def arrays():
    rng = np.random.default_rng(4)
    n = 3000
    z = rng.standard_normal((n, 4))
    h = np.tanh(z @ ortho_group.rvs(4, random_state=2).T) + 0.05 * rng.standard_normal((n, 4))
    return z, h


def test_heldout_r2_matches_sklearn(arrays):
    z, h = arrays
    m = audit_metrics(z, h, test_fraction=0.3, seed=5, gauss_slices=0)
    test, train = split_rows(len(z), 0.3, 5)
    fit = LinearRegression().fit(h[train], z[train])
    expected = r2_score(z[test], fit.predict(h[test]))
    assert m["r2_h_to_z_heldout"] == pytest.approx(expected, abs=1e-6)
    raw = r2_score(z[test], fit.predict(h[test]), multioutput="raw_values")
    np.testing.assert_allclose(m["r2_h_to_z_heldout_per_dim"], raw, atol=1e-6)
    back = LinearRegression().fit(z[train], h[train])
    assert m["r2_z_to_h_heldout"] == pytest.approx(
        r2_score(h[test], back.predict(z[test])), abs=1e-6)
    assert m["r2_h_to_z"] == pytest.approx(LinearRegression().fit(h, z).score(h, z), abs=1e-6)


def unit_z(z: np.ndarray) -> np.ndarray:
    """Each latent scaled to unit variance on its rows with NumPy's population σ: what the
    audit compares h with where z's law is not declared white."""
    zc = z - z.mean(0)
    return zc / zc.std(0)


def test_mcc_procrustes_rank_match_scipy(arrays):
    z, h = arrays
    m = audit_metrics(z, h, gauss_slices=0)
    corr = np.abs(np.corrcoef(z.T, h.T)[:4, 4:])
    r, c = linear_sum_assignment(-corr)
    assert m["mcc"] == pytest.approx(corr[r, c].mean(), abs=1e-6)
    zc, hc = unit_z(z), h - h.mean(0)
    rot, _ = orthogonal_procrustes(zc, hc)
    assert m["procrustes_mse"] == pytest.approx(np.square(zc @ rot - hc).sum(1).mean(), abs=1e-6)
    # declared white, z is used as it is
    m = audit_metrics(z, h, gauss_slices=0, z_white=True)
    zc = z - z.mean(0)
    rot, _ = orthogonal_procrustes(zc, hc)
    assert m["procrustes_mse"] == pytest.approx(np.square(zc @ rot - hc).sum(1).mean(), abs=1e-6)
    ev = np.clip(np.linalg.eigvalsh(np.cov(h.T)), 0, None)
    p = ev / ev.sum()
    assert m["effective_rank"] == pytest.approx(math.exp(-(p * np.log(p)).sum()), abs=1e-6)
    assert m["whitening_error"] == pytest.approx(np.linalg.norm(np.cov(h.T) - np.eye(4)), abs=1e-6)


def test_large_matrices_use_the_fast_paths_and_still_agree():
    rng = np.random.default_rng(0)
    z = rng.standard_normal((3000, 300))
    h = z @ ortho_group.rvs(300, random_state=1).T * 1.1 + 0.1 * rng.standard_normal((3000, 300))
    m = audit_metrics(z, h, gauss_slices=0)
    zc, hc = unit_z(z), h - h.mean(0)
    rot, _ = orthogonal_procrustes(zc, hc)
    assert m["procrustes_mse"] == pytest.approx(np.square(zc @ rot - hc).sum(1).mean(), rel=1e-6)
    assert m["r2_h_to_z"] == pytest.approx(LinearRegression().fit(h, z).score(h, z), abs=1e-6)


def test_semi_orthogonal_fit_and_principal_angles():
    rng = np.random.default_rng(1)
    z = rng.standard_normal((4000, 2))
    basis = ortho_group.rvs(5, random_state=3)[:, :2]  # 5×2, orthonormal columns
    h = z @ basis.T + 1e-3 * rng.standard_normal((4000, 5))
    m = audit_metrics(z, h, gauss_slices=0, z_white=True)  # drawn white: used as it is
    assert m["embed_dim"] == 5 and m["latent_dim"] == 2
    assert m["procrustes_mse"] < 1e-4
    assert m["r2_h_to_z_heldout"] == pytest.approx(1.0, abs=1e-5)
    assert m["principal_angle_max_deg"] < 0.5
    q = np.linalg.lstsq(np.hstack([z, np.ones((4000, 1))]), h, rcond=None)[0][:2].T
    top = np.linalg.eigh(np.cov(h.T))[1][:, -2:]
    expected = np.degrees(subspace_angles(q, top))
    np.testing.assert_allclose(sorted(m["principal_angles_deg"]), sorted(expected), atol=1e-6)


def test_circular_latents_sin_cos_r2():
    rng = np.random.default_rng(2)
    theta = rng.uniform(-np.pi, np.pi, (3000, 1))
    z = np.hstack([theta, rng.standard_normal((3000, 1))])
    h = np.hstack([np.sin(theta), np.cos(theta), z[:, 1:]])
    m = audit_metrics(z, h, circular=[0], gauss_slices=0)
    assert m["r2_h_to_sincos"] == pytest.approx(1.0, abs=1e-9)
    tgt = np.hstack([np.sin(theta), np.cos(theta)])
    assert m["r2_h_to_sincos"] == pytest.approx(LinearRegression().fit(h, tgt).score(h, tgt),
                                                abs=1e-6)
    assert m["r2_h_to_z"] < 0.99  # the raw angle is not linear in (sin, cos)
    # per-target values are labelled and ordered latent by latent: (sin z0, cos z0, sin z1 …)
    h2 = np.hstack([np.sin(theta), rng.standard_normal((3000, 2))])  # sin θ kept, cos θ lost
    z2 = np.hstack([theta, theta[::-1]])
    m2 = audit_metrics(z2, h2, circular=[0, 1], gauss_slices=0)
    assert m2["sincos_targets"] == ["sin z0", "cos z0", "sin z1", "cos z1"]
    per = dict(zip(m2["sincos_targets"], m2["r2_h_to_sincos_per_target"]))
    assert per["sin z0"] == pytest.approx(1.0) and per["cos z0"] < 0.01


def test_whitening_floor_is_the_rms_of_epsilon_for_white_noise():
    rng = np.random.default_rng(3)
    for n, dim in ((50, 3), (2000, 40)):
        eps = np.array([np.linalg.norm(np.cov(rng.standard_normal((n, dim)).T) - np.eye(dim))
                        for _ in range(400 if n == 50 else 40)])
        assert math.sqrt(np.mean(eps**2)) == pytest.approx(whitening_floor(n, dim), rel=0.04)
        assert np.mean(eps) <= whitening_floor(n, dim)
    assert whitening_floor(10_000, 1024) == pytest.approx(10.25, abs=0.01)


def test_floor_dominated_and_vacuous_bounds_are_reported():
    rng = np.random.default_rng(5)
    z = rng.standard_normal((600, 64))
    zp = 0.5 * z + math.sqrt(0.75) * rng.standard_normal(z.shape)
    m = audit_metrics(z, z, zp, 0.5, gauss_slices=0, z_white=True)
    # a perfect encoder: ε sits at its finite-sample floor, which then dominates the bound
    assert m["whitening_error"] == pytest.approx(m["whitening_floor"], rel=0.1)
    assert m["bound_floor_dominated"] is True and m["bound_vacuous"] is False
    assert m["bound"] < m["bound_upper"]
    # an embedding whose positive pairs are unrelated: D is huge and the bound says nothing
    bad = audit_metrics(z, z, rng.standard_normal(z.shape), 0.5, gauss_slices=0, z_white=True)
    assert bad["bound_vacuous"] is True
    assert bad["bound"] >= bad["bound_trivial"] == pytest.approx(
        np.trace(np.cov(z.T)) * 599 / 600)
    # z standardised on the rows: E‖z_s − z̄_s‖² is exactly the number of latents
    assert audit_metrics(3.0 * z, z, zp, 0.5, gauss_slices=0)["bound_trivial"] == \
        pytest.approx(64.0, rel=1e-9)


def test_gaussianity_test_separates_gaussian_from_uniform():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(4000, 3, generator=g)
    gauss = audit_metrics(z, z @ torch.randn(3, 3, generator=g))
    unif = audit_metrics(z, torch.rand(4000, 3, generator=g))
    assert gauss["gaussianity_p_value"] > 0.05
    assert unif["gaussianity_p_value"] < 1e-6
    assert unif["gaussianity_statistic"] > 5 * gauss["gaussianity_statistic"]
    mc = audit_metrics(z, torch.rand(4000, 3, generator=g), gauss_sims=30)
    assert mc["gaussianity_p_value"] == pytest.approx(1 / 31)


def test_gaussianity_p_value_is_calibrated_and_scale_invariant():
    """Under the null (Gaussian h, any covariance, any n) P(p ≤ α) ≈ α, asymptotic p-values."""
    from idaudit.maths.gaussianity import sliced_gaussianity

    rng = np.random.default_rng(3)
    for n, m, reps in ((100, 3, 300), (2000, 40, 200)):
        ps = np.array([sliced_gaussianity(
            rng.standard_normal((n, m)) @ rng.standard_normal((m, m)) * 10.0, n_slices=16,
            seed=r)["gaussianity_p_value"] for r in range(reps)])
        for alpha in (0.05, 0.2, 0.5):
            sd = math.sqrt(alpha * (1 - alpha) / reps)
            assert abs((ps <= alpha).mean() - alpha) < 3.5 * sd, (n, alpha, (ps <= alpha).mean())
    h = rng.standard_normal((3000, 5))
    a, b = (sliced_gaussianity(v, seed=1)["gaussianity_statistic"]
            for v in (h, 3.0 * h + 7.0))
    assert a == pytest.approx(b, rel=1e-6)


def test_chi2_mixture_tail_matches_scipy_and_simulation():
    from scipy import stats

    from idaudit.maths.gaussianity import chi2_mixture_sf, ep_null_weights

    c = np.full(3, 0.5)  # 0.5·χ²_6 in total with dof 2 each
    for x in (0.5, 3.0, 9.0):
        assert chi2_mixture_sf(x, c, 2) == pytest.approx(stats.chi2.sf(2 * x, 6), abs=1e-6)
    w = ep_null_weights(8)
    draws = (w[:, None] * np.random.default_rng(0).chisquare(8, (w.size, 200_000))).sum(0)
    for q in (0.5, 0.9, 0.99):
        x = float(np.quantile(draws, q))
        assert chi2_mixture_sf(x, w, 8) == pytest.approx(1 - q, abs=3e-3)


def test_bootstrap_interval_brackets_the_estimate(arrays):
    z, h = arrays
    m = audit_metrics(z, h, bootstrap=60, gauss_slices=0)
    lo, hi = m["r2_h_to_z_heldout_ci"]
    assert lo <= m["r2_h_to_z_heldout"] <= hi
    assert 0 < hi - lo < 0.05


def test_python_api_matches_arrays_and_gates():
    rng = np.random.default_rng(6)
    z = rng.standard_normal((3000, 3))
    h = z @ ortho_group.rvs(3, random_state=0).T
    # z's law is not declared: each latent is standardised on the 3000 rows, so h = Qz shows
    # the sampling of its variances in its orthogonality error (exactly ‖diag Ĉov(z) − I‖_F/√3,
    # Ĉov a mean over the rows), not 0
    rep = audit(z, h, gate={"min": {"r2_h_to_z_heldout": 0.999},
                            "max": {"orthogonality_error": 0.1}}, gauss_sims=0)
    assert rep.metrics["orthogonality_error"] == pytest.approx(
        np.linalg.norm(np.diag(np.var(z, 0)) - np.eye(3)) / math.sqrt(3), rel=1e-9)
    assert rep.verdict == "pass" and rep.exit_code == 0
    assert rep.to_dict()["metrics"]["r2_h_to_z_heldout"] == pytest.approx(1.0)
    bad = audit(z, np.tanh(2 * h), gate={"min": {"r2_h_to_z_heldout": 0.999}}, gauss_sims=0)
    assert bad.verdict == "fail" and bad.exit_code == 1
    flat = audit(z, np.ones_like(h), gauss_sims=0)
    assert flat.verdict == "inconclusive" and flat.exit_code == 3 and "collapsed" in flat.reason


def test_gaussianity_statistic_matches_a_numpy_epps_pulley():
    from idaudit.maths.gaussianity import _whitened_projections, sliced_gaussianity

    rng = np.random.default_rng(8)
    h = rng.standard_exponential((1500, 3))
    got = sliced_gaussianity(h, n_slices=16, seed=11)["gaussianity_statistic"]
    p = _whitened_projections(h, 16, np.random.default_rng(11)).T
    assert p.shape == (1500, 3)  # 16 directions in 3 dimensions span 3
    np.testing.assert_allclose(np.cov(p.T), np.eye(3), atol=1e-9)
    p = (p - p.mean(0)) / p.std(0, ddof=1)
    t = np.linspace(0, 3, 17)
    w = np.full(17, 2 * 3 / 16)
    w[0] = w[-1] = 3 / 16
    w = w * np.exp(-t**2 / 2)
    cf_c = np.cos(p[:, :, None] * t).mean(0)
    cf_s = np.sin(p[:, :, None] * t).mean(0)
    err = (cf_c - np.exp(-t**2 / 2)) ** 2 + cf_s**2
    expected = (err @ w * len(h)).mean()
    assert got == pytest.approx(expected, rel=1e-9)


def test_large_npz_members_are_mapped_and_read_the_same(tmp_path):
    from pathlib import Path

    from idaudit.loading.arrays import _read_npz

    rng = np.random.default_rng(0)
    z = rng.standard_normal((3000, 60)).astype(np.float32)  # 720 kB: read
    h = np.asfortranarray(rng.standard_normal((3000, 120)))  # 2.9 MB, Fortran order: mapped
    plain, packed = tmp_path / "a.npz", tmp_path / "c.npz"
    np.savez(plain, z=z, h=h, rho=np.float64(0.9))
    np.savez_compressed(packed, z=z, h=h)
    got = _read_npz(Path(plain))
    assert not got["h"].flags.writeable and got["z"].flags.writeable  # mapped vs read
    np.testing.assert_array_equal(got["h"], h)
    np.testing.assert_array_equal(got["z"], z)
    assert float(got["rho"]) == 0.9
    np.testing.assert_array_equal(_read_npz(Path(packed))["h"], h)
    a = audit_metrics(got["h"][:, :60], got["h"], gauss_slices=8)
    b = audit_metrics(h[:, :60].copy(), h.copy(), gauss_slices=8)
    for key in ("r2_h_to_z_heldout", "orthogonality_error", "procrustes_mse", "mcc"):
        assert a[key] == pytest.approx(b[key], rel=1e-9, abs=1e-12), key


def test_procrustes_with_fewer_embedding_dims_than_latents():
    """h = A z with A a 4 × 8 semi-orthogonal map: min over R (RRᵀ = I) of E‖h − Rz‖² is 0."""
    rng = np.random.default_rng(0)
    z = rng.standard_normal((20_000, 8))
    a = ortho_group.rvs(8, random_state=3)[:4]
    m = audit_metrics(z, z @ a.T, gauss_slices=0, z_white=True)  # drawn white
    assert m["procrustes_mse"] == pytest.approx(0.0, abs=1e-9)
    assert audit_metrics(5.0 * z, standardize(z) @ a.T, gauss_slices=0)["procrustes_mse"] == \
        pytest.approx(0.0, abs=1e-9)  # any units, against the latents standardised
    # anisotropic latents: the iterative minimum is no worse than the true map's error
    zs = z * np.array([3, 2, 1, 1, 0.5, 0.5, 0.2, 0.1])
    h = zs @ a.T + 0.1 * rng.standard_normal((20_000, 4))
    got = audit_metrics(zs, h, gauss_slices=0, z_white=True)["procrustes_mse"]
    zc, hc = zs - zs.mean(0), h - h.mean(0)
    at_a = float(np.mean(np.sum((hc - zc @ a.T) ** 2, 1)))
    assert got <= at_a + 1e-9 and got == pytest.approx(0.04, rel=0.05)


def test_heldout_r2_follows_the_documented_finite_sample_formula():
    # docs/ci.md: held-out R² ≈ 1 − (1 − R)(1 + m/(n_train − m − 1)) for population R²  R
    rng = np.random.default_rng(3)
    n, m, sigma = 2000, 64, 0.3
    pop = 1.0 / (1.0 + sigma**2)
    vals = []
    for _ in range(5):
        z = rng.standard_normal((n, m))
        h = z + sigma * rng.standard_normal((n, m))
        vals.append(audit_metrics(z, h, gauss_slices=0)["r2_h_to_z_heldout"])
    expected = 1 - (1 - pop) * (1 + m / (n / 2 - m - 1))
    assert np.mean(vals) == pytest.approx(expected, abs=0.004)
    assert np.mean(vals) < pop - 0.003  # and measurably below the population value


@pytest.mark.parametrize("with_x", [False, True])
def test_bootstrap_interval_is_the_same_with_circular_latents(with_x):
    """Marking a latent as an angle adds sin/cos targets; the bootstrap of R²(h → z) must
    still resample h against z (it once picked the wrong block, or none)."""
    rng = np.random.default_rng(5)
    z = rng.standard_normal((1500, 2))
    h = z @ rng.standard_normal((2, 3)) + 0.3 * rng.standard_normal((1500, 3))
    x = rng.standard_normal((1500, 4)) if with_x else None
    plain = audit_metrics(z, h, x=x, bootstrap=30, gauss_slices=0, seed=3)
    circ = audit_metrics(z, h, x=x, circular=[1], bootstrap=30, gauss_slices=0, seed=3)
    assert circ["r2_h_to_z_heldout_ci"] == pytest.approx(plain["r2_h_to_z_heldout_ci"],
                                                         abs=1e-9)
    lo, hi = plain["r2_h_to_z_heldout_ci"]
    assert lo < plain["r2_h_to_z_heldout"] < hi


def test_one_latent_with_its_own_scale_matches_scikit_learn():
    """With one latent, Σ_zh is a 1 × m view of the covariance that LAPACK once overwrote in
    place with Σ_zz⁻¹Σ_zh: R²(z → h) read 0.055 instead of 0.496 and the Procrustes error 33.2
    instead of 8.93 here (Var z = 9). Both agree with scikit-learn now."""
    from idaudit.maths.metrics import audit_metrics

    rng = np.random.default_rng(0)
    n = 2000
    z = 3.0 * rng.normal(size=(n, 1))
    h = np.c_[z, rng.normal(size=(n, 2))] @ rng.normal(size=(3, 3)) + 0.5 * rng.normal(size=(n, 3))
    a = audit_metrics(z, h, gauss_slices=0, z_white=True)  # Procrustes in z's own units
    assert a["r2_z_to_h"] == pytest.approx(LinearRegression().fit(z, h).score(z, h), abs=1e-12)
    assert a["r2_h_to_z"] == pytest.approx(LinearRegression().fit(h, z).score(h, z), abs=1e-12)
    # Procrustes for m > n: min over RᵀR = 1 of E‖(h − h̄) − R(z − z̄)‖²
    hc, zc = h - h.mean(0), z - z.mean(0)
    u = hc.T @ zc
    best = (hc**2).sum(1).mean() + (zc**2).sum(1).mean() - 2 * np.linalg.norm(u) / n
    assert a["procrustes_mse"] == pytest.approx(best, rel=1e-9)
