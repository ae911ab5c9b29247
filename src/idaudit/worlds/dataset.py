"""A dataset-backed world from a pairs file written by ``idaudit world`` (safetensors + spec).

Training draws views from the stored pairs (x, x′), epoch by epoch; the evaluation set is
the file's own rows; planning and the observation map come from the synthetic world that
wrote the file (its spec is in the file's metadata).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

import torch

from idaudit.core.errors import IdauditError, first_line, require
from idaudit.core.metadata import read_metadata
from idaudit.worlds.base import EpochPairs, EvalSet, Pairs, PlanSet, World, stored_pairs, two_views
from idaudit.worlds.kind import WorldKind
from idaudit.worlds.spec import WorldSpec, check_fields, check_type
from idaudit.worlds.synthetic import PAIRS_FORMAT, PAIRS_FORMAT_VERSION, SYNTHETIC, SyntheticWorld

__all__ = ["NAME", "PAIRS_KIND", "PairsFileWorld", "is_pairs_file", "load_pairs", "locate",
           "read_pairs_spec", "relative_path", "stored_at"]

NAME = "pairs"


def is_pairs_file(path: str | Path) -> bool:
    path = Path(path)
    if not path.is_file():
        return False
    try:
        return read_metadata(path).get("format") == PAIRS_FORMAT
    except IdauditError:
        return False


def read_pairs_spec(path: str | Path) -> WorldSpec:
    """The spec of the world that wrote the pairs file ``path`` (its metadata only)."""
    meta = read_metadata(path)
    if meta.get("format") != PAIRS_FORMAT:
        raise IdauditError(f"{path} is not an idaudit world dataset")
    if meta.get("format_version") != str(PAIRS_FORMAT_VERSION):
        raise IdauditError(f"{path} has dataset format version {meta.get('format_version')}; "
                           f"this idaudit reads version {PAIRS_FORMAT_VERSION}")
    from idaudit.core.jsontext import parse_json_object
    from idaudit.worlds.kind import KINDS
    from idaudit.worlds.names import validate_spec
    from idaudit.worlds.synthetic import SyntheticKind

    try:
        spec = validate_spec(WorldSpec.from_dict(parse_json_object(meta.get("world"),
                                                                   "metadata 'world'")))
        if not isinstance(KINDS.get(spec.name), SyntheticKind):  # a plugin's one too
            raise IdauditError(f"world {spec.name!r} is not a synthetic world")
    except (ValueError, TypeError) as exc:  # IdauditError is a ValueError
        raise IdauditError(f"{path} has a malformed world spec ({first_line(exc)})") from None
    return spec


PAIR_TENSORS = ("z", "z_prime", "x", "x_prime")


def load_pairs(path: str | Path) -> tuple[WorldSpec, dict[str, torch.Tensor]]:
    """The spec of the world that wrote ``path`` and its tensors z, z′, x, x′ (rows × the
    world's dimension, one row per pair)."""
    from safetensors.torch import load_file

    spec = read_pairs_spec(path)
    try:
        t = load_file(str(path))
    except Exception as exc:  # safetensors raises several types for corrupt files
        raise IdauditError(f"cannot read the tensors in {path} ({first_line(exc)})") from None
    missing = [k for k in PAIR_TENSORS if k not in t]
    if missing:
        raise IdauditError(f"{path} lacks the tensors {missing} of a pairs file")
    shape = (len(t["z"]), spec.dim)
    for k in PAIR_TENSORS:
        if tuple(t[k].shape) != shape or not t[k].is_floating_point():
            raise IdauditError(f"{path}: {k} has shape {tuple(t[k].shape)} and dtype "
                               f"{t[k].dtype}; a pairs file's are {shape} floats")
    return spec, t


def relative_path(path: str | Path, base_dir: Path | None) -> str:
    """``path`` relative to ``base_dir`` where possible (checkpoints move with their data)."""
    path = Path(path).resolve()
    if base_dir is None:
        return str(path)
    try:
        return os.path.relpath(path, Path(base_dir).resolve())
    except ValueError:  # another drive on Windows
        return str(path)


def _candidates(stored: str, base_dir: Path | None) -> list[Path]:
    """Where a dataset path from a spec is looked for, in order: relative to ``base_dir``
    (the checkpoint's folder), then as given."""
    return [Path(stored)] if Path(stored).is_absolute() else \
        ([Path(base_dir) / stored] if base_dir is not None else []) + [Path(stored)]


def stored_at(stored: str, base_dir: Path | None) -> Path:
    """The path :func:`locate` finds (the first place looked at when nothing is there)."""
    candidates = _candidates(stored, base_dir)
    return next((c for c in candidates if c.exists()), candidates[0])


def locate(stored: str, base_dir: Path | None, what: str) -> Path:
    """A dataset path from a spec: relative to ``base_dir`` (the checkpoint's folder), as
    given, or an error that says to pass ``--data``."""
    candidates = _candidates(stored, base_dir)
    for c in candidates:
        if c.exists():
            return c
    raise IdauditError(f"the {what} this encoder was trained on is not at {stored} (looked in "
                       f"{', '.join(str(c) for c in candidates)}); pass --data PATH")


class PairsFileWorld(World):
    """The pairs in a file written by ``idaudit world`` (a synthetic world, stored)."""

    def __init__(self, spec: WorldSpec, path: Path) -> None:
        self.spec = spec
        self.path = Path(path)
        inner, t = load_pairs(self.path)
        self.inner = SyntheticWorld(inner)
        self.tensors = t

    def spec_for(self, base_dir: Path | None) -> WorldSpec:
        from dataclasses import replace

        return replace(self.spec, extra={**self.spec.extra,
                                         "data": relative_path(self.path, base_dir)})

    def observe(self, z: torch.Tensor) -> torch.Tensor:
        return self.inner.observe(z)

    def eval_set(self, n: int | None, seed: int) -> EvalSet:
        t = self.tensors
        k = len(t["z"]) if n is None else min(n, len(t["z"]))
        return EvalSet(z=t["z"][:k], x=t["x"][:k], x_prime=t["x_prime"][:k], rho=self.rho,
                       circular=self.circular, baseline=t["x"][:k], z_white=True)

    def plan_set(self, pairs: int, gallery: int | None, seed: int) -> PlanSet:
        return self.inner.plan_set(pairs, gallery, seed)

    def pairs(self, n: int | None = None, seed: int | None = None) -> Pairs:
        """The file's first ``n`` pairs (None: all of them)."""
        t = self.tensors
        return stored_pairs(Pairs(t["x"], t["x_prime"], t["z"], t["z_prime"]), n, seed,
                            f"the pairs file {self.path}")

    def pair_source(self, views: str, batch: int, gen: torch.Generator, device: torch.device,
                    n_views: int = 2) -> EpochPairs:
        two_views(n_views, "a pairs file")
        require(views == "pair", "--views anchor needs fresh latents; a pairs file has only "
                "its (x, x′) pairs (use --views pair)")
        return EpochPairs(self.tensors["x"], self.tensors["x_prime"], batch, gen, device)


class PairsKind(WorldKind):
    """The pairs file's kind: read from ``--data``, trained on epoch by epoch."""

    world = PairsFileWorld
    options: ClassVar[frozenset[str]] = frozenset({"data"})
    refuses: ClassVar[frozenset[str]] = frozenset({"steps"})
    data_note: ClassVar[str] = "a pairs file from `idaudit world`"

    def make_spec(self, name: str, options: dict[str, Any]) -> WorldSpec:
        require("data" in options, "the pairs world reads a file: pass --data PAIRS.safetensors")
        path = Path(options["data"])
        inner = read_pairs_spec(path)
        pairs = read_metadata(path).get("pairs", "0")
        pairs = int(pairs) if pairs.isdigit() else 0  # only a summary: the tensors say
        return WorldSpec(name=NAME, dim=inner.dim, source=inner.source, alpha=inner.alpha,
                         rho=inner.rho, layers=inner.layers, mixing_seed=inner.mixing_seed,
                         extra={"data": str(path), "world": inner.to_dict(), "pairs": pairs})

    def check_spec(self, spec: WorldSpec) -> WorldSpec:
        """A spec read from a checkpoint: ``extra`` holds the pairs file's path (a string),
        the spec of the world that wrote it and its number of pairs."""
        super().check_spec(spec)
        what = f"world {spec.name!r}: extra"
        check_fields(spec.extra, what, {"data", "world", "pairs", "circular"})
        check_type(spec.extra.get("data"), "string", f"{what}.data")
        check_type(spec.extra.get("world"), "object", f"{what}.world", optional=True)
        check_type(spec.extra.get("pairs"), "integer", f"{what}.pairs", optional=True)
        return spec

    def from_spec(self, spec: WorldSpec, base_dir: Path | None = None) -> PairsFileWorld:
        return PairsFileWorld(spec, locate(spec.extra["data"], base_dir, "pairs file"))

    def example_options(self, directory: Path) -> dict[str, Any]:
        """A pairs file of 256 spiral pairs under ``directory``."""
        from idaudit.worlds.synthetic import SYNTHETIC, SyntheticWorld, save_pairs

        spec = SYNTHETIC.make_spec("spiral", {})
        return {"data": str(save_pairs(directory / "pairs.safetensors", SyntheticWorld(spec),
                                       256, 0))}

    def files(self, spec: WorldSpec, base_dir: Path | None = None, **_: Any) -> list[Path]:
        """The pairs file, where :meth:`from_spec` finds it."""
        return [stored_at(spec.extra["data"], base_dir)]

    def default_encoder(self, world: World | WorldSpec) -> tuple[str, dict[str, Any]]:
        """The encoder of the synthetic world that wrote the file (a spec is built first:
        its file must be found)."""
        return SYNTHETIC.default_encoder(self.built(world).inner)

    def train_defaults(self) -> dict[str, Any]:
        return {"views": "pair", "epochs": 100}


PAIRS_KIND = PairsKind()  # registered as "pairs" in core/registered.py
