"""The CLI end to end through typer's CliRunner, and its errors (one line, exit 2)."""

import json
import statistics

import pytest
from conftest import one_line, run
from safetensors.torch import load_file, save_file

from idaudit.cli import app
from idaudit.core.registered import OBJECTIVES


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    path = d / "s.safetensors"
    res = run("train", "--world", "spiral", "--rho", "0.95", "--objective", "lejepa", "--lamb",
              "1e-3", "--steps", "300", "--seed", "1337", "--eval-every", "100", "--n-eval", "2000",
              "--out", path, "--quiet")
    assert res.exit_code == 0, res.output
    return path


def test_train_writes_checkpoint_and_log(ckpt):
    assert ckpt.exists()
    log = json.loads(ckpt.with_name("s.log.json").read_text())
    assert log["train"]["steps"] == 300
    assert [c["step"] for c in log["history"][0]["curve"]] == [100, 200, 300]
    assert log["metrics"]["r2_h_to_z"] > 0.5


def test_audit_json_has_the_contract_keys(ckpt, tmp_path):
    out = tmp_path / "a.json"
    res = run("audit", ckpt, "--json", out)
    assert res.exit_code == 0, res.output
    metrics = json.loads(out.read_text())["metrics"]
    for key in ("r2_h_to_z", "r2_z_to_h", "orthogonality_error", "procrustes_mse",
                "whitening_error", "alignment_gap", "D", "bound", "bound_holds",
                "mixing_r2_x_to_z"):
        assert key in metrics, key
    assert isinstance(metrics["bound_holds"], bool)
    log = json.loads(ckpt.with_name("s.log.json").read_text())
    assert metrics["r2_h_to_z"] == pytest.approx(log["metrics"]["r2_h_to_z"], rel=1e-12)


def test_plan_json(ckpt, tmp_path):
    out = tmp_path / "p.json"
    res = run("plan", ckpt, "--pairs", "10", "--gallery", "2000", "--json", out)
    assert res.exit_code == 0, res.output
    plan = json.loads(out.read_text())
    assert plan["pairs"] == 10 and len(plan["cost_ratios"]) == 10
    # the fixture's spiral is trained (R² ≈ 0.93): it plans nearly like the true latents
    assert 0.8 < plan["cost_ratio_median"] < 1.2
    assert plan["cost_ratio_median"] == pytest.approx(statistics.median(plan["cost_ratios"]))
    assert "lqr_value_rel_error_median" in plan
    # --k is the decoder's neighbours; -k names nothing (it once meant --pairs)
    res = run("plan", ckpt, "-k", "10")
    assert res.exit_code == 2 and "No such option: -k" in res.output


def test_world_writes_pairs(tmp_path):
    out = tmp_path / "w.safetensors"
    res = run("world", "coupling", "--dim", "6", "--pairs", "100", "--rho", "0.9", "--out", out)
    assert res.exit_code == 0, res.output
    t = load_file(str(out))
    assert t["z"].shape == (100, 6) and t["x_prime"].shape == (100, 6)


def test_embed_writes_an_npz_that_audits_like_the_encoder(tmp_path):
    import numpy as np
    import torch
    from conftest import identity_linear

    enc = tmp_path / "enc.pt"
    torch.jit.script(identity_linear()).save(str(enc))
    world = ("--world", "coupling", "--dim", "4", "--n-eval", "100")
    out = tmp_path / "emb.npz"
    res = run("embed", enc, *world, "--out", out)
    assert res.exit_code == 0 and res.stderr == "", res.output
    # rich wraps the line where the path ends; a wrap before ":" must not read as a space
    assert "".join(res.stdout.split()) == "".join(f"wrote {out}: z (100, 4), h (100, 4), "
                                                  "h_prime (ρ = 0.95)".split())
    data = np.load(out)
    assert sorted(data.files) == ["circular", "h", "h_prime", "rho", "seed", "x", "z", "z_white"]
    assert data["z"].shape == data["h"].shape == data["h_prime"].shape == (100, 4)
    assert float(data["rho"]) == 0.95 and int(data["seed"]) == 0 and data["circular"].size == 0
    np.testing.assert_allclose(data["h"], data["x"], rtol=0, atol=1e-6)  # the identity encoder
    # auditing the file gives the numbers of auditing the encoder on the same world
    a, b = tmp_path / "file.json", tmp_path / "enc.json"
    assert run("audit", out, "--json", a).exit_code == 0
    assert run("audit", enc, *world, "--json", b).exit_code == 0
    assert json.loads(a.read_text())["metrics"] == json.loads(b.read_text())["metrics"]


