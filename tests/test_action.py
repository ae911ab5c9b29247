"""The GitHub action: action.yml wires every input to scripts/idaudit_action.sh, and the script,
run as the action runs it (bash, inputs in the environment, GITHUB_STEP_SUMMARY and GITHUB_OUTPUT
files), exits with the audit's own code and writes the job summary, the step outputs and the
JUnit file."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from conftest import run

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "idaudit_action.sh"
RUN_LINE = re.compile(r'^bash "\$GITHUB_ACTION_PATH/(scripts/[\w.]+)" (\w[\w-]*)$')


def action() -> dict:
    yaml = pytest.importorskip("yaml", reason="PyYAML (pulled in by the dev extra's hydra-core, "
                                              "transformers) reads action.yml")
    return yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))


def script_modes() -> set[str]:
    """The modes the script's closing ``case`` accepts."""
    tail = SCRIPT.read_text(encoding="utf-8").split('case ${1:-audit} in', 1)[1]
    return set(re.findall(r"^  (\w[\w-]*)\)", tail, re.M))


# ---- action.yml -----------------------------------------------------------------------------


def test_action_yml_is_a_composite_action_running_the_script():
    doc = action()
    assert doc["runs"]["using"] == "composite"
    steps = doc["runs"]["steps"]
    runs = [s for s in steps if "run" in s]
    assert [RUN_LINE.match(s["run"]).group(2) for s in runs] == ["cache-key", "install", "audit",
                                                                 "link"]
    for s in runs:
        path, mode = RUN_LINE.match(s["run"]).groups()
        assert (ROOT / path).is_file() and (ROOT / path) == SCRIPT
        assert mode in script_modes(), mode
        assert s["shell"] == "bash"
    assert script_modes() == {"audit", "install", "cache-key", "link"}
    # the page is uploaded whatever the verdict, then linked from the summary
    page = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert page["if"] == "always() && steps.audit.outputs.html != ''"
    assert page["with"]["path"] == "${{ steps.audit.outputs.html }}"
    link = steps[steps.index(page) + 1]
    assert link["if"] == "always() && steps.page.outputs.artifact-url != ''"
    assert link["env"]["IDAUDIT_PAGE_URL"] == "${{ steps.page.outputs.artifact-url }}"
    # every ${{ steps.ID... }} names a step that exists and comes earlier (or is an output's)
    ids = [s.get("id") for s in steps]
    for i, s in enumerate(steps):
        for ref in re.findall(r"steps\.([\w-]+)\.", json.dumps(s)):
            assert ref in ids[:i], (ref, s)
    for out in doc["outputs"].values():
        assert re.fullmatch(r"\$\{\{ steps\.audit\.outputs\.[\w-]+ \}\}", out["value"]), out


def test_every_input_is_used_and_every_variable_reaches_the_script():
    doc = action()
    steps_text = json.dumps(doc["runs"]["steps"])
    used = set(re.findall(r"inputs\.([\w-]+)", steps_text))
    assert used == set(doc["inputs"]), (set(doc["inputs"]) - used, used - set(doc["inputs"]))
    assert [k for k, v in doc["inputs"].items() if v.get("required")] == ["targets"]
    # the variables the steps pass are exactly those the script reads
    passed = {k for s in doc["runs"]["steps"] for k in s.get("env", {})}
    text = SCRIPT.read_text(encoding="utf-8")
    read = set(re.findall(r"\$\{(IDAUDIT_[A-Z0-9_]+)", text))
    assert passed == read, (passed - read, read - passed)
    # no input is pasted into a shell line: they travel in env only
    for s in doc["runs"]["steps"]:
        assert "${{" not in s.get("run", ""), s["run"]


