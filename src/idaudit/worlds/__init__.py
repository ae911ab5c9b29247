"""Worlds with known latents behind one interface (:class:`World`) and one registry.

Synthetic worlds (sources × OU channel × mixing) and dataset-backed worlds (a pairs file
written by ``idaudit world``, a rendered Reacher dataset) answer the same questions, so
train, audit, plan and sweep never ask which world they hold. :data:`KINDS` maps each world
name to its :class:`WorldKind` (options, specs, writing, training defaults, recipes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from idaudit.core.arrayfiles import ARRAY_FILE_FORMS, array_file_kind
from idaudit.core.defaults import WORLD
from idaudit.core.errors import IdauditError
from idaudit.worlds.base import EvalSet, PlanSet, World
from idaudit.worlds.dataset import NAME as PAIRS
from idaudit.worlds.dataset import PairsFileWorld, is_pairs_file, load_pairs, read_pairs_spec
from idaudit.worlds.kind import KINDS, Recipe, WorldKind
from idaudit.worlds.mixings import MIXINGS, CouplingMixing
from idaudit.worlds.names import validate_spec, world_choices, world_names
from idaudit.worlds.reacher.kind import ReacherKind
from idaudit.worlds.reacher.world import NAME as REACHER
from idaudit.worlds.reacher.world import ReacherWorld
from idaudit.worlds.recorded import NAME as RECORDED
from idaudit.worlds.recorded import ArrayWorld, RecordedWorld
from idaudit.worlds.sources import SOURCES, gennorm_scale, ou_step, sample_source
from idaudit.worlds.spec import WorldSpec, check_type
from idaudit.worlds.synthetic import SYNTHETIC_WORLDS, SyntheticWorld, save_pairs

__all__ = [
    "KINDS", "MIXINGS", "SOURCES", "SYNTHETIC_WORLDS", "ArrayWorld", "CouplingMixing", "EvalSet",
    "PairsFileWorld", "PlanSet", "ReacherKind", "ReacherWorld", "Recipe", "RecordedWorld",
    "SyntheticWorld",
    "World", "WorldKind", "WorldSpec",
    "as_world", "build_world", "data_world", "gennorm_scale", "load_pairs", "make_spec", "ou_step",
    "sample_source", "save_pairs", "validate_spec", "world_name", "world_names",
]


def flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def data_world(path: str | Path) -> str:
    """The world that reads the data at ``path``: a pairs file, a Reacher dataset, or a
    recording of the user's own (an array file of pairs or episodes)."""
    path = Path(path)
    if is_pairs_file(path):
        return PAIRS
    if path.is_dir() and (path / "meta.json").exists():
        return REACHER
    if not path.exists():
        raise IdauditError(f"--data: not found: {path}")
    if array_file_kind(path) is not None:
        return RECORDED
    raise IdauditError(f"--data {path} is neither a pairs file from `idaudit world`, a "
                       f"rendered Reacher dataset nor a recording ({ARRAY_FILE_FORMS})")


def world_name(name: str | None, options: dict[str, Any]) -> str:
    """The registered world that ``name`` and the options (``data``) select."""
    check_type(name, "string", "--world", optional=True)
    check_type(options.get("data"), "path", "--data", optional=True)
    if "data" in options:
        found = data_world(options["data"]) if Path(options["data"]).exists() else None
        if found is not None and name in (None, found):
            name = found
        elif found == PAIRS and name is not None:
            inner = read_pairs_spec(options["data"]).name
            if inner != name:
                raise IdauditError(f"--data {options['data']} holds pairs of world {inner!r}, "
                                   f"not {name!r}")
            name = found
        elif found is not None:
            raise IdauditError(f"--data {options['data']} holds {found!r} data, not world "
                               f"{name!r}")
        elif name is None:
            raise IdauditError(f"--data: not found: {options['data']}")
    name = name or WORLD
    if name not in KINDS:
        raise IdauditError(f"unknown world {name!r}; valid: {world_choices()}")
    return name


def make_spec(name: str | None = None, **options: Any) -> WorldSpec:
    """Validate world options (None means "not given") and fill the named world's defaults.

    Options a world does not take are refused with a one-line error naming the option. With
    ``data`` and no name, the world is the one that reads the data.
    """
    options = {k: v for k, v in options.items() if v is not None}
    name = world_name(name, options)
    kind = KINDS.get(name)
    extra = sorted(set(options) - kind.options)
    if extra:
        raise IdauditError(f"{', '.join(flag(o) for o in extra)} does not apply to world "
                           f"{name!r}")
    return kind.make_spec(name, options)


def as_world(world: World | WorldSpec | str, base_dir: Path | None = None) -> World:
    """A World from a World, a WorldSpec or a world name (with its defaults)."""
    if isinstance(world, World):
        return world
    if isinstance(world, str):
        world = make_spec(world)
    if not isinstance(world, WorldSpec):
        raise IdauditError(f"world must be a World, WorldSpec or name, got {type(world).__name__}")
    return build_world(world, base_dir)


def build_world(spec: WorldSpec, base_dir: Path | None = None) -> World:
    """The world a spec describes (``base_dir``: where relative dataset paths are resolved)."""
    if spec.name not in KINDS:
        raise IdauditError(f"unknown world {spec.name!r}; valid: {world_choices()}")
    return KINDS.get(spec.name).from_spec(spec, base_dir)
