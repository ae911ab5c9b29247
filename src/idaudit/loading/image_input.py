"""Images as other projects' encoders take them: uint8 NHWC → float32 NCHW, normalised.

A world's images are uint8 (N, H, W, 3) in [0, 255]; ViTs from I-JEPA, V-JEPA 2, timm and
Hugging Face take float (N, 3, H, W) with x̂ = (x/255 − mean_c) / std_c per channel c (ImageNet
statistics, most often). :class:`ImageAdapter` puts that conversion in front of a module, so
the one embedding loop (:func:`idaudit.models.encoders.embed`) feeds it chunk by chunk. idaudit's own
checkpoints are not wrapped: their encoders record their own input format.

``--normalize`` takes a name (:data:`NORMALIZATIONS`, or ``none``: x/255 only) or
``MEAN,STD``, each one number (for all three channels) or three colon-separated numbers
(R:G:B), e.g. ``0.5,0.5`` or ``0.485:0.456:0.406,0.229:0.224:0.225``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from idaudit.core.errors import IdauditError

RGB = tuple[float, float, float]
MIN_STD = 1e-6  # a smaller std (a denormal, say) scales pixels towards overflow
Normalize = tuple[RGB, RGB]  # (mean, std) per channel, of x/255

NORMALIZATIONS: dict[str, Normalize] = {
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "clip": ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)),
    "inception": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),  # x̂ in [−1, 1]
}
SYNTAX = ("imagenet, clip, inception, none, or MEAN,STD with one number or three "
          "colon-separated numbers each (e.g. 0.5,0.5 or 0.485:0.456:0.406,0.229:0.224:0.225)")


def _channels(text: str, what: str, given: str) -> RGB:
    parts = text.split(":")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise IdauditError(f"--normalize {given!r}: the {what} {text!r} is not a number or three "
                           f"colon-separated numbers; give {SYNTAX}") from None
    if len(values) not in (1, 3):
        raise IdauditError(f"--normalize {given!r}: the {what} has {len(values)} numbers; give "
                           "one (all channels) or three (R:G:B)")
    if not all(math.isfinite(v) for v in values):
        raise IdauditError(f"--normalize {given!r}: the {what} must be finite numbers")
    r, g, b = values * 3 if len(values) == 1 else values
    return (r, g, b)


def parse_normalize(text: str) -> Normalize | None:
    """``--normalize``: a name, ``none`` (None: x/255 only) or ``MEAN,STD`` (see the module);
    anything else is a one-line error (exit 2)."""
    if not isinstance(text, str):
        raise IdauditError(f"--normalize must be text ({SYNTAX}), got {text!r}")
    name = text.strip().lower()
    if name == "none":
        return None
    if name in NORMALIZATIONS:
        return NORMALIZATIONS[name]
    halves = name.split(",")
    if len(halves) != 2 or not all(h.strip() for h in halves):
        raise IdauditError(f"--normalize must be {SYNTAX}; got {text!r}")
    mean = _channels(halves[0].strip(), "mean", text)
    std = _channels(halves[1].strip(), "std", text)
    if min(std) < MIN_STD:
        raise IdauditError(f"--normalize {text!r}: the std must be at least {MIN_STD:g} (pixels "
                           f"x/255 in [0, 1] divided by less are no image statistics), got "
                           f"{min(std):g}")
    return mean, std


def to_encoder_input(images: Any, normalize: Normalize | None) -> torch.Tensor:
    """uint8 images (N, H, W, 3), a numpy array or tensor, as float32 (N, 3, H, W):
    x/255 in [0, 1], then (x/255 − mean_c) / std_c when ``normalize`` is (mean, std). The
    result is on the images' device (a tensor's; the CPU for an array)."""
    x = torch.from_numpy(np.ascontiguousarray(images)) if isinstance(images, np.ndarray) \
        else images
    if not isinstance(x, torch.Tensor):
        raise IdauditError(f"images must be a uint8 array or tensor, got {type(images).__name__}")
    if x.dtype != torch.uint8 or x.ndim != 4 or x.shape[-1] != 3:
        raise IdauditError(f"images must be uint8 of shape (N, H, W, 3), got {str(x.dtype)[6:]} "
                           f"{tuple(x.shape)}")
    out = x.permute(0, 3, 1, 2).to(torch.float32).div_(255.0)
    if normalize is not None:
        mean, std = (torch.tensor(v, dtype=torch.float32, device=out.device).view(1, 3, 1, 1)
                     for v in normalize)
        out = out.sub_(mean).div_(std)
    return out.contiguous()


class ImageAdapter(nn.Module):
    """``module`` (a foreign image encoder taking float NCHW) behind the conversion:
    ``adapter(x_uint8_nhwc) = module(to_encoder_input(x, normalize))``. ``module``'s
    parameters are the adapter's, so :func:`idaudit.models.encoders.embed` finds its device and
    switches it to eval mode."""

    def __init__(self, module: Callable[[torch.Tensor], Any], normalize: Normalize | None
                 ) -> None:
        super().__init__()
        if isinstance(module, nn.Module):
            self.module = module
        else:
            self._call = module
        self.normalize = normalize

    def forward(self, x: Any) -> Any:
        fn = self.module if "module" in self._modules else self._call
        return fn(to_encoder_input(x, self.normalize))

    def describe_input(self, shape: tuple[int, ...]) -> str:
        """What the module is given for images of ``shape`` (N, H, W, 3), for messages."""
        n, height, width = shape[:3]
        how = "normalised" if self.normalize is not None else "in [0, 1]"
        return f"float images of shape {(n, 3, height, width)}, {how}"

    def extra_repr(self) -> str:
        return f"normalize={self.normalize}"
