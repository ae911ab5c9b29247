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
registry of :mod:`idaudit.core.registered`, whose names may grow with plugins).

Example:
    >>> BY_NAME["lamb"].flags, BY_NAME["lamb"].annotation
    (('--lamb',), 'float | None')
    >>> BY_NAME["objective"].invalids(), BY_NAME["lamb"].invalids()
    (('no-such-objective',), (-1, 2))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from idaudit.core.defaults import (
    CAGE_SECONDS,
    DATA_ROOT,
    OFFICIAL_LAMB,
    TRAIN_DEFAULTS,
    WORLD,
    WORLD_DEFAULTS,
)
from idaudit.core.defaults import default_text as _text

#: an option's type → (its annotation as typer reads it, the check_type kind)
KINDS = {"integer": ("int | None", "integer"), "number": ("float | None", "number"),
         "string": ("str | None", "string"), "flag": ("bool | None", None),
         "path": ("Path | None", "path"), "json": ("str | None", "object"),
         "number-or-rule": ("str | None", None), "list": ("list[str]", None)}


@dataclass(frozen=True)
class Option:
    """One option: its ``name`` (a request field, the flag with dashes), ``kind`` (a key of
    :data:`KINDS`), ``help`` (text, or a function of nothing returning it, for help read
    from a registry), the typer spellings (``flags``; by default the name, dashes for underscores), and
    its constraint: ``limit`` (a key of LIMITS) or ``choices`` (values, or a registry's
    name: ``"worlds"``, ``"objectives"``). ``typer``: further typer.Option arguments;
    ``default``: the command line's default where it is not None (a switch's False).

    Args:
        name, kind, help, flags, limit, choices, typer: as above.
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

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"option {self.name}: unknown kind {self.kind!r}")
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

    def invalids(self) -> tuple[Any, ...]:
        """Values the constraint refuses: an unknown name, or one past each end of the
        interval (the end itself where it is excluded)."""
        if self.choices is not None:
            return (f"no-such-{self.name}",)
        if self.limit is None:
            return ()
        from idaudit.core.limits import LIMITS

        lim = LIMITS[self.limit]
        ends = []
        if lim.low is not None:
            ends.append(lim.low if lim.open else lim.low - 1)
        if lim.high is not None:
            ends.append(lim.high if lim.open else lim.high + 1)
        return tuple(int(v) if lim.integer else v for v in ends)


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
    Option("stride", "integer", "reacher --trajectory: steps between views (default "
           f"{_world('stride')})", limit="stride"),
    Option("image_size", "integer", "reacher: image side in pixels, rendered at that size "
           f"(default {_world('image_size')}, the paper's)", limit="image_size"),
    Option("workers", "integer", "reacher: render processes (default: one per core)"),
)

#: the options of ``idaudit train`` besides the world's (TrainConfig's and the run's)
TRAIN: tuple[Option, ...] = (
    Option("mixing_seed", "integer", "coupling worlds: the seed of the mixing network g "
           f"(default {_world('mixing_seed')})"),
    Option("objective", "string", _registry_help("OBJECTIVES"), ("--objective", "-O"),
           choices="objectives"),
    Option("lamb", "number", "regulariser weight λ in [0, 1] (lejepa, whiten)", limit="lamb"),
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
    Option("data_seed", "integer", "reacher: the dataset's seed (default "
           f"{_world('data_seed')}; separate from the training --seed)"),
    Option("recipe", "string", "reacher: cpu (chosen on a CPU: small images, a lighter CNN, a "
           "run of minutes) | paper (chosen on CUDA); options given explicitly win"),
    Option("data", "path", "train on stored pairs: a file from `idaudit world`, or a Reacher "
           "dataset directory (rendered there if missing)"),
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
           "(timm.create_model, no download)"),
    Option("arch_kwargs", "json", "JSON kwargs for the factory"),
    Option("trust_pickle", "flag", "run code from the file: unpickle a whole module or an "
           "object of your own class, load a .pt2 archive or TorchScript idaudit cannot vet as "
           "code-free (still in the cage where it can be built); where no cage can be built, "
           "run programs from files in this process with your permissions",
           ("--trust-code", "--trust-pickle"), default=False),
    Option("key", "string", "the entry of a torch.save dict holding the weights, dots nesting "
           "(state_dict, target_encoder); asked for when it holds several"),
    Option("prefix", "string", "keep the weights under this prefix and strip it "
           "(model.backbone.); module. and _orig_mod. are stripped always"),
    Option("pool", "string", "token outputs (batch, tokens, dim): cls (the first token) | mean "
           "| none (all, flattened)", choices=POOLS),
    Option("output", "string", "the field of a model output or dict (last_hidden_state, "
           "pooler_output, emb), or an index of a tuple; an idaudit checkpoint trained with "
           "--projector: backbone (default) | projector"),
    Option("embed", "string", "module:function called as function(model, images) → (batch, "
           "m), for encoders with no plain forward"),
    Option("weights", "string", "a LeWM directory holding several weights files "
           "(weights_epoch_1.pt, weights_epoch_2.pt …): the one to load, by name"),
    Option("time_limit", "number", "seconds a program from a file (TorchScript, .pt2, Hugging "
           "Face, timm, LeWM, --trust-code) may run in its cage, load and forwards together "
           f"(default {_text(CAGE_SECONDS)})"),
    Option("world", "string", "evaluate on this world (default: the checkpoint's)",
           ("--world", "-w"), choices="worlds"),
    _W["dim"], _W["source"], _W["alpha"], _W["rho"], _W["layers"],
    Option("image_size", "integer", "reacher: render the evaluation images at S × S (e.g. 224 "
           "for a ViT; without --data the --n-eval pairs are rendered and cached)",
           limit="image_size"),
    Option("data", "path", "evaluate on stored data: a pairs file from `idaudit world` or a "
           "Reacher dataset directory"),
    Option("normalize", "string", "images for an encoder that is not an idaudit checkpoint: "
           "float N×3×S×S in [0, 1], then imagenet | none | MEAN,STD (default: the model's "
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


__all__ = ["BY_NAME", "ENCODER", "KINDS", "POOLS", "TRAIN", "WORLD", "Option", "by_name", "kinds"]