@pytest.mark.parametrize("name", ["notes.txt", "meta.json", "-"])
def test_embed_refuses_a_non_npz_out_before_touching_it(tmp_path, monkeypatch, name):
    """A file at a wrong --out is refused and kept, never deleted first (issue 27, item 3)."""
    import torch
    from conftest import identity_linear

    monkeypatch.chdir(tmp_path)
    enc = tmp_path / "enc.pt"
    torch.jit.script(identity_linear()).save(str(enc))
    (tmp_path / name).write_text("keep me\n")
    res = run("embed", enc, "--world", "coupling", "--dim", "4", "--n-eval", "100",
              "--out", name)
    one_line(res, 2, "--out must name an .npz file")
    assert (tmp_path / name).read_text() == "keep me\n"


def test_consistency_of_two_runs(tmp_path):
    import numpy as np

    rng = np.random.default_rng(2)
    h = rng.standard_normal((800, 3))
    q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    np.save(tmp_path / "a.npy", h)
    np.save(tmp_path / "b.npy", h @ q)  # the same embedding up to a rotation
    np.save(tmp_path / "c.npy", np.tanh(2 * h))
    out = tmp_path / "c.json"
    res = run("consistency", tmp_path / "a.npy", tmp_path / "b.npy", "--min-r2", "0.999",
              "--json", out)
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    assert report["verdict"] == "pass" and report["metrics"]["n_runs"] == 2
    assert report["metrics"]["consistency_r2"] > 0.999999
    res = run("consistency", tmp_path / "a.npy", tmp_path / "c.npy", "--min-r2", "0.999")
    assert res.exit_code == 1 and res.stderr == "gate failed: consistency_r2\n", res.output


def test_metrics_json_lists_the_catalogue(tmp_path):
    from idaudit.maths.catalogue import CATALOGUE

    out = tmp_path / "m.json"
    res = run("metrics", "--json", out)
    assert res.exit_code == 0 and f"wrote {out}" in " ".join(res.output.split()), res.output
    data = json.loads(out.read_text())
    assert [d["key"] for d in data] == [m.key for m in CATALOGUE]
    assert {"key", "label", "direction"} <= set(data[0])


def test_sweep_then_report(tmp_path):
    suite = tmp_path / "grid.toml"
    suite.write_text('[fixed]\nworld = "spiral"\nsteps = 20\nbatch = 64\nn_eval = 300\n'
                     'eval_every = 0\n[grid]\nseed = [1, 2]\n')
    res = run("sweep", suite, "--list")
    assert res.exit_code == 0 and "grid.toml:2runs" in "".join(res.output.split()), res.output
    out = tmp_path / "o"
    res = run("sweep", suite, "--out", out, "--workers", "1", "--set", "lamb=0.01")
    assert res.exit_code == 0, res.output
    assert "2 runs: 0 already done, 2 ok, 0 failed" in " ".join(res.output.split())
    assert len(list((out / "runs").glob("*.json"))) == 2
    res = run("sweep", suite, "--out", out, "--workers", "1", "--set", "lamb=0.01")
    assert res.exit_code == 0 and "2 already done, 0 ok" in " ".join(res.output.split())
    res = run("report", out, "--no-figures")
    assert res.exit_code == 0, res.output
    csv = (out / "summary.csv").read_text().splitlines()
    assert len(csv) == 2 and "r2_h_to_z_mean" in csv[0]  # two seeds of one recipe: one row
    md = (out / "summary.md").read_text()
    assert md.startswith("# idaudit sweep: suite ") and "seeds per configuration: mean ± std over seeds" in md
    assert "\n\n| " in md
    assert f"wrote {out / 'summary.csv'}" in " ".join(res.output.split())


