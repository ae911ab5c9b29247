"""Reacher datasets (round trip, resume, errors), a few pixel training steps, audit and plan."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("dm_control")

from conftest import assert_contract  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from idaudit.cli import app  # noqa: E402
from idaudit.core.errors import IdauditError  # noqa: E402
from idaudit.worlds.reacher import data as rd  # noqa: E402
from idaudit.worlds.reacher import render as reacher  # noqa: E402
from idaudit.worlds.reacher.render import RenderPool  # noqa: E402

runner = CliRunner()


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(rd, "CHUNK", 10)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("reacher") / "ou"
    spec = rd.ReacherSpec(mode="ou", rho=0.9, pairs=48, n_eval=30, seed=0)
    rd.build_dataset(root, spec, workers=1)
    return root


def test_world_pairs_of_a_rendered_dataset_are_its_images(tiny):
    """idaudit.world_pairs / WorldPairs on Reacher: the rendered pairs as stored (uint8
    images sharing the dataset's memory, the angles), never redrawn."""
    import torch

    import idaudit

    data = rd.load_dataset(tiny)
    p = idaudit.world_pairs(data=tiny)
    assert p.x.dtype == torch.uint8 and p.x.shape == (48, 64, 64, 3)
    for got, want in zip(p, (data.x, data.x_prime, data.z, data.z_prime)):
        np.testing.assert_array_equal(got.numpy(), want)
    ds = idaudit.WorldPairs("reacher", data=tiny, n=10)
    assert len(ds) == 10 and not ds.fresh
    ds.set_epoch(2)
    np.testing.assert_array_equal(ds[9][2].numpy(), data.z[9])
    with pytest.raises(IdauditError, match="seed does not apply"):
        idaudit.world_pairs(data=tiny, seed=0)


def test_dataset_round_trip(tiny):
    data = rd.load_dataset(tiny)
    assert data.x.shape == (48, 64, 64, 3) and data.x.dtype == np.uint8
    assert data.x_prime.shape == data.x.shape and data.x_eval.shape == (30, 64, 64, 3)
    z, zp = rd.ou_angles(rd.ReacherSpec(mode="ou", rho=0.9, pairs=48, n_eval=30, seed=0))
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
        # each evaluation image has its OU partner z′ = ρz + √(1−ρ²)η, rendered too
        eta = np.random.default_rng([rd.EVAL_SEED, 1]).standard_normal((30, 2))
        np.testing.assert_allclose(data.z_prime_eval, 0.9 * data.z_eval + np.sqrt(0.19) * eta,
                                   rtol=0, atol=1e-15)
        assert data.x_prime_eval.shape == (30, 64, 64, 3) and data.x_prime_eval.dtype == np.uint8
        np.testing.assert_array_equal(pool.render(data.z_prime_eval[-2:]), data.x_prime_eval[-2:])
    # the training statistics are those of the training images alone
    assert rd.ReacherSpec(mode="ou", pairs=48, n_eval=30).images() == 2 * 48 + 2 * 30


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
    other = rd.ReacherSpec(mode="ou", rho=0.5, pairs=48, n_eval=30, seed=0)
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


def _world(root):
    from idaudit.worlds import build_world, make_spec

    return build_world(make_spec("reacher", data=str(root)))


def test_the_eval_set_holds_partners_and_rho(tiny):
    data = rd.load_dataset(tiny)
    ev = _world(tiny).eval_set(None, 0)
    assert ev.rho == 0.9 and ev.x.shape == ev.x_prime.shape == (78, 64, 64, 3)
    np.testing.assert_array_equal(ev.x_prime[:48], data.x_prime)  # fitted on training pairs
    np.testing.assert_array_equal(ev.x_prime[48:], data.x_prime_eval)  # scored on eval pairs
    assert ev.test_rows.tolist() == list(range(48, 78))


def test_datasets_without_eval_partners_still_load(tiny, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(tiny, old)
    for chunk in old.glob("eval-*.npz"):  # as written before the partners existed
        with np.load(chunk) as f:
            z, x = f["z"], f["x"]
        with open(chunk, "wb") as f:
            np.savez_compressed(f, z=z, x=x)
    data = rd.load_dataset(old)
    assert data.x_prime_eval is None and data.z_prime_eval is None
    np.testing.assert_array_equal(data.x_eval, rd.load_dataset(tiny).x_eval)
    ev = _world(old).eval_set(None, 0)
    assert ev.x_prime is None and ev.rho is None and ev.x.shape == (78, 64, 64, 3)


def test_trajectory_datasets_have_no_eval_partners(tmp_path):
    root = tmp_path / "traj"
    rd.build_dataset(root, rd.ReacherSpec(mode="trajectory", stride=8, pairs=10, n_eval=10,
                                          image_size=16), workers=1)
    data = rd.load_dataset(root)
    assert data.x_prime_eval is None and data.x_prime.shape == (10, 16, 16, 3)
    world = _world(root)
    ev = world.eval_set(None, 0)
    assert world.rho is None and ev.x_prime is None and ev.rho is None
    with pytest.raises(IdauditError, match="trajectory pairs have no single ρ"):
        world.eval_set_at(32, 4, cache_dir=tmp_path)


def test_an_ou_world_renders_its_pairs_at_another_size(tiny, tmp_path):
    ev = _world(tiny).eval_set_at(24, 5, cache_dir=tmp_path, workers=1)
    assert ev.rho == 0.9 and ev.x.shape == ev.x_prime.shape == (5, 24, 24, 3)
    np.testing.assert_array_equal(ev.z.numpy(), rd.load_dataset(tiny).z_eval[:5])


def test_trajectory_pairs_are_anisotropic_and_non_gaussian():
    spec = rd.ReacherSpec(mode="trajectory", stride=8, pairs=400, n_eval=10, seed=0)
    z, zp, rho = rd.trajectory_angles(spec)
    assert z.shape == zp.shape == (400, 2)
    assert 0.9 < rho["rho_0"] < 1.0 and 0.9 < rho["rho_1"] < 1.0
    assert rho["rho_0"] != pytest.approx(rho["rho_1"], abs=1e-3)
    # the simulation enforces the wrist limit (a soft constraint: a little penetration)
    assert np.abs(z[:, 1]).max() <= reacher.WRIST_LIMIT + 0.15
    wrist = z[:, 1] / z[:, 1].std()
    assert abs(float(np.mean(wrist**4)) - 3.0) > 0.3  # not Gaussian


def test_pixel_training_audit_and_plan_end_to_end(tiny, tmp_path):
    # the dataset was rendered with the default data seed 0; training seed 1 shares it
    ckpt = tmp_path / "r.safetensors"
    res = runner.invoke(app, ["train", "--world", "reacher", "--rho", "0.9", "--pairs", "48",
                              "--n-eval", "30", "--seed", "1", "--epochs", "2", "--batch", "16",
                              "--data", str(tiny), "--out", str(ckpt), "--quiet"])
    assert res.exit_code == 0, res.output
    log = json.loads(ckpt.with_name("r.log.json").read_text())
    epochs = log["history"][0]["epoch_loss"]
    assert len(epochs) == 2 and all(np.isfinite(epochs))
    assert log["train"]["seed"] == 1 and log["world"]["extra"]["dataset"]["seed"] == 0
    assert not Path(log["world"]["extra"]["data"]).is_absolute()  # stored relative
    out = tmp_path / "a.json"
    res = runner.invoke(app, ["audit", str(ckpt), "--json", str(out)])
    assert res.exit_code == 0, res.output
    m = json.loads(out.read_text())["metrics"]
    assert m["n_train"] == 48 and m["n_test"] == 30
    assert len(m["r2_h_to_z_heldout_per_dim"]) == 2 and "r2_h_to_sincos" in m
    # the evaluation pairs give δ and the bound at the dataset's ρ, and the label-free signals
    assert np.isfinite(m["alignment_gap"]) and np.isfinite(m["bound"])
    res = runner.invoke(app, ["audit", str(ckpt), "--label-free", "--json", str(out)])
    assert res.exit_code == 0, res.output
    free = json.loads(out.read_text())["metrics"]
    assert free["label_free"] and free["n_samples"] == 78
    for key in ("rho_estimated", "canonical_spread", "alignment_gap", "bound"):
        assert np.isfinite(free[key]), key
    assert len(assert_contract(log["metrics"], m)) >= 20
    plot = tmp_path / "p.png"
    res = runner.invoke(app, ["plan", str(ckpt), "--pairs", "5", "--json", str(tmp_path / "p.json"),
                              "--plot", str(plot)])
    assert res.exit_code == 0, res.output
    plan = json.loads((tmp_path / "p.json").read_text())
    ratios = plan["cost_ratios"]
    assert plan["pairs"] == 5 and len(ratios) == 5 and np.isfinite(ratios).all()
    # two epochs on 48 pairs promise no band; the summary must still be that of the ratios
    assert plan["cost_ratio_median"] == pytest.approx(float(np.median(ratios)))
    assert plan["cost_ratio_q25"] <= plan["cost_ratio_median"] <= plan["cost_ratio_q75"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the checkpoint moves with its dataset: the path is relative to the checkpoint
    moved = tmp_path / "moved"
    moved.mkdir()
    rel = Path(os.path.relpath(tiny, tmp_path))
    (moved / rel.parent).mkdir(parents=True, exist_ok=True)
    shutil.copytree(tiny, moved / rel, dirs_exist_ok=True)
    shutil.copy(ckpt, moved / "r.safetensors")
    res = runner.invoke(app, ["audit", str(moved / "r.safetensors"), "--gauss-sims", "0"])
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("objective", ["whiten", "infonce", "vicreg"])
def test_every_objective_trains_on_pixels(tiny, tmp_path, objective):
    ckpt = tmp_path / f"{objective}.safetensors"
    res = runner.invoke(app, ["train", "--world", "reacher", "--data", str(tiny), "--objective",
                              objective, "--epochs", "1", "--batch", "16", "--seed", "1",
                              "--out", str(ckpt), "--quiet"])
    assert res.exit_code == 0, res.output
    from idaudit.models.checkpoint import load_checkpoint

    ck = load_checkpoint(ckpt)
    assert ck.train["objective"] == objective and ck.encoder_name == "pixel_cnn"
    # the world's own λ = 5e-3 where the objective has one and declares none of its own
    # (whiten: 0.5); VICReg has none
    assert ck.train["lamb"] == {"infonce": 0.0, "vicreg": None, "whiten": 0.5}.get(objective,
                                                                                   5e-3)
    out = tmp_path / "a.json"
    res = runner.invoke(app, ["audit", str(ckpt), "--json", str(out), "--gauss-sims", "0"])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["metrics"]["n_test"] == 30


@pytest.mark.parametrize("args,fragment", [
    (["--steps", "10"], "--steps does not apply to world 'reacher'"),
    (["--views", "anchor"], "--views anchor"),
    (["--sigma", "2"], "--sigma only applies to --objective infonce"),
    (["--dim", "4"], "--dim does not apply to world 'reacher'"),
    (["--rho", "0.5"], "different Reacher dataset"),
    (["--n-eval", "10"], "different Reacher dataset"),
    (["--data-seed", "3"], "different Reacher dataset"),
])
def test_pixel_options_that_do_not_apply_are_refused(tiny, tmp_path, args, fragment):
    res = runner.invoke(app, ["train", "--world", "reacher", "--data", str(tiny), "--epochs", "1",
                              "--out", str(tmp_path / "x.safetensors"), "--quiet", *args])
    assert res.exit_code == 2, res.output
    assert fragment in res.output and "Traceback" not in res.output
    assert not (tmp_path / "x.safetensors").exists()


def test_cpu_estimate_scales_with_the_run(tiny):
    from idaudit.training import TrainConfig, estimate_seconds
    from idaudit.worlds import build_world, make_spec

    world = build_world(make_spec("reacher", data=str(tiny)))
    small = estimate_seconds(world, TrainConfig(batch=8, epochs=1))
    assert small > 0
    # timed on the same kind of steps, 100× the work is estimated at ≈ 100× the time
    assert 20 * small < estimate_seconds(world, TrainConfig(batch=8, epochs=100)) < 500 * small


def test_recipes_choose_the_run_and_explicit_options_win(tiny):
    from idaudit.training.runs import resolve

    cpu = resolve({"world": "reacher", "rho": 0.95, "device": "cpu"})
    ds = cpu.world.extra["dataset"]
    assert cpu.recipe == "cpu" and "recipe cpu" in cpu.recipe_note
    assert (ds["image_size"], ds["pairs"], cpu.train.epochs) == (32, 60_000, 20)
    assert cpu.train.encoder == "pixel_cnn" and cpu.train.encoder_kwargs == {"width": 16}
    paper = resolve({"world": "reacher", "rho": 0.95, "recipe": "paper"})
    ds = paper.world.extra["dataset"]
    assert (ds["image_size"], ds["pairs"], paper.train.epochs) == (64, 100_000, 100)
    assert paper.train.encoder_kwargs == {"width": 32} and paper.id != cpu.id
    mine = resolve({"world": "reacher", "pairs": 500, "epochs": 3, "image_size": 48,
                    "encoder_kwargs": {"width": 8}, "encoder": "pixel_cnn"})
    ds = mine.world.extra["dataset"]
    assert (ds["image_size"], ds["pairs"], mine.train.epochs) == (48, 500, 3)
    assert mine.train.encoder_kwargs == {"width": 8}
    # data that exist say what they are: the recipe describes only what to render
    on_data = resolve({"world": "reacher", "data": str(tiny)})
    ds = on_data.world.extra["dataset"]
    assert (ds["image_size"], ds["pairs"], on_data.train.epochs) == (64, 48, 20)
    with pytest.raises(IdauditError, match="recipe does not apply to world 'spiral'"):
        resolve({"world": "spiral", "recipe": "cpu"})
    with pytest.raises(IdauditError, match="unknown recipe 'fast'"):
        resolve({"world": "reacher", "recipe": "fast"})


def test_images_render_natively_at_the_asked_size(tmp_path):
    root = tmp_path / "px32"
    spec = rd.ReacherSpec(pairs=12, n_eval=12, image_size=32)
    rd.build_dataset(root, spec, workers=1)
    data = rd.load_dataset(root)
    assert data.x.shape == (12, 32, 32, 3) and data.x_eval.shape == (12, 32, 32, 3)
    assert spec.default_dir().name.endswith("-px32")
    assert data.x.std() > 5  # an arm and a target, not a blank frame
    with pytest.raises(IdauditError, match="image_size must lie in"):
        rd.ReacherSpec(image_size=8).validate()
    # datasets and evaluation sets share one limit (issue 27: 300 px was refused for an
    # evaluation set of another project's encoder, whose own limit is 512)
    from idaudit.worlds.reacher.eval_pairs import ReacherEvalSpec

    assert rd.ReacherSpec(image_size=512).validate().image_size == 512
    assert ReacherEvalSpec(image_size=512).validate().image_size == 512
    for bad in (rd.ReacherSpec(image_size=513), ReacherEvalSpec(image_size=513)):
        with pytest.raises(IdauditError, match=r"must lie in \[16, 512\]"):
            bad.validate()
    ckpt = tmp_path / "r.safetensors"
    res = runner.invoke(app, ["train", "--world", "reacher", "--data", str(root), "--epochs", "1",
                              "--batch", "4", "--out", str(ckpt), "--device", "cpu"])
    assert res.exit_code == 0, res.output
    assert "recipe cpu" in res.output
    from idaudit.models.checkpoint import load_checkpoint

    ck = load_checkpoint(ckpt)
    assert ck.encoder_kwargs["image_size"] == 32 and ck.encoder_kwargs["width"] == 16
    res = runner.invoke(app, ["train", "--world", "reacher", "--data", str(root), "--epochs", "1",
                              "--image-size", "64", "--out", str(ckpt), "--quiet"])
    assert res.exit_code == 2 and "--image-size 64 (the data: 32)" in res.output
