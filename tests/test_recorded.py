"""A recorded world: the user's own frames and true states, as pairs or episodes.

The simulator here is the tests' own (a dot moving on an OU path, drawn into small RGB
images; its states in pixels), not a built-in world. The same recording is read from each
file form and from arrays in memory, and audited through each route; every route gives the
same numbers on the same rows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import idaudit
from idaudit.core.errors import IdauditError
from idaudit.worlds import ArrayWorld, as_world, make_spec
from idaudit.worlds.recordings import estimate_rho

SIZE = 16


def dot_episodes(episodes: int = 24, frames: int = 50, rho: float = 0.95, seed: int = 0
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(images, states in pixels, episode numbers): a dot whose (x, y) follows an OU path
    around the image's centre, drawn as a Gaussian blob (red) with a fixed green ramp."""
    rng = np.random.default_rng(seed)
    z = np.zeros((episodes, frames, 2))
    z[:, 0] = rng.standard_normal((episodes, 2))
    for t in range(1, frames):
        z[:, t] = rho * z[:, t - 1] + np.sqrt(1 - rho**2) * rng.standard_normal((episodes, 2))
    z = z.reshape(-1, 2) * 2.5 + SIZE / 2  # pixels: σ = 2.5 around the centre
    v, u = np.mgrid[0:SIZE, 0:SIZE]
    blob = np.exp(-((u[None] - z[:, 0, None, None]) ** 2 + (v[None] - z[:, 1, None, None]) ** 2)
                  / (2 * 1.5**2))
    img = np.zeros((len(z), SIZE, SIZE, 3), np.uint8)
    img[..., 0] = np.round(255 * blob)
    img[..., 1] = (u * 255 // SIZE).astype(np.uint8)[None]
    return img, z, np.repeat(np.arange(episodes), frames)


class DotEncoder(torch.nn.Module):
    """A fixed (seeded) small CNN for the dot's images, taken as idaudit gives images to an
    encoder from elsewhere: float N×3×S×S in [0, 1] → N×2."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, 2), torch.nn.GELU(),
                                       torch.nn.Flatten(), torch.nn.Linear(8 * 7 * 7, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@pytest.fixture(scope="module")
def dots() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return dot_episodes()


def write_forms(d: Path, arrays: dict[str, np.ndarray]) -> dict[str, Path]:
    """The same arrays as .npz, a folder of .npy, safetensors and HDF5."""
    import h5py
    from safetensors.numpy import save_file

    np.savez(d / "rec.npz", **arrays)
    (d / "npy").mkdir()
    for k, v in arrays.items():
        np.save(d / "npy" / f"{k}.npy", v)
    save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, str(d / "rec.st"))
    with h5py.File(d / "rec.h5", "w") as f:
        for k, v in arrays.items():
            f.create_dataset(k, data=v)
    return {"npz": d / "rec.npz", "npy": d / "npy", "safetensors": d / "rec.st",
            "hdf5": d / "rec.h5"}


# ---- ρ ---------------------------------------------------------------------------------

def test_rho_estimator_bias_is_bounded_by_simulation():
    """Pearson's ρ̂ on OU pairs: over 400 recordings of 500 pairs its mean lies within
    0.002 of ρ (its bias, −ρ(1−ρ²)/(2n) ≈ −1.7e-4 at ρ = 0.9, is far below that) and its spread
    is the (1 − ρ²)/√n the docstring states, within 15 %."""
    rng = np.random.default_rng(1)
    rho, n = 0.9, 500
    est = []
    for _ in range(400):
        z = rng.standard_normal((n, 3))
        zp = rho * z + np.sqrt(1 - rho**2) * rng.standard_normal((n, 3))
        est.append(estimate_rho(z * [1, 30, 0.01], zp * [1, 30, 0.01]))  # units do not matter
    est = np.asarray(est)
    assert abs(est.mean() - rho) < 0.002
    assert est.std() == pytest.approx((1 - rho**2) / np.sqrt(n), rel=0.15)


def test_angles_are_correlated_as_angles():
    """Angles recorded mod 2π: Pearson on the wrapped values is far off, the circular
    correlation is not (and does not change when the angles are shifted by 2π)."""
    rng = np.random.default_rng(2)
    z = rng.standard_normal((20000, 1)) * 0.8  # around 0: half of them wrap to near 2π
    zp = 0.9 * z + np.sqrt(1 - 0.81) * 0.8 * rng.standard_normal(z.shape)
    wrapped, wrapped_p = np.mod(z, 2 * np.pi), np.mod(zp, 2 * np.pi)
    assert estimate_rho(wrapped, wrapped_p)[0] < 0.7  # the wrap at 2π breaks Pearson
    circ = estimate_rho(wrapped, wrapped_p, angles=(0,))[0]
    from scipy.stats import circmean  # the formula, with scipy's circular means

    a = np.sin(wrapped[:, 0] - circmean(wrapped[:, 0]))
    b = np.sin(wrapped_p[:, 0] - circmean(wrapped_p[:, 0]))
    assert circ == pytest.approx((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()),
                                 abs=1e-9)
    assert circ == pytest.approx(estimate_rho(wrapped + 2 * np.pi, wrapped_p, angles=(0,))[0])
    assert circ > 0.85


# ---- reading ---------------------------------------------------------------------------

def test_every_file_form_reads_the_same_world(tmp_path, dots):
    img, z, ep = dots
    forms = write_forms(tmp_path, {"pixels": img, "qpos": z, "episode_idx": ep})
    opts = {"observations": "pixels", "latents": "qpos", "episodes": "episode_idx",
            "stride": 2}
    specs, sets = {}, {}
    for form, path in forms.items():
        spec = make_spec(None, data=str(path), **opts)
        assert spec.name == "recorded" and spec.dim == 2 and spec.extra["form"] == "episodes"
        specs[form] = spec
        sets[form] = as_world(spec).eval_set(100, seed=3)
    first = sets["npz"]
    for form in forms:
        assert specs[form].rho == specs["npz"].rho
        assert torch.equal(sets[form].z, first.z)
        assert np.array_equal(sets[form].x, first.x)
        assert np.array_equal(sets[form].x_prime, first.x_prime)
    # pairs 2 frames apart inside an episode, never across one, the last fifth held out
    held = np.unique(ep)[-round(0.2 * 24):]
    rows = {tuple(r) for r in np.round(z[np.isin(ep, held)], 9)}
    assert all(tuple(r) in rows for r in np.round(first.z.numpy(), 9))


def test_pairs_and_episodes_agree(tmp_path, dots):
    """The episodes form at stride 1 and the same pairs written out as a pairs file give the
    same ρ̂ and the same training pairs."""
    img, z, ep = dots
    from_episodes = ArrayWorld(img, z=z, episodes=ep)
    t = np.flatnonzero(ep[:-1] == ep[1:])
    np.savez(tmp_path / "pairs.npz", x=img[t], x_prime=img[t + 1], z=z[t], z_prime=z[t + 1])
    spec = make_spec(None, data=str(tmp_path / "pairs.npz"))
    assert spec.extra["form"] == "pairs"
    assert spec.extra["rho_per_dim"] == pytest.approx(from_episodes.spec.extra["rho_per_dim"])
    a = from_episodes.pairs()
    assert len(a.z) == len(from_episodes.train_rows)
    assert torch.equal(a.z_prime[0], torch.from_numpy(z[1]))


def test_estimated_rho_is_near_the_simulators(dots):
    img, z, ep = dots
    world = ArrayWorld(img, z=z, episodes=ep, name="dot")
    # 24 episodes of 50 frames started at the stationary law: ρ̂ per axis near 0.95
    assert world.rho == pytest.approx(0.95, abs=0.03)
    assert world.label == "dot" and world.latent_dim == 2


@pytest.mark.parametrize("arrays, options, message", [
    ({"x": np.zeros((10, 3)), "q": np.zeros((10, 2))}, {},
     "holds neither pairs (x, x_prime, z, z_prime) nor episodes (x, z, episode); it holds: q, x"),
    ({"x": np.zeros((8, 3)), "z": np.zeros((9, 2)), "episode": np.zeros(9)}, {},
     "must hold one observation per state (9 rows), got shape (8, 3)"),
    ({"x": np.zeros((9, 3)), "z": np.zeros((9, 2)), "episode": np.array([0, 0, 1, 1, 0, 2, 2, 2, 2])},
     {}, "each episode's frames must be consecutive"),
    ({"x": np.zeros((30, 3)), "z": np.random.default_rng(0).standard_normal((30, 2)),
      "episode": np.zeros(30)}, {}, "evaluation part holds 5 pairs (of 29); it needs at least 10"),
    ({"x": np.zeros((300, 3)), "z": np.random.default_rng(0).standard_normal((300, 2)),
      "episode": np.zeros(300)}, {}, "not in (0, 1): pass rho"),
    ({"x": np.zeros((300, 2, 2)), "z": np.zeros((300, 2)), "episode": np.zeros(300)}, {},
     "must be vectors (rows × D numbers) or RGB images"),
])
def test_bad_recordings_are_one_line(tmp_path, arrays, options, message):
    np.savez(tmp_path / "r.npz", **arrays)
    with pytest.raises(IdauditError) as err:
        make_spec("recorded", data=str(tmp_path / "r.npz"), **options)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_angles_out_of_range_and_rho_given(dots):
    img, z, ep = dots
    with pytest.raises(IdauditError, match="angles: latent 2 is out of range for 2 latents"):
        ArrayWorld(img, z=z, episodes=ep, angles=(2,))
    assert ArrayWorld(img, z=z, episodes=ep, rho=0.5).rho == 0.5


# ---- every route, the same numbers -----------------------------------------------------

def test_every_route_gives_the_same_audit(tmp_path, dots):
    """audit(encoder, world=ArrayWorld), audit(encoder, data=FILE) with key options, and the
    command line on the same file give the same metrics; WorldPairs holds the training part."""
    img, z, ep = dots
    np.savez(tmp_path / "dot.npz", pixels=img, qpos=z, episode=ep)
    net = DotEncoder().eval()
    keys = {"observations": "pixels", "latents": "qpos"}
    by_world = idaudit.audit(encoder=net, world=ArrayWorld(img, z=z, episodes=ep, name="dot"),
                             n_eval=200)
    by_data = idaudit.audit(encoder=net, data=str(tmp_path / "dot.npz"), n_eval=200, **keys)
    for key in ("r2_h_to_z_heldout", "orthogonality_error", "procrustes_mse", "bound", "mcc"):
        assert by_world.metrics[key] == pytest.approx(by_data.metrics[key], rel=1e-9), key
    assert by_world.world["extra"]["label"] == "dot"
    assert by_data.world["extra"]["label"] == "dot"
    pairs = idaudit.WorldPairs(ArrayWorld(img, z=z, episodes=ep))
    assert len(pairs) == len(ArrayWorld(img, z=z, episodes=ep).train_rows)
    x, xp, zz, zp = pairs[0]
    assert x.shape == (SIZE, SIZE, 3) and zz.shape == (2,)


def test_train_audit_and_plan_on_the_command_line(tmp_path, dots):
    """train --data on the recording, then audit with the checkpoint's own world and with
    --data: the same numbers; plan runs on it."""
    img, z, ep = dots
    np.savez(tmp_path / "dot.npz", x=img, z=z, episode=ep)
    cli = [sys.executable, "-m", "idaudit"]

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*cli, *args], capture_output=True, text=True, cwd=tmp_path,
                              timeout=600)

    done = run("train", "--data", "dot.npz", "--epochs", "1", "--batch", "128",
               "--out", "enc.safetensors")
    assert done.returncode == 0, done.stderr
    own = run("audit", "enc.safetensors", "--json", "own.json")
    given = run("audit", "enc.safetensors", "--data", "dot.npz", "--json", "given.json")
    assert own.returncode == 0 and given.returncode == 0, own.stderr + given.stderr
    a = json.loads((tmp_path / "own.json").read_text())["metrics"]
    b = json.loads((tmp_path / "given.json").read_text())["metrics"]
    assert a["r2_h_to_z_heldout"] == b["r2_h_to_z_heldout"]
    assert a["procrustes_mse"] == b["procrustes_mse"]
    plan = run("plan", "enc.safetensors", "--pairs", "8", "--gallery", "200", "--json", "p.json")
    assert plan.returncode == 0, plan.stderr
    assert json.loads((tmp_path / "p.json").read_text())["pairs"] == 8
    wrong = run("audit", "enc.safetensors", "--data", "dot.npz", "--latents", "qpos")
    assert wrong.returncode == 2 and "nor episodes (x, qpos, episode)" in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1


def test_a_sweep_embed_and_consistency_on_the_recording(tmp_path, dots):
    """A sweep (a TOML suite on the recording, its checkpoints kept): each run's record holds
    the numbers `idaudit audit` gives its checkpoint later, found through the path the
    checkpoint stores relative to itself; embed → audit of the .npz gives them again;
    consistency compares the two seeds' runs."""
    img, z, ep = dots
    np.savez(tmp_path / "dot.npz", x=img, z=z, episode=ep)
    (tmp_path / "suite.toml").write_text('[fixed]\ndata = "dot.npz"\nepochs = 1\n'
                                         'batch = 128\n[grid]\nseed = [0, 1]\n')
    cli = [sys.executable, "-m", "idaudit"]

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*cli, *args], capture_output=True, text=True, cwd=tmp_path,
                              timeout=600)

    done = run("sweep", "suite.toml", "--out", "out", "--checkpoints", "--workers", "1")
    assert done.returncode == 0, done.stderr
    records = sorted((tmp_path / "out" / "runs").glob("*.json"))
    assert len(records) == 2
    keys = ("r2_h_to_z_heldout", "orthogonality_error", "procrustes_mse", "bound")
    checkpoints = []
    for record in records:
        swept = json.loads(record.read_text())
        assert swept["status"] == "ok" and swept["world"]["name"] == "recorded"
        ckpt = tmp_path / "out" / "checkpoints" / f"{swept['id']}.safetensors"
        checkpoints.append(str(ckpt))
        audited = run("audit", str(ckpt), "--json", f"{swept['id']}.json")
        assert audited.returncode == 0, audited.stderr
        later = json.loads((tmp_path / f"{swept['id']}.json").read_text())["metrics"]
        for key in keys:
            assert later[key] == pytest.approx(swept["metrics"][key], rel=1e-9), key
    embedded = run("embed", checkpoints[0], "--out", "h.npz")
    assert embedded.returncode == 0, embedded.stderr
    again = run("audit", "h.npz", "--json", "again.json")
    assert again.returncode == 0, again.stderr
    first = json.loads((tmp_path / f"{Path(checkpoints[0]).stem}.json").read_text())["metrics"]
    arrays = json.loads((tmp_path / "again.json").read_text())["metrics"]
    for key in keys:
        assert arrays[key] == pytest.approx(first[key], rel=1e-9), key
    agree = run("consistency", *checkpoints, "--json", "c.json")
    assert agree.returncode == 0, agree.stderr
    pairs = json.loads((tmp_path / "c.json").read_text())
    assert 0.0 < pairs["metrics"]["consistency_r2"] <= 1.0