def test_the_documented_workflow_uses_the_action_as_declared():
    """docs/ci.md's workflow: its `with:` keys are inputs of action.yml, its args real
    `idaudit audit` flags, and its report steps read where the action writes."""
    import shlex

    import typer

    from idaudit.cli import app

    doc = action()  # skips without PyYAML
    inputs = doc["inputs"]
    import yaml

    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    section = text.split("## Using the GitHub action", 1)[1]
    workflow = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    steps = [s for job in workflow["jobs"].values() for s in job["steps"]]
    ours = [s for s in steps if "/idaudit@" in s.get("uses", "")]
    assert len(ours) == 1
    given = ours[0]["with"]
    assert set(given) <= set(inputs) and "targets" in given, set(given) - set(inputs)
    audit_cmd = typer.main.get_command(app).commands["audit"]
    flags = {opt for p in audit_cmd.params for opt in p.opts}
    words = shlex.split(given["args"])
    assert {w for w in words if w.startswith("-")} <= flags
    out = inputs["output-dir"]["default"]
    by_use = {s["uses"].split("@")[0]: s for s in steps if "uses" in s}
    assert by_use["mikepenz/action-junit-report"]["with"]["report_paths"] == f"{out}/audit.xml"
    assert by_use["actions/upload-artifact"]["with"]["path"] == f"{out}/"
    assert all(s.get("if") == "always()" for s in steps[steps.index(ours[0]) + 1:])
    outputs_paragraph = section.split("**Outputs.**", 1)[1].split("\n\n", 1)[0]
    assert set(doc["outputs"]) <= set(re.findall(r"`([a-z0-9-]+)`", outputs_paragraph))


# ---- the script, run as the action runs it ------------------------------------------------


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """A spiral encoder trained 300 steps (held-out R² ≈ 0.94), in a directory with a space."""
    path = tmp_path_factory.mktemp("action") / "my runs" / "enc 1.safetensors"
    path.parent.mkdir()
    res = run("train", "--world", "spiral", "--rho", "0.95", "--objective", "lejepa", "--lamb",
              "1e-3", "--steps", "300", "--seed", "1337", "--n-eval", "2000", "--out", path,
              "--quiet")
    assert res.exit_code == 0, res.output
    return path