@pytest.mark.parametrize("args,fragment", [
    (["train", "--world", "moon"], "valid: spiral, banana, sinusoid, nvp, coupling"),
    (["train", "--objective", "byol"], "valid: " + ", ".join(OBJECTIVES.names())),
    (["train", "--encoder", "resnet", "--steps", "1"], "valid: cnn, coupling, mlp"),
    (["train", "--rho", "1.5"], "--rho"),
    (["train", "--rho", "0"], "--rho"),
    (["train", "--lamb", "2"], "--lamb"),
    (["train", "--world", "coupling", "--dim", "7"], "even"),
    (["train", "--source", "gennorm", "--alpha", "0"], "--alpha"),
    (["train", "--source", "gennorm", "--alpha", "-2"], "--alpha"),
    (["train", "--sigma", "wide"], "--sigma"),
    (["train", "--encoder-kwargs", "{bad"], "--encoder-kwargs"),
    (["world", "moon", "--out", "x.safetensors"], "valid:"),
    (["audit", "does-not-exist.safetensors"], "not found"),
    (["train", "--epochs", "5"], "--epochs does not apply to world 'spiral'"),
    (["train", "--stride", "4"], "--stride does not apply to world 'spiral'"),
    (["train", "--pairs", "40"], "--pairs does not apply to world 'spiral'"),
    (["train", "--workers", "2", "--steps", "1"], "--workers does not apply to world 'spiral'"),
    (["train", "--sigma", "2"], "--sigma only applies to --objective infonce"),
    (["train", "--objective", "infonce", "--lamb", "0.5"], "--lamb does not apply"),
    (["train", "--encoder-kwargs", "{}"], "--encoder-kwargs needs --encoder"),
    (["train", "--world", "banana", "--layers", "3"], "--layers only applies to coupling"),
    (["train", "--world", "spiral", "--mixing-seed", "3"], "--mixing-seed only applies to "
                                                           "coupling worlds, not 'spiral'"),
    (["train", "--objective", "whiten", "--n-slices", "8"], "--n-slices does not apply to "
                                                             "--objective whiten"),
    (["train", "--data-root", "elsewhere"], "--data-root does not apply to world 'spiral'"),
    (["train", "--world", "reacher", "--data", "d", "--data-root", "elsewhere"],
     "--data-root does not apply with --data"),
    (["world", "spiral", "--trajectory", "--out", "x.safetensors"], "--trajectory does not "
                                                                     "apply"),
    (["consistency", "a.npy"], "consistency needs at least two runs, got 1"),
    (["embed", "enc.pt", "--out", "x.txt"], "--out must name an .npz file, got x.txt"),
    (["metrics", "--json", "/tmp"], "--json /tmp: is a directory, not a file"),
    (["sweep", "nope", "--list"], "unknown suite 'nope'; valid: 2d, scaling"),
    (["report", "no-such-sweep"], "no-such-sweep has no runs/ directory"),
])
def test_bad_input_is_one_line_exit_2(args, fragment):
    res = run(*args)
    assert res.exit_code == 2, res.output
    assert fragment in res.output
    assert "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output


def test_corrupt_and_foreign_checkpoints(tmp_path, ckpt):
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(b"\x00\x01garbage" * 10)
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(ckpt.read_bytes()[:200])
    foreign = tmp_path / "foreign.safetensors"
    import torch

    save_file({"w": torch.zeros(2)}, str(foreign))
    wrong = tmp_path / "wrong.safetensors"
    state = load_file(str(ckpt))
    state = {k: v[..., :1].contiguous() for k, v in state.items()}
    from safetensors import safe_open

    with safe_open(str(ckpt), framework="pt") as f:
        meta = f.metadata()
    save_file(state, str(wrong), metadata=meta)
    for path, fragment in [(corrupt, "not a readable safetensors"),
                           (truncated, "not a readable safetensors"),
                           (foreign, "not an idaudit checkpoint"),
                           (wrong, "do not fit")]:
        for cmd in ("audit", "plan"):
            res = run(cmd, path)
            assert res.exit_code == 2, (cmd, path, res.output)
            # plan reads every encoder form audit reads, so both say the same
            expected = "neither an idaudit checkpoint" if path == foreign else fragment
            assert expected in res.output, res.output
            assert "Traceback" not in res.output


def test_version_and_short_help():
    from idaudit import __version__

    for flag in ("--version", "-V"):
        res = run(flag)
        assert res.exit_code == 0 and res.output.strip() == f"idaudit {__version__}", res.output
    for args in (["-h"], ["audit", "-h"], ["train", "-h"]):
        res = run(*args)
        assert res.exit_code == 0 and "Usage:" in res.output, res.output


def _commands():

    return [c.name or c.callback.__name__ for c in app.registered_commands]


@pytest.mark.parametrize("command", _commands())
def test_help_texts_print_as_written(command, monkeypatch):
    """rich takes [word] for markup and drops it: every bracketed piece of every help text
    (e.g. "[min] / [max]", "[, h_prime, rho]") must reach the rendered --help."""
    import inspect
    import re

    import typer


    monkeypatch.setenv("COLUMNS", "400")  # one line per option: no wrapping inside brackets
    cmd = next(c for c in app.registered_commands if (c.name or c.callback.__name__) == command)
    res = run(command, "--help")
    assert res.exit_code == 0, res.output
    shown = " ".join(res.output.split())
    texts = [p.default.help for p in inspect.signature(cmd.callback).parameters.values()
             if isinstance(p.default, typer.models.ParameterInfo) and p.default.help]
    texts.append(cmd.help or "")
    from rich.markup import render

    for text in texts:
        plain = " ".join(render(text).plain.split())  # the help as the user should read it
        for piece in re.findall(r"\[[^\]]*\]", plain):
            assert piece in shown, (command, piece)
    if command in ("audit", "consistency"):
        assert "TOML file with [min] / [max] tables" in shown
    if command == "plan":
        assert "holding z, h [, h_prime, rho]" in shown


