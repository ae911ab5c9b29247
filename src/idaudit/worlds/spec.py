"""World specifications: a JSON-able description that rebuilds the same world anywhere."""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from idaudit.core.defaults import WORLD, WORLD_DEFAULTS
from idaudit.core.errors import IdauditError

__all__ = ["WorldSpec", "check_fields", "check_numbers", "check_type", "shown"]

# kind → (how a message names it, the test); numpy's integers and floats count as numbers
_KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "integer": ("an integer", lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool)),
    "number": ("a number", lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool)),
    "string": ("a string", lambda v: isinstance(v, str)),
    "path": ("a path", lambda v: isinstance(v, (str, os.PathLike))),
    "boolean": ("true or false", lambda v: isinstance(v, bool)),
    "object": ("an object", lambda v: isinstance(v, dict)),
    "table": ("a table", lambda v: isinstance(v, dict)),
    "list": ("a list", lambda v: isinstance(v, list)),
}


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut short (a value read from a hostile file can be huge)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_type(value: Any, kind: str, what: str, *, optional: bool = False) -> Any:
    """``value`` if it is of ``kind`` (integer, number, string, path, boolean, object/table,
    list; ``optional``: None too), else a one-line :class:`IdauditError` (exit 2) such as
    "steps must be an integer, got 'abc'". The one type check for values read from files and
    dictionaries: suites, ``--set``, run options, checkpoint metadata, dataset metadata."""
    if value is None and optional:
        return value
    phrase, test = _KINDS[kind]
    if not test(value):
        raise IdauditError(f"{what} must be {phrase}, got {shown(value)}")
    return value


def check_numbers(value: Any, what: str, length: int | None = None) -> list[float]:
    """A list of finite numbers (of ``length`` items when given), as floats."""
    check_type(value, "list", what)
    if length is not None and len(value) != length:
        raise IdauditError(f"{what} must be a list of {length} numbers, got {shown(value)}")
    for v in value:
        if not (_KINDS["number"][1](v) and math.isfinite(v)):
            raise IdauditError(f"{what} must be a list of finite numbers, got {shown(value)}")
    return [float(v) for v in value]


def check_fields(d: Any, what: str, known: set[str] | frozenset[str],
                 required: tuple[str, ...] = ()) -> dict[str, Any]:
    """``d`` as an object holding only ``known`` fields and every ``required`` one."""
    check_type(d, "object", what)
    unknown = sorted(set(d) - set(known), key=str)
    if unknown:
        raise IdauditError(f"{what} has unknown fields {shown(unknown)}")
    for key in required:
        if key not in d:
            raise IdauditError(f"{what} lacks {key!r}")
    return d


@dataclass(frozen=True)
class WorldSpec:
    """What a world is: its name, latent dimension, source law, OU correlation ρ.

    ``layers`` and ``mixing_seed`` only matter for coupling worlds (``nvp`` is the paper's 2D
    RealNVP world, the coupling mixing at N = 2; both default to 4 layers). Dataset-backed
    worlds keep what locates and describes their data in ``extra``.
    """

    name: str = WORLD
    dim: int = 2
    source: str = WORLD_DEFAULTS["source"]
    alpha: float | None = None
    rho: float = WORLD_DEFAULTS["rho"]
    layers: int | None = None
    mixing_seed: int = WORLD_DEFAULTS["mixing_seed"]
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WorldSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**check_fields(d, "world spec", known))
