"""The library does what the CLI does: for each command, the CLI's JSON and the Python call's
result agree on the same inputs (several targets with --reduce median, --label-free, world
options, a gate file)."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import idaudit
from idaudit.cli import app
from idaudit.core.jsontext import jsonable

runner = CliRunner()


def cli_json(tmp_path, *args):
    out = tmp_path / "cli.json"
    res = runner.invoke(app, [*map(str, args), "--json", str(out)])
    assert res.exit_code in (0, 1, 3), res.output
    return res.exit_code, json.loads(out.read_text())


def lib_json(report):
    return json.loads(json.dumps(jsonable(report.to_dict())))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three array files of one recipe (rotations of z plus noise of three sizes), with pairs."""
    d = tmp_path_factory.mktemp("parity")
    rng = np.random.default_rng(4)
    z = rng.standard_normal((1500, 3))
    zp = 0.9 * z + np.sqrt(1 - 0.81) * rng.standard_normal(z.shape)
    paths = []
    for i, noise in enumerate((0.02, 0.1, 0.3)):
        q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
        e, ep = (noise * rng.standard_normal(z.shape) for _ in range(2))
        p = d / f"run{i}.npz"
        np.savez(p, z=z, h=z @ q + e, h_prime=zp @ q + ep, rho=np.array(0.9))
        paths.append(p)
    gate = d / "gate.toml"
    gate.write_text(textwrap.dedent("""\
        [min]
        r2_h_to_z_heldout = 0.95
        [max]
        orthogonality_error = 0.2
    """))
    return d, paths, gate


def test_several_targets_reduced_by_the_median(runs, tmp_path):
    _, paths, gate = runs
    code, cli = cli_json(tmp_path, "audit", *paths, "--reduce", "median", "--gate", gate)
    lib = idaudit.audit(targets=paths, reduce="median", gate=gate)
    assert lib_json(lib) == cli and lib.exit_code == code
    assert cli["metrics"]["reduce"] == "median" and cli["metrics"]["n_runs"] == 3
    # the gate as a dict and as --min/--max give the same report
    as_dict = idaudit.audit(targets=paths, reduce="median",
                            gate={"min": {"r2_h_to_z_heldout": 0.95},
                                  "max": {"orthogonality_error": 0.2}})
    as_flags = idaudit.audit(targets=paths, reduce="median", min=["r2_h_to_z_heldout=0.95"],
                             max={"orthogonality_error": 0.2})
    assert lib_json(as_dict) == lib_json(as_flags) == cli


def test_the_page_and_the_plot(runs, tmp_path):
    """--html/--plot and html=/plot=: the same page and the same PNG, byte for byte."""
    pytest.importorskip("matplotlib")
    _, paths, gate = runs
    res = runner.invoke(app, ["audit", *map(str, paths[:2]), "--gate", str(gate), "--html",
                              str(tmp_path / "cli.html"), "--plot", str(tmp_path / "cli.png")])
    lib = idaudit.audit(*paths[:2], gate=gate, html=tmp_path / "lib.html",
                        plot=tmp_path / "lib.png")
    assert res.exit_code == lib.exit_code, res.output
    for ext in ("html", "png"):
        assert (tmp_path / f"cli.{ext}").read_bytes() == (tmp_path / f"lib.{ext}").read_bytes()


def test_label_free(runs, tmp_path):
    _, paths, _ = runs
    code, cli = cli_json(tmp_path, "audit", paths[1], "--label-free", "--max",
                         "canonical_spread=0.05")
    lib = idaudit.audit(encoder=paths[1], label_free=True, max={"canonical_spread": 0.05})
    assert lib_json(lib) == cli and lib.exit_code == code
    assert cli["metrics"]["label_free"] is True and "r2_h_to_z_heldout" not in cli["metrics"]
    # arrays in memory: the same numbers as the file
    data = np.load(paths[1])
    mem = idaudit.audit(data["z"], data["h"], data["h_prime"], 0.9, label_free=True,
                        max={"canonical_spread": 0.05})
    assert lib_json(mem)["metrics"] == cli["metrics"]


def test_world_options_and_an_encoder_file(tmp_path):
    enc = tmp_path / "enc.pt"
    q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((4, 4)))
    lin = torch.nn.Linear(4, 4, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(q).float())
    torch.jit.trace(lin, torch.zeros(1, 4)).save(str(enc))
    args = ("--world", "coupling", "--dim", "4", "--rho", "0.8", "--layers", "2", "--n-eval",
            "600", "--seed", "3", "--bootstrap", "20")
    code, cli = cli_json(tmp_path, "audit", enc, *args, "--min-r2", "0.1")
    lib = idaudit.audit(encoder=enc, world="coupling", dim=4, rho=0.8, layers=2, n_eval=600,
                        seed=3, bootstrap=20, min_r2=0.1)
    assert lib_json(lib) == cli and lib.exit_code == code
    assert cli["world"]["rho"] == 0.8 and cli["world"]["layers"] == 2
    assert cli["metrics"]["n_samples"] == 600 and "r2_h_to_z_heldout_ci_low" in cli["metrics"]


