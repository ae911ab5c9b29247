"""stable-worldmodel's datasets as recorded worlds, with its own code (.ci/run stage 3, whose
venv installs stable-worldmodel and hdf5plugin; skipped where they are missing).

Episodes are collected by stable-worldmodel's ``World.collect`` on its Reacher environment
into its HDF5 format (frames ``pixels``, joint angles ``qpos``, episodes by ``ep_offset`` /
``ep_len``), and a LeWM built from stable-worldmodel's own config and saved by its own
``save_pretrained`` is audited on the held-out episodes of that world.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_worldmodel")
pytest.importorskip("hdf5plugin")  # stable-worldmodel registers its HDF5 format only with it

os.environ.setdefault("MUJOCO_GL", "egl")


@pytest.fixture(scope="module")
def reacher_h5(tmp_path_factory) -> Path:
    """10 episodes of 50 steps of swm/ReacherDMControl-v0 under a random policy, 32 × 32."""
    import stable_worldmodel as swm

    path = tmp_path_factory.mktemp("swm") / "reacher.h5"
    world = swm.World("swm/ReacherDMControl-v0", num_envs=1, image_shape=(32, 32),
                      max_episode_steps=50)
    world.set_policy(swm.policy.RandomPolicy(seed=0))
    world.collect(str(path), episodes=10, seed=0, format="hdf5")
    return path


def test_a_collected_dataset_is_a_recorded_world(reacher_h5):
    import h5py

    from idaudit.worlds import as_world, make_spec

    spec = make_spec(None, data=str(reacher_h5), observations="pixels", latents="qpos",
                     angles="0,1")
    assert spec.name == "recorded" and spec.dim == 2 and spec.extra["form"] == "episodes"
    with h5py.File(reacher_h5) as f:
        lengths, qpos = f["ep_len"][:], f["qpos"][:]
    world = as_world(spec)
    # pairs never cross an episode: (number of frames − 1) pairs in each
    assert len(world.train_rows) + len(world.eval_rows) == int((lengths - 1).sum())
    ev = world.eval_set(None, seed=0)
    assert ev.x.shape[1:] == (32, 32, 3) and ev.x.dtype == np.uint8
    held = qpos[int(lengths[:-2].sum()):]  # the last fifth of 10 episodes: the last 2
    assert np.isin(np.asarray(ev.z)[:, 0], held[:, 0]).all()
    assert 0 < spec.rho < 1


def test_lewm_audited_on_the_world_it_was_trained_in(reacher_h5, tmp_path):
    """A LeWM (stable-worldmodel's config, its save_pretrained) on the held-out episodes of
    the collected world, from the command line; the report names the world and its rows."""
    sys.path.insert(0, str(Path(__file__).parent))
    from standins import save_lewm_epochs

    run_dir, _ = save_lewm_epochs(tmp_path / "home")
    done = subprocess.run(
        [sys.executable, "-m", "idaudit", "audit", str(run_dir), "--weights",
         "weights_epoch_2.pt", "--data", str(reacher_h5), "--observations", "pixels",
         "--latents", "qpos", "--angles", "0,1", "--normalize", "imagenet",
         "--json", str(tmp_path / "a.json")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "a.json").read_text())
    assert report["world"]["extra"]["label"] == "reacher"
    assert report["metrics"]["latent_dim"] == 2 and report["metrics"]["embed_dim"] == 32
    assert report["metrics"]["n_samples"] == 2 * 49  # the 2 held-out episodes' pairs
    assert -1 <= report["metrics"]["r2_h_to_sincos"] <= 1


# ---- swm:ENV_ID worlds: episodes collected by stable-worldmodel, in its folder format ----

SMALL = {"frames": 120, "episode_steps": 30, "image_size": 32}  # 4 episodes of 30 steps


@pytest.fixture(scope="module")
def swm_cache(tmp_path_factory):
    """idaudit's cache in a temporary folder for this module (the collections land there)."""
    old = os.environ.get("IDAUDIT_CACHE")
    os.environ["IDAUDIT_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield Path(os.environ["IDAUDIT_CACHE"])
    if old is None:
        del os.environ["IDAUDIT_CACHE"]
    else:
        os.environ["IDAUDIT_CACHE"] = old


@pytest.fixture(scope="module")
def reacher_spec(swm_cache):
    from idaudit.worlds import make_spec

    return make_spec("swm:ReacherDMControl-v0", **SMALL)


def _encoder():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, 2), torch.nn.GELU(),
                               torch.nn.Flatten(), torch.nn.Linear(8 * 15 * 15, 4)).eval()


