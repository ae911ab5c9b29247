"""The options commands share, each declared once: world options, the encoder flags of every
command that embeds an encoder, and a gated report's flags."""

from __future__ import annotations

import functools
from typing import Any

import typer

from idaudit.core.defaults import CAGE_SECONDS, WORLD_DEFAULTS, default_text
from idaudit.core.options import WORLD as WORLD_OPTIONS
from idaudit.core.options import Option
from idaudit.core.request_parts import encoder_forms

# ---- shared options --------------------------------------------------------------------
# World options default to None ("not given"): each world fills its own defaults and refuses
# the options it does not take, naming them. Help texts read the defaults from
# idaudit.core.defaults (chained options) and the request dataclasses (a command's own options).


def world_default(key: str) -> str:
    """A world option's default as its help text shows it."""
    return default_text(WORLD_DEFAULTS[key])


def n_eval_option(what: str, whose: str = "the training") -> Any:
    """``--n-eval`` of a command that embeds a world's evaluation set: ``what`` it counts, and
    whose evaluation set is the default."""
    return typer.Option(None, "--n-eval", help=f"{what} (default: {whose} eval set, else "
                        f"{world_default('n_eval')}; reacher without --data: "
                        f"{world_default('rendered_eval_pairs')} rendered pairs)")


def typer_option(option: Option, default: Any = None) -> Any:
    """The typer parameter of a declared option (:mod:`idaudit.core.options`): its flags,
    its help (read now: a registry's names, plugins' included) and typer's extras."""
    return typer.Option(default, *option.flags, help=option.help_text(), **option.typer)


def option_flags(param: str, options: tuple[Option, ...], prepare=None):
    """Give a command the declared ``options`` as flags in place of its parameter ``param``,
    which receives them as one dict (:func:`flag_group`)."""
    return flag_group(param, tuple((o.name, o.annotation, typer_option(o)) for o in options),
                      prepare)


WorldOpt, DimOpt, SourceOpt, AlphaOpt, RhoOpt, LayersOpt, TrajectoryOpt, StrideOpt, \
    ImageSizeOpt, WorkersOpt = (typer_option(o) for o in WORLD_OPTIONS)


EncoderArg = typer.Argument(..., help=encoder_forms())
ArchOpt = typer.Option(None, "--arch", help="the network plain weights belong to: "
                       "module.path:factory (searched in installed packages, then the working "
                       "directory) or timm:NAME (timm.create_model, no download)")
ArchKwargsOpt = typer.Option(None, "--arch-kwargs", help="JSON kwargs for the factory")
TrustOpt = typer.Option(False, "--trust-code", "--trust-pickle", help="run code from the "
                        "file: unpickle a whole module or an object of your own class, load a "
                        ".pt2 archive or TorchScript idaudit cannot vet as code-free (still in "
                        "the cage where it can be built); where no cage can be built, run "
                        "programs from files in this process with your permissions")
TimeLimitOpt = typer.Option(None, "--time-limit", help="seconds a program from a file "
                            "(TorchScript, .pt2, Hugging Face, timm, LeWM, --trust-code) may run "
                            f"in its cage, load and forwards together (default "
                            f"{default_text(CAGE_SECONDS)})")
KeyOpt = typer.Option(None, "--key", help="the entry of a torch.save dict holding the weights, "
                      "dots nesting (state_dict, target_encoder); asked for when it holds "
                      "several")
PrefixOpt = typer.Option(None, "--prefix", help="keep the weights under this prefix and strip "
                         "it (model.backbone.); module. and _orig_mod. are stripped always")
PoolOpt = typer.Option(None, "--pool", help="token outputs (batch, tokens, dim): cls (the first "
                       "token) | mean | none (all, flattened)")
OutputOpt = typer.Option(None, "--output", help="the field of a model output or dict "
                         "(last_hidden_state, pooler_output, emb), or an index of a tuple; "
                         "an idaudit checkpoint trained with --projector: backbone (default) "
                         "| projector")
EmbedOpt = typer.Option(None, "--embed", help="module:function called as function(model, "
                        "images) → (batch, m), for encoders with no plain forward")
WeightsOpt = typer.Option(None, "--weights", help="a LeWM directory holding several weights "
                          "files (weights_epoch_1.pt, weights_epoch_2.pt …): the one to load, "
                          "by name")
NormalizeOpt = typer.Option(None, "--normalize", help="images for an encoder that is not an "
                            "idaudit checkpoint: float N×3×S×S in [0, 1], then imagenet | none "
                            "| MEAN,STD (default: the model's own, a Hugging Face directory's "
                            "preprocessor_config.json, else none)")
EvalImageSizeOpt = typer.Option(None, "--image-size", help="reacher: render the evaluation "
                                "images at S × S (e.g. 224 for a ViT; without --data the "
                                "--n-eval pairs are rendered and cached)")
