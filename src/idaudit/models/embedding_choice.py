"""Which part of an encoder's output is the embedding, (batch, m), and how it is called.

An encoder may return a tensor, a tuple/list, a dict or a Hugging Face ``ModelOutput``, and
tokens (batch, tokens, dim) as ViTs do. :func:`select_embedding` turns that into (batch, m):

* ``output`` picks a field (``last_hidden_state``, ``pooler_output``, ``emb`` …) of a dict,
  ModelOutput or object, or an element (an integer) of a tuple/list/ModelOutput; without it a
  tuple/list gives its element 0 (the convention of ``return_dict=False`` models and of
  encoders that return ``(embedding, extras)``), a ModelOutput with ``pool`` set gives its
  ``last_hidden_state``, and any other dict or ModelOutput is refused, naming its fields;
* ``pool`` reduces tokens: ``cls`` h = y[:, 0], ``mean`` h = (1/N) Σₙ y[:, n], ``none``
  flattens them, h = y.reshape(batch, −1); tokens without ``pool`` are refused (never
  silently flattened). Other shapes: (batch,) becomes one column, (batch, m) stays, four or
  more axes (feature maps) are flattened.

:func:`encoder_call` says how a module is called: its ``forward``, or — for a module with no
``forward`` of its own — its ``encode``; an ``encode(info)`` (LeWM / stable-worldmodel) is
given ``{"pixels": x[:, None]}`` (one time step) and its ``emb`` is the embedding.
:class:`ChosenEmbedding` carries a loaded module with its choice (and an optional
``embed(model, x)`` function), so that :func:`idaudit.models.encoders.embed` applies it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from idaudit.core.errors import IdauditError
from idaudit.core.options import POOLS

__all__ = ["ChosenEmbedding", "call_and_choice", "select_embedding"]

_POOL_FLAG = "--pool cls|mean|none"


@dataclass(frozen=True)
class Choice:
    """Which output is the embedding: a field or index (``output``) and a token ``pool``;
    ``hint``: what to say when ``pool`` meets an output that is no tokens (a timm model's)."""

    pool: str | None = None
    output: str | int | None = None
    hint: str = ""


def _type_name(y: Any) -> str:
    return type(y).__name__


def _fields(y: Any) -> list[str]:
    return [str(k) for k in y.keys()] if isinstance(y, Mapping) else []


def output_field(y: Any, output: str | int) -> Any:
    """The field ``output`` of a dict / ModelOutput / object, or its element ``output`` (an
    integer) of a tuple, list or ModelOutput; a one-line error naming what there is."""
    if isinstance(output, int):
        items = y.to_tuple() if hasattr(y, "to_tuple") else y
        if not isinstance(items, (tuple, list)):
            raise IdauditError(f"--output {output} picks an element of a tuple, but the encoder "
                               f"returned {_describe(y)}")
        if not -len(items) <= output < len(items):
            raise IdauditError(f"--output {output} is out of range: the encoder returned "
                               f"{len(items)} outputs")
        return items[output]
    if isinstance(y, Mapping):
        if output in y and y[output] is not None:
            return y[output]
        raise IdauditError(f"the encoder's output has no field {output!r} (its fields: "
                           f"{', '.join(_fields(y)) or 'none'})")
    if not isinstance(y, torch.Tensor) and hasattr(y, output):
        return getattr(y, output)
    raise IdauditError(f"--output {output} picks a field, but the encoder returned {_describe(y)}")


def _describe(y: Any) -> str:
    if isinstance(y, torch.Tensor):
        return f"a tensor of shape {tuple(y.shape)}"
    if isinstance(y, Mapping):
        return f"{_type_name(y)} with fields {', '.join(_fields(y)) or 'none'}"
    if isinstance(y, (tuple, list)):
        return f"a {_type_name(y)} of {len(y)}"
    return _type_name(y)


def pool_tokens(y: torch.Tensor, pool: str, hint: str = "") -> torch.Tensor:
    """Tokens (batch, N, dim) → (batch, m): ``cls`` y[:, 0], ``mean`` the average over the N
    tokens, ``none`` every token's values in a row (any shape)."""
    if pool == "none":
        return y.reshape(y.shape[0], -1)
    if y.ndim != 3:
        raise IdauditError(f"--pool {pool} applies to tokens (batch, tokens, dim), but the "
                           f"encoder returned shape {tuple(y.shape)}{hint}")
    return y[:, 0] if pool == "cls" else y.mean(dim=1)


def select_embedding(y: Any, batch: int, choice: Choice = Choice()) -> torch.Tensor:
    """The embedding (batch, m) in an encoder's output ``y`` for ``batch`` inputs (see the
    module's docstring); a one-line :class:`IdauditError` when there is no unambiguous one."""
    if choice.output is not None:
        y = output_field(y, choice.output)
    elif isinstance(y, Mapping):
        if choice.pool is not None and hasattr(y, "to_tuple") and \
                y.get("last_hidden_state") is not None:
            y = y["last_hidden_state"]
        else:
            raise IdauditError(f"the encoder returned {_describe(y)}; choose the embedding with "
                               "--output FIELD (and, for tokens, " + _POOL_FLAG + ")")
    elif isinstance(y, (tuple, list)) and y:
        y = y[0]
    if not isinstance(y, torch.Tensor) or y.ndim < 1 or y.shape[0] != batch:
        shape = tuple(y.shape) if isinstance(y, torch.Tensor) else _type_name(y)
        raise IdauditError(f"the encoder returned {shape} for a batch of {batch}; expected "
                           "(batch, embed_dim)")
    if choice.pool is not None:
        return pool_tokens(y, choice.pool, choice.hint)
    if y.ndim == 3:
        raise IdauditError(f"the encoder returned tokens of shape {tuple(y.shape)} (batch, "
                           f"tokens, dim); choose how to pool them with {_POOL_FLAG}, or give "
                           "--embed module:function")
    return y.reshape(y.shape[0], -1)


def _own_forward(module: Any) -> bool:
    """Whether ``module`` has a forward other than nn.Module's placeholder (looked up in the
    classes' own dicts: TorchScript's forward is a descriptor that fails on the class)."""
    if not isinstance(module, nn.Module):
        return True
    owner = next(c for c in type(module).__mro__ if "forward" in vars(c))
    return owner is not nn.Module


def _takes_info(fn: Callable) -> bool:
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0] == "info"


