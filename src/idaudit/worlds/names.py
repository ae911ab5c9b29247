"""The registered world names, and a world spec read from a file checked against them."""

from __future__ import annotations

from idaudit.core.errors import IdauditError
from idaudit.worlds.kind import KINDS
from idaudit.worlds.spec import WorldSpec
from idaudit.worlds.synthetic import SYNTHETIC_WORLDS


def world_names() -> list[str]:
    """Every registered world name (synthetic first, as the paper lists them)."""
    return [*SYNTHETIC_WORLDS, *(n for n in KINDS.names() if n not in SYNTHETIC_WORLDS)]


def validate_spec(spec: WorldSpec) -> WorldSpec:
    """Check a spec read from a file: a known world, fields of the right types and ranges."""
    if not isinstance(spec.name, str) or spec.name not in KINDS:
        raise IdauditError(f"unknown world {spec.name!r}; valid: {', '.join(world_names())}")
    try:
        return KINDS.get(spec.name).check_spec(spec)
    except TypeError as exc:
        raise IdauditError(f"world spec: {exc}") from None
