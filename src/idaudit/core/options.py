"""Options declared once: name, type, flags, help, default and constraint of every option a
command passes to its request.

Each :class:`Option` here is the one place its option is described. What reads them:

* the typer parameters of every command (``cli/options.py``:
  :func:`~idaudit.cli.options.option_flags`), with their ``--help``: the world options
  (:data:`WORLD`), the train options (:data:`TRAIN`), the encoder options of the commands
  that embed an encoder (:data:`ENCODER`), and each command's own
  (:mod:`idaudit.core.command_options`, declared with the same :class:`Option`);
* the fields of :class:`~idaudit.core.requests.TrainRequest` (made from :data:`WORLD` and
  :data:`TRAIN`: :func:`request_fields`) and the types
  :meth:`~idaudit.training.config.TrainConfig.validate` checks (:func:`kinds`); the defaults
  of the other requests' own fields (:func:`by_name`);
* docs/options.md (``scripts/options_table.py`` writes it from
  :data:`~idaudit.core.command_options.GROUPS`; a test compares);
* the invalid values tests/test_options.py tries on the command line (each constraint's
  :meth:`Option.invalids`).

A constraint is a declaration: ``limit`` names an interval of :data:`idaudit.core.limits.LIMITS`
(one check, one wording), ``choices`` the values a string may take (a tuple, or the name of a
registry of :mod:`idaudit.core.registered`, whose names may grow with plugins), ``valid`` what
a value must be (a key of :data:`VALID`: a non-empty text, an object, a bool), ``pattern`` a
text's form (a :class:`Pattern`) and ``requires`` the option it goes with; :func:`check_values`
checks them all (the encoder options' :class:`~idaudit.core.request_parts.LoadOptions`).

Example:
    >>> BY_NAME["lamb"].flags, BY_NAME["lamb"].annotation
    (('--lamb',), 'float | None')
    >>> BY_NAME["objective"].invalids(), BY_NAME["lamb"].invalids()
    (('no-such-objective',), (-1, 2))
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from idaudit.core.defaults import (
    CAGE_SECONDS,
    DATA_ROOT,
    NORMALIZATIONS,
    OFFICIAL_LAMB,
    TRAIN_DEFAULTS,
    WORLD,
    WORLD_DEFAULTS,
)
from idaudit.core.defaults import default_text as _text
from idaudit.core.errors import IdauditError

#: an option's type → (its annotation as typer reads it, the check_type kind)
KINDS = {"integer": ("int | None", "integer"), "number": ("float | None", "number"),
         "string": ("str | None", "string"), "flag": ("bool | None", None),
         "path": ("Path | None", "path"), "json": ("str | None", "object"),
         # a directory a command makes, kept as typed (Path would read "s3://b" as "s3:/b")
         "directory": ("str | None", "path"),
         "number-or-rule": ("str | None", None), "list": ("list[str]", None)}


#: what a value declared ``valid`` must be (the CLI gives text; Python any object): its test,
#: the refusal's words after the flag, and a value it refuses (tried by the tests)
VALID: dict[str, tuple[Callable[[Any], bool], str, Any]] = {
    "text": (lambda v: isinstance(v, str) and bool(v.strip()), "must be a non-empty text", " "),
    "mapping": (lambda v: isinstance(v, dict), "must be an object", [1]),
    "bool": (lambda v: isinstance(v, bool), "must be True or False", "yes"),
}


@dataclass(frozen=True)
class Pattern:
    """The form of a text option: a regular expression the whole text matches (an integer
    is read as its digits), what a refusal ``says`` after the flag, and a value it refuses
    (``bad``, tried by the tests)."""

    regex: str
    says: str
    bad: str

    def holds(self, value: Any) -> bool:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        return isinstance(value, str) and re.fullmatch(self.regex, value, re.DOTALL) is not None


@dataclass(frozen=True)
class Option:
    """One option: its ``name`` (a request field, the flag with dashes), ``kind`` (a key of
    :data:`KINDS`), ``help`` (text, or a function of nothing returning it, for help read
    from a registry), the typer spellings (``flags``; by default the name, dashes for underscores), and
    its constraint: ``limit`` (a key of LIMITS) or ``choices`` (values, or a registry's
    name: ``"worlds"``, ``"objectives"``), ``valid`` (a key of :data:`VALID`: a non-empty
    text, an object, a bool) and ``pattern`` (a text's :class:`Pattern`), ``requires`` (the
    option it goes with, and why: given alone it is refused). ``typer``: further typer.Option
    arguments; ``default``: the command line's default where it is not None (a switch's False).

    Args:
        name, kind, help, flags, limit, choices, valid, pattern, requires, typer: as above.
        default: typer's default (None: "not given"; a request or a world fills it).

    Example:
        >>> Option("steps", "integer", "training steps").flags
        ('--steps',)
    """

    name: str
    kind: str
    help: str | Callable[[], str]
    flags: tuple[str, ...] = ()
    limit: str | None = None
    choices: tuple[str, ...] | str | None = None
    typer: dict[str, Any] = field(default_factory=dict)
    default: Any = None
    valid: str | None = None
    pattern: Pattern | None = None
    requires: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"option {self.name}: unknown kind {self.kind!r}")
        if self.valid is not None and self.valid not in VALID:
            raise ValueError(f"option {self.name}: unknown valid {self.valid!r}")
        if not self.flags:
            object.__setattr__(self, "flags", ("--" + self.name.replace("_", "-"),))

    @property
    def flag(self) -> str:
        """The option's long flag, as errors name it."""
        return self.flags[0].split("/")[0]

    @property
    def annotation(self) -> str:
        if self.kind == "flag" and self.default is not None:
            return "bool"  # a switch that is off unless given
        return KINDS[self.kind][0]

    def help_text(self) -> str:
        return self.help() if callable(self.help) else self.help

    def check(self, value: Any) -> None:
        """Refuse ``value`` (not None) outside the declared constraint, in one line naming
        the flag: its ``valid`` kind, then its ``pattern``, its ``choices`` (a tuple; a
        registry's names are checked where the name is looked up) and its ``limit``."""
        if self.valid is not None and not VALID[self.valid][0](value):
            raise IdauditError(f"{self.flag} {VALID[self.valid][1]}, got {value!r}")
        if self.pattern is not None and not self.pattern.holds(value):
            raise IdauditError(f"{self.flag} {self.pattern.says}, got {value!r}")
        if isinstance(self.choices, tuple) and value not in self.choices:
            raise IdauditError(f"{self.flag} must be one of {', '.join(self.choices)}, got "
                               f"{value!r}")
        if self.limit is not None:
            from idaudit.core.limits import check

            check(self.limit, value, self.flag)

    def invalids(self) -> tuple[Any, ...]:
        """Values the constraint refuses: one its ``valid`` kind refuses, one its ``pattern``
        does, an unknown name, one past each end of the interval (the end itself where it is
        excluded)."""
        tried = [VALID[self.valid][2]] if self.valid is not None else []
        tried += [self.pattern.bad] if self.pattern is not None else []
        tried += [f"no-such-{self.name}"] if self.choices is not None else []
        if self.limit is not None:
            from idaudit.core.limits import LIMITS

            lim = LIMITS[self.limit]
            ends = [lim.low if lim.open else lim.low - 1] if lim.low is not None else []
            ends += [lim.high if lim.open else lim.high + 1] if lim.high is not None else []
            tried += [int(v) if lim.integer else v for v in ends]
        return tuple(tried)