ENCODERS_PY = """from torch import nn


def network():
    return nn.Sequential(nn.Conv2d(3, 8, 3, 2), nn.GELU(), nn.Flatten(), nn.Linear(8 * 7 * 7, 2))
"""


def test_the_monitor_on_a_recording_gives_the_command_s_numbers(tmp_path, dots, monkeypatch):
    """The Lightning monitor validating on the recording's held-out pairs (EvalRows(data=…))
    while a module trains on WorldPairs(data=…): the command it gives, run through the CLI on
    the checkpoint ModelCheckpoint saved, reports every number it shares with the monitor."""
    L = pytest.importorskip("lightning")
    from conftest import run
    from lightning.pytorch.callbacks import ModelCheckpoint

    from idaudit.lightning import EvalRows, IdentifiabilityMonitor

    img, z, ep = dots
    np.savez(tmp_path / "dot.npz", pixels=img, qpos=z, episode=ep)
    (tmp_path / "dot_encoders.py").write_text(ENCODERS_PY)  # a name no other test's module has
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    from dot_encoders import network

    class Encoder(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = network()

        def forward(self, batch):  # images as idaudit gives them: float N×3×S×S in [0, 1]
            h, hp = (self.net(batch[k].permute(0, 3, 1, 2).float() / 255)
                     for k in ("x", "x_prime"))
            cov = torch.cov(torch.cat([h, hp]).T)
            loss = (h - hp).square().sum(1).mean() + (cov - torch.eye(2)).square().sum()
            return {"embedding": h, "embedding_prime": hp, "loss": loss}

        def training_step(self, batch, batch_idx):
            return self(batch)["loss"]

        def validation_step(self, batch, batch_idx):
            return self(batch)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=3e-3)

    keys = {"observations": "pixels", "latents": "qpos"}
    train = idaudit.WorldPairs(data="dot.npz", as_dict=True, **keys)
    val = EvalRows(data="dot.npz", seed=0, **keys)
    assert len(val) == len(ArrayWorld(img, z=z, episodes=ep).eval_rows)
    monitor = IdentifiabilityMonitor(pair_key="embedding_prime", rho=val.eval.rho)
    torch.manual_seed(0)
    L.Trainer(max_epochs=1, logger=False, accelerator="cpu", enable_progress_bar=False,
              enable_model_summary=False,
              callbacks=[monitor, ModelCheckpoint(dirpath="ckpt", filename="last")]).fit(
        Encoder(), torch.utils.data.DataLoader(train, batch_size=128, shuffle=True),
        torch.utils.data.DataLoader(val, batch_size=128))
    assert monitor.rows["exact"], monitor.rows
    assert monitor.rows["text"].startswith(f"validation loader 0: all {len(val)} rows of the "
                                           "evaluation set of the recording dot.npz")
    [words] = monitor.commands("ckpt/last.ckpt", "dot_encoders:network", prefix="net.")
    assert words[:2] == ["idaudit", "audit"] and words[words.index("--data") + 1] == "dot.npz"
    res = run(*words[1:], "--json", "audit.json")
    assert res.exit_code == 0, res.output
    got = json.loads((tmp_path / "audit.json").read_text())["metrics"]
    shared = sorted(k for k in got if k in monitor.metrics)
    assert {"r2_h_to_z_heldout", "procrustes_mse", "orthogonality_error", "bound",
            "latent_cov_error"} <= set(shared)
    assert got["latents_standardized"] is True  # a recording's z: standardised on both routes
    for k in shared:
        assert float(got[k]) == pytest.approx(monitor.metrics[k], rel=1e-6, abs=1e-12), k


