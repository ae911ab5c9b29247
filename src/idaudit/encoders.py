"""Encoders by registry name: ``mlp``, ``coupling`` (matched inverse coupling), ``cnn``."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .errors import IdauditError
from .registry import Registry
from .worlds.mixings import coupling_parity, coupling_step

ENCODERS: Registry = Registry("encoder")


@ENCODERS.register("mlp")
class MLP(nn.Module):
    """x → Linear(in, w) → GELU → … (``depth`` hidden layers of width ``width``) → Linear(w, out)."""

    def __init__(self, in_dim: int = 2, out_dim: int = 2, width: int = 256, depth: int = 4) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        d = in_dim
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.GELU()]
            d = width
        layers.append(nn.Linear(d, out_dim))
        self.net = nn.Sequential(*layers)
        self.in_dim, self.out_dim = in_dim, out_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@ENCODERS.register("coupling")
class InverseCoupling(nn.Module):
    """The coupling mixing's inverse with learnable weights: layer j undoes mixing layer L−1−j.

    Each layer sets v ← v + tanh(V u + c) with the same halves as the mixing layer it undoes
    (tanh is odd, so the learned V can take the sign of the subtraction).
    """

    def __init__(self, dim: int = 2, layers: int = 4) -> None:
        super().__init__()
        if dim % 2:
            raise IdauditError(f"the coupling encoder needs an even dimension, got {dim}")
        half = dim // 2
        self.layers = nn.ModuleList(nn.Linear(half, half) for _ in range(layers))
        self.parities = [coupling_parity(layers - 1 - j) for j in range(layers)]
        self.in_dim = self.out_dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for lin, parity in zip(self.layers, self.parities):
            x = coupling_step(x, lin.weight, lin.bias, parity)
        return x


@ENCODERS.register("cnn")
class CNN(nn.Module):
    """The paper's pixel encoder: 4 × (Conv 4×4 s2 → BN → GELU), AvgPool, Linear-BN-GELU, Linear."""

    def __init__(self, out_dim: int = 2, in_channels: int = 3, image_size: int = 64) -> None:
        super().__init__()
        chans = [in_channels, 32, 64, 128, 256]
        blocks: list[nn.Module] = []
        for cin, cout in zip(chans[:-1], chans[1:]):
            blocks += [nn.Conv2d(cin, cout, 4, stride=2, padding=1), nn.BatchNorm2d(cout), nn.GELU()]
        self.features = nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Sequential(nn.Linear(256, 256), nn.BatchNorm1d(256), nn.GELU(),
                                  nn.Linear(256, out_dim))
        self.in_shape = (in_channels, image_size, image_size)
        self.out_dim = out_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


@ENCODERS.register("pixel_cnn")
class PixelEncoder(nn.Module):
    """The CNN with a dataset's per-channel normalisation: takes (N, 64, 64, 3) images in [0, 255]."""

    def __init__(self, mean: list[float] | None = None, std: list[float] | None = None,
                 out_dim: int = 2) -> None:
        super().__init__()
        self.cnn = CNN(out_dim=out_dim)
        self.register_buffer("mean", torch.tensor(mean or [0.5] * 3).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(std or [0.25] * 3).view(1, 3, 1, 1))
        self.out_dim = out_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 3, 1, 2).float() / 255.0
        return self.cnn((x - self.mean) / self.std)


def build_encoder(name: str, kwargs: dict[str, Any] | None = None) -> nn.Module:
    """Instantiate a registered encoder; bad arguments become a one-line error."""
    cls = ENCODERS.get(name)
    try:
        return cls(**(kwargs or {}))
    except TypeError as exc:
        raise IdauditError(f"bad arguments for encoder {name!r}: {exc}") from None
