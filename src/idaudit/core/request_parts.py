"""The parts a request is composed of, and a request built from flat options.

:class:`LoadOptions` (how an encoder file is opened and which of its outputs is the embedding;
with :func:`encoder_forms`, what a target may be), :class:`WorldChoice` (a
world and its options), :class:`EncoderOptions` (where and how encoders are embedded: a
``LoadOptions``, a ``WorldChoice`` or stored data) and :class:`GateOptions` (a gate). Each
option of a part is also an option of the request holding it, under its own name
(:func:`option_paths`); :class:`Composed` builds a request from those flat options. The
requests, one per command, are in :mod:`idaudit.core.requests`. This module imports nothing
heavy: the CLI reads it before any command runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from idaudit.core.errors import IdauditError
from idaudit.core.options import ENCODER, check_values

__all__ = ["Composed", "EncoderOptions", "GateOptions", "LoadOptions", "WorldChoice", "encoder_forms",
           "option_paths"]


def encoder_forms() -> str:
    """What a target may be: :data:`idaudit.core.registered.ENCODER_FORMS` (the help lines of
    idaudit's own file formats), then the plugin file formats installed (``idaudit.formats``
    entry points, by name: nothing is imported).

    Returns:
        One line, for ``--help`` and the error for a file no format reads.

    Example:
        >>> encoder_forms().startswith("an idaudit checkpoint")
        True
    """
    from idaudit.core.registered import ENCODER_FORMS, FORMATS

    return ENCODER_FORMS + "".join(f"; a {name} file ({FORMATS.help(name)})"
                                   for name in sorted(FORMATS.plugins()))



@dataclass
class LoadOptions:
    """How an encoder file is opened and which of its outputs is the embedding.

    ``arch`` (``module.path:factory`` or ``timm:NAME``) and ``arch_kwargs``: the network plain
    weights belong to; ``trust_pickle`` (``--trust-code``): unpickle whole modules and objects
    of the user's classes (runs code from the file), and where no cage can be built run
    programs from files in this process; ``key``: the entry of a torch.save dict holding the
    weights (dots nest: ``state_dict``, ``target_encoder``); ``prefix``: keep the keys under
    it and strip it (``model.backbone.``); ``pool``: ``cls`` | ``mean`` | ``none`` for token
    outputs (batch, tokens, dim); ``output``: a field of the output (``last_hidden_state``,
    ``pooler_output``, ``emb``) or an element (an integer) of a tuple; ``embed``: how the
    model is called, ``function(model, inputs) → (batch, m)``, the function itself (Python)
    or its name ``module:function``; in an audit, several by name (``{"backbone": f,
    "projector": g}``: one target each, side by side); ``weights``: the weights file of a
    LeWM directory that holds several (``weights_epoch_2.pt``), by name.
    """

    arch: str | None = None
    arch_kwargs: dict[str, Any] | None = None
    trust_pickle: bool = False
    key: str | None = None
    prefix: str | None = None
    pool: str | None = None
    output: str | int | None = None
    embed: str | Callable[[Any, Any], Any] | dict[str, Any] | None = None
    weights: str | None = None
    time_limit: float | None = None

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Refuse (one line naming the flag) a value outside its option's declaration in
        :data:`~idaudit.core.options.ENCODER` (a non-empty text, a form, an object, a bool,
        one of its POOLS, a limit, the option it goes with), or an ``embed`` that is no
        function; an integer ``output`` given as text ("0") becomes an int."""
        if isinstance(self.output, str) and re.fullmatch(r"-?[0-9]+", self.output.strip()):
            self.output = int(self.output)
        check_values(ENCODER, {f.name: getattr(self, f.name) for f in fields(self)})
        _check_embeds(self.embed)

    def chooses_embedding(self) -> bool:
        return self.pool is not None or self.output is not None or self.embed is not None

    def refuse(self, names: tuple[str, ...], what: str) -> None:
        """A one-line error if an option in ``names`` is given for ``what``."""
        given = [f"--{n.replace('_', '-')}" for n in names  # `is`: output=0 is given
                 if getattr(self, n) is not None and getattr(self, n) is not False]
        if given:
            raise IdauditError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not "
                               f"apply to {what}")

    def refuse_all(self, what: str) -> None:
        """A one-line error if any option is given for ``what`` (arrays given as they are: no
        file is opened, no encoder called)."""
        self.refuse(tuple(f.name for f in fields(self)), what)

    def refuse_for_arrays(self, path: Path) -> None:
        if self.arch is not None:
            raise IdauditError(f"--arch goes with plain weights, not arrays ({path} holds "
                               "arrays)")
        self.refuse(("arch_kwargs", "prefix", "pool", "output", "embed", "time_limit"),
                    f"arrays ({path} holds arrays: they are audited as they are)")