def test_doctor_names_idaudits_own_version(monkeypatch):
    from idaudit import __version__, doctor

    res = run("doctor")
    assert f"idaudit {__version__}" in " ".join(res.output.split())
    # exit 0 when every check is ok, 1 when one is missing (with its fix in the table)
    missing = [line for line in res.output.splitlines() if "│ missing │" in line]
    assert res.exit_code == (1 if missing else 0), res.output
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.setattr(doctor, "probe_backend", lambda backend: (False, f"no {backend}"))
    monkeypatch.setenv("COLUMNS", "400")  # one line per row
    res = run("doctor")
    assert res.exit_code == 1, res.output
    gl = next(line for line in res.output.splitlines() if line.startswith("│ gl_backend"))
    assert "│ missing │" in gl and "no headless GL backend works: egl fails: no egl" in gl, gl
    assert doctor.INSTALL_HINT in " ".join(res.output.split())  # the fix


def test_a_cli_that_cannot_import_is_one_line_exit_5(tmp_path):
    import subprocess
    import sys

    code = ("import sys\nsys.modules['typer'] = None  # typer missing: the CLI cannot import\n"
            "from idaudit._entry import main\nmain()\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={k: v for k, v in __import__("os").environ.items()
                              if k != "IDAUDIT_TRACEBACK"})
    assert res.returncode == 5, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("internal error: idaudit could not start")
    assert "typer" in lines[0] and "Traceback" not in res.stderr


def test_assert_identifiable_hides_idaudits_frames(tmp_path):
    import subprocess
    import sys

    (tmp_path / "test_user.py").write_text(
        "import numpy as np\nfrom idaudit.testing import assert_identifiable\n\n"
        "def test_it():\n    z = np.random.default_rng(0).standard_normal((500, 2))\n"
        "    assert_identifiable(z, np.tanh(3 * z) ** 3, min_r2=0.99)\n")
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                          str(tmp_path / "test_user.py")], capture_output=True, text=True,
                         cwd=tmp_path)
    assert res.returncode == 1, res.stdout
    assert "embedding is not identifiable: r2_h_to_z_heldout" in res.stdout
    assert "test_user.py:6" in res.stdout
    assert "idaudit/testing.py" not in res.stdout and "auditing.py" not in res.stdout
    assert "1 failed" in res.stdout  # the summary line a user reads


def test_demo_runs_the_whole_loop_and_gates(tmp_path):
    # 800 steps: held-out R² 0.977 here (1500: 0.982), the plan's median ratio 1.005
    res = run("demo", "--steps", "800", "--out", tmp_path / "d")
    assert res.exit_code == 0, res.output
    for step in ("1/4 world", "2/4 train", "3/4 audit, gated", "4/4 plan"):
        assert step in res.output
    audit = json.loads((tmp_path / "d" / "audit.json").read_text())
    assert audit["verdict"] == "pass" and audit["metrics"]["r2_h_to_z_heldout"] > 0.95
    assert [g["metric"] for g in audit["gate"]] == ["r2_h_to_z_heldout"]
    plan = json.loads((tmp_path / "d" / "plan.json").read_text())
    assert 0.8 < plan["cost_ratio_median"] < 1.2


def _arrays_for_pipes(directory):
    """Two runs' arrays (a sheared and a rotated copy of z, 2000 × 2) for the pipe tests."""
    import numpy as np

    rng = np.random.default_rng(0)
    z = rng.standard_normal((2000, 2))
    np.savez(directory / "e.npz", z=z, h=z @ np.array([[1.0, 0.2], [0.0, 1.0]]), h_prime=z,
             rho=0.9)
    np.savez(directory / "f.npz", z=z,
             h=z @ np.array([[0.0, 1.0], [1.0, 0.0]]) + 0.01 * rng.standard_normal(z.shape))


