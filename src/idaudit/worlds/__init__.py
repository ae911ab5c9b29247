"""Worlds with known latents: sources, the OU channel, mixings, specs."""

from .mixings import MIXINGS, CouplingMixing
from .sources import SOURCES, gennorm_scale, ou_step, sample_source
from .spec import SYNTHETIC_WORLDS, World, WorldSpec, build_world, make_spec

__all__ = [
    "MIXINGS", "SOURCES", "SYNTHETIC_WORLDS", "CouplingMixing", "World", "WorldSpec",
    "build_world", "gennorm_scale", "make_spec", "ou_step", "sample_source",
]
