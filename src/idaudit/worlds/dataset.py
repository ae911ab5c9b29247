"""Datasets of positive pairs written by ``idaudit world`` (safetensors + JSON metadata)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..errors import IdauditError
from ..io import atomic_write
from .spec import World, WorldSpec

FORMAT = "idaudit-world"
FORMAT_VERSION = 1


def save_pairs(path: str | Path, world: World, n: int, seed: int) -> Path:
    """Sample n pairs (z, z′ = OU(z)) and their observations; write them atomically."""
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(seed)
    z, zp = world.sample_pairs(n, gen)
    tensors = {"z": z, "z_prime": zp, "x": world.observe(z), "x_prime": world.observe(zp)}
    meta = {"format": FORMAT, "format_version": str(FORMAT_VERSION),
            "world": json.dumps(world.spec.to_dict()), "seed": str(seed), "pairs": str(n)}
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    return atomic_write(path, lambda tmp: save_file(tensors, tmp, metadata=meta))


def load_pairs(path: str | Path) -> tuple[WorldSpec, dict[str, torch.Tensor]]:
    from safetensors.torch import load_file

    from ..checkpoint import read_metadata

    meta = read_metadata(path)
    if meta.get("format") != FORMAT:
        raise IdauditError(f"{path} is not an idaudit world dataset")
    if meta.get("format_version") != str(FORMAT_VERSION):
        raise IdauditError(f"{path} has dataset format version {meta.get('format_version')}; "
                           f"this idaudit reads version {FORMAT_VERSION}")
    spec = WorldSpec.from_dict(json.loads(meta["world"]))
    return spec, load_file(str(path))