def _check_embeds(embed: Any) -> None:
    """``embed``: a function or its name (:func:`_check_embed`), or several by name (an
    audit's targets side by side)."""
    if isinstance(embed, dict):
        if not embed:
            raise IdauditError("--embed as a dict names one function or more (name → "
                               "function, one target each), got none")
        for name, fn in embed.items():
            if not isinstance(name, str) or not name.strip():
                raise IdauditError(f"--embed's names must be non-empty texts, got {name!r}")
            _check_embed(fn, f"--embed[{name!r}]")
    elif embed is not None:
        _check_embed(embed, "--embed")


def _check_embed(fn: Any, flag: str) -> None:
    """An embed function: callable (Python), or named ``module:function``."""
    if callable(fn):
        return
    text = fn if isinstance(fn, str) else ""
    mod, sep, attr = text.partition(":")
    if not (sep and mod.strip() and attr.strip()):
        raise IdauditError(f"{flag} must look like module.path:function, got {fn!r}",
                           library=f"{flag[2:]} must be a function (model, x) → (batch, m) or "
                                   f"its name module.path:function, got {fn!r}")


@dataclass
class WorldChoice:
    """Which world (a name, a ``WorldSpec`` or a ``World``) and its options: ``dim``,
    ``source``, ``alpha``, ``rho``, ``layers``, ``image_size``, ``stride``, a recorded
    world's array names and angles, a stable-worldmodel world's ``frames`` and
    ``episode_steps`` (None: the world's own)."""

    world: Any = None
    dim: int | None = None
    source: str | None = None
    alpha: float | None = None
    rho: float | None = None
    layers: int | None = None
    image_size: int | None = None
    stride: int | None = None
    observations: str | None = None
    latents: str | None = None
    episodes: str | None = None
    angles: str | tuple[int, ...] | list[int] | None = None
    frames: int | None = None
    episode_steps: int | None = None

    def world_options(self) -> dict[str, Any]:
        """The world options given (world names: see :func:`idaudit.worlds.make_spec`)."""
        return {k: getattr(self, k) for k in self._WORLD_OPTIONS if getattr(self, k) is not None}

    _WORLD_OPTIONS = ("dim", "source", "alpha", "rho", "layers", "image_size", "stride",
                      "observations", "latents", "episodes", "angles", "frames",
                      "episode_steps")


@dataclass
class EncoderOptions:
    """Where and how encoders are embedded (audit, consistency, plan, embed): how a file opens
    and which output is the embedding (``load``), the world and its options (``world``), or
    stored ``data``. Images reach an idaudit checkpoint as it recorded; any other encoder gets
    float N×3×S×S in [0, 1], then ``normalize`` (``imagenet``, ``none``, ``MEAN,STD``:
    :func:`idaudit.loading.image_input.parse_normalize`; None: the model's own where its files
    say it, :func:`idaudit.loading.image_input.model_normalize`, else none). Evaluation images
    rendered for an encoder (``--world reacher`` without ``--data``) are cached under
    ``cache_dir`` (None: ``$IDAUDIT_CACHE``, else ``~/.cache/idaudit``); ``progress`` shows a
    bar while they render."""

    load: LoadOptions = field(default_factory=LoadOptions)
    world: WorldChoice = field(default_factory=WorldChoice)
    data: str | Path | None = None
    normalize: str | None = None
    cache_dir: str | Path | None = None
    progress: bool = False

    def placement_flags(self, n_eval: int | None = None, with_rho: bool = True) -> list[str]:
        """The flags given that say where an encoder is embedded (``--rho`` only
        ``with_rho``): none of them applies to arrays, which are evaluated as they are."""
        given = [f for f, v in (("--world", self.world.world), ("--data", self.data),
                                ("--n-eval", n_eval), ("--normalize", self.normalize),
                                ("--cache-dir", self.cache_dir)) if v is not None]
        return given + [f"--{k.replace('_', '-')}" for k in self.world.world_options()
                        if with_rho or k != "rho"]