CacheDirOpt = typer.Option(None, "--cache-dir", help="where rendered evaluation images are "
                           "cached (default $IDAUDIT_CACHE, else ~/.cache/idaudit)")
EvalWorldOpt = typer.Option(None, "--world", "-w", help="evaluate on this world (default: the "
                            "checkpoint's)")
DataOpt = typer.Option(None, "--data", help="evaluate on stored data: a pairs file from "
                       "`idaudit world` or a Reacher dataset directory")


KeysOpt = typer.Option(False, "--keys", help="show each metric's key (what --min, --max and "
                       "gate files name) beside its label; what each means: `idaudit metrics`, "
                       "docs/metrics.md")


#: the flags of every command that embeds encoders (audit, consistency, plan, embed): the
#: fields of EncoderOptions, each declared once here — (name, annotation, typer option)
ENCODER_FLAGS = (
    ("arch", "str | None", ArchOpt), ("arch_kwargs", "str | None", ArchKwargsOpt),
    ("trust_pickle", "bool", TrustOpt), ("key", "str | None", KeyOpt),
    ("prefix", "str | None", PrefixOpt), ("pool", "str | None", PoolOpt),
    ("output", "str | None", OutputOpt), ("embed", "str | None", EmbedOpt),
    ("weights", "str | None", WeightsOpt), ("time_limit", "float | None", TimeLimitOpt),
    ("world", "str | None", EvalWorldOpt), ("dim", "int | None", DimOpt),
    ("source", "str | None", SourceOpt), ("alpha", "float | None", AlphaOpt),
    ("rho", "float | None", RhoOpt), ("layers", "int | None", LayersOpt),
    ("image_size", "int | None", EvalImageSizeOpt), ("data", "Path | None", DataOpt),
    ("normalize", "str | None", NormalizeOpt), ("cache_dir", "Path | None", CacheDirOpt),
)


def flag_group(param: str, flags: tuple, prepare=None):
    """A decorator giving a command the ``flags`` — (name, annotation, typer option) triples,
    declared once for every command that takes them — in place of its parameter ``param``,
    which receives them as one dict (passed through ``prepare`` when given)."""
    import inspect

    def decorate(fn):
        sig = inspect.signature(fn)
        group = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                   default=option, annotation=annotation)
                 for name, annotation, option in flags]
        params = []
        for p in sig.parameters.values():
            params += group if p.name == param else [p]

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            given = {name: kwargs.pop(name) for name, _, _ in flags}
            return fn(*args, **{param: prepare(given) if prepare else given}, **kwargs)

        wrapper.__signature__ = sig.replace(parameters=params)
        wrapper.__annotations__ = {**{k: v for k, v in fn.__annotations__.items() if k != param},
                                   **{name: annotation for name, annotation, _ in flags}}
        return wrapper

    return decorate


def _encoder_fields(given: dict) -> dict:
    """The EncoderOptions fields of the encoder flags: ``--arch-kwargs`` parsed, a progress
    bar while evaluation images render."""
    from idaudit.core.jsontext import parse_json_object

    return {**given, "arch_kwargs": parse_json_object(given["arch_kwargs"], "--arch-kwargs"),
            "progress": True}


#: give a command the ENCODER_FLAGS as one dict ``encoder`` of EncoderOptions fields
encoder_flags = flag_group("encoder", ENCODER_FLAGS, _encoder_fields)

#: the flags of a gated report (audit, consistency): where it is written, and the gate given
#: as METRIC=VALUE pairs or a file (each command has its own --min-r2 and orthogonality flag)
# outputs are readable=False here and on every command: click would check that an existing
# output is readable, and that check races with another process replacing the same report
# (seen as "Path … is not readable", exit 2, with six audits writing one report at once)
REPORT_FLAGS = (
    ("json_path", "Path | None", typer.Option(None, "--json", readable=False,
                                                 help="write the report as JSON")),
    ("junit", "Path | None", typer.Option(None, "--junit", readable=False, help="JUnit XML, a testcase per "
                                           "gate")),
    ("markdown", "Path | None", typer.Option(None, "--markdown", readable=False, help="Markdown summary")),
    ("keys", "bool", KeysOpt),
    ("min", "list[str]", typer.Option([], "--min", help="gate: METRIC=VALUE, metric ≥ value "
                                      "(repeatable)")),
    ("max", "list[str]", typer.Option([], "--max", help="gate: METRIC=VALUE, metric ≤ value "
                                      "(repeatable)")),
    ("gate", "Path | None", typer.Option(None, "--gate", help="TOML file with [min] / [max] "
                                         "tables")),
)
report_flags = flag_group("report", REPORT_FLAGS)
