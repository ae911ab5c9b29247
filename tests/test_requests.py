"""One request per command, every default in one place: the CLI's flags, the request
dataclasses and the resolver agree, and help texts show the values the code uses."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest
import typer
from conftest import run

from idaudit import cli
from idaudit.core.defaults import TEST_FRACTION, TRAIN_DEFAULTS, WORLD, WORLD_DEFAULTS
from idaudit.core.errors import IdauditError
from idaudit.core.request_parts import GateOptions, LoadOptions, WorldChoice, option_paths
from idaudit.core.requests import (
    LIBRARY_ONLY,
    AuditRequest,
    ConsistencyRequest,
    EmbedRequest,
    PlanRequest,
    SweepRequest,
    TrainRequest,
    WorldRequest,
    default,
)
from idaudit.training.config import TrainConfig
from idaudit.training.runs import RUN_OPTIONS, resolve
from idaudit.worlds import make_spec

ROOT = Path(__file__).resolve().parents[1]

#: command → its request, and the flags whose parameter is not the request's field name
COMMANDS = {"embed": EmbedRequest, "audit": AuditRequest, "consistency": ConsistencyRequest,
            "plan": PlanRequest, "train": TrainRequest, "world": WorldRequest,
            "sweep": SweepRequest}
RENAMED = {"out_path": "out", "json_path": None, "name": None, "junit": None, "markdown": None,
           "quiet": None, "show_config": None, "keys": None, "list_only": None,
           "targets": "targets", "target": "target"}


#: flags that only render, per command (audit's --plot is a request field: the library draws it)
RENDER_ONLY = {"plan": {"plot"}}


def _params(command: str):
    fn = next(c.callback for c in cli.app.registered_commands
              if (c.name or c.callback.__name__) == command)
    for p in inspect.signature(fn).parameters.values():
        if isinstance(p.default, typer.models.ParameterInfo):
            name = None if p.name in RENDER_ONLY.get(command, ()) else RENAMED.get(p.name, p.name)
            yield name, p.default


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_flag_is_a_request_field_with_the_same_default(command):
    request = COMMANDS[command]
    options = option_paths(request)
    for name, info in _params(command):
        if name is None:  # rendering and output flags of the CLI itself
            continue
        assert name in options, f"{command} --{name} has no field in {request.__name__}"
        want = default(request, name)
        got = info.default
        if got is ...:  # a required argument
            continue
        if want in ([], (), None) and got in ([], (), None):
            continue
        assert str(got) == str(want), (command, name, got, want)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_request_option_is_a_flag_or_says_why_not(command):
    """The other direction: each option of a request is a flag of its command, or one of
    LIBRARY_ONLY, whose reasons docs/architecture.md prints; none listed there has a flag."""
    flags = {name for name, _ in _params(command) if name is not None}
    for name in option_paths(COMMANDS[command]):
        if name in LIBRARY_ONLY:
            assert name not in flags, f"{command} --{name} is listed as library-only"
        else:
            assert name in flags, f"{command}: {name} has no flag and no reason in LIBRARY_ONLY"


def test_the_library_only_options_are_documented_and_used():
    text = " ".join((ROOT / "docs" / "architecture.md").read_text().split())
    every = set().union(*(option_paths(r) for r in COMMANDS.values()))
    for name, why in LIBRARY_ONLY.items():
        assert name in every, name  # no stale entry
        assert f"`{name}`" in text and " ".join(why.split()) in text, name


def test_the_train_flags_the_library_had_alone_reach_the_run():
    """--weight-decay, --clip, --schedule, --n-slices, --mixing-seed: given on the command
    line they resolve as given (what --show-config prints is the library's resolve)."""
    args = ["--world", "coupling", "--dim", "4", "--weight-decay", "0.25", "--clip", "2",
            "--schedule", "cosine_epochs", "--n-slices", "64", "--mixing-seed", "3"]
    res = run("train", *args, "--show-config")
    assert res.exit_code == 0, res.output
    resolved = resolve({"world": "coupling", "dim": 4, "weight_decay": 0.25, "clip": 2.0,
                        "schedule": "cosine_epochs", "n_slices": 64, "mixing_seed": 3})
    assert res.output.splitlines() == resolved.config_lines()
    lines = {ln.split(" = ")[0].strip(): ln for ln in res.output.splitlines()}
    for key, value in (("weight_decay", "0.25"), ("clip", "2.0"), ("schedule", "cosine_epochs"),
                       ("n_slices", "64")):
        assert lines[key].split(" = ")[1] == f"{value}  (given)", lines[key]
    assert resolved.world.mixing_seed == 3 and resolved.train.weight_decay == 0.25
    help_text = " ".join(run("train", "--help").output.replace("│", " ").split())
    from idaudit.training.schedule import SCHEDULES

    assert all(f"{name} (" in help_text for name in SCHEDULES)  # every schedule, explained
    bad = run("train", "--schedule", "linear", "--show-config")
    assert bad.exit_code == 2 and "--schedule must be one of constant_cosine, cosine_epochs" \
        in bad.output


def test_requests_are_composed_of_their_parts():
    """A request has its load options, world choice and gate (no dataclass diamond); flat
    options — the CLI's flags, the keyword functions' names — go to the part that holds them,
    and ``rho`` is the arrays' with arrays, a world's with an encoder."""
    req = AuditRequest.from_options(targets=["a.pt"], arch="m:f", world="spiral", rho=0.8,
                                    min_r2=0.9, n_eval=500, bootstrap=10)
    assert req.encoder.load.arch == "m:f" and req.encoder.world.world == "spiral"
    assert req.encoder.world.rho == 0.8 and req.rho is None
    assert req.gate.min_r2 == 0.9 and req.n_eval == 500 and req.bootstrap == 10
    arrays = AuditRequest.from_options(z=[[0.0]], h=[[1.0]], rho=0.7)
    assert arrays.rho == 0.7 and arrays.encoder.world.rho is None
    assert option_paths(AuditRequest)["rho"] == [("rho",), ("encoder", "world", "rho")]
    assert option_paths(AuditRequest)["arch"] == [("encoder", "load", "arch")]
    assert "n_eval" not in option_paths(PlanRequest)  # plan sizes its gallery, not an eval set
    assert not any(issubclass(r, (LoadOptions, WorldChoice, GateOptions))
                   for r in (AuditRequest, ConsistencyRequest, PlanRequest, EmbedRequest))
    with pytest.raises(IdauditError, match="AuditRequest has no option nope"):
        AuditRequest.from_options(nope=1)
    with pytest.raises(IdauditError, match="pool must be one of"):  # the part checks itself
        ConsistencyRequest.from_options(pool="max")


def test_the_train_request_holds_exactly_the_run_options():
    names = {f.name for f in dataclasses.fields(TrainRequest)} - {"out", "workers", "data_root"}
    assert names == set(RUN_OPTIONS)


def test_global_defaults_are_the_ones_that_run():
    """What defaults.py says is what a run, a world and the train config get."""
    assert {f.name for f in dataclasses.fields(TrainConfig)} == set(TRAIN_DEFAULTS)
    resolved = resolve({})
    assert resolved.world.name == WORLD
    cfg = resolved.train
    for key in ("objective", "lamb", "steps", "batch", "lr", "weight_decay", "schedule", "seed",
                "inits", "eval_every", "n_eval", "n_slices", "views"):
        assert getattr(cfg, key) == TRAIN_DEFAULTS[key], key
    spiral = make_spec("spiral")
    assert spiral.rho == WORLD_DEFAULTS["rho"] and spiral.dim == WORLD_DEFAULTS["dim"]
    assert spiral.source == WORLD_DEFAULTS["source"]
    assert make_spec("coupling", dim=4).layers == WORLD_DEFAULTS["layers"]
    from idaudit.worlds import build_world

    assert len(build_world(make_spec("spiral")).eval_set(None, 0).z) == WORLD_DEFAULTS["n_eval"]
    assert len(build_world(make_spec("spiral")).plan_set(2, None, 0).gallery_z) == \
        WORLD_DEFAULTS["gallery"]
    assert AuditRequest().test_fraction is None and ConsistencyRequest().test_fraction == \
        TEST_FRACTION


@pytest.mark.parametrize("command, text", [
    ("train", f"decay (default {TRAIN_DEFAULTS['weight_decay']:g}, or the world's recipe's)"),
    ("train", f"(default {TRAIN_DEFAULTS['schedule']}, or the world's recipe's)"),
    ("train", f"(default {TRAIN_DEFAULTS['n_slices']})"),
    ("train", f"mixing network g (default {WORLD_DEFAULTS['mixing_seed']})"),
    ("world", f"(default {WORLD_DEFAULTS['rho']:g})"),
    ("world", f"(default {WORLD_DEFAULTS['layers']}; the encoder matches)"),
    ("train", f"(default: {WORLD}, or"),
    ("audit", f"(default {TEST_FRACTION:g}; not where"),
    ("plan", "default 10 000"),
])
def test_help_texts_show_the_defaults_the_code_uses(command, text):
    res = run(command, "--help")
    assert res.exit_code == 0
    flat = " ".join(line.strip(" │") for line in res.output.splitlines())
    assert text in " ".join(flat.split()), flat


def test_tables_can_show_each_metrics_key(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    z = rng.standard_normal((600, 2))
    np.savez(tmp_path / "a.npz", z=z, h=z @ np.array([[0.0, 1.0], [-1.0, 0.0]]))
    plain = run("audit", tmp_path / "a.npz")
    keyed = run("audit", tmp_path / "a.npz", "--keys")
    assert plain.exit_code == keyed.exit_code == 0
    assert "r2_h_to_z_heldout" in keyed.output and "r2_h_to_z_heldout" not in plain.output