# every command that prints to stdout, through rich (audit, plan, consistency, metrics,
# report, doctor, world, typer's --help, --version) or typer.echo (train --show-config)
PIPED = {
    "audit": ["audit", "e.npz", "--min-r2", "0.5"],
    "plan": ["plan", "{ckpt}", "--pairs", "10", "--gallery", "2000"],
    "consistency": ["consistency", "e.npz", "f.npz", "--min-r2", "0.5"],
    "metrics": ["metrics"],
    "report": ["report", "{sweep}"],
    "train --show-config": ["train", "--world", "reacher", "--show-config"],
    "world": ["world", "spiral", "--pairs", "100", "--out", "w.safetensors"],
    "doctor": ["doctor"],
    "--help": ["--help"],
    "audit --help": ["audit", "--help"],
    "--version": ["--version"],
}


@pytest.mark.parametrize("name", list(PIPED))
def test_a_closed_pipe_ends_with_141_never_1(name, ckpt, tmp_path):
    """`idaudit … | head` whose reader has left before the first byte: exit 141 (as SIGPIPE),
    never 1 (a failed gate; rich's own answer) or 5, and nothing on stderr."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    _arrays_for_pipes(tmp_path)
    sweep = tmp_path / "sweep"
    shutil.copytree(Path(__file__).parents[1] / "docs" / "data" / "scaling-sweep", sweep)
    args = [a.format(ckpt=ckpt, sweep=sweep) for a in PIPED[name]]
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte is written
    try:
        res = subprocess.run([sys.executable, "-m", "idaudit", *args], stdout=write_end,
                             stderr=subprocess.PIPE, cwd=tmp_path, text=True, timeout=300)
    finally:
        os.close(write_end)
    assert (res.returncode, res.stderr) == (141, ""), res.stderr


@pytest.mark.parametrize("args", [["audit", "e.npz"], ["consistency", "e.npz", "f.npz"]])
def test_a_closed_pipe_still_writes_the_report_files(args, tmp_path):
    """`idaudit audit … --json F | head`: the reader leaving stdout does not cost the files
    asked for (they are written before the console report): exit 141 and the JSON and
    Markdown complete."""
    import json
    import os
    import subprocess
    import sys

    _arrays_for_pipes(tmp_path)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        res = subprocess.run([sys.executable, "-m", "idaudit", *args, "--min-r2", "0.5",
                              "--json", "r.json", "--markdown", "r.md"], stdout=write_end,
                             stderr=subprocess.PIPE, cwd=tmp_path, text=True, timeout=300)
    finally:
        os.close(write_end)
    assert res.returncode == 141, res.stderr
    written = json.loads((tmp_path / "r.json").read_text())
    assert written["verdict"] == "pass" and written["metrics"]
    assert "pass" in (tmp_path / "r.md").read_text().lower()


def test_head_after_the_verdict_line_is_not_a_failed_gate(tmp_path):
    """`set -o pipefail; idaudit audit … | head -1` on a passing audit: the verdict line, then
    141 where the reader left before the rest (0 where the output was complete), never 1."""
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    _arrays_for_pipes(tmp_path)
    idaudit_command = shlex.quote(str(Path(sys.executable).with_name("idaudit")))
    res = subprocess.run(["bash", "-c", f"set -o pipefail; {idaudit_command} audit e.npz "
                          "--min-r2 0.5 | head -1"], capture_output=True, cwd=tmp_path, text=True,
                         timeout=300)
    assert res.returncode in (0, 141), (res.returncode, res.stderr)
    assert res.stdout.startswith("verdict: pass") and res.stdout.count("\n") == 1, res.stdout
    assert res.stderr == ""


def test_a_dash_report_goes_to_stdout_alone(tmp_path, monkeypatch):
    """``--json -`` (and --junit/--markdown -) write the report to stdout, the table to stderr,
    and no file named '-' (issue 27, item 7); two reports on stdout are refused."""
    import numpy as np

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    z = rng.standard_normal((500, 2))
    np.savez(tmp_path / "a.npz", z=z, h=z @ np.array([[1.0, 0.2], [0.0, 1.0]]))
    res = run("audit", "a.npz", "--json", "-", "--min-r2", "0.9")
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["verdict"] == "pass" and report["metrics"]["r2_h_to_z"] > 0.99
    assert "R²" in res.stderr and not (tmp_path / "-").exists()
    res = run("audit", "a.npz", "--markdown", "-")
    assert res.exit_code == 0 and res.stdout.lstrip().startswith("#"), res.stdout[:200]
    res = run("plan", "a.npz", "--json", "-")
    assert res.exit_code == 0 and "cost_ratio_median" in json.loads(res.stdout), res.output
    res = run("metrics", "--json", "-")
    assert res.exit_code == 0 and {m["key"] for m in json.loads(res.stdout)} >= {"r2_h_to_z"}
    one_line(run("audit", "a.npz", "--json", "-", "--junit", "-"), 2,
             "--json and --junit both name standard output")
    assert not (tmp_path / "-").exists()