def test_the_guide_runs_as_written(tmp_path):
    """docs/own-world.md: its Python block (a simulator, ArrayWorld, a loop over WorldPairs,
    an audit), then its shell block (train --data, audit, plan) on the file the block wrote."""
    import re
    import shlex

    doc = (Path(__file__).resolve().parents[1] / "docs" / "own-world.md").read_text()
    python = re.search(r"^```python\n(.*?)^```", doc, re.M | re.S).group(1)
    shell = re.search(r"^```bash\n(.*?)^```", doc, re.M | re.S).group(1)
    from test_doc_examples import doc_env

    done = subprocess.run([sys.executable, "-c", python], capture_output=True, text=True,
                          cwd=tmp_path, timeout=600, env=doc_env("docs/own-world.md",
                                                                 "import numpy as np"))
    assert done.returncode == 0, done.stderr
    rho_line, audit_line = done.stdout.strip().splitlines()
    assert float(rho_line.split(": ")[1]) == pytest.approx(0.95, abs=0.03)
    r2, label = audit_line.split()
    assert label == "mydot" and -1 <= float(r2) <= 1
    for line in shell.strip().splitlines():
        args = shlex.split(line)
        assert args[0] == "idaudit"
        ran = subprocess.run([sys.executable, "-m", "idaudit", *args[1:]], capture_output=True,
                             text=True, cwd=tmp_path, timeout=600, env=doc_env(
                                 "docs/own-world.md", "idaudit train --data mydot.npz --epochs 2 "
                                 "--out mydot.safetensors"))
        assert ran.returncode == 0, (line, ran.stderr)
    report = json.loads((tmp_path / "mydot-audit.json").read_text())
    assert report["world"]["name"] == "recorded" and report["world"]["extra"]["label"] == "mydot"
