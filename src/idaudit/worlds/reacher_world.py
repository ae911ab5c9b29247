"""The Reacher pixel world: a dataset-backed World over a rendered dataset directory.

Its spec keeps the dataset's own spec (mode, ρ or stride, pairs, evaluation images, the
dataset's seed) and the directory (stored relative to a checkpoint). The dataset's seed is
not a training seed: one dataset serves every training seed.
"""

from __future__ import annotations

import dataclasses
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from ..errors import IdauditError, require
from ..io import check_memory
from .base import KINDS, EpochPairs, EvalSet, PlanSet, Recipe, World
from .dataset import locate, relative_path
from .reacher_data import ReacherData, ReacherSpec, build_dataset, load_dataset, read_meta
from .spec import WorldSpec, check_fields, check_type

NAME = "reacher"
N_FIT = 10_000  # training images the audit's linear maps are fitted on
PLAN_INSIDE = 2.5  # plan between gallery images whose angles all lie within ±2.5

# world option → ReacherSpec field
DATASET_OPTIONS = {"rho": "rho", "mode": "mode", "trajectory": "mode", "stride": "stride",
                   "pairs": "pairs", "n_eval": "n_eval", "data_seed": "seed",
                   "image_size": "image_size"}


def dataset_spec(options: dict[str, Any]) -> dict[str, Any]:
    """The ReacherSpec fields the user set (``trajectory`` = True means ``mode`` trajectory)."""
    out = {}
    for opt, field in DATASET_OPTIONS.items():
        if opt in options:
            value = options[opt]
            if opt == "trajectory":
                value = "trajectory" if check_type(value, "boolean", "--trajectory") else "ou"
            out[field] = value
    if "mode" in options and "trajectory" in options and out["mode"] != options["mode"]:
        raise IdauditError("--trajectory contradicts mode " + repr(options["mode"]))
    return out