def check_values(options: tuple[Option, ...], values: dict[str, Any]) -> None:
    """Refuse (one line naming the flag) each of ``values`` (by option name; None: not given)
    outside its option's declared constraint (:meth:`Option.check`), then an option given
    without the one it ``requires``.

    Example:
        >>> check_values(ENCODER, {"arch_kwargs": {"dim": 4}})
        Traceback (most recent call last):
        ...
        idaudit.core.errors.UsageError: arch_kwargs goes with arch (the factory it is passed to)

    (The command line's message names the flags: "--arch-kwargs goes with --arch …".)
    """
    named = by_name(options)
    for option in options:
        if values.get(option.name) is not None:
            option.check(values[option.name])
    for option in options:
        if option.requires is not None and values.get(option.name) and \
                values.get(option.requires[0]) is None:
            other, why = option.requires
            raise IdauditError(f"{option.flag} goes with {named[other].flag} ({why})")


def _registry_help(name: str, tail: str = "") -> Callable[[], str]:
    def text() -> str:
        from idaudit.core import registered

        return registered.choices(getattr(registered, name)) + tail

    return text


def _world(key: str) -> str:
    return _text(WORLD_DEFAULTS[key])


#: the world options of ``idaudit train`` and ``idaudit world`` (the same flags, declared once)
WORLD: tuple[Option, ...] = (
    Option("world", "string", _registry_help("WORLDS", f" (default: {WORLD}, or the world of "
                                             "--data)"), ("--world", "-w"), choices="worlds"),
    Option("dim", "integer", "latent dimension (coupling: any even N; 2D worlds: 2)",
           ("--dim", "-n")),
    Option("source", "string", "latent law: gaussian | laplace | gennorm (default "
           f"{_world('source')})"),
    Option("alpha", "number", "shape α of the gennorm source (2 = Gaussian, 1 = Laplace)",
           limit="alpha"),
    Option("rho", "number", "OU correlation ρ in (0, 1): z′ = ρz + √(1−ρ²)η (default "
           f"{_world('rho')})", limit="rho"),
    Option("layers", "integer", f"coupling layers (default {_world('layers')}; the encoder "
           "matches)", limit="layers"),
    Option("trajectory", "flag", "reacher: pairs from episodes of a goal-reaching controller "
           "instead of OU pairs", ("--trajectory/--ou",), typer={"show_default": False}),
    Option("stride", "integer", "steps between a pair's views: reacher --trajectory (default "
           f"{_world('stride')}), recorded and swm: episodes (default 1)", limit="stride"),
    Option("observations", "string", "recorded: the array of observations in --data (default "
           "x; pairs: with NAME_prime)"),
    Option("latents", "string", "recorded: the array of true states in --data (default z; "
           "pairs: with NAME_prime), e.g. qpos"),
    Option("episodes", "string", "recorded: the array of each frame's episode number in "
           "--data (default episode)"),
    Option("angles", "string", "recorded: latents that are angles in radians, e.g. 0,1 (ρ "
           "estimated and R² scored as angles)"),
    Option("image_size", "integer", "reacher: image side in pixels, rendered at that size "
           f"(default {_world('image_size')}, the paper's); swm: the collected frames' side",
           limit="image_size"),
    Option("frames", "integer", "swm: frames collected, in whole episodes of --episode-steps "
           f"(default {_world('swm_frames')}: 12 held-out episodes, enough rows for a 192-wide "
           "encoder and an estimated ceiling)", limit="frames"),
    Option("episode_steps", "integer", "swm: steps per collected episode (default "
           f"{_world('episode_steps')})", limit="episode_steps"),
    Option("workers", "integer", "reacher: render processes (default: one per core)"),
)