@dataclass
class GateOptions:
    """A gate, every way the CLI takes one: ``min_r2``, ``max_orthogonality_error``,
    ``min``/``max`` (``{metric: value}`` or ``["METRIC=VALUE", …]``) and ``gate`` (a
    ``{"min": …, "max": …}`` dict or a TOML file); :func:`idaudit.evaluations.gate.collect_thresholds`
    reads it."""

    min_r2: float | None = None
    max_orthogonality_error: float | None = None
    min: dict[str, float] | list[str] | None = None
    max: dict[str, float] | list[str] | None = None
    gate: dict[str, dict[str, float]] | str | Path | None = None


#: the parts a request is composed of, by field name: each option of a part is also an
#: option of the request (the CLI's flag, a keyword of the Python function), under its own name
_PARTS = (LoadOptions, WorldChoice, EncoderOptions, GateOptions)


def option_paths(request: type) -> dict[str, list[tuple[str, ...]]]:
    """Every option of a request class → where it lies: its own fields, and each field of a
    part (a field holding one of :data:`_PARTS`) under the part's name (``("encoder",
    "load", "arch")``). An option two places hold (``rho``: the arrays' ρ and a world's) has
    two paths."""
    out: dict[str, list[tuple[str, ...]]] = {}

    def walk(cls: type, prefix: tuple[str, ...]) -> None:
        for f in fields(cls):
            part = _part(f)
            if part is not None:
                walk(part, (*prefix, f.name))
            elif not f.name.startswith("_"):
                out.setdefault(f.name, []).append((*prefix, f.name))

    walk(request, ())
    return out


_PART_NAMES = {cls.__name__: cls for cls in _PARTS}


def _part(f: Any) -> type | None:
    """The part a dataclass field holds, or None (annotations are text in this module)."""
    return _PART_NAMES.get(f.type if isinstance(f.type, str) else getattr(f.type, "__name__", ""))


@dataclass
class Composed:
    """A request made of parts (:data:`_PARTS`), built from flat options too."""

    @classmethod
    def from_options(cls, **options: Any) -> Any:
        """The request whose options (flat, as the CLI's flags name them: ``arch``,
        ``world``, ``min_r2`` …) are ``options``: each goes to the part that holds it; an
        option two places hold goes to the first (see
        :meth:`idaudit.core.requests.AuditRequest.from_options`)."""
        paths = option_paths(cls)
        unknown = sorted(set(options) - set(paths))
        if unknown:
            raise IdauditError(f"{cls.__name__} has no option {', '.join(unknown)}")
        parts: dict[tuple[str, ...], dict[str, Any]] = {(): {}}
        for name, value in options.items():
            path = paths[name][0]
            parts.setdefault(path[:-1], {})[path[-1]] = value
        return _build(cls, (), parts)


def _build(cls: type, prefix: tuple[str, ...], parts: dict[tuple[str, ...], dict[str, Any]]
           ) -> Any:
    given = dict(parts.get(prefix, {}))
    for f in fields(cls):
        part = _part(f)
        if part is not None and any(k[:len(prefix) + 1] == (*prefix, f.name) for k in parts):
            given[f.name] = _build(part, (*prefix, f.name), parts)
    return cls(**given)
