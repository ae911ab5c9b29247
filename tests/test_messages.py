"""The first hour's messages and tables (issue 57, item 5): what a new user reads on the
README's install — a missing extra named with the pip line that installs it, an optional
extra that does not fail `idaudit doctor`, --help summaries that are whole sentences, tables
that fit 80 columns and say which value each row holds. Missing packages are made missing in
a subprocess (a sitecustomize that refuses their import), not mocked."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import one_line
from rich.cells import cell_len
from typer.testing import CliRunner

import idaudit
from idaudit.cli import COMMANDS, app
from idaudit.core.defaults import NORMALIZATIONS
from idaudit.maths.catalogue import catalogue

SRC = Path(idaudit.__file__).resolve().parents[1]  # the child imports this very idaudit

REFUSE = """\
import importlib.abc, sys
BLOCKED = {blocked!r}
class _Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{top!r}}", name=top)
        return None
sys.meta_path.insert(0, _Refuse())
"""


def idaudit_without(blocked: tuple[str, ...], args: list[str], cwd: Path, tmp: Path,
                    columns: int = 250) -> subprocess.CompletedProcess:
    """``python -m idaudit ARGS`` in ``cwd`` where ``blocked`` are not importable, in this
    process and every Python process it starts (the sitecustomize is on their PYTHONPATH)."""
    hook = tmp / "refuse"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(REFUSE.format(blocked=list(blocked)))
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1",
           "PYTHONPATH": os.pathsep.join([str(hook), str(SRC)])}
    env.pop("MUJOCO_GL", None)
    return subprocess.run([sys.executable, "-m", "idaudit", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def invoke(*args: str, columns: int = 80):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns)})


@pytest.fixture
def arrays(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    for i, name in enumerate(("a", "b")):
        z = rng.standard_normal((600, 2))
        h = z @ np.array([[1.0, 0.2 * i], [0.0, 1.0]]) + 0.05 * rng.standard_normal(z.shape)
        np.savez(tmp_path / f"{name}.npz", z=z, h=h, h_prime=z, rho=0.9)
    return tmp_path


# ---- a missing extra is named with its pip line ----------------------------------------
@pytest.mark.parametrize("flags, line", [
    (["--html", "a.html", "--plot", "a.png"],
     'error: --plot and --html need matplotlib: pip install "idaudit[plot]"'),
    (["--html", "a.html"], 'error: --html needs matplotlib: pip install "idaudit[plot]"'),
])
def test_plot_and_html_without_matplotlib_name_the_plot_extra(arrays, tmp_path, flags, line):
    proc = idaudit_without(("matplotlib",), ["audit", "a.npz", *flags], arrays, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == line and proc.stdout == ""
    assert not (arrays / "a.html").exists() and not (arrays / "a.png").exists()


@pytest.mark.parametrize("args", [
    ["world", "reacher", "--rho", "0.95", "--pairs", "100", "--out", "data/ou"],
    ["train", "--world", "reacher", "--rho", "0.95", "--out", "r.safetensors"],
])
def test_reacher_without_its_extra_names_it_and_writes_nothing(tmp_path, args):
    cwd = tmp_path / "work"
    cwd.mkdir()
    proc = idaudit_without(("mujoco", "dm_control"), args, cwd, tmp_path)
    assert proc.returncode == 2, proc.stderr
    # train says its recipe first (a note); the error is one line, the last
    assert proc.stderr.strip().splitlines()[-1] == (
        'error: the Reacher world needs mujoco and dm_control, not installed here: '
        'pip install "idaudit[reacher]" (mujoco==3.17.0, dm_control==1.0.50)')
    assert list(cwd.rglob("*")) == []  # no data/…/meta.json, no checkpoint, no log


def test_doctor_passes_where_the_optional_reacher_extra_is_absent(tmp_path):
    """Exit 1 is a failed gate and nothing else: an optional extra that is not installed is
    ``ok``, said as the other optional extras say it."""
    proc = idaudit_without(("mujoco", "dm_control"), ["doctor"], tmp_path, tmp_path)
    rows = {cells[0]: cells[1:] for line in proc.stdout.splitlines()
            if (cells := [c.strip() for c in line.strip()[1:-1].split("│")]) and len(cells) == 4}
    for name in ("mujoco", "dm_control"):
        assert rows[name][:2] == ["ok", f'{name} not installed (optional: the Reacher world; '
                                        'pip install "idaudit[reacher]")'], proc.stdout
    assert rows["gl_backend"][:2] == ["ok", "not checked: the optional reacher extra is not "
                                            "installed (mujoco, dm_control)"], proc.stdout
    assert "missing" not in [r[0] for r in rows.values()], proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_doctor_still_fails_a_reacher_install_that_is_broken(monkeypatch):
    from idaudit import doctor

    broken = {"mujoco": (False, "ImportError: libGL.so.1: cannot open shared object file"),
              "dm_control": (True, "1.0.50")}
    monkeypatch.setattr(doctor, "_import_without_gl", lambda modules: broken)
    rows = {c["name"]: c for c in doctor._check_reacher()}
    assert not rows["mujoco"]["ok"] and rows["mujoco"]["fix"] == doctor.INSTALL_HINT
    assert not rows["gl_backend"]["ok"]


# ---- idaudit metrics -------------------------------------------------------------------
def test_metrics_keys_prints_the_keys_alone():
    res = invoke("metrics", "--keys")
    assert res.exit_code == 0, res.output
    assert res.output.splitlines() == [m.key for m in catalogue()]


def test_metrics_keys_and_json_on_stdout_are_refused():
    one_line(invoke("metrics", "--keys", "--json", "-"), 2,
             "error: --keys and --json - both print to stdout: give --json a file")


def test_metrics_is_readable_at_80_columns():
    res = invoke("metrics", columns=80)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert max(cell_len(ln.rstrip()) for ln in lines) <= 80
    assert "…" not in res.output  # nothing cut to fit
    starts = [ln.split()[0] for ln in lines if ln and not ln.startswith(" ")]
    assert [k for k in starts if k in {m.key for m in catalogue()}] == \
        [m.key for m in catalogue()]  # each metric begins a line of its own
    first = catalogue()[0]
    text = " ".join(res.output.split())
    assert f"{first.label.strip()}: {' '.join(first.meaning.split())}" in text


# ---- --help ----------------------------------------------------------------------------
def test_help_summaries_are_whole_sentences_at_80_columns():
    res = invoke("--help", columns=80)
    assert res.exit_code == 0, res.output
    panel = res.output.split("Commands")[1].splitlines()[1:]
    rows = [ln.strip("│ ") for ln in panel if ln.startswith("│")]
    assert [r.split()[0] for r in rows] == list(COMMANDS)  # one line each: none wraps
    for row in rows:
        summary = row.split(None, 1)[1].strip()
        assert summary.endswith(".") and "…" not in summary and summary[0].isupper(), row


def test_normalize_help_lists_every_accepted_value():
    res = invoke("audit", "--help", columns=200)
    text = " ".join(res.output.replace("│", " ").split())
    assert " | ".join([*NORMALIZATIONS, "none", "MEAN,STD"]) in text
    assert {"imagenet", "clip", "inception"} <= set(NORMALIZATIONS)


# ---- the unknown world -----------------------------------------------------------------
def test_unknown_world_lists_the_worlds_one_names_and_explains_pairs():
    res = invoke("train", "--world", "moon")
    one_line(res, 2, "unknown world 'moon'")
    line = res.output.strip()
    chosen, _, from_data = line.partition("; read from --data: ")
    assert chosen.startswith("error: unknown world 'moon'; valid: spiral, banana, sinusoid, "
                             "nvp, coupling, reacher")
    assert not re.search(r"\b(pairs|recorded)\b", chosen), line
    assert from_data.startswith("pairs (a pairs file from `idaudit world`), recorded (a "
                                "recording of your own world)"), line


# ---- several targets: which value each row holds ----------------------------------------
def test_several_targets_say_which_value_each_row_holds(arrays, monkeypatch):
    monkeypatch.chdir(arrays)
    worst = invoke("audit", "a.npz", "b.npz", "--min-r2", "0.5", columns=120)
    assert worst.exit_code == 0, worst.output
    assert "median · gated: worst" in worst.output
    assert "the median of the 2 targets; a gated row, the worst target's value" in worst.output
    median = invoke("audit", "a.npz", "b.npz", "--min-r2", "0.5", "--reduce", "median",
                    columns=120)
    assert median.exit_code == 0, median.output
    assert "gated: worst" not in median.output and "worst target" not in median.output
    assert re.search(r"┃\s+median\s+┃", median.output), median.output
    assert "the median of the 2 targets" in median.output
    one = invoke("audit", "a.npz", "--min-r2", "0.5", columns=120)
    assert "median" not in one.output.split("┡")[0] and "value" in one.output.split("┡")[0]
