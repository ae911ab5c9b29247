"""The train → audit contract: self-describing safetensors checkpoints.

A checkpoint holds the encoder's weights and, as JSON strings in the safetensors
metadata, everything needed to rebuild it and its world:

``format`` = "idaudit-checkpoint", ``format_version``, ``encoder`` ({name, kwargs}),
``world`` (a WorldSpec; a dataset-backed world's data path is stored relative to the
checkpoint's folder), ``train`` (the resolved TrainConfig), ``metrics`` (at save time) and
``idaudit_version``. Loading never unpickles anything.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from idaudit.core.atomic import atomic_write
from idaudit.core.errors import MAX_SEED, IdauditError, first_line
from idaudit.core.jsontext import jsonable, parse_json_object
from idaudit.core.metadata import CHECKPOINT_FORMAT, read_metadata
from idaudit.core.version import __version__
from idaudit.models.encoders import build_encoder
from idaudit.worlds import WorldSpec, validate_spec

__all__ = ["checkpoint_world", "load_checkpoint", "save_checkpoint"]

FORMAT = CHECKPOINT_FORMAT
FORMAT_VERSION = 1


@dataclass
class Checkpoint:
    encoder: nn.Module
    encoder_name: str
    encoder_kwargs: dict[str, Any]
    world: WorldSpec
    train: dict[str, Any]
    metrics: dict[str, Any]
    path: Path | None = None


def save_checkpoint(path: str | Path, encoder: nn.Module, encoder_name: str,
                    encoder_kwargs: dict[str, Any], world: WorldSpec,
                    train: dict[str, Any] | None = None,
                    metrics: dict[str, Any] | None = None) -> Path:
    from safetensors.torch import save_file

    tensors = {k: v.detach().cpu().contiguous() for k, v in encoder.state_dict().items()}
    meta = {
        "format": FORMAT,
        "format_version": str(FORMAT_VERSION),
        "encoder": json.dumps({"name": encoder_name, "kwargs": jsonable(encoder_kwargs)}),
        "world": json.dumps(jsonable(world.to_dict())),
        "train": json.dumps(jsonable(train or {})),
        "metrics": json.dumps(jsonable(metrics or {})),
        "idaudit_version": __version__,
    }
    return atomic_write(path, lambda tmp: save_file(tensors, tmp, metadata=meta))


def _check_metadata(enc: Any, train: Any, metrics: Any) -> None:
    """Types and ranges of the fields audit and plan use (a ValueError names the field)."""
    if not isinstance(enc, dict) or not isinstance(enc.get("name"), str):
        raise ValueError("encoder.name must be a string")
    if not isinstance(enc.get("kwargs") or {}, dict):
        raise ValueError("encoder.kwargs must be an object")
    if not isinstance(train, dict) or not isinstance(metrics, dict):
        raise ValueError("train and metrics must be objects")
    n_eval, seed = train.get("n_eval"), train.get("seed", 0)
    if n_eval is not None:
        from idaudit.core.limits import check

        check("n_eval", n_eval, "train.n_eval")
    if not (isinstance(seed, int) and 0 <= seed <= MAX_SEED):
        raise ValueError(f"train.seed must be an integer in [0, {MAX_SEED}], got {seed!r}")


def _world_of(meta: dict[str, str]) -> WorldSpec:
    """The world spec of a checkpoint's metadata, validated (a ValueError names the fault)."""
    return validate_spec(WorldSpec.from_dict(parse_json_object(meta.get("world", "{}"),
                                                               "section 'world'")))


def checkpoint_world(path: str | Path) -> WorldSpec | None:
    """The world the idaudit checkpoint at ``path`` was trained on, from its metadata alone
    (no weights read); None where ``path`` is no idaudit checkpoint or its world is
    malformed (:func:`load_checkpoint` then says why)."""
    try:
        if not os.path.isfile(path):
            return None
        meta = read_metadata(path)
        if meta.get("format") != FORMAT or meta.get("format_version") != str(FORMAT_VERSION):
            return None
        return _world_of(meta)
    except (ValueError, TypeError, OSError):  # IdauditError is a ValueError
        return None


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Rebuild the encoder and world spec from an idaudit checkpoint."""
    from safetensors.torch import load_file

    path = Path(path)
    meta = read_metadata(path)
    if meta.get("format") != FORMAT:
        raise IdauditError(f"{path} is a safetensors file but not an idaudit checkpoint "
                           "(no 'format: idaudit-checkpoint' metadata)")
    version = meta.get("format_version", "?")
    if version != str(FORMAT_VERSION):
        raise IdauditError(f"{path} has checkpoint format version {version}; this idaudit "
                           f"reads version {FORMAT_VERSION}")
    try:
        missing = [k for k in ("encoder", "world") if k not in meta]
        if missing:
            raise ValueError(f"no {missing[0]!r} section")
        enc = parse_json_object(meta.get("encoder", "{}"), "section 'encoder'")
        world = _world_of(meta)
        train, metrics = (parse_json_object(meta.get(k, "{}"), f"section {k!r}")
                          for k in ("train", "metrics"))
        _check_metadata(enc, train, metrics)
    except (ValueError, TypeError) as exc:  # IdauditError is a ValueError
        raise IdauditError(f"{path} has malformed idaudit metadata ({first_line(exc)})") \
            from None
    encoder = build_encoder(enc["name"], enc.get("kwargs") or {})
    try:
        state = load_file(str(path))
    except Exception as exc:
        raise IdauditError(f"cannot read the weights in {path} ({first_line(exc)})") from None
    try:
        encoder.load_state_dict(state)
    except RuntimeError as exc:
        raise IdauditError(f"{path}: weights do not fit encoder {enc['name']!r} "
                           f"({first_line(exc)})") from None
    encoder.eval()
    return Checkpoint(encoder, enc["name"], enc.get("kwargs") or {}, world, train, metrics, path)