#: the options of ``idaudit train`` besides the world's (TrainConfig's and the run's)
TRAIN: tuple[Option, ...] = (
    Option("mixing_seed", "integer", "coupling worlds: the seed of the mixing network g "
           f"(default {_world('mixing_seed')})"),
    Option("objective", "string", _registry_help("OBJECTIVES"), ("--objective", "-O"),
           choices="objectives"),
    Option("lamb", "number", "regulariser weight λ in [0, 1] (lejepa, whiten; whiten "
           "has a λ of its own, see --show-config)", limit="lamb"),
    Option("sigma", "number-or-rule", "InfoNCE kernel width σ; 'auto' = √((1−ρ_v²)/ρ_v), "
           "matched to the views' OU channel; 'sqrtn' = √(N/2)"),
    Option("steps", "integer", "training steps on synthetic worlds", limit="steps"),
    Option("epochs", "integer", "epochs over the pairs on dataset worlds (reacher, --data)", limit="epochs"),
    Option("batch", "integer", "pairs per step (two views each)", limit="batch"),
    Option("lr", "number", "peak learning rate", limit="lr"),
    Option("weight_decay", "number", "AdamW's weight decay (default "
           f"{_text(TRAIN_DEFAULTS['weight_decay'])}, or the world's recipe's)", limit="weight_decay"),
    Option("clip", "number", "clip the gradients' norm at this value (default: none, or the "
           "world's recipe's)", limit="clip"),
    Option("schedule", "string", "learning-rate schedule: constant_cosine (the peak for the "
           "first half, then cosine to 0) | cosine_epochs (cosine stepped once per epoch) "
           f"(default {TRAIN_DEFAULTS['schedule']}, or the world's recipe's)",
           choices=("constant_cosine", "cosine_epochs")),
    Option("n_slices", "integer", "random directions of SIGReg's sliced Gaussianity test "
           f"(lejepa) (default {TRAIN_DEFAULTS['n_slices']})", limit="n_slices"),
    Option("seed", "integer", "training seed (initialisation, batches, the evaluation set of "
           "synthetic worlds)"),
    Option("inits", "integer", "train K encoders, keep the lowest final loss", limit="inits"),
    Option("eval_every", "integer", "steps between curve points (0: only at the end)", limit="eval_every"),
    Option("n_eval", "integer", "size of the fixed evaluation set (reacher: of the rendered "
           "evaluation images)", limit="n_eval"),
    Option("views", "string", "anchor: both views one OU step from a shared z (the paper's "
           "code; views correlate ρ²) | pair: views (z, z′) (dataset worlds: pair only)",
           choices=("anchor", "pair")),
    Option("form", "string", "lejepa: paper (λ·SIGReg of both views pooled + (1 − λ)·"
           "alignment) | official (the lejepa library's: alignment + λ·SIGReg per view, λ "
           f"default {_text(OFFICIAL_LAMB)}) (default {TRAIN_DEFAULTS['form']})",
           choices=("paper", "official")),
    Option("n_views", "integer", "views per row, each one OU step from a shared anchor (above "
           f"2: --views anchor, synthetic worlds) (default {TRAIN_DEFAULTS['n_views']})",
           limit="n_views"),
    Option("projector", "string", "widths of a projector head, e.g. 256,256,2 (Linear-BN-ReLU, "
           "last Linear); the objective sees its output, audit and plan the backbone's unless "
           "--output projector"),
    Option("encoder", "string", "mlp | coupling | cnn | pixel_cnn (default: the world's own, "
           "e.g. the matched inverse coupling on coupling; mlp and coupling take their widths "
           "from a vector world; the run's first line names it)"),
    Option("encoder_kwargs", "json", "JSON object"),
    Option("device", "string", "auto (CUDA when present) | cpu | cuda; it chooses the reacher "
           "recipe"),
    Option("pairs", "integer", "reacher: rendered training pairs", limit="pairs"),
    Option("data_seed", "integer", "reacher and swm: the dataset's seed (default "
           f"{_world('data_seed')}; separate from the training --seed)"),
    Option("recipe", "string", "reacher: cpu (chosen on a CPU: small images, a lighter CNN, a "
           "run of minutes) | paper (chosen on CUDA); options given explicitly win"),
    Option("data", "path", "train on stored pairs: a file from `idaudit world`, a Reacher "
           "dataset directory (rendered there if missing), or a recording of your own world"),
    Option("data_root", "path", "reacher: where a dataset is rendered unless --data names the "
           f"place (default: {DATA_ROOT})"),
)

