"""The world ``shear``: two latents observed through x = (z₀, z₁ + ½ z₀²)."""

from typing import Any, ClassVar

import torch

from idaudit.core.errors import UsageError
from idaudit.worlds.spec import WorldSpec
from idaudit.worlds.synthetic import SyntheticKind, SyntheticWorld


def shear(z: torch.Tensor) -> torch.Tensor:
    return torch.stack([z[:, 0], z[:, 1] + 0.5 * z[:, 0] ** 2], dim=1)


class ShearWorld(SyntheticWorld):
    def __init__(self, spec: WorldSpec) -> None:
        self.spec = spec
        self._mix = shear


class ShearKind(SyntheticKind):
    world = ShearWorld
    options: ClassVar[frozenset[str]] = frozenset({"dim", "source", "alpha", "rho"})

    def make_spec(self, name: str, options: dict[str, Any]) -> WorldSpec:
        if options.get("dim", 2) != 2:
            raise UsageError("world shear is two-dimensional")
        return super().make_spec(name, {**options, "dim": 2})


SHEAR = ShearKind()
