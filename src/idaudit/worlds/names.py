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


def _data_note(name: str) -> str:
    """What the file of a world read from ``--data`` alone is ("" for a world one chooses, or
    a plugin that cannot be loaded: listed as it is)."""
    try:
        return getattr(KINDS.get(name), "data_note", "") or ""
    except Exception:  # noqa: BLE001 - a broken plugin is doctor's to report, not this list's
        return ""


def world_choices() -> str:
    """The world names a user chooses and the families of names (``swm:…``), as a refusal of
    an unknown world lists them; the worlds read from ``--data`` alone (``pairs``,
    ``recorded``: the file says which) after them, each with what its file is.

    Example:
        >>> world_choices().split("; ")[1]  # doctest: +ELLIPSIS
        'read from --data: pairs (a pairs file from `idaudit world`), recorded (a recording...'
    """
    notes = {name: _data_note(name) for name in world_names()}
    chosen = [n for n, note in notes.items() if not note]
    text = ", ".join([*chosen, *(p + "ENV_ID" for p in KINDS.families())])
    from_data = [f"{n} ({note})" for n, note in notes.items() if note]
    return text + (f"; read from --data: {', '.join(from_data)}" if from_data else "")


def validate_spec(spec: WorldSpec) -> WorldSpec:
    """Check a spec read from a file: a known world, fields of the right types and ranges."""
    if not isinstance(spec.name, str) or spec.name not in KINDS:
        raise IdauditError(f"unknown world {spec.name!r}; valid: {world_choices()}")
    try:
        return KINDS.get(spec.name).check_spec(spec)
    except TypeError as exc:
        raise IdauditError(f"world spec: {exc}") from None
