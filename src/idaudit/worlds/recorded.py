"""A world from a user's own recordings: observations and their true states.

The paper's question — did the encoder learn the world? — is about the world the encoder was
trained on. A user who recorded that world (a simulator of their own, an environment's
episodes) brings it in one of two forms, from a file (``.npz``, a folder of ``.npy`` files,
safetensors or HDF5: :mod:`idaudit.core.arrayfiles`) or from arrays in memory
(:class:`ArrayWorld`):

* **pairs**: ``x``, ``x_prime`` (observations, rows × …) and ``z``, ``z_prime`` (their true
  states, rows × N), row for row: x′ is one step of the world's dynamics after x;
* **episodes**: ``x`` and ``z`` frame by frame, and ``episode`` (one integer per frame, each
  episode's frames consecutive and in time order; or ``ep_offset`` and ``ep_len``, each
  episode's first row and length, as stable-worldmodel's HDF5 datasets hold them); the pairs
  are (frame t, frame t + δ) of each episode, δ = ``stride``.

The key names are options (``--latents qpos``, ``--observations pixels``, ``--episodes
episode_idx``; the pairs' partners are ``NAME_prime``). Observations are vectors (rows × D
numbers) or RGB images (rows × H × W × 3, uint8). They stay in the file, memory-mapped or lazy
where its format allows; the states are read whole.

**Held-out data.** The last fifth of the episodes (of the pairs, in the pairs form; of the
frames, for a single episode) is the evaluation set audit, plan and a training run's
evaluation use; training draws only from the rest, and :meth:`RecordedWorld.pairs` (what
``WorldPairs`` holds) gives only the rest too.

**ρ.** Each state's correlation across its pairs is estimated from the pairs (z, z′): the
Pearson correlation of z_j and z′_j, or for a latent declared an angle (``angles``) the
circular correlation of Jammalamadaka and SenGupta; the world's ρ, which the bound and the
label-free signals take, is their mean — the ρ with which an encoder h = Qz of standardised
states shows δ = 0 — unless ``rho`` is given. :func:`estimate_rho` documents the estimator;
tests/test_recorded.py bounds its bias by simulation. Reading a recording is
:mod:`idaudit.worlds.recordings`'.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from idaudit.core.defaults import WORLD_DEFAULTS
from idaudit.core.errors import IdauditError, index_list, latent_indices, require
from idaudit.core.limits import check
from idaudit.core.memory import check_memory
from idaudit.worlds.base import EpochPairs, EvalSet, Pairs, PlanSet, World, stored_pairs, two_views
from idaudit.worlds.dataset import locate, relative_path, stored_at
from idaudit.worlds.kind import WorldKind
from idaudit.worlds.recordings import (
    KEY_DEFAULTS,
    KEY_OPTIONS,
    Recording,
    Rows,
    episodes_recording,
    estimate_rho,
    pairs_recording,
    read_recording,
)
from idaudit.worlds.spec import WorldSpec, check_fields, check_type

__all__ = ["ArrayWorld", "NAME", "RECORDED_KIND", "RecordedKind", "RecordedWorld",
           "recording_spec"]

NAME = "recorded"
# ---- the world ---------------------------------------------------------------------------

class RecordedWorld(World):
    """A recording as a world (:mod:`idaudit.worlds.recorded`): evaluation, planning and
    training views all from its pairs; its held-out part evaluates."""

    def __init__(self, spec: WorldSpec, recording: Recording, path: Path | None = None) -> None:
        self.spec, self.recording, self.path = spec, recording, path
        self.train_rows, self.eval_rows = recording.split()

    @property
    def label(self) -> str:
        """What the user calls this world (a file's name, ``ArrayWorld(name=…)``)."""
        return str(self.spec.extra.get("label", NAME))

    @property
    def rho_per_dim(self) -> list[float]:
        return [float(r) for r in self.spec.extra["rho_per_dim"]]

    def spec_for(self, base_dir: Path | None) -> WorldSpec:
        if self.path is None:
            return self.spec
        return dataclasses.replace(self.spec, extra={**self.spec.extra,
                                                     "data": relative_path(self.path, base_dir)})

    def _chosen(self, rows: np.ndarray, n: int | None, seed: int) -> np.ndarray:
        """``n`` of ``rows`` (None: all), a seeded draw kept in order."""
        if n is None or n >= len(rows):
            return rows
        check("n_eval", n, "--n-eval")
        return np.sort(np.random.default_rng(seed).choice(rows, n, replace=False))

    def _check_rows(self, rows: int, what: str) -> None:
        per_row = int(np.prod(self.recording.first.shape[1:]))
        itemsize = 1 if self.recording.first.images else 4
        check_memory(2 * rows * per_row * itemsize, f"{what} of the recorded world "
                     f"{self.label!r}")

    def eval_set(self, n: int | None, seed: int) -> EvalSet:
        """The held-out pairs (``n`` of them drawn from ``seed``; None: all)."""
        rows = self._chosen(self.eval_rows, n, seed)
        self._check_rows(len(rows), f"an evaluation set of {len(rows)} pairs")
        rec = self.recording
        x = rec.first.take(rows)
        return EvalSet(z=torch.from_numpy(rec.z[rows]), x=x, x_prime=rec.second.take(rows),
                       rho=self.rho, circular=self.circular,
                       baseline=None if rec.first.images else x)

    def plan_set(self, pairs: int, gallery: int | None, seed: int) -> PlanSet:
        """A gallery of training frames and start/goal frames held out, all recorded."""
        gallery = WORLD_DEFAULTS["gallery"] if gallery is None else gallery
        rng = np.random.default_rng(seed)
        rec = self.recording
        g = np.sort(rng.choice(self.train_rows, min(gallery, len(self.train_rows)),
                               replace=False))
        ends = rng.choice(self.eval_rows, (2, pairs), replace=len(self.eval_rows) < 2 * pairs)
        self._check_rows(len(g) + 2 * pairs, "a planning gallery and its start/goal frames")

        def frames(rows: np.ndarray) -> tuple[torch.Tensor, Any]:
            order = np.argsort(rows, kind="stable")
            back = np.empty_like(order)
            back[order] = np.arange(len(rows))
            x = rec.first.take(rows[order])
            return torch.from_numpy(rec.z[rows]), x[back] if isinstance(x, np.ndarray) else \
                x[torch.from_numpy(back)]

        gz, gx = frames(g)
        sz, sx = frames(ends[0])
        ez, ex = frames(ends[1])
        return PlanSet(gz, gx, sz, sx, ez, ex)

    def pairs(self, n: int | None = None, seed: int | None = None) -> Pairs:
        """The training pairs (the first ``n``; None: all): observations and states."""
        train = self.train_rows  # checked as stored pairs are (n in range, no seed)
        rows = stored_pairs(Pairs(train, train, train, train), n, seed,
                            f"the recorded world {self.label!r}").z
        self._check_rows(len(rows), "the training pairs")
        rec = self.recording

        def tensor(a: Any) -> torch.Tensor:
            return a if isinstance(a, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(a))

        return Pairs(tensor(rec.first.take(rows)), tensor(rec.second.take(rows)),
                     torch.from_numpy(rec.z[rows]), torch.from_numpy(rec.z_prime[rows]))

    def pair_source(self, views: str, batch: int, gen: torch.Generator, device: torch.device,
                    n_views: int = 2) -> EpochPairs:
        two_views(n_views, "a recorded world")
        require(views == "pair", "--views anchor needs fresh latents; a recorded world has "
                "only its (x, x′) pairs (use --views pair)")
        rows = self.train_rows
        rec = self.recording
        return EpochPairs(Rows(rec.first.base, rec.first.rows[rows]),
                          Rows(rec.second.base, rec.second.rows[rows]), batch, gen, device)


def recording_spec(recording: Recording, options: dict[str, Any], extra: dict[str, Any]
                   ) -> WorldSpec:
    """The spec of a recording: its dimension, its ρ (given or estimated), its angles."""
    recording.split()  # enough pairs for training and for evaluation, said before any work
    dim = recording.z.shape[1]
    angles = tuple(latent_indices(list(options.get("angles", ())), "--angles"))
    for i in angles:
        require(i < dim, f"--angles: latent {i} is out of range for {dim} latents")
    rhos = estimate_rho(recording.z, recording.z_prime, angles)
    if "rho" in options:
        rho = float(check("rho", options["rho"], "--rho"))
    else:
        rho = float(np.nanmean(rhos)) if np.isfinite(rhos).any() else float("nan")
        if not 0 < rho < 1:
            raise IdauditError(f"the recorded pairs' states correlate with ρ̂ = {rho:.3g} (per "
                               f"latent {', '.join(f'{r:.3g}' for r in rhos)}), not in (0, 1): "
                               "pass --rho, or pairs nearer in time (--stride)")
    return WorldSpec(name=NAME, dim=dim, source=NAME, rho=rho,
                     extra={**extra, "form": recording.form, "circular": list(angles),
                            "rho_per_dim": [None if not np.isfinite(r) else float(r)
                                            for r in rhos]})


def ArrayWorld(x: Any, x_prime: Any = None, z: Any = None, z_prime: Any = None, *,
               episodes: Any = None, stride: int = 1, name: str = "arrays",
               angles: tuple[int, ...] | list[int] = (), rho: float | None = None
               ) -> RecordedWorld:
    """A world from arrays in memory: pairs (``x``, ``x_prime``, ``z``, ``z_prime``) or episodes
    (``x``, ``z`` frame by frame and ``episodes``, pairs ``stride`` frames apart).

    Args:
        x, x_prime: observations, rows × D numbers or rows × H × W × 3 uint8 images.
        z, z_prime: their true states, rows × N.
        episodes: each frame's episode number (episodes form; leave ``x_prime``, ``z_prime``).
        stride: frames between a pair's views (episodes form).
        name: what reports call this world.
        angles: latents that are angles (radians).
        rho: the channel's ρ (default: estimated, :func:`estimate_rho`).

    Returns:
        A :class:`RecordedWorld` that audit, plan, embed, consistency, train,
        :class:`~idaudit.worlds.user_pairs.WorldPairs` and the monitor take as ``world=``.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> z = rng.standard_normal((400, 2))
        >>> zp = 0.9 * z + np.sqrt(0.19) * rng.standard_normal(z.shape)
        >>> w = ArrayWorld(np.tanh(z), np.tanh(zp), z, zp, name="tanh")
        >>> w.label, w.latent_dim, round(w.rho, 1)
        ('tanh', 2, 0.9)
    """
    check_type(name, "string", "name")
    options = {"angles": tuple(angles), **({"rho": rho} if rho is not None else {})}
    if episodes is not None:
        require(x_prime is None and z_prime is None, "ArrayWorld takes pairs (x, x_prime, z, "
                "z_prime) or episodes (x, z, episodes=…), not both")
        require(z is not None, "ArrayWorld with episodes needs z (the states of x)")
        rec = episodes_recording(x, z, episodes, stride, ("x", "z", "episodes"))
    else:
        require(x_prime is not None and z is not None and z_prime is not None,
                "ArrayWorld needs x, x_prime, z and z_prime (pairs), or x, z and episodes=…")
        rec = pairs_recording(x, x_prime, z, z_prime, ("x", "x_prime", "z", "z_prime"))
    return RecordedWorld(recording_spec(rec, options, {"label": name}), rec)


class RecordedKind(WorldKind):
    """The kind of recorded worlds: read from ``--data`` (a file of pairs or episodes)."""

    world = RecordedWorld
    options: ClassVar[frozenset[str]] = frozenset({"data", "stride", "rho", "angles",
                                                   *KEY_OPTIONS})
    refuses: ClassVar[frozenset[str]] = frozenset({"steps"})
    data_note: ClassVar[str] = "a recording of your own world"

    def make_spec(self, name: str, options: dict[str, Any]) -> WorldSpec:
        require("data" in options, "the recorded world reads a file: pass --data FILE (pairs "
                "or episodes of your own world)")
        keys = {k: options.get(k, KEY_DEFAULTS[k]) for k in KEY_OPTIONS}
        for k, v in keys.items():
            check_type(v, "string", "--" + k)
        stride = options.get("stride", 1)
        path = Path(options["data"])
        rec = read_recording(path, keys, stride)
        angles = options.get("angles", ())
        angles = index_list(angles, "--angles")
        extra = {"data": str(path), "label": path.stem, "keys": keys, "stride": stride}
        return recording_spec(rec, {**options, "angles": angles}, extra)

    def check_spec(self, spec: WorldSpec) -> WorldSpec:
        """A spec read from a checkpoint: where the file is, its keys, stride and ρ̂s."""
        super().check_spec(spec)
        what = f"world {spec.name!r}: extra"
        check_fields(spec.extra, what, {"data", "label", "keys", "stride", "form", "circular",
                                        "rho_per_dim"})
        check_type(spec.extra.get("data"), "string", f"{what}.data", optional=True)
        check_type(spec.extra.get("label"), "string", f"{what}.label", optional=True)
        keys = check_type(spec.extra.get("keys", {}), "object", f"{what}.keys")
        check_fields(keys, f"{what}.keys", set(KEY_OPTIONS))
        check_type(spec.extra.get("stride", 1), "integer", f"{what}.stride")
        check_type(spec.extra.get("rho_per_dim"), "list", f"{what}.rho_per_dim", optional=True)
        return spec

    def from_spec(self, spec: WorldSpec, base_dir: Path | None = None) -> RecordedWorld:
        if spec.extra.get("data") is None:
            raise IdauditError(f"the recorded world {spec.extra.get('label', NAME)!r} was "
                               "arrays in memory: pass --data FILE holding the same recording")
        path = locate(spec.extra["data"], base_dir, "recording")
        keys = {**KEY_DEFAULTS, **spec.extra.get("keys", {})}
        rec = read_recording(path, keys, int(spec.extra.get("stride", 1)))
        return RecordedWorld(spec, rec, path)

    def example_options(self, directory: Path) -> dict[str, Any]:
        """Episodes of a dot moving on a 2-D OU path, seen through a fixed nonlinear map."""
        rng = np.random.default_rng(0)
        frames, episodes = 60, 8
        z = np.zeros((episodes, frames, 2))
        z[:, 0] = rng.standard_normal((episodes, 2))
        for t in range(1, frames):
            z[:, t] = 0.95 * z[:, t - 1] + np.sqrt(1 - 0.95**2) * rng.standard_normal((episodes, 2))
        z = z.reshape(-1, 2)
        x = np.stack([np.tanh(z[:, 0]) + 0.3 * z[:, 1], z[:, 1] - 0.2 * z[:, 0] ** 2,
                      np.sin(z[:, 0])], 1)
        path = directory / "recording.npz"
        np.savez(path, x=x, z=z, episode=np.repeat(np.arange(episodes), frames))
        return {"data": str(path)}

    def files(self, spec: WorldSpec, base_dir: Path | None = None, **_: Any) -> list[Path]:
        data = spec.extra.get("data")
        return [] if data is None else [stored_at(data, base_dir)]

    def probe_input(self, spec: WorldSpec, rows: int, base_dir: Path | None = None
                    ) -> Any | None:
        """The recording's first ``rows`` frames where they are images (reading the whole
        evaluation set may take long); None for vectors. ``base_dir``: where its relative
        path is found from (the checkpoint's folder)."""
        world = self.from_spec(spec, base_dir)
        if not world.recording.first.images:
            return None
        return world.recording.first.take(np.arange(rows))

    def default_encoder(self, world: World | WorldSpec) -> tuple[str, dict[str, Any]]:
        """An MLP for vectors; for square RGB images, the paper's pixel CNN normalised by the
        training frames' channel mean and std."""
        built = self.built(world)
        assert isinstance(built, RecordedWorld)
        first = built.recording.first
        dim = built.latent_dim
        if not first.images:
            return "mlp", {"in_dim": int(first.shape[1]), "out_dim": dim}
        h, w = first.shape[1:3]
        require(h == w, f"the recorded world's images are {h}×{w}: the paper's CNN takes "
                "square images (pass --encoder with --encoder-kwargs)")
        sample = first.take(built.train_rows[:: max(1, len(built.train_rows) // 512)])
        pixels = sample.reshape(-1, 3).astype(np.float64) / 255.0
        return "pixel_cnn", {"mean": pixels.mean(0).tolist(),
                             "std": np.maximum(pixels.std(0), 1e-3).tolist(),
                             "image_size": int(h), "out_dim": dim}

    def train_defaults(self) -> dict[str, Any]:
        return {"views": "pair", "epochs": 100}


RECORDED_KIND = RecordedKind()  # registered as "recorded" in core/registered.py
