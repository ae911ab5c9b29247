"""docs/ci.md's workflow for the action, run the way GitHub runs it, from a fresh venv.

The job's own steps before the action are done as the workflow writes them: a fresh Python
(setup-python), torch installed into it, the project's training step writing
``ckpt/jepa.pth.tar`` with a ``target_encoder`` state dict, ``myproject.models:vit_small``
importable from the working directory. Then every step of action.yml runs with the example's
``with:`` inputs exactly (empty strings included) over action.yml's defaults, its ``${{ … }}``
expressions evaluated as GitHub does (``||`` takes the first non-empty), each step's
GITHUB_OUTPUT feeding the next and GITHUB_PATH prepended to PATH, the action's files a copy of
this checkout (as GitHub checks an action out). Two things differ from a runner, and say so:
torch comes from the package index this machine has (the workflow names PyTorch's CPU index,
which cannot be reached here; the wheel is the same CPU build), and the apt step is skipped
(this machine has the GL libraries; MUJOCO_GL=egl as the workflow sets).

The example's "vit_small" is a one-block ViT of width 32 (patch 16 on 224 px, mean-pooled
tokens): random weights fail the R² gate (exit 1), zero weights collapse (exit 3); a spiral
checkpoint that the fresh venv's idaudit trains passes the same inputs with ``args: ""``
(exit 0), the Reacher-specific args not applying to an idaudit checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.examples  # CI stage 2d (pyproject: not in the default run)

ROOT = Path(__file__).resolve().parents[1]
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")

MODELS = '''
import torch
from torch import nn


class TinyViT(nn.Module):
    """Patches of 16 px → width 32, one transformer block; returns the tokens."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, width, 16, 16)
        self.pos = nn.Parameter(0.02 * torch.randn(1, 196, width))
        self.block = nn.TransformerEncoderLayer(width, 4, 64, dropout=0.0, batch_first=True)

    def forward(self, x):
        tokens = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        return self.block(tokens)


def vit_small():
    return TinyViT()