#: how token outputs (batch, tokens, dim) become one embedding per input: the first (CLS)
#: token, the mean over tokens, or all of them flattened
POOLS = ("cls", "mean", "none")

_W = {o.name: o for o in WORLD}

#: the flags of every command that embeds encoders (audit, consistency, plan, embed): the
#: fields of EncoderOptions (its LoadOptions, its world and how images reach the encoder)
ENCODER: tuple[Option, ...] = (
    Option("arch", "string", "the network plain weights belong to: module.path:factory "
           "(searched in installed packages, then the working directory) or timm:NAME "
           "(timm.create_model, no download)", valid="text",
           pattern=Pattern(r"[^:].*:.*[^:]", "must look like module.path:factory or timm:NAME",
                           "nocolon")),
    Option("arch_kwargs", "json", "JSON kwargs for the factory", valid="mapping",
           requires=("arch", "the factory it is passed to")),
    Option("trust_pickle", "flag", "run code from the file: unpickle a whole module or an "
           "object of your own class, load a .pt2 archive or TorchScript idaudit cannot vet as "
           "code-free (still in the cage where it can be built); where no cage can be built, "
           "run programs from files in this process with your permissions",
           ("--trust-code", "--trust-pickle"), default=False, valid="bool"),
    Option("key", "string", "the entry of a torch.save dict holding the weights, dots nesting "
           "(state_dict, target_encoder); asked for when it holds several", valid="text",
           pattern=Pattern(r"[^.]+(\.[^.]+)*", "must be names joined by dots (state_dict, "
                           "model.encoder)", "a..b")),
    Option("prefix", "string", "keep the weights under this prefix and strip it "
           "(model.backbone.); module. and _orig_mod. are stripped always", valid="text"),
    Option("pool", "string", "token outputs (batch, tokens, dim): cls (the first token) | mean "
           "| none (all, flattened)", choices=POOLS),
    Option("output", "string", "the field of a model output or dict (last_hidden_state, "
           "pooler_output, emb), or an index of a tuple; an idaudit checkpoint trained with "
           "--projector: backbone (default) | projector",
           pattern=Pattern(r"-?[0-9]+|[A-Za-z_][A-Za-z0-9_]*", "must be a field name "
                           "(last_hidden_state, emb) or an index of a tuple (0)", "last hidden")),
    Option("embed", "string", "module:function called as function(model, images) → (batch, "
           "m), for encoders with no plain forward"),
    Option("weights", "string", "a LeWM directory holding several weights files "
           "(weights_epoch_1.pt, weights_epoch_2.pt …): the one to load, by name", valid="text",
           pattern=Pattern(r"(?!\.\.?\Z)[^/\\]+", "names a file of the LeWM directory "
                           "(weights_epoch_2.pt), not a path", "a/b.pt")),
    Option("time_limit", "number", "seconds a program from a file (TorchScript, .pt2, Hugging "
           "Face, timm, LeWM, --trust-code) may run in its cage, load and forwards together "
           f"(default {_text(CAGE_SECONDS)})", limit="time_limit"),
    Option("world", "string", "evaluate on this world (default: the checkpoint's)",
           ("--world", "-w"), choices="worlds"),
    _W["dim"], _W["source"], _W["alpha"], _W["rho"], _W["layers"], _W["stride"],
    _W["observations"], _W["latents"], _W["episodes"], _W["angles"], _W["frames"],
    _W["episode_steps"],
    Option("image_size", "integer", "reacher: render the evaluation images at S × S (e.g. 224 "
           "for a ViT; without --data the --n-eval pairs are rendered and cached)",
           limit="image_size"),
    Option("data", "path", "evaluate on stored data: a pairs file from `idaudit world`, a "
           "Reacher dataset directory, or a recording of your own world (pairs or episodes: "
           "docs/own-world.md)"),
    Option("normalize", "string", "images for an encoder that is not an idaudit checkpoint: "
           "float N×3×S×S in [0, 1], then " + " | ".join([*NORMALIZATIONS, "none", "MEAN,STD"])
           + " (default: the model's "
           "own, a Hugging Face directory's preprocessor_config.json, else none)"),
    Option("cache_dir", "path", "where rendered evaluation images are cached (default "
           "$IDAUDIT_CACHE, else ~/.cache/idaudit)"),
)


BY_NAME: dict[str, Option] = {o.name: o for o in (*WORLD, *TRAIN)}


def by_name(options: tuple[Option, ...]) -> dict[str, Option]:
    """A group's options by name (a request reads its fields' defaults from it).

    Example:
        >>> by_name(ENCODER)["pool"].choices
        ('cls', 'mean', 'none')
    """
    return {o.name: o for o in options}


def kinds(options: tuple[Option, ...]) -> dict[str, str]:
    """``{name: check_type kind}`` of the options that have one (TrainConfig's checks).

    Example:
        >>> kinds(TRAIN)["steps"]
        'integer'
    """
    return {o.name: KINDS[o.kind][1] for o in options if KINDS[o.kind][1] is not None}


__all__ = ["BY_NAME", "ENCODER", "KINDS", "POOLS", "TRAIN", "VALID", "WORLD", "Option", "Pattern",
           "by_name", "check_values", "kinds"]
