"""Encoders by registry name: ``mlp``, ``coupling`` (matched inverse coupling), ``cnn``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from idaudit.core.errors import IdauditError
from idaudit.core.registry import Registry
from idaudit.worlds.mixings import coupling_chain, coupling_parity

__all__ = ["ENCODERS", "EncoderFailed", "InverseCoupling", "MLP", "PixelEncoder", "Projected", "Projector",
           "build_encoder", "coupling_chain", "embed", "pick_device"]

ENCODERS: Registry = Registry("encoder")


def _sizes(minimum: int = 1, **sizes: Any) -> None:
    """Encoder sizes are integers ≥ ``minimum`` (a one-line error names the argument)."""
    for name, value in sizes.items():
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= minimum):
            raise IdauditError(f"encoder argument {name} must be an integer ≥ {minimum}, "
                               f"got {value!r}")


@ENCODERS.register("mlp")
class MLP(nn.Module):
    """x → Linear(in, w) → GELU → … (``depth`` hidden layers of width ``width``) → Linear(w, out)."""

    def __init__(self, in_dim: int = 2, out_dim: int = 2, width: int = 256, depth: int = 4) -> None:
        super().__init__()
        _sizes(in_dim=in_dim, out_dim=out_dim, width=width)
        _sizes(minimum=0, depth=depth)
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

    @staticmethod
    def vector_widths(kwargs: dict[str, Any]) -> tuple[int, int]:
        """(input, output) widths of the MLP ``kwargs`` build."""
        return int(kwargs.get("in_dim", 2)), int(kwargs.get("out_dim", 2))

    @staticmethod
    def sized_for(width_in: int, width_out: int) -> dict[str, Any]:
        """The arguments that fit an MLP to vectors of ``width_in`` → ``width_out``."""
        return {"in_dim": width_in, "out_dim": width_out}


@ENCODERS.register("coupling")
class InverseCoupling(nn.Module):
    """The coupling mixing's inverse with learnable weights: layer j undoes mixing layer L−1−j.

    Each layer sets v ← v + tanh(V u + c) with the same halves as the mixing layer it undoes
    (tanh is odd, so the learned V can take the sign of the subtraction).
    """

    def __init__(self, dim: int = 2, layers: int = 4) -> None:
        super().__init__()
        _sizes(dim=dim, layers=layers)
        if dim % 2:
            raise IdauditError(f"the coupling encoder needs an even dimension, got {dim}")
        half = dim // 2
        self.layers = nn.ModuleList(nn.Linear(half, half) for _ in range(layers))
        self.parities = [coupling_parity(layers - 1 - j) for j in range(layers)]
        self.in_dim = self.out_dim = dim

    #: what the training line says of it as a world's own encoder
    about = "the mixing inverted with learnable weights"

    @staticmethod
    def vector_widths(kwargs: dict[str, Any]) -> tuple[int, int]:
        return int(kwargs.get("dim", 2)), int(kwargs.get("dim", 2))

    @staticmethod
    def sized_for(width_in: int, width_out: int) -> dict[str, Any]:
        """A coupling maps R^N to itself: N = both widths (refused where they differ)."""
        if width_in != width_out:
            raise IdauditError(f"the coupling encoder maps R^N to itself; these observations "
                               f"are {width_in}-wide and the latents {width_out}")
        return {"dim": width_in}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return coupling_chain(x, [lin.weight for lin in self.layers],
                              [lin.bias for lin in self.layers], self.parities)


@ENCODERS.register("cnn")
class CNN(nn.Module):
    """The paper's pixel encoder: 4 × (Conv 4×4 s2 → BN → GELU) with w, 2w, 4w, 8w channels,
    AvgPool, Linear(8w)-BN-GELU, Linear (the paper: w = 32)."""

    def __init__(self, out_dim: int = 2, in_channels: int = 3, image_size: int = 64,
                 width: int = 32) -> None:
        super().__init__()
        _sizes(out_dim=out_dim, in_channels=in_channels, image_size=image_size, width=width)
        chans = [in_channels, width, 2 * width, 4 * width, 8 * width]
        blocks: list[nn.Module] = []
        for cin, cout in zip(chans[:-1], chans[1:]):
            blocks += [nn.Conv2d(cin, cout, 4, stride=2, padding=1), nn.BatchNorm2d(cout), nn.GELU()]
        self.features = nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Sequential(nn.Linear(8 * width, 8 * width), nn.BatchNorm1d(8 * width),
                                  nn.GELU(), nn.Linear(8 * width, out_dim))
        self.in_shape = (in_channels, image_size, image_size)
        self.out_dim = out_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


@ENCODERS.register("pixel_cnn")
class PixelEncoder(nn.Module):
    """The CNN with a dataset's per-channel normalisation: takes (N, S, S, 3) images in
    [0, 255] (S = ``image_size``, 64 in the paper); ``width`` as :class:`CNN`."""

    def __init__(self, mean: list[float] | None = None, std: list[float] | None = None,
                 out_dim: int = 2, width: int = 32, image_size: int = 64) -> None:
        super().__init__()
        self.cnn = CNN(out_dim=out_dim, width=width, image_size=image_size)
        self.register_buffer("mean", torch.tensor(mean or [0.5] * 3).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(std or [0.25] * 3).view(1, 3, 1, 1))
        self.out_dim = out_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 3, 1, 2).float() / 255.0
        return self.cnn((x - self.mean) / self.std)


class Projector(nn.Sequential):
    """The projector head of the lejepa library's recipe: for each width but the last,
    Linear → BatchNorm1d → ReLU; then Linear to the last width (its output dimension)."""

    def __init__(self, in_dim: int, widths: list[int]) -> None:
        layers: list[nn.Module] = []
        d = in_dim
        for i, w in enumerate(widths):
            layers.append(nn.Linear(d, w))
            if i + 1 < len(widths):
                layers += [nn.BatchNorm1d(w), nn.ReLU()]
            d = w
        super().__init__(*layers)
        self.out_dim = d


#: what a projected encoder's forward returns: the backbone's h (the default) or the projector's
PROJECTED_OUTPUTS = ("backbone", "projector")


@ENCODERS.register("projected")
class Projected(nn.Module):
    """A registered backbone with a :class:`Projector` on top; the objective sees the
    projector's output p = g(f(x)), the audit by default the backbone's h = f(x)
    (``output = "projector"``: p)."""

    def __init__(self, backbone: str = "mlp", backbone_kwargs: dict[str, Any] | None = None,
                 widths: list[int] | None = None, output: str = "backbone") -> None:
        super().__init__()
        if not widths or not all(isinstance(w, int) and w >= 1 for w in widths):
            raise IdauditError(f"a projected encoder needs layer widths ≥ 1, got {widths!r}")
        if backbone == "projected":
            raise IdauditError("a projected encoder's backbone cannot be projected itself")
        self.backbone = build_encoder(backbone, backbone_kwargs)
        self.projector = Projector(int(self.backbone.out_dim), list(widths))
        self.output = output
        self.out_dim = self.backbone.out_dim

    @property
    def output(self) -> str:
        return self._output

    @output.setter
    def output(self, value: str) -> None:
        if value not in PROJECTED_OUTPUTS:
            raise IdauditError(f"--output of a checkpoint with a projector is one of "
                               f"{', '.join(PROJECTED_OUTPUTS)}, got {value!r}")
        self._output = value

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """p = projector(backbone(x)), what the objective sees."""
        return self.projector(self.backbone(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.backbone(x)
        return h if self._output == "backbone" else self.projector(h)


def build_encoder(name: str, kwargs: dict[str, Any] | None = None) -> nn.Module:
    """Instantiate a registered encoder; bad arguments become a one-line error."""
    cls = ENCODERS.get(name)
    if not isinstance(kwargs or {}, dict):
        raise IdauditError(f"encoder arguments must be an object, got {kwargs!r}")
    try:
        return cls(**(kwargs or {}))
    except IdauditError:
        raise
    except Exception as exc:  # TypeError for unknown names, RuntimeError for negative sizes …
        line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise IdauditError(f"bad arguments for encoder {name!r}: {line}") from None


def pick_device(name: str = "auto") -> torch.device:
    """``auto`` → CUDA when present, else CPU; ``cuda`` without a GPU is an input error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise IdauditError("--device cuda was asked for but no CUDA device is available")
    try:
        return torch.device(name)
    except RuntimeError:
        raise IdauditError(f"unknown device {name!r}; use auto, cpu or cuda") from None