def action_env(tmp_path, **inputs) -> dict:
    """The environment of the action's audit step: idaudit on PATH (this venv's), this checkout's
    source first, the summary and output files in ``tmp_path``, no other GITHUB_ variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GITHUB_", "IDAUDIT_", "RUNNER_"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = str(ROOT / "src")
    env["IDAUDIT_PYTHON"] = sys.executable
    env["GITHUB_STEP_SUMMARY"] = str(tmp_path / "step summary.md")
    env["GITHUB_OUTPUT"] = str(tmp_path / "step output.txt")
    for path in (env["GITHUB_STEP_SUMMARY"], env["GITHUB_OUTPUT"]):
        Path(path).write_text("", encoding="utf-8")
    env.update({k: str(v) for k, v in inputs.items()})
    return env


def run_script(env: dict, cwd: Path, *mode: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *mode], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def step_outputs(env: dict) -> dict:
    lines = Path(env["GITHUB_OUTPUT"]).read_text(encoding="utf-8").splitlines()
    return dict(line.split("=", 1) for line in lines)


def summary(env: dict) -> str:
    return Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8")


def junit(path: Path) -> ET.Element:
    suite = ET.parse(path).getroot()
    assert suite.tag == "testsuite"
    return suite


def test_a_passing_gate_exits_0_with_the_report_in_the_summary(ckpt, tmp_path):
    env = action_env(tmp_path, IDAUDIT_TARGETS=f"  {ckpt}  \n\n", IDAUDIT_MIN_R2="0.9",
                     IDAUDIT_ARGS="--max 'orthogonality_error=5'",
                     IDAUDIT_OUTPUT_DIR="audit reports")
    res = run_script(env, tmp_path)
    assert res.returncode == 0, res.stderr
    out = tmp_path / "audit reports"
    report = json.loads((out / "audit.json").read_text(encoding="utf-8"))
    r2 = report["metrics"]["r2_h_to_z_heldout"]
    assert report["verdict"] == "pass" and report["source"] == str(ckpt)
    assert 0.9 < r2 < 0.999
    text = summary(env)
    assert text.startswith("## idaudit · ✅ pass\n")
    assert f"| `r2_h_to_z_heldout` | {r2:.6f} | ≥ 0.9 | pass |" in text
    assert f"| `orthogonality_error` | {report['metrics']['orthogonality_error']:.6f} | ≤ 5 | pass |" \
        in text
    assert f"idaudit audit `{ckpt}` · exit 0" in text
    assert (out / "audit.md").read_text(encoding="utf-8") in text
    outputs = step_outputs(env)
    assert outputs == {"verdict": "pass", "r2": outputs["r2"], "exit-code": "0",
                       "json": "audit reports/audit.json", "junit": "audit reports/audit.xml",
                       "markdown": "audit reports/audit.md", "html": "audit reports/audit.html"}
    assert float(outputs["r2"]) == r2  # the JSON's number, every digit
    assert set(outputs) == set(action()["outputs"])
    suite = junit(out / "audit.xml")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "0", "0")
    assert sorted(c.get("name") for c in suite) == ["orthogonality_error ≤ 5",
                                                   "r2_h_to_z_heldout ≥ 0.9"]


def test_a_failing_gate_exits_1_and_the_junit_file_reports_it(ckpt, tmp_path):
    env = action_env(tmp_path, IDAUDIT_TARGETS=ckpt, IDAUDIT_MIN_R2="0.999",
                     GITHUB_ACTIONS="true")
    res = run_script(env, tmp_path)
    assert res.returncode == 1, res.stderr
    out = tmp_path / "idaudit-report"  # the default output-dir
    r2 = json.loads((out / "audit.json").read_text(encoding="utf-8"))["metrics"]["r2_h_to_z_heldout"]
    text = summary(env)
    assert text.startswith("## idaudit · ❌ fail\n")
    assert f"| `r2_h_to_z_heldout` | {r2:.6f} | ≥ 0.999 | **FAIL** |" in text
    outputs = step_outputs(env)
    assert (outputs["verdict"], outputs["exit-code"], float(outputs["r2"])) == ("fail", "1", r2)
    suite = junit(out / "audit.xml")
    assert (suite.get("tests"), suite.get("failures")) == ("1", "1")
    failure = suite.find("testcase/failure")
    assert failure is not None and failure.get("message") == (f"r2_h_to_z_heldout = {r2:.6f}, "
                                                              "required ≥ 0.999")
    # inside GitHub the failure is also an annotation naming the gate
    assert "::error title=idaudit::gate failed: r2_h_to_z_heldout" in res.stdout


def test_the_page_is_written_and_its_link_goes_to_the_summary(tmp_path):
    """audit.html holds the JSON's numbers (a failed gate's page too); html=false writes none;
    the link mode puts the artifact's address in the summary, and refuses anything but an
    https:// address."""
    pytest.importorskip("matplotlib")
    from test_audit_page import arrays, assert_page_numbers_are_the_jsons, parse_page

    z, h, _, _ = arrays(noise=0.3)
    np.savez(tmp_path / "a.npz", z=z, h=h)
    env = action_env(tmp_path, IDAUDIT_TARGETS="a.npz", IDAUDIT_MIN_R2="0.99")
    res = run_script(env, tmp_path)
    assert res.returncode == 1, res.stderr
    out = tmp_path / "idaudit-report"
    page = parse_page((out / "audit.html").read_text(encoding="utf-8"))
    assert page.verdict == "FAIL" and len(page.images) == 2  # predictions, embeddings
    assert_page_numbers_are_the_jsons(page, json.loads((out / "audit.json").read_text()))
    assert step_outputs(env)["html"] == "idaudit-report/audit.html"
    env = action_env(tmp_path, IDAUDIT_TARGETS="a.npz", IDAUDIT_MIN_R2="0.5",
                     IDAUDIT_HTML="false")
    assert run_script(env, tmp_path).returncode == 0
    assert not (out / "audit.html").exists() and "html" not in step_outputs(env)
    url = "https://github.com/o/r/actions/runs/1/artifacts/2"
    env = action_env(tmp_path, IDAUDIT_PAGE_URL=url, IDAUDIT_ARTIFACT_NAME="seed-0 page")
    assert run_script(env, tmp_path, "link").returncode == 0
    assert summary(env) == (f"📄 [The audit's page]({url}): the verdict, gates, figures and "
                            "every metric with its meaning (artifact `seed-0 page`, a zip "
                            "holding audit.html)\n\n")
    env = action_env(tmp_path, IDAUDIT_PAGE_URL="javascript:alert(1)")
    one_line_error(run_script(env, tmp_path, "link"), "must be the artifact's https:// address")


