"""An audit of arrays imports no torch (issue 59, item 0): ``idaudit audit FILE`` on an .npz or
a safetensors file of arrays, and ``idaudit.audit(FILE)``, read them with NumPy only — torch's
import alone costs about 2 s of a whole-process audit. A bfloat16 file, which NumPy cannot
read, still goes through torch, with the same numbers as its float32 copy."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

RUN_CLI = """
import json, runpy, sys
sys.argv = ["idaudit", "audit", {path!r}, "--json", "out.json"]
try:
    runpy.run_module("idaudit", run_name="__main__")
except SystemExit as done:
    code = done.code
print(json.dumps({{"exit": code, "torch": "torch" in sys.modules}}))
"""
RUN_API = """
import json, sys, idaudit
report = idaudit.audit({path!r})
print(json.dumps({{"r2": report.metrics["r2_h_to_z_heldout"], "torch": "torch" in sys.modules}}))
"""


def _arrays(tmp_path):
    rng = np.random.default_rng(0)
    z = rng.standard_normal((1500, 3))
    q = np.linalg.qr(rng.standard_normal((3, 3)))[0]
    h = (z @ q + 0.1 * rng.standard_normal(z.shape)).astype(np.float32)
    return z.astype(np.float32), h


def _run(code: str, cwd) -> dict:
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("form", ["npz", "safetensors"])
def test_an_array_audit_imports_no_torch(form, tmp_path):
    z, h = _arrays(tmp_path)
    path = tmp_path / f"e.{form}"
    if form == "npz":
        np.savez(path, z=z, h=h)
    else:
        from safetensors.numpy import save_file

        save_file({"z": z, "h": h}, str(path))
    cli = _run(RUN_CLI.format(path=str(path)), tmp_path)
    assert cli == {"exit": 0, "torch": False}
    r2 = json.loads((tmp_path / "out.json").read_text())["metrics"]["r2_h_to_z_heldout"]
    assert 0.98 < r2 < 1.0
    api = _run(RUN_API.format(path=str(path)), tmp_path)
    assert api["torch"] is False and api["r2"] == r2


def test_bfloat16_arrays_go_through_torch_with_the_same_numbers(tmp_path):
    import torch
    from safetensors.torch import save_file

    z, h = _arrays(tmp_path)
    h16 = torch.from_numpy(h).to(torch.bfloat16)
    save_file({"z": torch.from_numpy(z), "h": h16}, str(tmp_path / "bf.safetensors"))
    save_file({"z": torch.from_numpy(z), "h": h16.float()}, str(tmp_path / "f32.safetensors"))
    bf = _run(RUN_API.format(path=str(tmp_path / "bf.safetensors")), tmp_path)
    f32 = _run(RUN_API.format(path=str(tmp_path / "f32.safetensors")), tmp_path)
    assert bf["torch"] is True and f32["torch"] is False
    assert bf["r2"] == f32["r2"]
