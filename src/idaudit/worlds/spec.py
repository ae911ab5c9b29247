"""World specifications: a JSON-able description that rebuilds the same world anywhere."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import IdauditError, require
from .mixings import MIXINGS, CouplingMixing
from .sources import SOURCES, ou_step, sample_source

SYNTHETIC_WORLDS = ("spiral", "banana", "sinusoid", "nvp", "coupling")
WORLD_NAMES = SYNTHETIC_WORLDS


@dataclass(frozen=True)
class WorldSpec:
    """What a world is: its name, latent dimension, source law, OU correlation ρ.

    ``layers`` and ``mixing_seed`` only matter for coupling worlds (``nvp`` is the paper's 2D
    RealNVP world, the coupling mixing at N = 2; both default to 4 layers).
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
        require(not unknown, f"world spec has unknown fields: {sorted(unknown)}")
        return cls(**d)


def make_spec(
    name: str,
    dim: int | None = None,
    source: str = "gaussian",
    alpha: float | None = None,
    rho: float = 0.95,
    layers: int | None = None,
    mixing_seed: int = 0,
) -> WorldSpec:
    """Validate user input and fill the defaults of a world (errors exit 2)."""
    if name not in SYNTHETIC_WORLDS:
        valid = ", ".join(SYNTHETIC_WORLDS)
        raise IdauditError(f"unknown world {name!r}; valid: {valid}")
    SOURCES.get(source)  # raises with the valid names
    require(isinstance(rho, (int, float)) and 0.0 < rho < 1.0 and math.isfinite(rho),
            f"--rho must lie strictly between 0 and 1, got {rho}")
    if source == "gennorm":
        require(alpha is not None, "--alpha is required with --source gennorm")
    if alpha is not None:
        require(math.isfinite(alpha) and alpha > 0, f"--alpha must be > 0, got {alpha}")
        if source != "gennorm":
            raise IdauditError("--alpha only applies to --source gennorm")
    if name in ("spiral", "banana", "sinusoid", "nvp"):
        require(dim in (None, 2), f"world {name!r} is two-dimensional; got --dim {dim}")
        dim = 2
    else:
        dim = 2 if dim is None else dim
        require(dim >= 2 and dim % 2 == 0, f"--dim must be an even number ≥ 2 for coupling, got {dim}")
    if name in ("nvp", "coupling"):
        layers = 4 if layers is None else layers
    else:
        require(layers is None, f"--layers only applies to coupling worlds, not {name!r}")
    if layers is not None:
        require(layers >= 1, f"--layers must be ≥ 1, got {layers}")
    return WorldSpec(name=name, dim=dim, source=source, alpha=alpha, rho=float(rho),
                     layers=layers, mixing_seed=mixing_seed)


class World:
    """A synthetic world: latent law + OU channel + observation map g."""

    def __init__(self, spec: WorldSpec) -> None:
        self.spec = spec
        if spec.name in ("nvp", "coupling"):
            self._mix = CouplingMixing(spec.dim, spec.layers or 4, seed=spec.mixing_seed)
        else:
            self._mix = MIXINGS.get(spec.name)

    @property
    def latent_dim(self) -> int:
        return self.spec.dim

    @property
    def obs_dim(self) -> int:
        return self.spec.dim

    @property
    def rho(self) -> float:
        return self.spec.rho

    def sample_latents(self, n: int, gen: torch.Generator) -> torch.Tensor:
        return sample_source(self.spec.source, (n, self.spec.dim), gen, self.spec.alpha)

    def transition(self, z: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """z' from the OU channel, the noise drawn from the source law."""
        eta = self.sample_latents(z.shape[0], gen)
        return ou_step(z, self.spec.rho, eta)

    def sample_pairs(self, n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.sample_latents(n, gen)
        return z, self.transition(z, gen)

    def sample_views(self, n: int, gen: torch.Generator, scheme: str = "anchor"
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """Two views of a batch for training.

        ``anchor`` (the paper's code): both views are one OU step from a shared anchor z, so
        the two views form an OU pair with correlation ρ². ``pair``: the views are (z, z′).
        """
        if scheme == "pair":
            return self.sample_pairs(n, gen)
        if scheme != "anchor":
            raise IdauditError(f"unknown view scheme {scheme!r}; valid: anchor, pair")
        z = self.sample_latents(n, gen)
        return self.transition(z, gen), self.transition(z, gen)

    def view_correlation(self, scheme: str = "anchor") -> float:
        """Correlation of the two training views: ρ² for anchor views, ρ for (z, z′) pairs."""
        return self.rho**2 if scheme == "anchor" else self.rho

    def observe(self, z: torch.Tensor) -> torch.Tensor:
        return self._mix(z)

    def default_encoder(self) -> tuple[str, dict[str, Any]]:
        """The paper's encoder for this world: (registry name, kwargs)."""
        if self.spec.name in ("nvp", "coupling"):
            return "coupling", {"dim": self.spec.dim, "layers": self.spec.layers}
        return "mlp", {"in_dim": self.obs_dim, "out_dim": self.latent_dim}


def build_world(spec: WorldSpec) -> World:
    if spec.name not in SYNTHETIC_WORLDS:
        valid = ", ".join(SYNTHETIC_WORLDS)
        raise IdauditError(f"unknown world {spec.name!r}; valid: {valid}")
    return World(spec)
