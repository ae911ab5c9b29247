"""Reacher datasets (round trip, resume, errors), a few pixel training steps, audit and plan."""

import json

import numpy as np
import pytest

pytest.importorskip("dm_control")

from typer.testing import CliRunner  # noqa: E402

from idaudit.cli import app  # noqa: E402
from idaudit.errors import IdauditError  # noqa: E402
from idaudit.worlds import reacher_data as rd  # noqa: E402
from idaudit.worlds.reacher import RenderPool  # noqa: E402

runner = CliRunner()


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(rd, "CHUNK", 10)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("reacher") / "ou"
    spec = rd.ReacherSpec(mode="ou", rho=0.9, pairs=48, n_eval=30, seed=1)
    rd.build_dataset(root, spec, workers=1)
    return root


def test_dataset_round_trip(tiny):
    data = rd.load_dataset(tiny)
    assert data.x.shape == (48, 64, 64, 3) and data.x.dtype == np.uint8
    assert data.x_prime.shape == data.x.shape and data.x_eval.shape == (30, 64, 64, 3)
    z, zp = rd.ou_angles(rd.ReacherSpec(mode="ou", rho=0.9, pairs=48, n_eval=30, seed=1))
    np.testing.assert_array_equal(data.z, z)
    np.testing.assert_array_equal(data.z_prime, zp)
    np.testing.assert_array_equal(data.z_eval, rd.eval_angles(30))
    meta = json.loads((tiny / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["format_version"] == rd.FORMAT_VERSION
    x = data.x.astype(np.float64) / 255
    np.testing.assert_allclose(meta["channel_mean"], x.mean((0, 1, 2)), rtol=1e-9)
    np.testing.assert_allclose(meta["channel_std"], x.std((0, 1, 2)), rtol=1e-6)
    # the images are the renderer's: re-render two frames and compare bytes
    with RenderPool(1) as pool:
        np.testing.assert_array_equal(pool.render(data.z[:2]), data.x[:2])


def test_interrupted_render_resumes_without_rerendering(tmp_path, small_chunks, monkeypatch):
    spec = rd.ReacherSpec(mode="ou", rho=0.9, pairs=35, n_eval=12, seed=2)
    rd.build_dataset(tmp_path / "d", spec, workers=1)
    before = rd.load_dataset(tmp_path / "d")
    # simulate a kill: one training chunk missing, metadata still "rendering"
    (tmp_path / "d" / "train-00002.npz").unlink()
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    meta["status"] = "rendering"
    (tmp_path / "d" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(IdauditError, match="partly rendered"):
        rd.load_dataset(tmp_path / "d")
    rendered = []
    real = RenderPool.imap_batches

    def counting(self, batches):
        rendered.extend(len(b) for b in batches)
        return real(self, batches)

    monkeypatch.setattr(RenderPool, "imap_batches", counting)
    rd.build_dataset(tmp_path / "d", spec, workers=1)
    assert rendered == [20]  # only the missing chunk: 10 pairs × 2 views
    after = rd.load_dataset(tmp_path / "d")
    np.testing.assert_array_equal(before.x_prime, after.x_prime)


def test_dataset_errors(tmp_path, tiny):
    other = rd.ReacherSpec(mode="ou", rho=0.5, pairs=48, n_eval=30, seed=1)
    with pytest.raises(IdauditError, match="different Reacher dataset"):
        rd.build_dataset(tiny, other, workers=1)
    bad = tmp_path / "v"
    bad.mkdir()
    (bad / "meta.json").write_text(json.dumps({"format": rd.FORMAT, "format_version": 99}))
    with pytest.raises(IdauditError, match="format version 99"):
        rd.load_dataset(bad)
    foreign = tmp_path / "f"
    foreign.mkdir()
    (foreign / "meta.json").write_text(json.dumps({"format": "idaudit-world"}))
    with pytest.raises(IdauditError, match="not a Reacher one"):
        rd.load_dataset(foreign)
    with pytest.raises(IdauditError, match="mode"):
        rd.ReacherSpec(mode="sac").validate()
    res = runner.invoke(app, ["train", "--world", "reacher", "--data", str(bad), "--pairs", "4",
                              "--epochs", "1"])
    assert res.exit_code == 2 and "Traceback" not in res.output


def test_trajectory_pairs_are_anisotropic_and_non_gaussian():
    spec = rd.ReacherSpec(mode="trajectory", stride=8, pairs=400, n_eval=10, seed=0)
    z, zp, rho = rd.trajectory_angles(spec)
    assert z.shape == zp.shape == (400, 2)
    assert 0.9 < rho["rho_0"] < 1.0 and 0.9 < rho["rho_1"] < 1.0
    assert rho["rho_0"] != pytest.approx(rho["rho_1"], abs=1e-3)
    # the simulation enforces the wrist limit (a soft constraint: a little penetration)
    assert np.abs(z[:, 1]).max() <= rd.WRIST_LIMIT + 0.15
    wrist = z[:, 1] / z[:, 1].std()
    assert abs(float(np.mean(wrist**4)) - 3.0) > 0.3  # not Gaussian


def test_pixel_training_audit_and_plan_end_to_end(tiny, tmp_path):
    ckpt = tmp_path / "r.safetensors"
    res = runner.invoke(app, ["train", "--world", "reacher", "--rho", "0.9", "--pairs", "48",
                              "--n-eval", "30", "--seed", "1", "--epochs", "2", "--batch", "16",
                              "--data", str(tiny), "--out", str(ckpt), "--quiet"])
    assert res.exit_code == 0, res.output
    log = json.loads(ckpt.with_name("r.log.json").read_text())
    assert len(log["history"]) == 2 and all(np.isfinite(h["loss"]) for h in log["history"])
    out = tmp_path / "a.json"
    res = runner.invoke(app, ["audit", str(ckpt), "--json", str(out), "--gauss-sims", "0"])
    assert res.exit_code == 0, res.output
    m = json.loads(out.read_text())["metrics"]
    assert m["n_train"] == 48 and m["n_test"] == 30
    assert len(m["r2_h_to_z_heldout_per_dim"]) == 2 and "r2_h_to_sincos" in m
    assert m["r2_h_to_z_heldout"] == pytest.approx(log["metrics"]["r2_h_to_z_heldout"])
    plot = tmp_path / "p.png"
    res = runner.invoke(app, ["plan", str(ckpt), "--pairs", "5", "--json", str(tmp_path / "p.json"),
                              "--plot", str(plot)])
    assert res.exit_code == 0, res.output
    plan = json.loads((tmp_path / "p.json").read_text())
    assert plan["pairs"] == 5 and plan["cost_ratio_median"] > 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cpu_estimate_scales_with_the_run():
    from idaudit.pixel import estimate_seconds
    from idaudit.train.pixels import PixelConfig

    cfg = PixelConfig(batch=8, epochs=1)
    small = estimate_seconds(cfg, pairs=16, epochs=1)
    assert small > 0
    # timed on the same kind of steps, 100× the work is estimated at ≈ 100× the time
    assert 20 * small < estimate_seconds(cfg, pairs=1600, epochs=1) < 500 * small