def test_the_library_refuses_what_the_cli_refuses(runs):
    """The same refusal on both sides, each in its own spelling: the library names the
    parameter (``n_eval``), the command line the flag (``--n-eval``)."""
    _, paths, _ = runs
    data = np.load(paths[0])
    one, both = [str(paths[0])], [str(p) for p in paths]
    for kwargs, args, library, flags in [
        ({"targets": paths[:1], "reduce": "median"}, [*one, "--reduce", "median"],
         "reduce applies to several targets", "--reduce applies to several targets"),
        ({"targets": paths, "reduce": "mean"}, [*both, "--reduce", "mean"],
         "reduce must be one of", "--reduce must be one of"),
        ({"targets": paths[:1], "world": "spiral"}, [*one, "--world", "spiral"],
         "arrays are audited as they are: world does not apply",
         "arrays are audited as they are: --world does not apply"),
        ({"z": data["z"], "h": data["h"], "dim": 3}, None, "dim does not apply", None),
        ({"targets": paths[:1], "n_eval": 5}, [*one, "--n-eval", "5"],
         "n_eval must be an integer ≥ 10, got 5", "--n-eval must be an integer ≥ 10, got 5"),
        ({"targets": paths[:1], "bootstrap": -1}, [*one, "--bootstrap", "-1"],
         "bootstrap must be an integer ≥ 0", "--bootstrap must be an integer ≥ 0"),
        ({"targets": paths[:1], "test_fraction": 1.5}, [*one, "--test-fraction", "1.5"],
         "test_fraction must lie strictly between 0 and 1",
         "--test-fraction must lie strictly between 0 and 1"),
        ({"targets": paths[:1], "circular": "0,x"}, [*one, "--circular", "0,x"],
         "circular expects", "--circular expects"),
        ({"targets": paths[:1], "trust_pickle": "yes"}, None,
         "trust_pickle must be True or False", None),
        ({"targets": paths[:1], "nonsense": 1}, None, "unknown options: nonsense", None),
    ]:
        with pytest.raises(idaudit.IdauditError) as err:
            idaudit.audit(**kwargs)
        said = str(err.value)
        assert library in said, (said, library)
        assert "--" not in said, said
        if args is not None:
            res = runner.invoke(app, ["audit", *args])
            assert res.exit_code == 2 and f"error: {flags}" in " ".join(res.output.split()), \
                res.output


def test_every_flag_in_a_message_reads_as_a_parameter_in_the_library():
    """Each flag an idaudit message names is an option of a request under the library's
    spelling (``--trust-code`` → ``trust_pickle``), or one of the command line's own and
    other programs' flags, kept as written (``--json``, pip's ``--force-reinstall``)."""
    import inspect
    import re
    from pathlib import Path

    import typer

    from idaudit import cli
    from idaudit.core import request_parts, requests
    from idaudit.core.errors import NOT_PARAMETERS, library_spelling, parameter_of

    names = set().union(*(request_parts.option_paths(r) for r in (
        requests.AuditRequest, requests.ConsistencyRequest, requests.PlanRequest,
        requests.EmbedRequest, requests.TrainRequest, requests.WorldRequest,
        requests.SweepRequest)))
    methods = {"plot"}  # PlanReport.plot(path): the library's plot is a method
    src = Path(idaudit.__file__).parent
    for path in src.rglob("*.py"):
        for flag in set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*(?![\w-])", path.read_text())):
            param = parameter_of(flag).split("=")[0]
            assert flag in NOT_PARAMETERS or param in names | methods, (path, flag, param)
    # every flag of every command reads as its parameter; the CLI's own flags as they are
    from test_requests import RENAMED
    for command in cli.app.registered_commands:
        for p in inspect.signature(command.callback).parameters.values():
            info = p.default
            if not isinstance(info, typer.models.ParameterInfo) or not info.param_decls:
                continue
            field = RENAMED.get(p.name, p.name)
            for decl in info.param_decls:
                for flag in decl.split("/"):
                    if not flag.startswith("--"):
                        continue
                    if field is None or field not in names:
                        assert flag in NOT_PARAMETERS or flag[2:] in methods | names, flag
                    elif flag != "--ou":  # --trajectory/--ou: trajectory=False
                        assert parameter_of(flag) == field, (command.name, flag, field)
    assert library_spelling("--n-eval 5 and --trust-code, not --json") == \
        "n_eval 5 and trust_pickle, not --json"


