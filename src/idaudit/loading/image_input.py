"""Images as other projects' encoders take them: uint8 NHWC → float32 NCHW, normalised.

A world's images are uint8 (N, H, W, 3) in [0, 255]; ViTs from I-JEPA, V-JEPA 2, timm and
Hugging Face take float (N, 3, H, W) with x̂ = (x/255 − mean_c) / std_c per channel c (ImageNet
statistics, most often). :class:`ImageAdapter` puts that conversion in front of a module, so
the one embedding loop (:func:`idaudit.models.encoders.embed`) feeds it chunk by chunk. idaudit's own
checkpoints are not wrapped: their encoders record their own input format.

``--normalize`` takes a name (:data:`NORMALIZATIONS`, or ``none``: x/255 only) or
``MEAN,STD``, each one number (for all three channels) or three colon-separated numbers
(R:G:B), e.g. ``0.5,0.5`` or ``0.485:0.456:0.406,0.229:0.224:0.225``. Without it, a model
that says how its images are normalised (a Hugging Face directory's
``preprocessor_config.json``: :func:`model_normalize`) gets what it says.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from idaudit.core.defaults import NORMALIZATIONS
from idaudit.core.errors import IdauditError

__all__ = ["ImageAdapter", "NORMALIZATIONS", "model_normalize", "parse_normalize", "to_encoder_input"]

RGB = tuple[float, float, float]
MIN_STD = 1e-6  # a smaller std (a denormal, say) scales pixels towards overflow
Normalize = tuple[RGB, RGB]  # (mean, std) per channel, of x/255

SYNTAX = (f"{', '.join(NORMALIZATIONS)}, none, or MEAN,STD with one number or three "
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


def describe(normalize: Normalize | None) -> str:
    """``normalize`` in words: "mean 0.5, 0.5, 0.5; std 0.5, 0.5, 0.5", or "x/255 only"."""
    if normalize is None:
        return "x/255 only"
    mean, std = normalize
    return (f"mean {', '.join(f'{v:.4g}' for v in mean)}; std "
            f"{', '.join(f'{v:.4g}' for v in std)}")


@dataclass(frozen=True)
class ModelNormalize:
    """How a model's own files say its images are normalised: ``normalize`` in
    ``--normalize``'s syntax (of x/255), read from ``source``."""

    normalize: str
    source: Path

    def note(self, given: str | None, used: Normalize | None) -> str | None:
        """What to tell the user: that the model's own normalisation is used (``given`` None),
        or that ``--normalize`` overrides a different one; None when they agree."""
        own = parse_normalize(self.normalize)
        if given is None:
            return (f"images are normalised as {self.source} says ({describe(own)}); "
                    "--normalize overrides it")
        if own != used:
            return (f"{self.source} normalises images otherwise ({describe(own)}); "
                    f"--normalize {given} is used as given")
        return None


def _stat(value: Any, what: str, source: Path) -> RGB:
    """``image_mean`` / ``image_std``: one number or three, finite."""
    values = value if isinstance(value, list) else [value]
    if len(values) not in (1, 3) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for v in values):
        raise IdauditError(f"{source}: {what} must be one number or three, got {value!r}; "
                           "choose the normalisation with --normalize")
    r, g, b = (float(v) for v in values * 3) if len(values) == 1 else (float(v) for v in values)
    return (r, g, b)


def model_normalize(source: Path) -> ModelNormalize | None:
    """The normalisation a Hugging Face image processor config declares, as ``--normalize``
    would say it of x/255. The processor computes x̂ = (x·r − μ)/σ on pixels x in [0, 255]
    (r = ``rescale_factor``, 1 where ``do_rescale`` is false; μ = 0, σ = 1 where
    ``do_normalize`` is false), which is (x/255 − μ′)/σ′ with μ′ = μ/(255r), σ′ = σ/(255r).
    None where it declares no ``image_mean`` / ``image_std``."""
    from idaudit.core.jsontext import parse_json_object

    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise IdauditError(f"cannot read {source} ({exc})") from None
    cfg = parse_json_object(text, str(source)) or {}
    normalize = cfg.get("do_normalize", True) is not False
    if normalize and ("image_mean" not in cfg or "image_std" not in cfg):
        return None
    mean = _stat(cfg["image_mean"], "image_mean", source) if normalize else (0.0, 0.0, 0.0)
    std = _stat(cfg["image_std"], "image_std", source) if normalize else (1.0, 1.0, 1.0)
    rescale = cfg.get("rescale_factor", 1 / 255) if cfg.get("do_rescale", True) is not False \
        else 1.0
    if isinstance(rescale, bool) or not isinstance(rescale, (int, float)) or \
            not math.isfinite(rescale) or rescale <= 0:
        raise IdauditError(f"{source}: rescale_factor must be a number > 0, got {rescale!r}; "
                           "choose the normalisation with --normalize")
    scale = 255.0 * float(rescale)
    if not normalize and math.isclose(scale, 1.0, rel_tol=1e-9):
        return ModelNormalize("none", source)
    text = ",".join(":".join(repr(v / scale) for v in stat) for stat in (mean, std))
    if min(std) / scale < MIN_STD:
        raise IdauditError(f"{source}: image_std {list(std)} is not an image statistic (at "
                           f"least {MIN_STD:g} of x/255); choose the normalisation with "
                           "--normalize")
    return ModelNormalize(text, source)


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
