"""Options declared once (idaudit.core.options): every command's flags, the fields of
TrainRequest, the defaults of the other requests, TrainConfig's types and docs/options.md are
what the declarations say, and every declared constraint refuses a value on the command line —
the values tried come from the declarations, not from a list in this file."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from idaudit.cli import app
from idaudit.core.command_options import CHAINED, GROUPS
from idaudit.core.defaults import WORLD as DEFAULT_WORLD
from idaudit.core.errors import IdauditError
from idaudit.core.options import BY_NAME, ENCODER, TRAIN, WORLD
from idaudit.core.registered import WORLDS
from idaudit.core.request_parts import LoadOptions
from idaudit.core.requests import TrainRequest

ROOT = Path(__file__).resolve().parents[1]


def flags_of(command: str) -> set[str]:
    click = typer.main.get_command(app).commands[command]
    return {flag for p in click.params for flag in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize("command,options", [(c, options) for commands, options in
                                             GROUPS.values() for c in commands])
def test_each_declared_option_is_a_flag_of_its_commands(command, options):
    have = flags_of(command)
    for option in options:
        for flag in option.flags:
            for spelling in flag.split("/"):
                assert spelling in have, (command, spelling)


def test_train_request_and_train_config_are_made_from_the_declarations():
    from idaudit.training.config import FIELD_TYPES, TrainConfig

    fields = {f.name for f in dataclasses.fields(TrainRequest)}
    assert {o.name for o in (*WORLD, *TRAIN)} <= fields
    assert fields - {o.name for o in (*WORLD, *TRAIN)} == {"mode", "out"}
    config = {f.name for f in dataclasses.fields(TrainConfig)}
    assert set(FIELD_TYPES) == config - {"sigma"}  # a number or a rule's name: checked apart
    assert all(FIELD_TYPES[n] == {"integer": "integer", "number": "number", "string": "string",
                                  "json": "object"}[BY_NAME[n].kind] for n in FIELD_TYPES)


def test_docs_options_md_is_what_the_declarations_give():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "options_table.py"),
                           "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = (ROOT / "docs" / "options.md").read_text()
    assert all(f"`{o.flags[0]}`" in text for _, options in GROUPS.values() for o in options)


def world_taking(name: str) -> str | None:
    """A world that takes option ``name`` (None: the default world does)."""
    default = WORLDS.get(DEFAULT_WORLD)
    if name in default.options or name in (o.name for o in TRAIN) and \
            name not in default.refuses and not any(name in WORLDS.get(n).options
                                                    for n in WORLDS.builtin()) and \
            not any(name in k.options for k in WORLDS.family_objects()):
        return None
    families = [WORLDS.get(p + "x").example_name for p in WORLDS.families()]  # swm:ENV_ID
    for world in (*WORLDS.builtin(), *families):
        kind = WORLDS.get(world)
        if name in kind.options and name not in kind.refuses:
            return world
    return None


CONSTRAINED = [o for o in (*WORLD, *TRAIN) if o.invalids()]
TRIED = [(o, v) for o in CONSTRAINED for v in o.invalids()]


def test_the_constrained_options_are_the_declared_ones():
    assert {o.name for o in CONSTRAINED} >= {"world", "rho", "objective", "lamb", "schedule",
                                             "n_eval", "views", "form", "n_views", "image_size",
                                             "pairs"}


@pytest.mark.parametrize("option,value", TRIED, ids=[f"{o.name}={v}" for o, v in TRIED])
def test_a_value_outside_a_declared_constraint_is_one_line_and_exit_2(option, value):
    value = str(value)
    world = world_taking(option.name) if option.name != "world" else None
    args = ["train", "--show-config", *(["--world", world] if world else []),
            option.flags[0].split("/")[0], value]
    proc = subprocess.run([sys.executable, "-m", "idaudit", *args], capture_output=True,
                          text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, (args, proc.stderr)
    assert option.flag in lines[0] or value in lines[0], (args, lines)
    assert "does not apply" not in lines[0], (args, lines)  # the constraint refused it


#: what a command's own option needs beside it to reach its check: the command's inputs, and
#: the options it goes with
NEEDS = {"audit": ["A"], "consistency": ["A", "B"], "plan": ["A"],
         "embed": ["A", "--out", "OUT/e.npz"], "world": ["spiral", "--out", "OUT/w.safetensors"],
         "sweep": ["2d", "--out", "OUT/sweep"]}
WITH = {("audit", "angle_sigma"): ["--circular", "0"],
        ("world", "n_eval"): ["reacher"],  # the one world with evaluation images of its own
        **{("sweep", n): ["--executor", "ray"] for n in
           ("cpus_per_run", "gpus_per_run", "memory_per_run")}}
OWN = [(commands[0], o, v) for title, (commands, options) in GROUPS.items()
       if title not in CHAINED for o in options for v in o.invalids()]


@pytest.mark.parametrize("command,option,value", OWN,
                         ids=[f"{c}-{o.name}={v}" for c, o, v in OWN])
def test_a_command_s_own_option_outside_its_constraint_is_one_line_and_exit_2(
        tmp_path, command, option, value):
    import numpy as np
    from conftest import run

    z = np.random.default_rng(0).standard_normal((600, 2))
    for name, h in (("A", z), ("B", z[:, ::-1])):
        np.savez(tmp_path / f"{name}.npz", z=z, h=h)
    args = [str(tmp_path / f"{a}.npz") if a in ("A", "B") else
            a.replace("OUT", str(tmp_path)) for a in NEEDS[command]]
    extra = WITH.get((command, option.name), [])
    if extra[:1] == ["reacher"]:
        args, extra = [extra[0], *args[1:]], []
    res = run(command, *args, *extra, option.flag, str(value))
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, (command, option.name, res.output)
    assert option.flag in lines[0] or str(value) in lines[0], lines
    assert "does not apply" not in lines[0] and "goes with" not in lines[0], lines


LOAD = [(o, v) for o in ENCODER if o.name in {f.name for f in dataclasses.fields(LoadOptions)}
        for v in o.invalids()]


@pytest.mark.parametrize("option,value", LOAD, ids=[f"{o.name}={v!r}" for o, v in LOAD])
def test_load_options_refuse_what_their_declarations_refuse(option, value):
    """LoadOptions checks each encoder option as declared (a non-empty text, a form, an
    object, a bool, one of the choices, an interval): one line naming the option."""
    from idaudit.core.errors import library_spelling

    with pytest.raises(IdauditError) as refused:
        LoadOptions(**{option.name: value})
    assert refused.value.exit_code == 2
    assert str(refused.value).startswith(library_spelling(option.flag) + " "), refused.value


def test_an_option_given_without_the_one_it_requires_is_refused():
    needs = [o for o in ENCODER if o.requires is not None]
    assert [o.name for o in needs] == ["arch_kwargs"]
    with pytest.raises(IdauditError, match="arch_kwargs goes with arch "):
        LoadOptions(arch_kwargs={"dim": 4})
    assert LoadOptions(arch="m:f", arch_kwargs={"dim": 4}).arch_kwargs == {"dim": 4}
    assert LoadOptions(arch_kwargs={}).arch is None  # an empty object gives nothing to pass


def test_declared_choices_are_the_code_s_own():
    from idaudit.maths.losses import LEJEPA_FORMS
    from idaudit.training.schedule import SCHEDULES

    assert BY_NAME["schedule"].choices == tuple(SCHEDULES)
    assert BY_NAME["form"].choices == tuple(LEJEPA_FORMS)
    from idaudit.core.command_options import AUDIT
    from idaudit.core.options import by_name
    from idaudit.evaluations.audit import combine_reports

    with pytest.raises(IdauditError) as refused:  # audit's check names the values it takes
        combine_reports([], reduce="no-such-reduce")
    assert f"one of {', '.join(by_name(AUDIT)['reduce'].choices)}," in str(refused.value)