def test_plan(tmp_path):
    enc = tmp_path / "enc.pt"
    torch.jit.trace(torch.nn.Identity(), torch.zeros(1, 4)).save(str(enc))
    out = tmp_path / "p.json"
    args = ["plan", str(enc), "--world", "coupling", "--dim", "4", "--rho", "0.8", "--pairs",
            "12", "--gallery", "800", "--seed", "2", "--json", str(out)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    lib = idaudit.plan(enc, world="coupling", dim=4, rho=0.8, pairs=12, gallery=800, seed=2)
    assert lib_json(lib) == json.loads(out.read_text())
    from idaudit.core.requests import PlanRequest

    req = PlanRequest.from_options(target=enc, world="coupling", dim=4, rho=0.8, pairs=12,
                                   gallery=800, seed=2)
    assert lib_json(idaudit.plan(req)) == json.loads(out.read_text())
    with pytest.raises(idaudit.IdauditError, match="PlanRequest alone"):
        idaudit.plan(req, pairs=3)


def test_consistency(runs, tmp_path):
    d, paths, gate = runs
    hs = []
    for i, p in enumerate(paths):
        np.save(d / f"h{i}.npy", np.load(p)["h"])
        hs.append(d / f"h{i}.npy")
    code, cli = cli_json(tmp_path, "consistency", *hs, "--min-r2", "0.9", "--max",
                         "consistency_procrustes_mse=0.5", "--seed", "1")
    lib = idaudit.consistency(*hs, min_r2=0.9, max={"consistency_procrustes_mse": 0.5}, seed=1)
    assert lib_json(lib) == cli and lib.exit_code == code
    from idaudit.core.requests import ConsistencyRequest

    req = ConsistencyRequest.from_options(targets=hs, min_r2=0.9, seed=1,
                                          max={"consistency_procrustes_mse": 0.5})
    assert lib_json(idaudit.consistency(req)) == cli
    with pytest.raises(idaudit.IdauditError, match="ConsistencyRequest alone"):
        idaudit.consistency(req, seed=2)
    assert cli["metrics"]["n_runs"] == 3 and len(cli["metrics"]["pairs"]) == 6
    # arrays in memory give the same numbers (names run0, run1, … instead of file names)
    mem = idaudit.consistency(*(np.load(p) for p in hs), min_r2=0.9, seed=1)
    assert mem.metrics["consistency_r2"] == cli["metrics"]["consistency_r2"]
    with pytest.raises(idaudit.IdauditError, match="unknown options: gates"):
        idaudit.consistency(*hs, gates=1)
    assert idaudit.consistency is idaudit.evaluations.consistency.consistency  # not shadowed by a module


def test_train(tmp_path):
    """`idaudit train` and `idaudit.train` of the same request train the same encoder:
    the CLI's log equals the library's record (same seed, same numbers on the CPU)."""
    from safetensors.torch import load_file

    from idaudit.core.requests import TrainRequest

    opts = {"world": "coupling", "dim": 4, "rho": 0.8, "layers": 2, "steps": 30, "batch": 64,
            "n_eval": 400, "eval_every": 0, "seed": 5, "lamb": 0.01}
    args = ["train", "--world", "coupling", "--dim", "4", "--rho", "0.8", "--layers", "2",
            "--steps", "30", "--batch", "64", "--n-eval", "400", "--eval-every", "0",
            "--seed", "5", "--lamb", "0.01", "--quiet", "--out", tmp_path / "cli.safetensors"]
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    cli = json.loads((tmp_path / "cli.log.json").read_text())
    lib = idaudit.train(TrainRequest(**opts, out=tmp_path / "lib.safetensors"))
    assert lib.id == cli["id"]
    assert json.loads(json.dumps(jsonable(lib.metrics))) == cli["metrics"]
    a, b = load_file(tmp_path / "cli.safetensors"), load_file(tmp_path / "lib.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_world(tmp_path):
    """`idaudit world` and `idaudit.write_world` (keywords or a request) write the same pairs."""
    from safetensors.torch import load_file

    from idaudit.core.requests import WorldRequest

    res = runner.invoke(app, ["world", "banana", "--rho", "0.7", "--pairs", "300", "--seed",
                              "4", "--out", str(tmp_path / "cli.safetensors")])
    assert res.exit_code == 0, res.output
    line = idaudit.write_world("banana", rho=0.7, pairs=300, seed=4,
                               out=tmp_path / "lib.safetensors")
    idaudit.write_world(WorldRequest(world="banana", rho=0.7, pairs=300, seed=4,
                                     out=tmp_path / "req.safetensors"))
    a, b = load_file(tmp_path / "cli.safetensors"), load_file(tmp_path / "lib.safetensors")
    c = load_file(tmp_path / "req.safetensors")
    assert sorted(a) == ["x", "x_prime", "z", "z_prime"] and len(a["z"]) == 300
    assert all(torch.equal(a[k], b[k]) and torch.equal(a[k], c[k]) for k in a)
    assert "300" in line
    with pytest.raises(idaudit.IdauditError, match="WorldRequest alone"):
        idaudit.write_world(WorldRequest(world="banana", out=tmp_path / "x.safetensors"), seed=1)
    with pytest.raises(idaudit.IdauditError, match="pairs must be an integer ≥ 1"):
        idaudit.write_world("banana", pairs=0, out=tmp_path / "x.safetensors")
    with pytest.raises(idaudit.IdauditError, match="unknown options: steps"):
        idaudit.write_world("banana", steps=3, out=tmp_path / "x.safetensors")


def test_sweep(tmp_path):
    """`idaudit sweep` and `idaudit.experiments.sweep.sweep` of the same grid record the same runs."""
    from idaudit.core.requests import SweepRequest
    from idaudit.experiments.sweep import sweep, sweep_runs

    grid = tmp_path / "grid.toml"
    grid.write_text(textwrap.dedent("""
        [fixed]
        world = "spiral"
        steps = 20
        batch = 64
        n_eval = 300
        eval_every = 0
        [grid]
        seed = [1, 2]
    """))
    res = runner.invoke(app, ["sweep", str(grid), "--out", str(tmp_path / "cli"), "--workers",
                              "1", "--set", "lamb=0.01"])
    assert res.exit_code == 0, res.output
    counts = sweep(grid, out=tmp_path / "lib", workers=1, set={"lamb": 0.01})
    assert counts == {"total": 2, "skipped": 0, "ok": 2, "failed": 0}
    names = sorted(p.name for p in (tmp_path / "cli" / "runs").glob("*.json"))
    assert names == sorted(p.name for p in (tmp_path / "lib" / "runs").glob("*.json"))
    for name in names:
        a = json.loads((tmp_path / "cli" / "runs" / name).read_text())
        b = json.loads((tmp_path / "lib" / "runs" / name).read_text())
        assert a["metrics"] == b["metrics"] and a["options"]["lamb"] == 0.01
    runs = sweep_runs(SweepRequest(suite=str(grid), only=["seed=2"], set=["lamb=0.01"]))
    assert [r["seed"] for r in runs] == [2]
    with pytest.raises(idaudit.IdauditError, match="set takes one value per option"):
        sweep_runs(SweepRequest(suite=str(grid), set=["lamb=0.01,0.02"]))


def test_embed(tmp_path):
    """`idaudit embed` and `idaudit.embed` (keywords or a request) write the same arrays."""
    from idaudit.core.requests import EmbedRequest

    enc = tmp_path / "enc.pt"
    torch.jit.trace(torch.nn.Identity(), torch.zeros(1, 4)).save(str(enc))
    res = runner.invoke(app, ["embed", str(enc), "--world", "coupling", "--dim", "4", "--rho",
                              "0.8", "--n-eval", "300", "--seed", "2", "--out",
                              str(tmp_path / "cli.npz")])
    assert res.exit_code == 0, res.output
    opts = {"world": "coupling", "dim": 4, "rho": 0.8, "n_eval": 300, "seed": 2}
    inp = idaudit.embed(enc, **opts, out=tmp_path / "lib.npz")
    idaudit.embed(EmbedRequest.from_options(target=enc, **opts, out=tmp_path / "req.npz"))
    a, b = np.load(tmp_path / "cli.npz"), np.load(tmp_path / "lib.npz")
    c = np.load(tmp_path / "req.npz")
    assert sorted(a.files) == ["circular", "h", "h_prime", "rho", "seed", "x", "z", "z_white"]
    assert all(np.array_equal(a[k], b[k]) and np.array_equal(a[k], c[k]) for k in a.files)
    assert np.array_equal(np.asarray(inp.h), a["h"])
    with pytest.raises(idaudit.IdauditError, match="unknown options: gauss_sims"):
        idaudit.embed(enc, gauss_sims=0)
    with pytest.raises(idaudit.IdauditError, match="EmbedRequest alone"):
        idaudit.embed(EmbedRequest(target=enc), seed=1)
    assert a["h"].shape == (300, 4) and float(a["rho"]) == 0.8 and int(a["seed"]) == 2
