"""A plugin package adds a world, an objective, a metric group and a file format with no edit
inside idaudit: the test builds tests/plugin_example into a wheel (a real distribution with
entry points), installs it into a directory of its own with pip, and runs idaudit with that
directory on its path — --help, `idaudit metrics`, `idaudit doctor`, the conformance suite, a
training run and audits all see the four entries."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

EXAMPLE = Path(__file__).parent / "plugin_example"
DIST, VERSION = "idaudit-plugin-example", "0.1.0"
ENTRY_POINTS = {"idaudit.worlds": "shear = idaudit_plugin_example.world:SHEAR",
                "idaudit.objectives": "hinge = idaudit_plugin_example.objective:HINGE",
                "idaudit.metrics": "maxcorr = idaudit_plugin_example.metric:MAXCORR",
                "idaudit.formats": "rows = idaudit_plugin_example.rows:ROWS"}


def build_wheel(out: Path) -> Path:
    """The example package as a wheel: its modules, METADATA, WHEEL, entry_points.txt and a
    RECORD of their hashes (what a build backend writes; pip installs it as it is)."""
    info = f"{DIST.replace('-', '_')}-{VERSION}.dist-info"
    files = {str(p.relative_to(EXAMPLE)): p.read_bytes()
             for p in sorted((EXAMPLE / "idaudit_plugin_example").glob("*.py"))}
    files[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {DIST}\nVersion: {VERSION}\n"
                                 "Requires-Dist: idaudit\n").encode()
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: idaudit-tests\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    files[f"{info}/entry_points.txt"] = "".join(
        f"[{group}]\n{line}\n\n" for group, line in ENTRY_POINTS.items()).encode()
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    wheel = out / f"{DIST.replace('-', '_')}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return wheel


@pytest.fixture(scope="module")
def plugged(tmp_path_factory):
    """The environment of a process that has the plugin installed (PYTHONPATH: pip's target
    directory), and a directory to work in."""
    root = tmp_path_factory.mktemp("plugin")
    target = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-index", "--disable-pip-version-check", "--target", str(target),
                    str(build_wheel(root))], check=True)
    env = {**os.environ, "PYTHONPATH": str(target), "MUJOCO_GL": "egl", "COLUMNS": "200"}
    return env, root


def idaudit(plugged, *args: str, code: int = 0) -> str:
    env, root = plugged
    proc = subprocess.run([sys.executable, "-m", "idaudit", *args], env=env, cwd=root,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == code, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def test_the_plugin_is_a_real_distribution_with_entry_points(plugged):
    env, _ = plugged
    code = ("from importlib import metadata; d = metadata.distribution('idaudit-plugin-example'); "
            "print(sorted(e.group + ':' + e.name for e in d.entry_points))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == str(sorted(f"{g}:{line.split(' = ')[0]}"
                                     for g, line in ENTRY_POINTS.items()))


def flat(text: str) -> str:
    """--help's text with rich's box and line breaks gone: words one space apart."""
    return " ".join(text.replace("│", " ").split())


def test_help_lists_the_plugins_entries(plugged):
    assert "shear (from idaudit-plugin-example)" in flat(idaudit(plugged, "world", "--help"))
    assert "hinge (from idaudit-plugin-example)" in flat(idaudit(plugged, "train", "--help"))
    assert "a rows file (from idaudit-plugin-example)" in \
        flat(idaudit(plugged, "audit", "--help"))


def test_idaudit_metrics_lists_the_plugins_metric(plugged):
    _, root = plugged
    idaudit(plugged, "metrics", "--json", str(root / "metrics.json"))
    entries = json.loads((root / "metrics.json").read_text())
    mine = [e for e in entries if e["key"] == "mean_max_abs_corr"]
    assert len(mine) == 1 and mine[0]["direction"] == "higher"
    assert "mean_max_abs_corr" in idaudit(plugged, "metrics")


def test_doctor_loads_each_plugin(plugged):
    env, root = plugged  # doctor's exit says whether all else is installed: not asserted
    proc = subprocess.run([sys.executable, "-m", "idaudit", "doctor"], env=env, cwd=root,
                          capture_output=True, text=True, timeout=600)
    rows = [line for line in proc.stdout.splitlines() if "idaudit-plugin-example" in line]
    assert len(rows) == 4 and all(" ok " in row for row in rows), proc.stdout
    for kind, name in (("world", "shear"), ("objective", "hinge"), ("group", "maxcorr"),
                       ("format", "rows")):
        assert any(f"{kind} {name}" in row for row in rows), rows
    assert "reading a file: text parsed as numbers" in " ".join(proc.stdout.split()), \
        proc.stdout  # a format's trust row


def test_the_conformance_suite_checks_the_plugins_entries(plugged):
    env, root = plugged
    (root / "test_conformance_of_plugin.py").write_text(
        "from idaudit.testing import parametrize_with_checks\n\n\n"
        "@parametrize_with_checks()\n"
        "def test_entry(check):\n"
        "    check()\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-n", "0", "-k", "shear or hinge or maxcorr or rows",
                           "test_conformance_of_plugin.py"], env=env, cwd=root,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "4 passed" in proc.stdout, proc.stdout[-1000:]


def test_train_on_the_plugin_world_with_its_objective_then_audit(plugged):
    _, root = plugged
    idaudit(plugged, "train", "--world", "shear", "--objective", "hinge", "--steps", "300",
            "--out", str(root / "shear.safetensors"))
    idaudit(plugged, "audit", str(root / "shear.safetensors"), "--json",
            str(root / "shear.json"))
    report = json.loads((root / "shear.json").read_text())
    metrics = report["metrics"]
    assert 0.0 <= metrics["mean_max_abs_corr"] <= 1.0
    assert metrics["r2_h_to_z_heldout"] > 0.5  # a trained encoder, not a random one


def test_audit_a_file_of_the_plugin_format(plugged):
    env, root = plugged
    path = root / "embeddings.rows"
    subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                    "from idaudit_plugin_example.rows import example; example(Path(sys.argv[1]))",
                    str(path)], env=env, check=True)
    idaudit(plugged, "audit", str(path), "--json", str(root / "rows.json"))
    metrics = json.loads((root / "rows.json").read_text())["metrics"]
    table = np.loadtxt(path, skiprows=1)
    corr = np.corrcoef(table.T)[:2, 2:]
    assert metrics["mean_max_abs_corr"] == pytest.approx(np.abs(corr).max(1).mean(), abs=1e-9)
    cut = root / "cut.rows"
    cut.write_text(path.read_text()[:40])
    env, _ = plugged
    proc = subprocess.run([sys.executable, "-m", "idaudit", "audit", str(cut)], env=env,
                          cwd=root, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