def test_an_inconclusive_audit_keeps_its_exit_3(tmp_path):
    rng = np.random.default_rng(5)
    np.savez(tmp_path / "collapsed.npz", z=rng.standard_normal((400, 2)), h=np.zeros((400, 2)))
    env = action_env(tmp_path, IDAUDIT_TARGETS="collapsed.npz", IDAUDIT_MIN_R2="0.5")
    res = run_script(env, tmp_path)
    assert res.returncode == 3, res.stderr
    assert summary(env).startswith("## idaudit · ⚠️ inconclusive\n\n> the embedding collapsed")
    assert step_outputs(env)["verdict"] == "inconclusive"
    assert "warning: inconclusive (exit 3): the embedding collapsed" in res.stderr
    # inside GitHub it is a warning annotation with the reason
    env = action_env(tmp_path, IDAUDIT_TARGETS="collapsed.npz", IDAUDIT_MIN_R2="0.5",
                     GITHUB_ACTIONS="true")
    res = run_script(env, tmp_path)
    assert res.returncode == 3
    assert "::warning title=idaudit::inconclusive (exit 3): the embedding collapsed" in res.stdout


def test_several_targets_label_the_worst_and_the_medians(tmp_path):
    """With two runs the summary's value column says it holds medians, and the gated row
    that it holds the worst run's value (or the median under --reduce median)."""
    rng = np.random.default_rng(8)
    z = rng.standard_normal((600, 2))
    np.savez(tmp_path / "a.npz", z=z, h=z + 0.1 * rng.standard_normal((600, 2)))
    np.savez(tmp_path / "b.npz", z=z, h=z + 0.6 * rng.standard_normal((600, 2)))
    for reduce in ("worst", "median"):
        env = action_env(tmp_path, IDAUDIT_TARGETS="a.npz\nb.npz", IDAUDIT_MIN_R2="0.5",
                         IDAUDIT_ARGS=f"--reduce {reduce} --floor-draws 0")
        res = run_script(env, tmp_path)
        assert res.returncode == 0, res.stderr
        report = json.loads((tmp_path / "idaudit-report" / "audit.json").read_text())
        runs = [r["metrics"]["r2_h_to_z_heldout"] for r in report["runs"]]
        gated = min(runs) if reduce == "worst" else float(np.median(runs))
        assert report["metrics"]["r2_h_to_z_heldout"] == pytest.approx(gated, abs=1e-12)
        text = summary(env)
        assert "| metric | value (median of 2) | gate | result |" in text
        assert f"| `r2_h_to_z_heldout` | {gated:.6f} ({reduce} of 2) | ≥ 0.5 | pass |" in text
        mcc = float(np.median([r["metrics"]["mcc"] for r in report["runs"]]))
        assert f"| `mcc` | {mcc:.6f} |  |  |" in text


def test_a_cache_turned_off_is_a_note_not_a_failure(tmp_path):
    """PIP_NO_CACHE_DIR makes `pip cache dir` fail: the step goes on with no cache directory
    (the cache step is then skipped), instead of exit 2 saying pip is missing."""
    env = action_env(tmp_path, PIP_NO_CACHE_DIR="1")
    res = run_script(env, tmp_path, "cache-key")
    assert res.returncode == 0, res.stderr
    assert "pip's download cache is off here" in res.stderr
    outputs = step_outputs(env)
    assert outputs["pip-cache-dir"] == "" and outputs["key"].startswith("idaudit-pip-")
    assert outputs["python"] == shutil.which(sys.executable)
    assert "steps.prepare.outputs.pip-cache-dir != ''" in \
        next(s["if"] for s in action()["runs"]["steps"] if s.get("uses", "").startswith(
            "actions/cache"))
    # a Python with no pip at all is still one line
    env = action_env(tmp_path, IDAUDIT_PYTHON=str(tmp_path / "nopip" / "bin" / "python"))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "nopip")],
                   check=True)
    one_line_error(run_script(env, tmp_path, "cache-key"), "no pip for")


SYSTEM_PYTHON = Path("/usr/bin/python3")


def _externally_managed(python: Path) -> bool:
    code = ("import os, sys, sysconfig; sys.exit(0 if os.path.exists(os.path.join("
            "sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')) and sys.prefix == "
            "sys.base_prefix else 1)")
    return python.exists() and subprocess.run([str(python), "-c", code]).returncode == 0


@pytest.mark.skipif(not _externally_managed(SYSTEM_PYTHON),
                    reason="needs a PEP 668 system Python at /usr/bin/python3 (Debian 12 has one)")
