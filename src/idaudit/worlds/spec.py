"""World specifications: a JSON-able description that rebuilds the same world anywhere."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..errors import IdauditError


@dataclass(frozen=True)
class WorldSpec:
    """What a world is: its name, latent dimension, source law, OU correlation ρ.

    ``layers`` and ``mixing_seed`` only matter for coupling worlds (``nvp`` is the paper's 2D
    RealNVP world, the coupling mixing at N = 2; both default to 4 layers). Dataset-backed
    worlds keep what locates and describes their data in ``extra``.
    """

    name: str = "spiral"
    dim: int = 2
    source: str = "gaussian"
    alpha: float | None = None
    rho: float = 0.95
    layers: int | None = None
    mixing_seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WorldSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise IdauditError(f"world spec has unknown fields: {sorted(unknown)}")
        return cls(**d)
