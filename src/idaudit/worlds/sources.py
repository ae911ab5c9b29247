"""Unit-variance latent sources and the Ornstein–Uhlenbeck (OU) channel.

Every source has mean 0 and variance 1 per coordinate, so the OU channel
``z' = ρ z + sqrt(1 − ρ²) η`` (η drawn from the same law, independent of z) keeps
unit variance whatever the law; it keeps the law itself only for the Gaussian.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from idaudit.core.errors import require
from idaudit.core.registry import Registry

__all__ = ["SOURCES", "gennorm_scale", "ou_step", "sample_source"]

SOURCES: Registry = Registry("source")


def gennorm_scale(alpha: float) -> float:
    """Scale s of the generalised normal exp(−|x/s|^α) with unit variance.

    Var = s² Γ(3/α) / Γ(1/α)  ⇒  s = sqrt(Γ(1/α) / Γ(3/α)).
    """
    return math.exp(0.5 * (math.lgamma(1.0 / alpha) - math.lgamma(3.0 / alpha)))


@SOURCES.register("gaussian")
def _gaussian(shape: tuple[int, ...], gen: torch.Generator, alpha: float | None = None):
    return torch.randn(shape, generator=gen)


@SOURCES.register("laplace")
def _laplace(shape: tuple[int, ...], gen: torch.Generator, alpha: float | None = None):
    # Laplace(0, b) has variance 2b²; b = 1/√2. Inverse CDF on u ∈ (−1/2, 1/2).
    u = torch.rand(shape, generator=gen) - 0.5
    u = u.clamp(-0.5 + 1e-7, 0.5 - 1e-7)
    return -(1.0 / math.sqrt(2.0)) * torch.sign(u) * torch.log1p(-2.0 * u.abs())


@SOURCES.register("gennorm")
def _gennorm(shape: tuple[int, ...], gen: torch.Generator, alpha: float | None = None):
    require(alpha is not None and alpha > 0, "--alpha must be > 0 for the gennorm source")
    # |x|/s = G^(1/α), G ~ Gamma(1/α, 1); a numpy generator seeded from `gen`.
    seed = int(torch.randint(0, 2**62, (1,), generator=gen).item())
    rng = np.random.default_rng(seed)
    g = rng.standard_gamma(1.0 / alpha, size=shape)
    sign = rng.integers(0, 2, size=shape) * 2 - 1
    x = gennorm_scale(alpha) * sign * np.power(g, 1.0 / alpha)
    return torch.from_numpy(x.astype(np.float32))


def sample_source(
    name: str, shape: tuple[int, ...], gen: torch.Generator, alpha: float | None = None
) -> torch.Tensor:
    """Draw i.i.d. unit-variance samples of the named law (float32, CPU)."""
    return SOURCES.get(name)(tuple(shape), gen, alpha)


def ou_step(
    z: torch.Tensor, rho: float, noise: torch.Tensor
) -> torch.Tensor:
    """The OU channel z' = ρ z + sqrt(1 − ρ²) η for a given noise draw η."""
    return rho * z + math.sqrt(1.0 - rho * rho) * noise