def test_a_pep668_python_gets_a_venv_of_the_actions_own(tmp_path):
    """python-version "" on Debian's Python: the first step makes a venv in RUNNER_TEMP that
    sees the system's packages, and the later steps install into it; the install step given
    the system Python itself refuses in one line instead of pip's error."""
    env = action_env(tmp_path, IDAUDIT_PYTHON=str(SYSTEM_PYTHON), RUNNER_TEMP=tmp_path)
    one_line_error(run_script(env, tmp_path, "install"), "is externally managed (PEP 668)")
    res = run_script(env, tmp_path, "cache-key")
    venv = tmp_path / "idaudit-venv"
    if res.returncode == 2:  # no ensurepip (python3-venv) on this machine: one line says how
        one_line_error(res, "install python3-venv, or set python-version")
        return
    assert res.returncode == 0, res.stderr
    assert f"installing into the action's own venv {venv}" in res.stderr
    outputs = step_outputs(env)
    assert outputs["python"] == str(venv / "bin" / "python")
    cfg = (venv / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = true" in cfg
    probe = subprocess.run([outputs["python"], "-c", "import sys; print(sys.prefix != "
                            "sys.base_prefix)"], capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "True"
    assert not _externally_managed(Path(outputs["python"]))
    # a second run reuses it
    res = run_script(action_env(tmp_path, IDAUDIT_PYTHON=str(SYSTEM_PYTHON),
                                RUNNER_TEMP=tmp_path), tmp_path, "cache-key")
    assert res.returncode == 0, res.stderr


def test_an_ungated_audit_passes_with_a_warning(tmp_path):
    rng = np.random.default_rng(6)
    z = rng.standard_normal((400, 2))
    np.savez(tmp_path / "good.npz", z=z, h=z @ np.array([[0.0, 1.0], [-1.0, 0.0]]))
    env = action_env(tmp_path, IDAUDIT_TARGETS="good.npz", IDAUDIT_ARGS="--floor-draws 0")
    res = run_script(env, tmp_path)
    assert res.returncode == 0, res.stderr
    assert "warning: no gate was given" in res.stderr
    text = summary(env)
    assert text.startswith("## idaudit · ") and "\n> no gate: no threshold was given" in text
    outputs = step_outputs(env)
    assert outputs["verdict"] == "ungated" and float(outputs["r2"]) == pytest.approx(1.0, abs=1e-12)


def one_line_error(res: subprocess.CompletedProcess, fragment: str) -> None:
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], res.stderr


def test_a_missing_target_is_refused_in_one_line(tmp_path):
    env = action_env(tmp_path, IDAUDIT_TARGETS="ckpt/no such.safetensors", IDAUDIT_MIN_R2="0.9")
    res = run_script(env, tmp_path)
    one_line_error(res, "target not found: ckpt/no such.safetensors")
    assert summary(env) == ("## idaudit · error (exit 2)\n\n```\n"
                            "target not found: ckpt/no such.safetensors\n```\n")
    assert step_outputs(env) == {"verdict": "error", "exit-code": "2"}
    assert not (tmp_path / "idaudit-report").exists()


@pytest.mark.parametrize(("inputs", "fragment"), [
    ({"IDAUDIT_TARGETS": " \n "}, "no target to audit"),
    ({"IDAUDIT_ARGS": "--json x.json"}, "args: --json is the action's own"),
    ({"IDAUDIT_ARGS": "--junit=x.xml"}, "args: --junit is the action's own"),
    ({"IDAUDIT_ARGS": "--html p.html"}, "args: --html is the action's own"),
    ({"IDAUDIT_HTML": "yes"}, "html must be true or false, got 'yes'"),
    ({"IDAUDIT_ARGS": "--max 'mcc=1"}, "args input): No closing quotation"),
    ({"IDAUDIT_ARGS": "--min-r2 0.5", "IDAUDIT_MIN_R2": "0.9"}, "--min-r2 is given twice"),
    ({"IDAUDIT_OUTPUT_DIR": "a\nb"}, "IDAUDIT_OUTPUT_DIR holds a newline"),
    ({"GITHUB_STEP_SUMMARY": "."}, "GITHUB_STEP_SUMMARY (.) cannot be appended to"),
])
def test_bad_inputs_are_refused_in_one_line(tmp_path, inputs, fragment):
    (tmp_path / "t.npz").write_bytes(b"")  # exists: the refusals come before any audit
    env = action_env(tmp_path, **{"IDAUDIT_TARGETS": "t.npz", **inputs})
    one_line_error(run_script(env, tmp_path), fragment)


def test_a_nested_shell_word_is_never_expanded(tmp_path):
    """``$(…)`` and globs in args reach idaudit as they are written: nothing is run."""
    (tmp_path / "t.npz").write_bytes(b"")
    env = action_env(tmp_path, IDAUDIT_TARGETS="t.npz",
                     IDAUDIT_ARGS="--json-x \"$(touch pwned)\" *")
    res = run_script(env, tmp_path)
    assert res.returncode == 2 and not (tmp_path / "pwned").exists(), res.stderr
    assert "No such option: --json-x" in res.stderr


def test_an_error_of_idaudit_keeps_its_exit_2_and_removes_a_stale_report(tmp_path):
    rng = np.random.default_rng(7)
    z = rng.standard_normal((300, 2))
    np.savez(tmp_path / "a.npz", z=z, h=z)
    (tmp_path / "idaudit-report").mkdir()
    (tmp_path / "idaudit-report" / "audit.json").write_text('{"verdict": "pass"}')
    env = action_env(tmp_path, IDAUDIT_TARGETS="a.npz", IDAUDIT_ARGS="--min not_a_metric=1")
    res = run_script(env, tmp_path)
    assert res.returncode == 2
    assert res.stderr.startswith("error: unknown metric 'not_a_metric' in the gate")
    assert not (tmp_path / "idaudit-report" / "audit.json").exists()
    assert summary(env).startswith("## idaudit · error (exit 2)\n\n```\nerror: unknown metric")
    assert step_outputs(env) == {"verdict": "error", "r2": "", "exit-code": "2"}


def test_without_idaudit_on_path_it_says_so(tmp_path):
    (tmp_path / "t.npz").write_bytes(b"")
    env = action_env(tmp_path, IDAUDIT_TARGETS="t.npz")
    env["PATH"] = os.pathsep.join(p for p in ("/usr/bin", "/bin") if Path(p).is_dir())
    if shutil.which("idaudit", path=env["PATH"]) or not shutil.which("bash", path=env["PATH"]):
        pytest.skip("this machine has idaudit in /usr/bin or /bin, or no bash there")
    one_line_error(run_script(env, tmp_path), "idaudit is not on PATH")


@pytest.mark.parametrize(("inputs", "fragment"), [
    ({"IDAUDIT_SPEC": "idaudit==0.1", "IDAUDIT_EXTRAS": "vision"},
     "extras apply to the action's own checkout"),
    ({"IDAUDIT_TORCH_SPEC": "", "IDAUDIT_TORCH_INDEX_URL": "https://example.org/whl"},
     "torch-index-url is set but torch-spec is empty"),
    ({"IDAUDIT_TORCH_SPEC": "torch", "IDAUDIT_TORCH_INDEX_URL": "download.pytorch.org"},
     "torch-index-url must be a URL, pypi"),
])
def test_install_refuses_inputs_that_do_not_apply(tmp_path, inputs, fragment):
    """Refused before pip runs; were it reached, pip would only pretend (no index, a dry run)
    and fail on an empty directory, never touching this venv."""
    env = action_env(tmp_path, IDAUDIT_ACTION_PATH=tmp_path, PIP_NO_INDEX="1", PIP_DRY_RUN="1",
                     **inputs)
    one_line_error(run_script(env, tmp_path, "install"), fragment)


def test_an_unknown_mode_is_refused(tmp_path):
    one_line_error(run_script(action_env(tmp_path), tmp_path, "deploy"), "unknown mode 'deploy'")


def _install_env(tmp_path: Path, **inputs) -> dict:
    """The install step's environment, pip unable to change anything (no index, a dry run):
    where it runs at all, it fails (exit 2) or pretends."""
    return action_env(tmp_path, IDAUDIT_ACTION_PATH=ROOT, PIP_NO_INDEX="1", PIP_DRY_RUN="1",
                      GITHUB_PATH=tmp_path / "path.txt", **inputs)


def ran_pip(res: subprocess.CompletedProcess) -> bool:
    """Whether the install step ran pip: it failed (nothing to install from here) or, in its
    dry run, found the requirements already met."""
    return (res.returncode == 2 and "error: pip could not install" in res.stderr) or \
        (res.returncode == 0 and "Requirement already satisfied" in res.stdout)


def test_install_is_skipped_when_the_same_idaudit_is_on_path(tmp_path):
    """This venv's idaudit on PATH is the checkout's version with the plot extra and torch
    2.13.0: the action's own checkout (and a spec pinning that version) is not reinstalled,
    and the log says so; a spec of another version, an extra whose packages are missing, a
    torch pin it does not have, or no idaudit on PATH install as before (pip runs: with no
    index and a dry run it can only fail, exit 2, or find the requirements met)."""
    import torch

    from idaudit.core.version import __version__

    torch_pin = "torch==" + torch.__version__.split("+")[0]
    exe = shutil.which("idaudit", path=str(Path(sys.executable).parent))
    if exe is None or "python" not in Path(exe).read_text(errors="replace").splitlines()[0]:
        pytest.skip("no idaudit console script beside this interpreter")
    skipped = (f"idaudit {__version__} is already on PATH ({exe}) with the extras and the "
               f"{torch_pin} asked for: the install is skipped")
    for spec in ("", f"idaudit[plot]=={__version__}"):
        env = _install_env(tmp_path, IDAUDIT_SPEC=spec, IDAUDIT_TORCH_SPEC=torch_pin)
        res = run_script(env, tmp_path, "install")
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == skipped and "pip" not in res.stderr, (res.stdout, res.stderr)
    # no torch asked for: the line names none
    res = run_script(_install_env(tmp_path, IDAUDIT_TORCH_SPEC=""), tmp_path, "install")
    assert res.returncode == 0 and res.stdout.strip() == (
        f"idaudit {__version__} is already on PATH ({exe}) with the extras asked for: the "
        "install is skipped"), res.stderr
    # what differs is said, and pip runs (and fails here: no index)
    other = {"IDAUDIT_SPEC": "idaudit==9.9", "IDAUDIT_TORCH_SPEC": ""}
    res = run_script(_install_env(tmp_path, **other), tmp_path, "install")
    assert ran_pip(res) and "the install is skipped" not in res.stdout
    assert (f"note: the idaudit on PATH ({exe}) says 'idaudit {__version__}', not "
            "'idaudit 9.9': installing") in res.stderr
    assert res.stderr.strip().endswith("error: pip could not install idaudit==9.9")
    for inputs, why in (
            ({"IDAUDIT_SPEC": f"idaudit[vision]=={__version__}", "IDAUDIT_TORCH_SPEC": ""},
             "timm (extra vision) is not installed"),
            ({"IDAUDIT_SPEC": f"idaudit=={__version__}", "IDAUDIT_TORCH_SPEC": "torch==1.0"},
             f"its torch is {torch_pin[7:]}, not 1.0"),
            ({"IDAUDIT_SPEC": f"idaudit=={__version__}", "IDAUDIT_TORCH_SPEC": "torch>=2"},
             "torch-spec torch>=2 is not a pin (torch==V) to compare with")):
        if why.startswith("timm") and importlib.util.find_spec("timm") is not None:
            continue
        res = run_script(_install_env(tmp_path, **inputs), tmp_path, "install")
        assert "the install is skipped" not in res.stdout, (inputs, res.stdout)
        note = next(line for line in res.stderr.splitlines() if line.startswith("note:"))
        assert note.startswith(f"note: idaudit {__version__} is on PATH ({exe}), but {why}")
        assert note.endswith(": installing")
        assert ran_pip(res), (inputs, res.stdout, res.stderr)
    res = run_script(_install_env(tmp_path, IDAUDIT_TORCH_SPEC="",
                                  IDAUDIT_SPEC="idaudit @ git+https://example.org/idaudit"),
                     tmp_path, "install")  # pins no version: pip decides
    assert ran_pip(res) and "the install is skipped" not in res.stdout
    assert "note: idaudit" not in res.stderr and "note: the idaudit" not in res.stderr
    # no idaudit on PATH: installed
    env = _install_env(tmp_path, IDAUDIT_SPEC=f"idaudit=={__version__}", IDAUDIT_TORCH_SPEC="")
    env["PATH"] = os.pathsep.join(p for p in ("/usr/bin", "/bin") if Path(p).is_dir())
    if shutil.which("idaudit", path=env["PATH"]):
        return
    res = run_script(env, tmp_path, "install")
    assert ran_pip(res) and "the install is skipped" not in res.stdout
