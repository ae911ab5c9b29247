"""The options commands share, each declared once: world options, the encoder flags of every
command that embeds an encoder, and a gated report's flags."""

from __future__ import annotations

import functools
from typing import Any

import typer

from idaudit.core.options import ENCODER, Option
from idaudit.core.request_parts import encoder_forms

__all__ = ["EncoderArg", "encoder_flags", "option_flags", "report_flags"]

# ---- shared options --------------------------------------------------------------------
# Every option a command passes to its request is declared once in idaudit.core.options (its
# flags, help, default and constraint); world options default to None ("not given"): each
# world fills its own defaults and refuses the options it does not take, naming them.


def typer_option(option: Option) -> Any:
    """The typer parameter of a declared option (:mod:`idaudit.core.options`): its flags,
    its help (read now: a registry's names, plugins' included) and typer's extras."""
    default = list(option.default) if isinstance(option.default, tuple) else option.default
    return typer.Option(default, *option.flags, help=option.help_text(), **option.typer)


def option_flags(param: str, options: tuple[Option, ...], prepare=None):
    """Give a command the declared ``options`` as flags in place of its parameter ``param``,
    which receives them as one dict (:func:`flag_group`)."""
    return flag_group(param, tuple((o.name, o.annotation, typer_option(o)) for o in options),
                      prepare)



EncoderArg = typer.Argument(..., help=encoder_forms())
KeysOpt = typer.Option(False, "--keys", help="show each metric's key (what --min, --max and "
                       "gate files name) beside its label; what each means: `idaudit metrics`, "
                       "docs/metrics.md")


def flag_group(param: str, flags: tuple, prepare=None):
    """A decorator giving a command the ``flags`` — (name, annotation, typer option) triples,
    declared once for every command that takes them — in place of its parameter ``param``,
    which receives them as one dict (passed through ``prepare`` when given). An annotation
    given as text ("Path | None") is read here, so the command's module need not import what
    it names."""
    import inspect
    from pathlib import Path

    flags = tuple((name, eval(a, {"Path": Path}) if isinstance(a, str) else a, option)  # noqa: S307
                  for name, a, option in flags)  # the texts are KINDS' and REPORT_FLAGS'

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


#: give a command the encoder flags (idaudit.core.options.ENCODER) as one dict ``encoder`` of
#: EncoderOptions fields
encoder_flags = option_flags("encoder", ENCODER, _encoder_fields)

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