def test_the_folder_format_reads_as_stable_worldmodel_reads_it(reacher_spec):
    """The folder World.collect wrote, read by idaudit, holds what swm's own load_dataset
    gives: the same states and the same decoded frames (channels last here)."""
    import stable_worldmodel as swm

    from idaudit.core.arrayfiles import array_file_kind, read_arrays

    folder = reacher_spec.extra["data"]
    assert array_file_kind(folder) == "swm-folder"
    ours = read_arrays(folder, ["pixels", "qpos", "ep_len", "ep_offset"])
    theirs = swm.data.load_dataset(folder)
    assert ours["ep_len"].tolist() == [30] * 4 and ours["ep_offset"].tolist() == [0, 30, 60, 90]
    np.testing.assert_array_equal(ours["qpos"], theirs.get_col_data("qpos"))
    assert ours["pixels"].shape == (120, 32, 32, 3) and ours["pixels"].dtype == np.uint8
    episode = theirs.load_episode(2)["pixels"].permute(0, 2, 3, 1).numpy()
    np.testing.assert_array_equal(ours["pixels"][np.arange(60, 90)], episode)


def test_a_reacher_world_collects_once_and_audits(reacher_spec, swm_cache):
    import idaudit
    from idaudit.worlds import make_spec
    from idaudit.worlds.swm import Collection, cache_dir, collect

    assert reacher_spec.name == "swm:ReacherDMControl-v0" and reacher_spec.dim == 2
    assert reacher_spec.extra["circular"] == [0, 1] and 0.9 < reacher_spec.rho < 1
    c = Collection(**reacher_spec.extra["collection"])
    assert (c.episodes, c.steps, c.seed, c.image_size) == (4, 30, 0, 32)
    folder = cache_dir() / c.key()
    assert folder.parent.parent == swm_cache  # $IDAUDIT_CACHE/swm/<key>
    stamp = (folder / "collection.json").stat().st_mtime_ns
    again = make_spec("swm:ReacherDMControl-v0", **SMALL)  # read from the cache
    assert again.extra["collection"] == reacher_spec.extra["collection"]
    assert collect(c, cache_dir()) == (folder, False)
    assert (folder / "collection.json").stat().st_mtime_ns == stamp
    assert [p.name for p in cache_dir().iterdir()] == [folder.name]  # no temporary left
    report = idaudit.audit(encoder=_encoder(), world=reacher_spec)
    m = report.metrics
    assert m["n_samples"] == 29 and m["latent_dim"] == 2 and m["embed_dim"] == 4  # 1 held-out ep
    assert np.isfinite(m["r2_h_to_sincos"]) and -1 <= m["r2_h_to_sincos"] <= 1


@pytest.mark.parametrize(("env", "dim", "angles"), [("CartpoleDMControl-v0", 2, [1]),
                                                     ("TwoRoom-v1", 2, [])])
def test_other_environments_collect_and_audit(env, dim, angles, swm_cache):
    import idaudit
    from idaudit.worlds import make_spec

    spec = make_spec(f"swm:{env}", **SMALL, data_seed=3)
    assert spec.dim == dim and spec.extra["circular"] == angles
    assert spec.extra["collection"]["episodes"] == 4 and spec.extra["collection"]["seed"] == 3
    m = idaudit.audit(encoder=_encoder(), world=spec).metrics
    assert m["n_samples"] == 29 and m["latent_dim"] == dim  # the last of 4 episodes, 30 frames
    key = "r2_h_to_sincos" if angles else "r2_h_to_z"
    assert np.isfinite(m[key]) and -1 <= m[key] <= 1, sorted(m)


def test_train_on_a_collected_world_from_the_command_line(reacher_spec, swm_cache, tmp_path):
    """`idaudit train --world swm:…` reads the cached collection (nothing collected again) and
    its checkpoint audits on the same world, rebuilt from the spec it records."""
    import idaudit

    out = tmp_path / "r.safetensors"
    done = subprocess.run(
        [sys.executable, "-m", "idaudit", "train", "--world", "swm:ReacherDMControl-v0",
         "--frames", "120", "--episode-steps", "30", "--image-size", "32", "--epochs", "1",
         "--batch", "32", "--out", str(out)], capture_output=True, text=True, timeout=300,
        env={**os.environ, "IDAUDIT_CACHE": str(swm_cache)})
    assert done.returncode == 0, done.stderr
    assert "collecting" not in done.stderr
    m = idaudit.audit(str(out)).metrics
    assert m["n_samples"] == 29 and np.isfinite(m["r2_h_to_sincos"])


@pytest.mark.parametrize("args", [
    ["--world", "swm:NoSuchEnv-v0"],
    ["--world", "swm:ReacherDMControl-v0", "--angles", "0"],  # the table declares the angles
])
def test_bad_swm_worlds_are_one_line(args, tmp_path, swm_cache):
    done = subprocess.run([sys.executable, "-m", "idaudit", "train", *args, "--out",
                           str(tmp_path / "w.safetensors")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert "swm:ReacherDMControl-v0" in lines[0] or "--angles" in lines[0]


def test_world_refuses_an_swm_world_before_collecting(tmp_path):
    """`idaudit world` cannot write an swm world's pairs: refused in one line before a single
    episode is collected (the cache it would collect into stays empty)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    done = subprocess.run([sys.executable, "-m", "idaudit", "world", "swm:ReacherDMControl-v0",
                           "--out", str(tmp_path / "w.npz")], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "IDAUDIT_CACHE": str(cache)})
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: world 'swm:ReacherDMControl-v0' cannot be written as a dataset"]
    assert list(cache.iterdir()) == []
