"""Nonlinear observation maps x = g(z) with known latents.

2D maps (all measure-preserving or volume-preserving so the difficulty is purely
geometric):

* spiral:   g(z) = R(π‖z‖) z, a rotation by an angle growing with the radius;
* banana:   g(z) = (z₁, z₂ + a (z₁² − 1)), a parabolic shear (a = 0.5);
* sinusoid: g(z) = (z₁, z₂ + a sin(b z₁)), a sinusoidal shear (a = 1, b = 2);

and the RealNVP-style additive coupling for any even N: L layers, each splits
x into halves (u, v), alternating which half conditions, and sets
v ← v + tanh(W u) with W = 2·(seeded random orthogonal matrix).
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from idaudit.core.registry import Registry

__all__ = ["CouplingMixing", "MIXINGS", "banana", "coupling_chain", "coupling_parity", "coupling_step",
           "sinusoid", "spiral"]

MIXINGS: Registry = Registry("mixing")


def spiral(z: torch.Tensor) -> torch.Tensor:
    angle = math.pi * z.norm(dim=-1)
    c, s = torch.cos(angle), torch.sin(angle)
    x0 = c * z[..., 0] - s * z[..., 1]
    x1 = s * z[..., 0] + c * z[..., 1]
    return torch.stack([x0, x1], dim=-1)


def banana(z: torch.Tensor, a: float = 0.5) -> torch.Tensor:
    return torch.stack([z[..., 0], z[..., 1] + a * (z[..., 0] ** 2 - 1.0)], dim=-1)


def sinusoid(z: torch.Tensor, a: float = 1.0, b: float = 2.0) -> torch.Tensor:
    return torch.stack([z[..., 0], z[..., 1] + a * torch.sin(b * z[..., 0])], dim=-1)


MIXINGS.add("spiral", spiral)
MIXINGS.add("banana", banana)
MIXINGS.add("sinusoid", sinusoid)


def coupling_parity(layer: int) -> int:
    """Which half conditions in mixing layer ``layer`` (0: first half updates the second)."""
    return layer % 2


def seeded_orthogonal(n: int, seed: int) -> torch.Tensor:
    """A Haar-random n×n orthogonal matrix from a seed (QR with sign fix)."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n, generator=g, dtype=torch.float64)
    q, r = torch.linalg.qr(a)
    q = q * torch.sign(torch.diagonal(r)).unsqueeze(0)
    return q.float()


def coupling_chain(x: torch.Tensor, weights: list[torch.Tensor],
                   biases: list[torch.Tensor | None], parities: list[int]) -> torch.Tensor:
    """Additive coupling layers in turn: layer k sets v ← v + tanh(W_k u + c_k), with
    (u, v) = (first half, second half) at parity 0 and the other way round at parity 1.

    The halves are carried apart through the chain and joined once at the end (no
    concatenation or slicing per layer: at N = 1024 those copies were a tenth of a step)."""
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    for weight, bias, parity in zip(weights, biases, parities):
        if parity == 0:
            second = second + torch.tanh(F.linear(first, weight, bias))
        else:
            first = first + torch.tanh(F.linear(second, weight, bias))
    return torch.cat([first, second], dim=-1)


def coupling_step(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                  parity: int) -> torch.Tensor:
    """One additive coupling layer: v ← v + tanh(W u + c), u the conditioning half."""
    return coupling_chain(x, [weight], [bias], [parity])


class CouplingMixing:
    """RealNVP-style additive coupling g: R^N → R^N with seeded orthogonal weights ×2."""

    def __init__(self, dim: int, layers: int = 4, seed: int = 0, gain: float = 2.0) -> None:
        self.dim, self.layers, self.seed = dim, layers, seed
        half = dim // 2
        self.weights = [gain * seeded_orthogonal(half, seed * 1000 + i) for i in range(layers)]

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        return coupling_chain(z, [w.to(z.device, z.dtype) for w in self.weights],
                              [None] * self.layers,
                              [coupling_parity(i) for i in range(self.layers)])
