"""The base install (no extras) works: scripts/check_base_install.py with the extras' packages
made unimportable, on this tree and on a copy that imports an extra's package (it must fail)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check_base_install.py"


def _script():
    spec = importlib.util.spec_from_file_location("check_base_install", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(src: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run([sys.executable, str(SCRIPT), "--block-extras"], capture_output=True,
                          text=True, env=env, timeout=300)


def test_extras_only_modules_are_the_extras():
    blocked = _script().extras_only_modules()
    for base in ("numpy", "torch", "typer", "rich", "safetensors", "scipy", "sklearn", "numba"):
        assert base not in blocked, base
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib (the dev extra) is not installed")
    assert {"matplotlib", "pytest"} <= blocked


def test_this_tree_works_without_the_extras():
    res = _run(ROOT / "src")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "base install: OK" in res.stdout
    assert "imported" in res.stdout and "idaudit train --world …: exit 0" in res.stdout


def test_an_import_only_an_extra_satisfies_is_caught(tmp_path):
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib (the dev extra) is not installed")
    shutil.copytree(ROOT / "src" / "idaudit", tmp_path / "idaudit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    cli = tmp_path / "idaudit" / "cli" / "application.py"
    text = cli.read_text().replace("import typer\n", "import matplotlib  # an extra's\nimport typer\n", 1)
    assert "import matplotlib" in text
    cli.write_text(text)
    res = _run(tmp_path)
    assert res.returncode == 1
    assert "import idaudit.cli: ModuleNotFoundError: No module named 'matplotlib'" in res.stdout
    assert "base install: " in res.stdout and "problem(s)" in res.stdout
