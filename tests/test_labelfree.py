"""Label-free signals: canonical correlations of positive pairs, and the label-free audit."""

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from idaudit.cli import app
from idaudit.maths.labelfree import canonical_correlations, label_free_metrics

runner = CliRunner()


def ou_pairs(n=6000, d=4, rho=0.9, seed=0):
    r = np.random.default_rng(seed)
    z = r.standard_normal((n, d))
    return z, rho * z + math.sqrt(1 - rho**2) * r.standard_normal((n, d))


def test_canonical_correlations_match_numpy_cca_on_exchangeable_data():
    z, zp = ou_pairs(2000, 3)
    a = np.vstack([z @ np.diag([1, 2, 0.5]), zp @ np.diag([1, 2, 0.5])])
    b = np.vstack([zp @ np.diag([1, 2, 0.5]), z @ np.diag([1, 2, 0.5])])
    a = np.tanh(a)  # nonlinear, so the correlations differ
    b = np.tanh(b)

    def inv_sqrt(c):
        w, v = np.linalg.eigh(c)
        return (v / np.sqrt(w)) @ v.T

    cov = np.cov(np.hstack([a, b]).T)
    k = inv_sqrt(cov[:3, :3]) @ cov[:3, 3:] @ inv_sqrt(cov[3:, 3:])
    want = np.sort(np.linalg.svd(k, compute_uv=False))[::-1]
    np.testing.assert_allclose(canonical_correlations(a, b), want, atol=1e-10)


def test_identified_pairs_keep_rho_and_warped_ones_fall_short():
    z, zp = ou_pairs()
    q, _ = np.linalg.qr(np.random.default_rng(1).standard_normal((4, 4)))
    good = label_free_metrics(z @ q.T, zp @ q.T, 0.9, gauss_slices=0)
    assert good["rho_estimated"] == pytest.approx(0.9, abs=0.01)
    assert abs(good["canonical_shortfall"]) < 0.01 and good["canonical_spread"] < 0.01
    warped = label_free_metrics(np.tanh(2 * z), np.tanh(2 * zp), 0.9, gauss_slices=0)
    assert warped["canonical_shortfall"] > 0.03
    assert warped["rho_estimated"] < good["rho_estimated"]
    assert warped["whitening_error"] > good["whitening_error"]


def test_arrays_without_z_are_audited_label_free(tmp_path):
    z, zp = ou_pairs()
    np.savez(tmp_path / "good.npz", h=z, h_prime=zp, rho=np.array(0.9))
    np.savez(tmp_path / "bad.npz", h=np.tanh(2 * z), h_prime=np.tanh(2 * zp),
             rho=np.array(0.9))
    gate = ("--max", "canonical_shortfall=0.02", "--gauss-sims", "0")
    res = runner.invoke(app, ["audit", str(tmp_path / "good.npz"), *gate, "--json",
                              str(tmp_path / "g.json")])
    assert res.exit_code == 0, res.output
    m = json.loads((tmp_path / "g.json").read_text())["metrics"]
    assert m["label_free"] is True and "r2_h_to_z" not in m and m["bound_upper"] > m["bound"]
    res = runner.invoke(app, ["audit", str(tmp_path / "bad.npz"), *gate])
    assert res.exit_code == 1, res.output
    res = runner.invoke(app, ["audit", str(tmp_path / "good.npz"), "--min-r2", "0.9"])
    assert res.exit_code == 2 and "needs the true latents z" in res.output
    res = runner.invoke(app, ["audit", str(tmp_path / "good.npz"), "--bootstrap", "10"])
    assert res.exit_code == 2 and "--bootstrap needs the true latents" in res.output
    res = runner.invoke(app, ["audit", str(tmp_path / "good.npz"), "--circular", "0"])
    assert res.exit_code == 2 and "--circular needs the true latents" in res.output
    np.savez(tmp_path / "flat.npz", h=np.ones((100, 2)))
    res = runner.invoke(app, ["audit", str(tmp_path / "flat.npz")])
    assert res.exit_code == 3 and "collapsed" in res.output


def test_label_free_flag_ignores_z(tmp_path):
    z, zp = ou_pairs()
    np.savez(tmp_path / "a.npz", z=z, h=z, h_prime=zp, rho=np.array(0.9))
    res = runner.invoke(app, ["audit", str(tmp_path / "a.npz"), "--label-free", "--gauss-sims",
                              "0", "--json", str(tmp_path / "a.json")])
    assert res.exit_code == 0, res.output
    m = json.loads((tmp_path / "a.json").read_text())["metrics"]
    assert m["label_free"] is True and "r2_h_to_z_heldout" not in m


def test_a_worlds_own_angles_do_not_block_a_label_free_audit(tmp_path):
    """A world that marks its latents as angles (Reacher's joints) is still audited label-free;
    only the user's --circular, which needs z, is refused."""
    from idaudit.evaluations.audit import audit_inputs
    from idaudit.evaluations.inputs import AuditInputs

    z, zp = ou_pairs()
    inp = AuditInputs(z=z, h=z, h_prime=zp, rho=0.9, circular=(0, 1))
    report = audit_inputs(inp, label_free=True, gauss_sims=0)
    assert report.metrics["label_free"] is True and report.verdict != "inconclusive"
    assert report.metrics["rho_estimated"] == pytest.approx(0.9, abs=0.02)
    np.savez(tmp_path / "a.npz", z=z, h=z, h_prime=zp, rho=np.array(0.9))
    res = runner.invoke(app, ["audit", str(tmp_path / "a.npz"), "--label-free", "--circular",
                              "0"])
    assert res.exit_code == 2 and "--circular needs the true latents" in res.output


def test_the_mean_canonical_correlation_is_rho_when_identified_and_below_otherwise():
    """docs/metrics.md: canonical_mean is ρ for a rotation of z, below ρ for a nonlinear
    encoder (Gaussian maximal correlation: no functions of z, z′ correlate by more than ρ)."""
    from idaudit.maths.labelfree import label_free_metrics

    rng = np.random.default_rng(3)
    rho, n = 0.8, 20_000
    z = rng.standard_normal((n, 3))
    zp = rho * z + np.sqrt(1 - rho**2) * rng.standard_normal(z.shape)
    q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    rotated = label_free_metrics(z @ q, zp @ q, rho, gauss_slices=0)
    bent = label_free_metrics(np.tanh(2 * z) + z**2, np.tanh(2 * zp) + zp**2, rho,
                              gauss_slices=0)
    assert abs(rotated["canonical_mean"] - rho) < 0.01
    assert bent["canonical_mean"] < rho - 0.1
    assert rotated["canonical_shortfall"] == pytest.approx(rho - rotated["canonical_mean"])
