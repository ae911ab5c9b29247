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