'''


def documented() -> tuple[dict, list[dict], dict]:
    """docs/ci.md's workflow: the job's env, its steps, and the action's step."""
    yaml = pytest.importorskip("yaml", reason="PyYAML (the dev extra brings it) reads the YAML")
    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    section = text.split("## Using the GitHub action", 1)[1]
    workflow = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    job = next(iter(workflow["jobs"].values()))
    ours = [s for s in job["steps"] if "/idaudit@" in s.get("uses", "")]
    assert len(ours) == 1
    return job.get("env", {}), job["steps"], ours[0]


def action() -> dict:
    import yaml

    return yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))


def lookup(path: str, ctx: dict) -> str:
    node = ctx
    for part in path.split("."):
        node = node.get(part, "") if isinstance(node, dict) else ""
    return "" if node is None else str(node)


def evaluate(text: str, ctx: dict) -> str:
    """``${{ a || 'b' }}``, ``${{ inputs.x }}``, ``${{ steps.id.outputs.k }}``, ``${{ github.x }}``
    in ``text``, as GitHub evaluates them (the first non-empty term of ``||``)."""
    def one(match: re.Match) -> str:
        for term in (t.strip() for t in match.group(1).split("||")):
            value = term[1:-1] if term.startswith("'") else lookup(term, ctx)
            assert re.fullmatch(r"'[^']*'|[\w.-]+", term), f"expression not modelled: {term}"
            if value:
                return value
        return ""
    return EXPR.sub(one, text)


def condition(expr: str, ctx: dict) -> bool:
    """``A != ''``, ``A == 'true'`` and ``always()`` joined by ``&&`` (what action.yml's
    ``if:`` use; the steps after a failed one are not run here, so ``always()`` is true)."""
    result = True
    for part in (p.strip() for p in expr.split("&&")):
        if part == "always()":
            continue
        m = re.fullmatch(r"([\w.-]+) (==|!=) '([^']*)'", part)
        assert m, f"condition not modelled: {part}"
        value = lookup(m.group(1), ctx)
        result &= (value == m.group(3)) == (m.group(2) == "==")
    return result


def read_outputs(path: Path) -> dict:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def run_action(given: dict, job_env: dict, python: Path, work: Path, action_path: Path,
               cache: Path) -> tuple[int, dict, str, list[dict]]:
    """Every step of action.yml with the inputs ``given`` (over the defaults); returns the last
    step's exit code, the audit step's outputs, the job summary and what each step did."""
    doc = action()
    inputs = {k: str(v.get("default", "")) for k, v in doc["inputs"].items()}
    inputs.update({k: str(v) for k, v in given.items()})
    ctx: dict = {"inputs": inputs, "steps": {}, "github": {"action_path": str(action_path)}}
    tmp = work / ".runner"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    summary, gh_path = tmp / "summary.md", tmp / "path"
    summary.touch()
    gh_path.touch()
    done: list[dict] = []
    rc = 0
    for i, step in enumerate(doc["runs"]["steps"]):
        runs = condition(step["if"], ctx) if "if" in step else True
        done.append({"step": step.get("id") or step.get("uses"), "runs": runs})
        if not runs:
            continue
        if "uses" in step:
            if step["uses"].startswith("actions/setup-python"):  # the fresh venv is that Python
                ctx["steps"][step["id"]] = {"outputs": {"python-path": str(python)}}
            continue  # actions/cache: nothing to restore on a first run
        out = tmp / f"output-{i}"
        out.touch()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("GITHUB_", "IDAUDIT_", "RUNNER_", "PYTHON", "VIRTUAL_ENV",
                                    "PIP_"))}
        extra = [p for p in gh_path.read_text().splitlines() if p]
        env["PATH"] = os.pathsep.join([*reversed(extra), "/usr/bin", "/bin"])
        env.update({k: str(v) for k, v in job_env.items()})
        env.update(GITHUB_OUTPUT=str(out), GITHUB_STEP_SUMMARY=str(summary),
                   GITHUB_PATH=str(gh_path), GITHUB_ACTION_PATH=str(action_path),
                   GITHUB_ACTIONS="true", RUNNER_TEMP=str(tmp), RUNNER_OS="Linux",
                   IDAUDIT_CACHE=str(cache))
        env.update({k: evaluate(v, ctx) for k, v in step.get("env", {}).items()})
        res = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=work, env=env,
                             capture_output=True, text=True, timeout=900)
        rc = res.returncode
        ctx["steps"][step.get("id", f"step{i}")] = {"outputs": read_outputs(out)}
        done[-1].update(rc=rc, stderr=res.stderr[-2000:], stdout=res.stdout[-2000:])
        if rc != 0:
            break
    outputs = ctx["steps"].get("audit", {}).get("outputs", {})
    return rc, outputs, summary.read_text(), done


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The job up to the action: a fresh venv with torch, the project's files and checkpoint."""
    job_env, steps, ours = documented()
    base = tmp_path_factory.mktemp("workflow")
    venv, work = base / "venv", base / "checkout"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)],
                   check=True)
    python = venv / "bin" / "python"
    torch_line = next(line for s in steps for line in s.get("run", "").splitlines()
                      if "pip install torch" in line).split("--index-url")[0].split()
    assert torch_line[:3] == ["pip", "install", "torch==2.13.0"], torch_line
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    res = subprocess.run([str(python), "-m", *torch_line, "-q", "--disable-pip-version-check"],
                         env=env, capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        pytest.skip(f"torch could not be installed into a fresh venv here: {res.stderr[-300:]}")
    (work / "myproject").mkdir(parents=True)
    (work / "myproject" / "__init__.py").write_text("")
    (work / "myproject" / "models.py").write_text(MODELS)
    sys.path.insert(0, str(work))
    try:
        from myproject.models import vit_small
    finally:
        sys.path.remove(str(work))
        sys.modules.pop("myproject.models", None)
        sys.modules.pop("myproject", None)
    torch.manual_seed(0)
    net = vit_small()
    target = ours["with"]["targets"]
    (work / target).parent.mkdir(parents=True)
    torch.save({"target_encoder": net.state_dict(), "epoch": 3}, work / target)
    zero = {k: torch.zeros_like(v) for k, v in net.state_dict().items()}
    torch.save({"target_encoder": zero, "epoch": 3}, work / "ckpt" / "collapsed.pth.tar")
    # the action's files, checked out where GitHub would put them (tracked files only)
    action_path = base / "actions" / "idaudit"
    shutil.copytree(ROOT, action_path, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", "*.egg-info", "build", "dist", ".venv*", ".pytest_cache",
        ".ruff_cache", "runs", "demo-out"))
    return {"env": job_env, "with": ours["with"], "python": python, "work": work,
            "action_path": action_path, "cache": base / "cache"}


def test_the_documented_workflow_runs_through_the_action(job):
    given = job["with"]
    assert given["torch-spec"] == "" and "torch-index-url" not in given  # the case of issue 40
    assert given["python-version"] == "3.11"
    rc, outputs, summary, done = run_action(given, job["env"], job["python"], job["work"],
                                            job["action_path"], job["cache"])
    steps = {d["step"]: d for d in done}
    assert steps["prepare"]["rc"] == 0, steps["prepare"]
    assert steps["install"]["rc"] == 0, steps["install"]["stderr"]
    # the example's install left the project's torch alone and put idaudit beside it
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    probe = subprocess.run([str(job["python"]), "-c", "import torch, idaudit; "
                            "print(torch.__version__, idaudit.__file__)"],
                           capture_output=True, text=True, check=True, env=clean)
    assert probe.stdout.startswith("2.13.0") and str(job["python"].parents[1]) in probe.stdout
    # random weights: the R² gate fails — exit 1, the verdict, the summary and its annotation
    assert rc == 1, steps["audit"]
    assert outputs["verdict"] == "fail" and outputs["exit-code"] == "1"
    report = json.loads((job["work"] / "idaudit-report" / "audit.json").read_text())
    assert report["verdict"] == "fail" and report["world"]["name"] == "reacher"
    assert report["metrics"]["n_samples"] == 2000
    assert float(outputs["r2"]) == report["metrics"]["r2_h_to_z_heldout"] < 0.9
    assert summary.startswith("## idaudit · ❌ fail")
    assert "::error title=idaudit::gate failed: r2_h_to_z_heldout" in steps["audit"]["stdout"]

    # zero weights: the embedding collapses — exit 3, with a warning annotation
    rc, outputs, summary, done = run_action({**given, "targets": "ckpt/collapsed.pth.tar"},
                                            job["env"], job["python"], job["work"],
                                            job["action_path"], job["cache"])
    assert rc == 3, done[-1]
    assert outputs["verdict"] == "inconclusive"
    assert summary.startswith("## idaudit · ⚠️ inconclusive")
    assert "::warning title=idaudit::inconclusive (exit 3):" in done[-1]["stdout"]

    # a spiral checkpoint the fresh venv's idaudit trains passes the same inputs (args "")
    idaudit = job["python"].parent / "idaudit"
    res = subprocess.run([str(idaudit), "train", "--world", "spiral", "--rho", "0.95",
                          "--objective", "lejepa", "--lamb", "1e-3", "--steps", "300", "--seed",
                          "1337", "--n-eval", "2000", "--out", "ckpt/spiral.safetensors", "-q"],
                         cwd=job["work"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    rc, outputs, summary, done = run_action(
        {**given, "targets": "ckpt/spiral.safetensors", "args": ""}, job["env"], job["python"],
        job["work"], job["action_path"], job["cache"])
    assert rc == 0, done[-1]
    assert outputs["verdict"] == "pass" and float(outputs["r2"]) >= 0.9
    assert summary.startswith("## idaudit · ✅ pass")
    # the page: the action's own checkout installed the plot extra, so it is written and the
    # upload step runs (GitHub's own step, not run here; its link step then has no address)
    assert outputs["html"] == "idaudit-report/audit.html"
    assert (job["work"] / outputs["html"]).read_text().count('id="verdict">PASS<') == 1
    steps = {d["step"]: d for d in done}
    assert steps["page"]["runs"] and not steps["link"]["runs"]
