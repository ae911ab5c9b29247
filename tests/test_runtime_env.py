"""``--runtime-env FILE``: a Ray runtime environment read from JSON or YAML and checked as Ray
checks one, each kind of bad file one line naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import idaudit

pytest.importorskip("ray")

from idaudit.core.errors import IdauditError  # noqa: E402
from idaudit.experiments.runtime_env import read_runtime_env  # noqa: E402

ENV = {"py_modules": [str(Path(idaudit.__file__).parent)], "env_vars": {"MUJOCO_GL": "egl"}}


def test_json_and_yaml_give_the_same_mapping(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps(ENV))
    src = ENV["py_modules"][0]
    (tmp_path / "b.yaml").write_text(f"py_modules:\n  - {src}\nenv_vars:\n  MUJOCO_GL: egl\n")
    (tmp_path / "c.YML").write_text(f"{{py_modules: [{src}], env_vars: {{MUJOCO_GL: egl}}}}\n")
    assert read_runtime_env(tmp_path / "a.json") == ENV
    assert read_runtime_env(tmp_path / "b.yaml") == ENV
    assert read_runtime_env(tmp_path / "c.YML") == ENV


@pytest.mark.parametrize(("name", "text", "says"), [
    ("e.toml", "x = 1", "a runtime environment is a .json, .yaml or .yml file"),
    ("e.json", "{", "not JSON"),
    ("e.yaml", "a: [", "not YAML: expected the node content, but found '<stream end>' at line 1"),
    ("e.json", '{"py_modules": ["/nonexistent/x"]}', "/nonexistent/x is not a valid path"),
    ("e.json", "[1, 2]", "a mapping of Ray's keys, got list"),
    ("e.json", '{"pips": ["numpy"]}', "unknown key(s) pips; Ray knows"),
    ("e.json", '{"env_vars": {"A": 1}}', "must be of type Dict[str, str]"),
])
def test_a_bad_file_is_one_line_naming_it(tmp_path, name, text, says):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(IdauditError) as err:
        read_runtime_env(path)
    msg = str(err.value)
    # (a library caller reads the option's name, runtime_env; the command line its flag)
    assert msg.startswith((f"--runtime-env {path}: ", f"runtime_env {path}: ")), msg
    assert says in msg, msg
    assert "\n" not in msg and err.value.exit_code == 2


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(IdauditError, match=r"cannot read it \(No such file or directory\)"):
        read_runtime_env(tmp_path / "gone.yaml")


def test_the_sweep_refuses_it_without_ray_and_reads_it_before_any_run(tmp_path):
    """--runtime-env under the local pool is refused; under Ray a bad file is refused before
    Ray is reached or anything is written (exit 2, one line each)."""
    import subprocess
    import sys

    bad = tmp_path / "env.json"
    bad.write_text('{"pips": []}')
    base = [sys.executable, "-m", "idaudit", "sweep", "2d", "--runtime-env", str(bad)]
    local = subprocess.run([*base, "--out", str(tmp_path / "a")], capture_output=True,
                           text=True, timeout=120)
    ray_ = subprocess.run([*base, "--out", str(tmp_path / "b"), "--executor", "ray",
                           "--address", "127.0.0.1:1"], capture_output=True, text=True,
                          timeout=120)
    assert local.returncode == 2 and local.stderr.strip() == (
        "error: --runtime-env applies to --executor ray only"), local.stderr
    assert ray_.returncode == 2 and ray_.stderr.strip() == (
        f"error: --runtime-env {bad}: unknown key(s) pips; Ray knows " + ray_.stderr.split(
            "Ray knows ", 1)[1].strip()), ray_.stderr
    assert "py_modules" in ray_.stderr and len(ray_.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
