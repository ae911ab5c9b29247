"""The Reacher world's kind: its options, specs, rendering, training defaults and recipes.

A Reacher spec keeps the dataset's own spec (mode, ρ or stride, pairs, evaluation images, the
dataset's seed) and the directory; ``idaudit world reacher`` and sweeps render the dataset
(:func:`~idaudit.worlds.reacher.data.build_dataset`), :class:`ReacherWorld` reads it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from idaudit.core.defaults import WORLD_DEFAULTS
from idaudit.core.errors import IdauditError
from idaudit.worlds.base import EvalSet, World
from idaudit.worlds.dataset import locate, stored_at
from idaudit.worlds.kind import Recipe, WorldKind
from idaudit.worlds.reacher.data import ReacherSpec, build_dataset, read_meta
from idaudit.worlds.reacher.world import NAME, ReacherWorld, dataset_of
from idaudit.worlds.spec import WorldSpec, check_fields, check_type

__all__ = ["REACHER_KIND", "ReacherKind"]

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


def spec_from_dataset(rspec: ReacherSpec, data: str | Path | None,
                      meta: dict[str, Any] | None = None) -> WorldSpec:
    """The world spec of a dataset (``meta``: its meta.json, for trajectory datasets' ρ₀, ρ₁;
    the spec's ρ is then their mean)."""
    extra: dict[str, Any] = {"data": None if data is None else str(data),
                             "dataset": dataclasses.asdict(rspec), "circular": [0, 1]}
    rho = rspec.rho
    if meta is not None and rspec.mode == "trajectory":
        extra.update(rho_0=meta["rho_0"], rho_1=meta["rho_1"])
        rho = float(np.mean([meta["rho_0"], meta["rho_1"]]))
    return WorldSpec(name=NAME, dim=2, source="gaussian" if rspec.mode == "ou" else "trajectory",
                     rho=rho, extra=extra)


def default_dir(rspec: ReacherSpec, root: Path) -> Path:
    """Where a sweep renders a dataset that names no directory."""
    name = rspec.default_dir().name + (f"-e{rspec.n_eval}" if rspec.n_eval != 10_000 else "")
    return Path(root) / name


class ReacherKind(WorldKind):
    """Reacher datasets: rendered by ``idaudit world reacher`` (a directory) or a sweep."""

    world = ReacherWorld
    options: ClassVar[frozenset[str]] = frozenset({*DATASET_OPTIONS, "data"})
    refuses: ClassVar[frozenset[str]] = frozenset({"steps", "n_eval"})
    writes_directory: ClassVar[bool] = True

    def make_spec(self, name: str, options: dict[str, Any]) -> WorldSpec:
        given = dataset_spec(options)
        data = options.get("data")
        if data is not None and self.data_exists(data):
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
        return spec_from_dataset(rspec, data)

    def check_spec(self, spec: WorldSpec) -> WorldSpec:
        """A spec read from a checkpoint: ``extra`` holds the dataset's path (a string, or
        None before it is rendered), its spec, the angle indices and the per-joint ρ."""
        super().check_spec(spec)
        what = f"world {spec.name!r}: extra"
        check_fields(spec.extra, what, {"data", "dataset", "circular", "rho_0", "rho_1"})
        check_type(spec.extra.get("data"), "string", f"{what}.data", optional=True)
        dataset_of(spec)
        for key in ("rho_0", "rho_1"):
            check_type(spec.extra.get(key), "number", f"{what}.{key}", optional=True)
        return spec

    def prepare(self, spec: WorldSpec, data_root: Path, workers: int | None = None,
                progress: bool = False) -> WorldSpec:
        """Render (or resume) the dataset: at its ``data`` path, else under ``data_root``."""
        rspec = dataset_of(spec)
        root = Path(spec.extra.get("data") or default_dir(rspec, data_root))
        build_dataset(root, rspec, workers=workers, progress=progress)
        return spec_from_dataset(rspec, root, read_meta(root))

    def from_spec(self, spec: WorldSpec, base_dir: Path | None = None) -> ReacherWorld:
        data = spec.extra.get("data")
        if not data:
            raise IdauditError("the Reacher world has no rendered dataset yet; pass --data DIR "
                               "(from `idaudit world reacher`)")
        root = locate(data, base_dir, "Reacher dataset")
        meta = read_meta(root)
        if meta.get("status") != "complete":
            raise IdauditError(f"{root} is only partly rendered; rerun the same `idaudit world "
                               "reacher` command to finish it")
        return ReacherWorld(spec_from_dataset(ReacherSpec(**meta["spec"]), root, meta), root)

    def example_options(self, directory: Path) -> dict[str, Any]:
        """A small dataset rendered under ``directory``: 64 pairs of 16 × 16 images."""
        options = {"pairs": 64, "n_eval": 64, "image_size": 16}
        root = directory / "reacher"
        build_dataset(root, ReacherSpec(**dataset_spec(options)), workers=1)
        return {"data": str(root)}

    def files(self, spec: WorldSpec, base_dir: Path | None = None, *,
              cache_dir: str | Path | None = None, data_root: Path | None = None
              ) -> list[Path]:
        """The dataset directory (found as :meth:`from_spec` finds it, or where
        :meth:`prepare` renders it under ``data_root``), else the cache of rendered
        evaluation pairs (:meth:`evaluation_set`)."""
        data = spec.extra.get("data")
        if data:
            return [stored_at(data, base_dir)]
        if data_root is not None:
            return [default_dir(dataset_of(spec), data_root)]
        from idaudit.worlds.reacher.eval_pairs import cache_root

        return [cache_root(cache_dir)]

    def write(self, spec: WorldSpec, out: Path, pairs: int, seed: int, workers: int | None,
              progress: bool = False) -> str:
        rspec = dataclasses.replace(dataset_of(spec), pairs=pairs, seed=seed).validate()
        build_dataset(out, rspec, workers=workers, progress=progress)
        meta = read_meta(out)
        extra = (f"; per-joint autocorrelation ρ₀ = {meta['rho_0']:.3f}, "
                 f"ρ₁ = {meta['rho_1']:.3f}" if rspec.mode == "trajectory" else "")
        return (f"Reacher dataset ({rspec.mode}, {pairs} pairs, {rspec.n_eval} eval images) in "
                f"{out}{extra}")

    def data_exists(self, data: str | Path) -> bool:
        return (Path(data) / "meta.json").exists()

    def evaluation_set(self, spec: WorldSpec, n: int | None, seed: int,
                       cache_dir: str | Path | None = None, progress: bool = False
                       ) -> EvalSet | None:
        """Without a dataset (no ``--data``): ``n`` OU pairs (z, z′) at the spec's ρ, both
        rendered at its image size and cached (:func:`reacher_eval_set`); the held-out rows
        are a seeded split. With a dataset: None (the world's own evaluation set)."""
        if spec.extra.get("data"):
            return None
        rspec = dataset_of(spec)
        if rspec.mode != "ou":
            raise IdauditError("an evaluation set without a dataset needs OU pairs (--rho); "
                               "trajectory pairs come from a rendered dataset (--data DIR)")
        from idaudit.worlds.reacher.eval_pairs import reacher_eval_set

        n = WORLD_DEFAULTS["rendered_eval_pairs"] if n is None else n
        return reacher_eval_set(rspec.rho, rspec.image_size, n, cache_dir=cache_dir,
                                progress=progress)

    def probe_input(self, spec: WorldSpec, rows: int, base_dir: Path | None = None
                    ) -> np.ndarray:
        """``rows`` images of the evaluation set's size (uint8, rows × S × S × 3), seeded
        noise: nothing rendered, no dataset read."""
        size = dataset_of(spec).image_size
        return np.random.default_rng(0).integers(0, 256, (rows, size, size, 3), dtype=np.uint8)

    def evaluation_rows(self, spec: WorldSpec, n: int | None, base_dir: Path | None = None
                        ) -> int | None:
        """Without a dataset: the ``n`` pairs :meth:`evaluation_set` renders (its default
        where None); with one: None (the dataset tells)."""
        if spec.extra.get("data") or dataset_of(spec).mode != "ou":
            return None
        return WORLD_DEFAULTS["rendered_eval_pairs"] if n is None else n

    def default_encoder(self, world: World | WorldSpec) -> tuple[str, dict[str, Any]]:
        """The paper's pixel CNN, normalised by the dataset's channel mean and std (a spec is
        built first: its dataset must be found)."""
        built = self.built(world)
        meta = read_meta(built.root)
        return "pixel_cnn", {"mean": meta["channel_mean"], "std": meta["channel_std"],
                             "image_size": dataset_of(built.spec).image_size}

    def train_defaults(self) -> dict[str, Any]:
        return {"views": "pair", "epochs": 100, "lamb": 5e-3, "weight_decay": 1e-4,
                "clip": 1.0, "schedule": "cosine_epochs", "eval_every": 0}

    def recipes(self) -> dict[str, Recipe]:
        return dict(RECIPES)


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

REACHER_KIND = ReacherKind()  # registered as "reacher" in core/registered.py
