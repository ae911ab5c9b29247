"""``idaudit.doctor``: the structure of the checks and what this machine has."""

from __future__ import annotations

import importlib.util
import os
import re

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
    assert by_name["python"]["ok"]


def test_cuda_detail_is_this_machines(checks: list[dict]) -> None:
    import torch

    cuda = {c["name"]: c for c in checks}["cuda"]
    assert cuda["ok"] and cuda["fix"] is None  # optional: ok either way, nothing to fix
    available = torch.cuda.is_available()
    assert cuda["detail"].startswith("CUDA available: ") == available, cuda
    assert cuda["detail"].startswith("CUDA not available (") == (not available), cuda
    if available:
        assert f"{torch.cuda.device_count()} GPU(s)" in cuda["detail"]
        assert torch.cuda.get_device_name(0) in cuda["detail"]


def test_cuda_check_reports_each_state(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: f"GPU-{i}")
    assert doctor._check_cuda(torch)["detail"] == "CUDA available: 2 GPU(s) (GPU-0, GPU-1)"

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    off = doctor._check_cuda(torch)
    assert off["ok"] and off["detail"] == ("CUDA not available (torch built without CUDA); "
                                           "training runs on the CPU")
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    assert "torch built for CUDA 12.4, no GPU found" in doctor._check_cuda(torch)["detail"]

    def broken() -> bool:
        raise RuntimeError("CUDA driver initialization failed")

    monkeypatch.setattr(torch.cuda, "is_available", broken)
    bad = doctor._check_cuda(torch)
    assert bad["ok"] and bad["detail"].startswith("CUDA not usable (RuntimeError: CUDA driver")
    assert doctor._check_cuda(None)["detail"] == "CUDA not checked: torch is not importable"


@pytest.mark.skipif(importlib.util.find_spec("dm_control") is None, reason="dm_control missing")
def test_gl_backend_found(checks: list[dict], monkeypatch: pytest.MonkeyPatch) -> None:
    gl = {c["name"]: c for c in checks}["gl_backend"]
    assert gl["ok"], gl
    backend = re.match(r"MUJOCO_GL=(\w+) ", gl["detail"])
    assert backend is not None, gl
    env_gl = os.environ.get("MUJOCO_GL")
    assert backend.group(1) in ((env_gl,) if env_gl else doctor.GL_BACKENDS), gl
    assert doctor.probe_backend(backend.group(1))[0]  # the backend named renders


def test_gl_fallback_and_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    works = {"egl": (False, "no EGL"), "osmesa": (True, "image mean 80.0")}
    monkeypatch.setattr(doctor, "probe_backend", lambda b: works[b])
    gl = doctor._check_gl()
    assert gl["ok"] and gl["detail"].startswith("MUJOCO_GL=osmesa works")
    assert "egl fails: no EGL" in gl["detail"] and gl["fix"] == "export MUJOCO_GL=osmesa"

    works["osmesa"] = (False, "no OSMesa")
    gl = doctor._check_gl()
    assert not gl["ok"] and gl["fix"] == doctor.INSTALL_HINT

    monkeypatch.setenv("MUJOCO_GL", "egl")
    works["osmesa"] = (True, "image mean 80.0")
    gl = doctor._check_gl()
    assert not gl["ok"] and "MUJOCO_GL=egl is set and used" in gl["detail"]
    assert gl["fix"] == "unset MUJOCO_GL or export MUJOCO_GL=osmesa (which works)"


@pytest.mark.parametrize("name", ["torchvision", "timm", "transformers", "hydra", "lightning"])
def test_vision_stack_is_what_a_fresh_import_finds(checks: list[dict], name: str) -> None:
    """The vision checks agree with importing each package in a fresh process: installed and
    importable → its version; installed but broken (a torchvision built for another torch) →
    not ok, with the pair to install; not installed → ok, optional."""
    import subprocess
    import sys

    check = {c["name"]: c for c in checks}[name]
    extra = name if name in ("hydra", "lightning") else "vision"
    if importlib.util.find_spec(name) is None:
        assert check["ok"] and "not installed" in check["detail"]
        assert f'idaudit[{extra}]' in check["detail"]
        return
    proc = subprocess.run([sys.executable, "-c", f"import {name}; print({name}.__version__)"],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode == 0:
        assert check["ok"] and check["detail"] == f"{name} {proc.stdout.strip()}"
    else:
        assert not check["ok"] and "not importable" in check["detail"]
        assert ("torchvision==" if extra == "vision" else f"idaudit[{extra}]") in check["fix"]