def _encode_info(module: Any) -> Callable[[torch.Tensor], dict[str, Any]]:
    def call(x: torch.Tensor) -> dict[str, Any]:
        info = module.encode({"pixels": x.unsqueeze(1)})  # (batch, time = 1, …)
        if not isinstance(info, Mapping):
            return info
        return {k: v[:, 0] if isinstance(v, torch.Tensor) and v.ndim >= 2 and v.shape[1] == 1
                else v for k, v in info.items()}
    return call


def encoder_call(module: Any) -> tuple[Callable[[torch.Tensor], Any], Choice]:
    """How to call ``module`` on inputs x, and the choice its way of calling implies: its
    ``forward``; with none of its own, ``encode(x)``, or for ``encode(info)`` (LeWM) the
    ``emb`` of ``encode({"pixels": x[:, None]})`` (its time axis removed)."""
    if _own_forward(module):
        return module, Choice()
    encode = getattr(module, "encode", None)
    if not callable(encode):
        raise IdauditError(f"the encoder ({type(module).__name__}) has no forward and no encode "
                           "method; say how to embed with --embed module:function")
    if _takes_info(encode):
        return _encode_info(module), Choice(output="emb")
    return encode, Choice()


class ChosenEmbedding(nn.Module):
    """A module with the choice of its embedding: called on x it returns (batch, m).

    ``embed_fn(module, x)`` (``--embed``) replaces the call of the module when given; ``pool``
    and ``output`` apply to what the call returns (:func:`select_embedding`); ``hint`` ends
    the refusal of a ``pool`` for an output that is no tokens."""

    def __init__(self, module: Any, pool: str | None = None, output: str | int | None = None,
                 embed_fn: Callable[[Any, torch.Tensor], Any] | None = None,
                 hint: str = "") -> None:
        super().__init__()
        if pool is not None and pool not in POOLS:
            raise IdauditError(f"--pool must be one of {', '.join(POOLS)}, got {pool!r}")
        self.module = module
        self.embed_fn = embed_fn
        if embed_fn is not None:
            call, implied = (lambda x: embed_fn(self.module, x)), Choice()
        else:
            call, implied = encoder_call(module)
        object.__setattr__(self, "_call", call)  # not registered a second time as a submodule
        self.choice = Choice(pool=pool, output=output if output is not None else implied.output,
                             hint=hint)

    def raw(self, x: torch.Tensor) -> Any:
        """What the module (or ``embed_fn``) returns for x, before the choice."""
        return self._call(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return select_embedding(self.raw(x), x.shape[0], self.choice)


def call_and_choice(encoder: Any) -> tuple[Callable[[torch.Tensor], Any], Choice]:
    """How :func:`idaudit.models.encoders.embed` calls ``encoder`` and which output it keeps."""
    if isinstance(encoder, ChosenEmbedding):
        return encoder.raw, encoder.choice
    return encoder_call(encoder)