EMBED_CHUNK = 8192  # rows per forward pass (1024 for images)


class EncoderFailed(IdauditError):
    """The encoder's own call raised (not idaudit's choice of its output): ``reason`` is the
    line the exception gave, ``error`` the exception."""

    def __init__(self, message: str, reason: str, error: BaseException) -> None:
        super().__init__(message)
        self.reason = reason
        self.error = error


def _module_device(encoder: Any) -> torch.device | None:
    if isinstance(encoder, nn.Module):
        for p in encoder.parameters():
            return p.device
        for b in encoder.buffers():
            return b.device
    return None


@torch.no_grad()
def embed(encoder: Callable[[torch.Tensor], Any], x: Any, device: torch.device | str | None = None,
          chunk: int | None = None) -> torch.Tensor:
    """h = encoder(x): in eval mode (the mode is restored after), without gradients, in chunks,
    returned as float32 (batch, m) on the CPU.

    ``encoder`` is any nn.Module (TorchScript and ``torch.export`` modules too) or callable,
    or a :class:`~idaudit.models.embedding_choice.ChosenEmbedding` carrying its pool/output/embed
    choice; a module with no ``forward`` is called through ``encode`` (LeWM's ``encode(info)``
    too). Which output is the embedding: :func:`~idaudit.models.embedding_choice.select_embedding`
    (a tuple gives element 0; a dict or ModelOutput, or tokens (batch, tokens, dim), need a
    chosen ``output``/``pool`` and are never flattened silently). ``x`` a tensor or array
    (uint8 images stay uint8 until they reach the encoder). Inputs go to ``device``, by default
    the encoder's own. A failing or ill-shaped encoder is a one-line :class:`IdauditError`.
    """
    from idaudit.models.embedding_choice import call_and_choice, select_embedding

    call, choice = call_and_choice(encoder)
    n = len(x)
    chunk = chunk or (EMBED_CHUNK if getattr(x, "ndim", 2) <= 2 else 1024)
    dev = torch.device(device) if device is not None else (_module_device(encoder) or
                                                            torch.device("cpu"))
    was_training = getattr(encoder, "training", None)
    if isinstance(encoder, nn.Module):
        try:
            encoder.eval()
        except NotImplementedError:  # torch.export modules keep their exported mode
            was_training = None
    outs = []
    try:
        for i in range(0, n, chunk):
            part = x[i:i + chunk]
            part = part if isinstance(part, torch.Tensor) else \
                torch.from_numpy(np.ascontiguousarray(part))
            try:
                y = call(part.to(dev))
            except IdauditError:  # idaudit's own refusal (the embedding chosen in the call)
                raise
            except Exception as exc:  # a user's encoder can raise anything
                fed = getattr(encoder, "describe_input", None)  # an ImageAdapter converts images first
                given = fed(tuple(part.shape)) if callable(fed) else \
                    f"inputs of shape {tuple(part.shape)}"
                reason = _error_line(exc)
                raise EncoderFailed(f"the encoder failed on {given}: {reason}", reason,
                                    exc) from None
            y = select_embedding(y, part.shape[0], choice)
            if y.is_complex() or not (y.is_floating_point() or y.dtype in (torch.int32,
                                                                              torch.int64)):
                raise IdauditError(f"the encoder returned {y.dtype} values; expected real "
                                   "numbers")
            outs.append(y.float().cpu())
    finally:
        if was_training:
            encoder.train(True)
    if not outs:
        raise IdauditError("nothing to embed: no inputs")
    return torch.cat(outs)


def _error_line(exc: BaseException) -> str:
    """The informative line of an exception (TorchScript puts it last, after a preamble)."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    if "TorchScript interpreter" in lines[0] and len(lines) > 1:
        return lines[-1]
    return lines[0]
