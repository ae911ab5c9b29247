"""House rules checked on the source: no import cycles, audit/plan/loaders free of train/,
no world-name branches outside worlds/ (scripts/check_imports.py), and a lint-clean tree."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_hygiene():
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_imports.py")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip().endswith("OK")


def test_api_surface():
    import idaudit
    from idaudit.errors import IdauditError

    assert issubclass(IdauditError, ValueError)
    import importlib

    home = {"audit": "auditing", "AuditReport": "auditing", "AuditRequest": "auditing",
            "run_audit": "auditing", "consistency": "agreement",
            "ConsistencyRequest": "agreement", "run_consistency": "agreement",
            "plan": "planning",
            "PlanReport": "planning", "run": "runs", "RunRecord": "runs", "World": "worlds.base",
            "WorldSpec": "worlds.spec", "build_world": "worlds", "make_spec": "worlds",
            "IdauditError": "errors", "__version__": "_version"}
    assert sorted(idaudit.__all__) == sorted(home)
    for name, module in home.items():  # each public name is the real object where it is defined
        real = getattr(importlib.import_module(f"idaudit.{module}"), name)
        assert getattr(idaudit, name) is real, name
    import typing

    from idaudit.auditing import AuditReport

    hints = typing.get_type_hints(AuditReport)
    assert typing.get_args(hints["verdict"]) == ("pass", "fail", "inconclusive", "ungated")


@pytest.mark.skipif(shutil.which("ruff") is None and not (ROOT / ".venv/bin/ruff").exists(),
                    reason="ruff not installed")
def test_ruff_is_clean():
    ruff = shutil.which("ruff") or str(ROOT / ".venv/bin/ruff")
    res = subprocess.run([ruff, "check", str(ROOT)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout


@pytest.mark.parametrize("env,expected", [
    ({}, ("2000", None)),
    ({"OMP_WAIT_POLICY": "ACTIVE"}, (None, "ACTIVE")),
    ({"GOMP_SPINCOUNT": "7"}, ("7", None)),
])
def test_openmp_waits_briefly_unless_the_user_says_otherwise(env, expected):
    import os

    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    code = ("import os, idaudit; print(os.environ.get('GOMP_SPINCOUNT'), "
            "os.environ.get('OMP_WAIT_POLICY'))")
    out = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True,
                         text=True, check=True).stdout.split()
    assert tuple(None if v == "None" else v for v in out) == expected