class ReacherWorld(World):
    """MuJoCo Reacher joint angles (shoulder, wrist) seen as RGB images (64 × 64 by default)."""

    options: ClassVar[frozenset[str]] = frozenset({*DATASET_OPTIONS, "data"})
    refuses: ClassVar[frozenset[str]] = frozenset({"steps", "n_eval"})
    writes_directory = True

    def __init__(self, spec: WorldSpec, root: Path) -> None:
        self.spec = spec
        self.root = Path(root)

    # ---- specs -----------------------------------------------------------------------

    @classmethod
    def make_spec(cls, name: str, options: dict[str, Any]) -> WorldSpec:
        given = dataset_spec(options)
        data = options.get("data")
        if data is not None and cls.data_exists(data):
            stored = read_meta(data)["spec"]
            stored = dataclasses.asdict(ReacherSpec(**stored))  # older datasets: defaults
            differ = {opt: (options[opt], stored.get(field))
                      for opt, field in DATASET_OPTIONS.items()
                      if opt in options and stored.get(field) != given[field]}
            if differ:
                said = ", ".join(f"--{k.replace('_', '-')} {v[0]} (the data: {v[1]})"
                                 for k, v in differ.items())
                raise IdauditError(f"{data} holds a different Reacher dataset: {said}; drop "
                                   "the option or choose another --data")
            rspec = ReacherSpec(**stored)
        else:
            rspec = ReacherSpec(**given)
        rspec.validate()
        return cls.spec_from_dataset(rspec, data)

    @staticmethod
    def spec_from_dataset(rspec: ReacherSpec, data: str | Path | None,
                          meta: dict[str, Any] | None = None) -> WorldSpec:
        extra: dict[str, Any] = {"data": None if data is None else str(data),
                                 "dataset": dataclasses.asdict(rspec), "circular": [0, 1]}
        rho = rspec.rho
        if meta is not None and rspec.mode == "trajectory":
            extra.update(rho_0=meta["rho_0"], rho_1=meta["rho_1"])
            rho = float(np.mean([meta["rho_0"], meta["rho_1"]]))
        return WorldSpec(name=NAME, dim=2,
                         source="gaussian" if rspec.mode == "ou" else "trajectory",
                         rho=rho, extra=extra)

    @classmethod
    def check_spec(cls, spec: WorldSpec) -> WorldSpec:
        """A spec read from a checkpoint: ``extra`` holds the dataset's path (a string, or
        None before it is rendered), its spec, the angle indices and the per-joint ρ."""
        super().check_spec(spec)
        what = f"world {spec.name!r}: extra"
        check_fields(spec.extra, what, {"data", "dataset", "circular", "rho_0", "rho_1"})
        check_type(spec.extra.get("data"), "string", f"{what}.data", optional=True)
        cls._rspec(spec)
        for key in ("rho_0", "rho_1"):
            check_type(spec.extra.get(key), "number", f"{what}.{key}", optional=True)
        return spec

    @classmethod
    def _rspec(cls, spec: WorldSpec) -> ReacherSpec:
        if "dataset" not in spec.extra:
            raise IdauditError("the Reacher world spec lacks its dataset description; "
                               "pass --data DIR")
        return ReacherSpec.from_dict(spec.extra["dataset"], f"world {spec.name!r}: "
                                     "extra.dataset")

    @classmethod
    def default_dir(cls, rspec: ReacherSpec, root: Path) -> Path:
        name = rspec.default_dir().name + (f"-e{rspec.n_eval}" if rspec.n_eval != 10_000 else "")
        return Path(root) / name

    @classmethod
    def prepare(cls, spec: WorldSpec, data_root: Path, workers: int | None = None,
                progress: bool = False) -> WorldSpec:
        """Render (or resume) the dataset: at its ``data`` path, else under ``data_root``."""
        rspec = cls._rspec(spec)
        root = Path(spec.extra.get("data") or cls.default_dir(rspec, data_root))
        build_dataset(root, rspec, workers=workers, progress=progress)
        return cls.spec_from_dataset(rspec, root, read_meta(root))

    @classmethod
    def from_spec(cls, spec: WorldSpec, base_dir: Path | None = None) -> ReacherWorld:
        data = spec.extra.get("data")
        if not data:
            raise IdauditError("the Reacher world has no rendered dataset yet; pass --data DIR "
                               "(from `idaudit world reacher`)")
        root = locate(data, base_dir, "Reacher dataset")
        meta = read_meta(root)
        if meta.get("status") != "complete":
            raise IdauditError(f"{root} is only partly rendered; rerun the same `idaudit world "
                               "reacher` command to finish it")
        return cls(cls.spec_from_dataset(ReacherSpec(**meta["spec"]), root, meta), root)

    @classmethod
    def write(cls, spec: WorldSpec, out: Path, pairs: int, seed: int, workers: int | None,
              progress: bool) -> str:
        rspec = dataclasses.replace(cls._rspec(spec), pairs=pairs, seed=seed).validate()
        build_dataset(out, rspec, workers=workers, progress=progress)
        meta = read_meta(out)
        extra = (f"; per-joint autocorrelation ρ₀ = {meta['rho_0']:.3f}, "
                 f"ρ₁ = {meta['rho_1']:.3f}" if rspec.mode == "trajectory" else "")
        return (f"Reacher dataset ({rspec.mode}, {pairs} pairs, {rspec.n_eval} eval images) in "
                f"{out}{extra}")

    @classmethod
    def data_exists(cls, data: str | Path) -> bool:
        return (Path(data) / "meta.json").exists()

    def spec_for(self, base_dir: Path | None) -> WorldSpec:
        return dataclasses.replace(self.spec, extra={**self.spec.extra,
                                                     "data": relative_path(self.root, base_dir)})

    # ---- the questions ---------------------------------------------------------------

    @cached_property
    def data(self) -> ReacherData:
        return load_dataset(self.root)

    @property
    def rho(self) -> float | None:
        """One ρ only for OU pairs; trajectory pairs differ per joint (see rho_per_dim)."""
        return self.spec.rho if self.spec.source == "gaussian" else None

    @property
    def rho_per_dim(self) -> list[float]:
        if self.rho is not None:
            return [self.rho, self.rho]
        return [float(self.spec.extra["rho_0"]), float(self.spec.extra["rho_1"])]

    @property
    def latent_labels(self) -> tuple[str, ...]:
        return ("shoulder (rad)", "wrist (rad)")

    def eval_set(self, n: int | None, seed: int) -> EvalSet:
        """Fit on (up to) 10 000 training images, score on the shared evaluation images.

        The alignment gap needs pairs whose correlation is one known ρ; it is left out.
        """
        require(n is None, "--n-eval does not apply to the Reacher world: its dataset fixes "
                "the evaluation images (`idaudit world reacher --n-eval N`)")
        d = self.data
        k = min(N_FIT, len(d.z))
        z = torch.from_numpy(np.concatenate([d.z[:k], d.z_eval]))
        x = np.concatenate([d.x[:k], d.x_eval])
        return EvalSet(z=z, x=x, test_rows=torch.arange(k, k + len(d.z_eval)),
                       circular=self.circular)

    def plan_set(self, pairs: int, gallery: int | None, seed: int) -> PlanSet:
        """The evaluation images are the gallery; starts and goals are drawn from those whose
        angles lie within ±2.5 rad (``gallery`` does not apply: the dataset fixes it)."""
        require(gallery is None, "--gallery does not apply to the Reacher world: its "
                "evaluation images are the gallery")
        size = self._rspec(self.spec).image_size
        check_memory(2 * pairs * size * size * 3,
                     f"drawing {pairs} start/goal pairs of images (--pairs)")
        d = self.data
        z = d.z_eval
        ok = np.flatnonzero((np.abs(z) < PLAN_INSIDE).all(1))
        rng = np.random.default_rng(seed)
        idx = rng.choice(ok, size=(pairs, 2), replace=len(ok) < 2 * pairs)
        zt = torch.from_numpy(z)
        return PlanSet(zt, d.x_eval, zt[idx[:, 0]], d.x_eval[idx[:, 0]], zt[idx[:, 1]],
                       d.x_eval[idx[:, 1]])

    def pair_source(self, views: str, batch: int, gen: torch.Generator, device: torch.device
                    ) -> EpochPairs:
        require(views == "pair", "--views anchor needs fresh latents; the Reacher world has "
                "only its rendered (x, x′) pairs")
        return EpochPairs(self.data.x, self.data.x_prime, batch, gen, device)

    def default_encoder(self) -> tuple[str, dict[str, Any]]:
        meta = read_meta(self.root)
        return "pixel_cnn", {"mean": meta["channel_mean"], "std": meta["channel_std"],
                             "image_size": self._rspec(self.spec).image_size}

    @classmethod
    def train_defaults(cls) -> dict[str, Any]:
        return {"views": "pair", "epochs": 100, "lamb": 5e-3, "weight_decay": 1e-4,
                "clip": 1.0, "schedule": "cosine_epochs", "eval_every": 0}

    @classmethod
    def recipes(cls) -> dict[str, Recipe]:
        return RECIPES


_DATASET = frozenset({"pairs", "image_size"})
_PAPER = {"pairs": 100_000, "image_size": 64, "epochs": 100, "encoder": "pixel_cnn",
          "encoder_kwargs": {"width": 32}}
# a recipe's note says why it exists; the line announcing a run is built from what will run
RECIPES = {
    "paper": Recipe(_PAPER, _DATASET, "the paper's configuration"),
    "cpu": Recipe(
        {"pairs": 60_000, "image_size": 32, "epochs": 20, "encoder": "pixel_cnn",
         "encoder_kwargs": {"width": 16}}, _DATASET,
        (f"for a CPU: the paper's {_PAPER['image_size']}×{_PAPER['image_size']} CNN over "
         f"{_PAPER['pairs']:,} pairs × {_PAPER['epochs']} epochs takes hours there; "
         "--recipe paper runs it").replace(",", " ")),
}

KINDS.add(NAME, ReacherWorld)
