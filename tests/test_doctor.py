"""``idaudit.doctor``: the structure of the checks and what this machine has."""

from __future__ import annotations

import importlib.util

import pytest

from idaudit import doctor


@pytest.fixture(scope="module")
def checks() -> list[dict]:
    return doctor.run_checks()


def test_structure(checks: list[dict]) -> None:
    assert checks
    names = [c["name"] for c in checks]
    assert len(names) == len(set(names))
    for name in ("python", "torch", "cuda", "numba", "scikit-learn", "scipy", "safetensors",
                 "mujoco", "dm_control", "gl_backend"):
        assert name in names
    for c in checks:
        assert set(c) == {"name", "ok", "detail", "fix"}
        assert isinstance(c["name"], str) and isinstance(c["ok"], bool)
        assert isinstance(c["detail"], str) and c["detail"]
        assert c["fix"] is None or isinstance(c["fix"], str)
        if not c["ok"]:
            assert c["fix"]


def test_torch_ok(checks: list[dict]) -> None:
    by_name = {c["name"]: c for c in checks}
    assert by_name["torch"]["ok"]
    assert by_name["torch"]["detail"].startswith("torch ")
    assert by_name["cuda"]["ok"]
    assert "CUDA" in by_name["cuda"]["detail"]
    assert by_name["python"]["ok"]


@pytest.mark.skipif(importlib.util.find_spec("dm_control") is None, reason="dm_control missing")
def test_gl_backend_found(checks: list[dict], monkeypatch: pytest.MonkeyPatch) -> None:
    gl = {c["name"]: c for c in checks}["gl_backend"]
    assert gl["ok"], gl
    backend = doctor.chosen_backend()
    assert backend is not None
    assert f"MUJOCO_GL={backend}" in gl["detail"]


def test_gl_fallback_and_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    works = {"egl": (False, "no EGL"), "osmesa": (True, "image mean 80.0")}
    monkeypatch.setattr(doctor, "probe_backend", lambda b: works[b])
    gl = doctor._check_gl()
    assert gl["ok"] and gl["detail"].startswith("MUJOCO_GL=osmesa works")
    assert "egl fails: no EGL" in gl["detail"] and gl["fix"] == "export MUJOCO_GL=osmesa"
    assert doctor.chosen_backend() == "osmesa"

    works["osmesa"] = (False, "no OSMesa")
    gl = doctor._check_gl()
    assert not gl["ok"] and gl["fix"] == doctor.INSTALL_HINT
    assert doctor.chosen_backend() is None

    monkeypatch.setenv("MUJOCO_GL", "egl")
    works["osmesa"] = (True, "image mean 80.0")
    gl = doctor._check_gl()
    assert not gl["ok"] and "MUJOCO_GL=egl is set and used" in gl["detail"]
    assert gl["fix"] == "unset MUJOCO_GL or export MUJOCO_GL=osmesa (which works)"
    assert doctor.chosen_backend() is None
