"""The registered world names, and a world spec read from a file checked against them."""

from __future__ import annotations

from idaudit.core.errors import IdauditError
from idaudit.worlds.kind import KINDS
from idaudit.worlds.spec import WorldSpec

__all__ = ["validate_spec", "world_choices", "world_names"]


def world_names() -> list[str]:
    """Every registered world name: idaudit's own in their order (synthetic first, as the
    paper lists them), then plugins'."""
    return KINDS.ordered()


def world_choices() -> str:
    """The registered world names and the families of names (``swm:…``), as a refusal of an
    unknown world lists them."""
    return ", ".join([*world_names(), *(p + "ENV_ID" for p in KINDS.families())])


def validate_spec(spec: WorldSpec) -> WorldSpec:
    """Check a spec read from a file: a known world, fields of the right types and ranges."""
    if not isinstance(spec.name, str) or spec.name not in KINDS:
        raise IdauditError(f"unknown world {spec.name!r}; valid: {world_choices()}")
    try:
        return KINDS.get(spec.name).check_spec(spec)
    except TypeError as exc:
        raise IdauditError(f"world spec: {exc}") from None
