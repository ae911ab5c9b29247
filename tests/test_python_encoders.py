"""Encoders as Python users hold them (issue 42, item 4): ``embed=`` takes a function as
``--embed`` takes its name, ``output=`` picks an element as ``--output`` does, several embed
functions of one model are audited side by side, and a network that takes its inputs in
another form is told how to say so, in the spelling of who asked. docs/integrations.md's
LeJEPA-style example runs here as written."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest
import rounding
from safetensors.torch import save_file
from typer.testing import CliRunner

import idaudit
from idaudit.cli import app
from idaudit.core.errors import IdauditError
from idaudit.evaluations.report import fmt

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()

#: a network in the LeJEPA library's style: views (N, V, D) in, (embedding, projection) out
VIEWS = textwrap.dedent('''\
    import torch
    from torch import nn


    class Views(nn.Module):
        def __init__(self, dim=4, width=16, proj=6):
            super().__init__()
            self.backbone = nn.Sequential(nn.Linear(dim, width), nn.Tanh(), nn.Linear(width, width))
            self.projector = nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, proj))

        def forward(self, views):
            n, v, d = views.shape
            emb = self.backbone(views.reshape(n * v, d))
            return emb, self.projector(emb).reshape(n, v, -1).transpose(0, 1)


    def make():
        torch.manual_seed(0)
        return Views()


    def backbone(model, x):
        return model(x[:, None])[0]


    def projector(model, x):
        return model(x[:, None])[1][0]
''')
WORLD = {"world": "coupling", "dim": 4, "n_eval": 600}
WORLD_FLAGS = ["--world", "coupling", "--dim", "4", "--n-eval", "600"]


@pytest.fixture()
def views(tmp_path, monkeypatch):
    """The module (importable from the working directory, as --arch and --embed find it),
    its network and the network's weights as a file."""
    (tmp_path / "views.py").write_text(VIEWS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import views as module

    net = module.make()
    save_file({k: v.contiguous() for k, v in net.state_dict().items()},
              str(tmp_path / "w.safetensors"))
    yield module, net, tmp_path / "w.safetensors"
    import sys

    sys.modules.pop("views", None)


def cli_json(path, *args):
    res = runner.invoke(app, ["audit", *map(str, args), "--json", str(path)])
    assert res.exit_code in (0, 1), res.output
    return json.loads(Path(path).read_text())


def test_an_embed_function_is_what_embed_names_on_the_command_line(views):
    module, net, weights = views
    lib = idaudit.audit(encoder=net, embed=module.backbone, **WORLD)
    cli = cli_json("cli.json", weights, "--arch", "views:make", "--embed", "views:backbone",
                   *WORLD_FLAGS)
    assert lib.metrics["embed_dim"] == 16
    assert json.loads(json.dumps(lib.metrics)) == cli["metrics"]
    # and the function's output is what a hand-made wrapper gives
    wrapped = idaudit.audit(encoder=lambda x: module.backbone(net, x), **WORLD)
    assert json.dumps(wrapped.metrics) == json.dumps(lib.metrics)


def test_output_picks_an_element_as_on_the_command_line(views):
    module, net, _ = views
    both = idaudit.audit(encoder=net, embed=lambda m, x: (m(x[:, None])[0],
                                                          m(x[:, None])[1][0]),
                         output=1, **WORLD)
    alone = idaudit.audit(encoder=net, embed=module.projector, **WORLD)
    assert both.metrics["embed_dim"] == 6 and json.dumps(both.metrics) == json.dumps(alone.metrics)
    first = idaudit.audit(encoder=net, embed=lambda m, x: (m(x[:, None])[0], None), **WORLD)
    assert first.metrics["r2_h_to_z_heldout"] == \
        idaudit.audit(encoder=net, embed=module.backbone, **WORLD).metrics["r2_h_to_z_heldout"]
    with pytest.raises(IdauditError, match=r"^output 2 is out of range: the encoder returned 2 "):
        idaudit.audit(encoder=net, embed=lambda m, x: m(x[:, None]), output=2, **WORLD)


@pytest.mark.parametrize("index", [0, 1])
def test_output_of_index_0_is_refused_where_it_does_not_apply(index, tmp_path):
    """``output=0`` (the embedding of an (embedding, projection) tuple) is as given as 1: arrays
    audited as they are refuse it in the library and on the command line."""
    z = np.random.default_rng(3).standard_normal((300, 2))
    with pytest.raises(IdauditError, match=r"^output does not apply to arrays z, h"):
        idaudit.audit(z, z, output=index)
    np.savez(tmp_path / "e.npz", z=z, h=z)
    res = runner.invoke(app, ["audit", str(tmp_path / "e.npz"), "--output", str(index)])
    assert res.exit_code == 2 and "--output does not apply" in res.output, res.output


def test_a_network_that_takes_views_is_told_how_in_one_line(views):
    """The shape it was given and embed= (Python) / --embed (the command line)."""
    _, net, weights = views
    with pytest.raises(IdauditError) as err:
        idaudit.audit(encoder=net, **WORLD)
    said = str(err.value)
    assert said == ("the encoder failed on inputs of shape (2, 4): not enough values to unpack "
                    "(expected 3, got 2); world 'coupling' gives 4-dimensional observations, "
                    "one a row: for another width give dim=N; for inputs in another form (a "
                    "stack of views, a dict) say how to call it with embed=, a function "
                    "(model, x) → (batch, m)")
    res = runner.invoke(app, ["audit", str(weights), "--arch", "views:make", *WORLD_FLAGS])
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert " ".join(lines[0].split()) == (
        "error: the encoder failed on inputs of shape (2, 4): not enough values to unpack "
        "(expected 3, got 2); world 'coupling' gives 4-dimensional observations, one a row: "
        "for another width give --dim N; for inputs in another form (a stack of views, a "
        "dict) say how to call it with --embed module:function, called as function(model, "
        "x) → (batch, m)")
    # plan tries the encoder the same way and says the same
    with pytest.raises(IdauditError) as err:
        idaudit.plan(encoder=net, pairs=4, world="coupling", dim=4)
    assert str(err.value) == said
    res = runner.invoke(app, ["plan", str(weights), "--arch", "views:make", "--pairs", "4",
                              *WORLD_FLAGS[:4]])
    assert res.exit_code == 2 and "--embed module:function" in res.output, res.output
    # an embed function that fails is not told to give one
    with pytest.raises(IdauditError) as err:
        idaudit.audit(encoder=net, embed=lambda m, x: m(x), **WORLD)
    assert "embed" not in str(err.value) and "inputs of shape (2, 4)" in str(err.value)


def test_several_embed_functions_are_targets_side_by_side(views):
    module, net, _ = views
    report = idaudit.audit(encoder=net, embed={"backbone": module.backbone,
                                               "projector": module.projector},
                           min_r2=0.5, **WORLD)
    alone = {name: idaudit.audit(encoder=net, embed=fn, **WORLD) for name, fn in
             (("backbone", module.backbone), ("projector", module.projector))}
    assert [r["source"] for r in report.runs] == ["backbone", "projector"]
    assert report.source == "backbone, projector"
    for run in report.runs:
        assert json.loads(json.dumps(run["metrics"])) == \
            json.loads(json.dumps(alone[run["source"]].metrics))
    r2 = [alone[n].metrics["r2_h_to_z_heldout"] for n in ("backbone", "projector")]
    assert report.metrics["r2_h_to_z_heldout"] == min(r2)  # gated on the worst
    assert report.verdict == ("pass" if min(r2) >= 0.5 else "fail")
    table = report.side_by_side(["r2_h_to_z_heldout", "embed_dim"])
    rows = table.splitlines()
    assert rows[0] == "| metric | backbone | projector | gate |"
    marks = ["pass" if v >= 0.5 else "FAIL" for v in r2]
    assert rows[2] == (f"| R²(h → z), held-out `r2_h_to_z_heldout` | {fmt(r2[0])} {marks[0]} | "
                       f"{fmt(r2[1])} {marks[1]} | ≥ 0.5 |")
    assert rows[3] == "| embedding dimension m `embed_dim` | 16 | 6 |  |"
    for kwargs, fragment in [
        ({"targets": [net, net]}, "embed as several functions (a dict, one target each) "
                                  "takes one encoder, got 2 targets"),
        ({"encoder": net, "embed": {}}, "embed as a dict names one function or more"),
        ({"encoder": net, "embed": {"a": 3}}, "embed['a'] must be a function (model, x) → "
                                               "(batch, m) or its name module.path:function"),
    ]:
        with pytest.raises(IdauditError, match=re.escape(fragment)):
            idaudit.audit(**{"embed": {"a": module.backbone, "b": module.projector}, **kwargs,
                             **WORLD})
    with pytest.raises(IdauditError, match="applies to an audit; give one function here"):
        idaudit.consistency(net, net, embed={"a": module.backbone}, **WORLD)


def test_the_lejepa_style_example_runs_as_it_says(tmp_path):
    """docs/integrations.md's block as written, on the install it states: what it prints is the
    report's summary and side-by-side table, and the lines the guide shows are those it prints,
    each trained number within the spread another CPU's kernels give it (tests/rounding.py)."""
    from test_doc_examples import run_python

    done = run_python("docs/integrations.md", "import idaudit", tmp_path, after=(
        "import json, pathlib\npathlib.Path('_report.json').write_text(json.dumps({"
        "'sources': [r['source'] for r in report.runs], 'printed': report.summary() + '\\n' + "
        "report.side_by_side(['r2_h_to_z_heldout', 'r2_h_to_z_heldout_floor_high', "
        "'orthogonality_error', 'procrustes_mse', 'embed_dim']) + '\\n'}))"))
    report = json.loads((tmp_path / "_report.json").read_text())
    assert report["sources"] == ["backbone", "projector"]
    assert done.stdout == report["printed"]
    # the doc's lines, each number within what another CPU's kernels move it by (a simulation:
    # tests/rounding.py, docs/data/rounding-spread.json); the verdict and marks exactly
    rounding.check_printed("integrations", done.stdout)


def test_a_function_is_not_sent_into_a_program_s_cage(tmp_path):
    """A program from a file runs in its cage, where a function of this process cannot go:
    its embed function is named module:function there."""
    import torch

    from idaudit.loading.confine import why_no_cage

    path = tmp_path / "lin.pt"
    torch.jit.trace(torch.nn.Linear(4, 4), torch.zeros(1, 4)).save(str(path))
    if why_no_cage() is not None:
        pytest.skip(f"no cage here: {why_no_cage()}")
    with pytest.raises(IdauditError) as err:
        idaudit.audit(encoder=path, embed=lambda m, x: m(x), **WORLD)
    assert str(err.value) == (f"{path} is a TorchScript program, run in its cage: give embed= as "
                              "the name module:function there (a function of this process "
                              "cannot be sent to it)")
