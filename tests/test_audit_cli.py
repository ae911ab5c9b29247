"""``idaudit audit`` through typer's CliRunner: how it parses its flags, renders the report
(table, --keys, --json, --junit, --markdown) and exits. What the audit finds is tested through
the library in tests/test_audit_api.py; that both agree, in tests/test_api_parity.py.

Exit codes: 0 pass (or no gate), 1 a threshold failed, 2 bad input or usage (one line on
stderr, no traceback), 3 inconclusive (one line on stderr), 5 a bug in idaudit (one line).
"""

import json
import textwrap
from xml.etree import ElementTree as ET

import numpy as np
import pytest
from conftest import identity_linear, run, three_runs
from safetensors.torch import save_file
from scipy.stats import ortho_group

from idaudit.maths.catalogue import BY_KEY
from idaudit.maths.linear import standardize

GATE = ("--min-r2", "0.999", "--max-orthogonality-error", "0.01")
FAST = ("--gauss-sims", "5")
CONTRACT = ("r2_h_to_z_heldout", "mcc", "orthogonality_error", "procrustes_mse",
            "whitening_error", "whitening_floor", "effective_rank", "gaussianity_p_value")


def assert_one_line_error(res, fragment, code=2):
    """Exit ``code``, nothing on stdout, one line ``error: …`` holding ``fragment`` on stderr."""
    assert res.exit_code == code, res.output
    assert "Traceback" not in res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1, res.output
    assert lines[0].startswith("error:"), res.output
    assert fragment in res.output, res.output
    assert res.stdout == "" and res.stderr.count("\n") == 1, res.output


def read_json(path):
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def npz_files(tmp_path_factory):
    """A rotation of the latents (standardised on their rows, as the audit compares h with
    latents of undeclared law) plus a little noise (passes), and its tanh (fails)."""
    rng = np.random.default_rng(20240)
    z = rng.standard_normal((4000, 8))
    q = ortho_group.rvs(8, random_state=11)
    d = tmp_path_factory.mktemp("arrays")
    np.savez(d / "good.npz", z=z, h=standardize(z) @ q.T + 1e-3 * rng.standard_normal(z.shape))
    np.savez(d / "tanh.npz", z=z, h=np.tanh(2.0 * z @ q.T))
    return {"good": d / "good.npz", "tanh": d / "tanh.npz"}


# ---- rendering: the table, --keys, --json, --junit, --markdown -------------------------


def test_table_shows_the_verdict_values_and_gates(npz_files, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # one line per row: no wrapping inside cells
    out = tmp_path / "a.json"
    rows = {"r2_h_to_z_heldout": "≥ 0.999", "orthogonality_error": "≤ 0.01"}
    for keys in ((), ("--keys",)):
        res = run("audit", npz_files["good"], *GATE, *FAST, "--json", out, *keys)
        assert res.exit_code == 0 and res.stderr == "", res.output
        m = read_json(out)["metrics"]
        lines = res.stdout.splitlines()
        assert lines[0].startswith("verdict: pass — ")  # what it rests on (test_verdict_lines)
        lines = lines[2:]
        top = next(i for i, line in enumerate(lines) if line.startswith(("┏", "┌")))
        title = "".join("".join(lines[:top]).split())  # it wraps to the table's width
        assert title == "".join(f"audit · {npz_files['good']} · PASS".split()), title
        for key, gate in rows.items():
            row = next(line for line in lines if f"│ {BY_KEY[key].label} " in line)
            assert f"{m[key]:.6f}" in row and gate in row and "pass" in row, row
            assert (key in row) == bool(keys), row
        procrustes = next(line for line in lines if "Procrustes MSE" in line)
        assert f"{m['procrustes_mse']:.6f}" in procrustes and "pass" not in procrustes
        assert ("r2_h_to_z_heldout" in res.stdout) == bool(keys)
        assert sum(line.count("pass") for line in lines) == 2


def test_json_report_layout(npz_files, tmp_path):
    out = tmp_path / "a.json"
    res = run("audit", npz_files["good"], *GATE, *FAST, "--json", out)
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output and res.stderr == ""
    report = read_json(out)
    assert set(report) >= {"verdict", "reason", "source", "world", "metrics", "gate"}
    assert report["verdict"] == "pass" and report["reason"] is None
    assert report["source"].endswith("good.npz") and report["world"] is None
    for key in CONTRACT:
        assert key in report["metrics"], key
        assert isinstance(report["metrics"][key], float), key
    assert len(report["gate"]) == 2
    for g in report["gate"]:
        assert set(g) == {"metric", "op", "value", "actual", "passed"}
        assert g["passed"] is True
        assert g["actual"] == report["metrics"][g["metric"]]
    assert [(g["metric"], g["op"], g["value"]) for g in report["gate"]] == [
        ("r2_h_to_z_heldout", "min", 0.999), ("orthogonality_error", "max", 0.01)]


def test_junit_all_pass_has_no_failure(npz_files, tmp_path):
    junit = tmp_path / "junit.xml"
    res = run("audit", npz_files["good"], *GATE, *FAST, "--junit", junit)
    assert res.exit_code == 0, res.output
    suite = ET.parse(junit).getroot()
    cases = suite.findall("testcase")
    assert len(cases) == 2
    assert all(c.find("failure") is None and c.find("error") is None for c in cases)
    assert suite.get("failures") == "0"


def test_toml_gate_junit_and_markdown(npz_files, tmp_path):
    gate = tmp_path / "gate.toml"
    gate.write_text(textwrap.dedent("""\
        [min]
        r2_h_to_z_heldout = 0.999
        mcc = 0.9

        [max]
        orthogonality_error = 0.01
    """))
    out, junit, md = tmp_path / "a.json", tmp_path / "junit.xml", tmp_path / "summary.md"
    res = run("audit", npz_files["good"], *FAST, "--gate", gate, "--max", "whitening_error=1",
              "--json", out, "--junit", junit, "--markdown", md)
    # A rotation of the latents is not axis-aligned: MCC ≈ 0.6 < 0.9 fails the gate.
    assert res.exit_code == 1, res.output
    assert res.stderr == "gate failed: mcc\n", res.output  # exit 1: one line naming the metric
    report = read_json(out)
    assert report["verdict"] == "fail"
    by_metric = {g["metric"]: g for g in report["gate"]}
    assert set(by_metric) == {"r2_h_to_z_heldout", "mcc", "orthogonality_error",
                              "whitening_error"}
    assert by_metric["mcc"]["passed"] is False and by_metric["mcc"]["actual"] < 0.9
    assert all(g["passed"] for k, g in by_metric.items() if k != "mcc")

    suite = ET.parse(junit).getroot()
    assert suite.tag == "testsuite"
    cases = suite.findall("testcase")
    assert len(cases) == 4 and suite.get("tests") == "4"
    assert suite.get("failures") == "1" and suite.get("errors") == "0"
    failing = [c for c in cases if c.find("failure") is not None]
    assert len(failing) == 1 and failing[0].get("name").startswith("mcc")
    assert "required ≥ 0.9" in failing[0].find("failure").get("message")
    names = sorted(c.get("name").split()[0] for c in cases)
    assert names == ["mcc", "orthogonality_error", "r2_h_to_z_heldout", "whitening_error"]

    text = md.read_text()
    assert "fail" in text.splitlines()[0]
    assert "| metric | value | gate | result |" in text
    for key in CONTRACT:
        assert f"`{key}`" in text, key
    mcc_row = next(line for line in text.splitlines() if line.startswith("| `mcc`"))
    assert "**FAIL**" in mcc_row and f"{report['metrics']['mcc']:.6f}" in mcc_row


def test_an_audit_without_thresholds_says_no_gate(npz_files, tmp_path):
    out, junit, md = tmp_path / "a.json", tmp_path / "junit.xml", tmp_path / "summary.md"
    res = run("audit", npz_files["good"], *FAST, "--json", out, "--junit", junit,
              "--markdown", md)
    assert res.exit_code == 0, res.output  # a report only: not a failure
    shown = " ".join(res.output.split())  # the title may wrap on a long path
    assert "NO GATE (report only)" in shown and "PASS" not in shown
    report = read_json(out)
    assert report["verdict"] == "ungated" and report["gate"] == []
    assert report["metrics"]["r2_h_to_z_heldout"] > 0.99999
    text = md.read_text()
    assert text.splitlines()[0].endswith("no gate") and "nothing was checked" in text
    suite = ET.parse(junit).getroot()
    assert suite.get("tests") == "1" and suite.get("skipped") == "1"
    assert suite.get("failures") == "0" and suite.get("errors") == "0"
    assert "nothing was checked" in suite.find("testcase/skipped").get("message")


# ---- exit codes 3 and 5 ----------------------------------------------------------------


def test_too_few_rows_is_inconclusive(tmp_path):
    rng = np.random.default_rng(3)
    z = rng.standard_normal((20, 4))
    np.savez(tmp_path / "few.npz", z=z, h=z)
    res = run("audit", tmp_path / "few.npz", "--gauss-sims", "0", "--junit", tmp_path / "j.xml")
    assert res.exit_code == 3, res.output
    assert "too few samples" in res.output and "Traceback" not in res.output
    # The reason is one unwrapped line on stderr (greppable in CI logs).
    assert any(line.startswith("inconclusive: too few samples") and "need at least 26" in line
               for line in res.output.splitlines()), res.output
    assert res.stderr.startswith("inconclusive: too few samples") and res.stderr.count("\n") == 1
    suite = ET.parse(tmp_path / "j.xml").getroot()
    cases = suite.findall("testcase")
    assert len(cases) == 1 and cases[0].find("error") is not None
    assert suite.get("errors") == "1" and suite.get("failures") == "0"
    assert "need at least 26" in cases[0].find("error").get("message")


def test_a_crash_is_exit_5_never_a_verdict(npz_files, monkeypatch):
    """An unexpected exception inside idaudit is a bug: one line and exit 5, not exit 1."""
    import idaudit.evaluations.audit

    def boom(*args, **kwargs):
        raise IndexError("list index out of range")

    monkeypatch.setattr(idaudit.evaluations.audit, "audit_inputs", boom)
    res = run("audit", npz_files["good"], "--min-r2", "0.9")
    assert res.exit_code == 5 and "Traceback" not in res.output, res.output
    assert res.output.strip().splitlines() == [res.output.strip()]
    assert res.output.startswith("internal error: IndexError: list index out of range")
    assert res.stdout == ""
    monkeypatch.setenv("IDAUDIT_TRACEBACK", "1")
    res = run("audit", npz_files["good"])
    assert isinstance(res.exception, IndexError)


# ---- flag parsing: --min/--max, --gate, --circular, --reduce, --arch-kwargs -------------


def test_min_max_flags(npz_files, tmp_path):
    out = tmp_path / "a.json"
    res = run("audit", npz_files["good"], *FAST, "--min", "r2_h_to_z_heldout=0.999",
              "--min", "effective_rank = 7.5", "--max", "procrustes_mse=1e-3", "--json", out)
    assert res.exit_code == 0, res.output
    gate = read_json(out)["gate"]
    assert [(g["metric"], g["op"], g["value"], g["passed"]) for g in gate] == [
        ("r2_h_to_z_heldout", "min", 0.999, True), ("effective_rank", "min", 7.5, True),
        ("procrustes_mse", "max", 1e-3, True)]
    res = run("audit", npz_files["good"], *FAST, "--max", "procrustes_mse=1e-7", "--json", out)
    assert res.exit_code == 1, res.output
    assert "procrustes_mse" in res.output
    assert res.stderr == "gate failed: procrustes_mse\n", res.output
    assert read_json(out)["verdict"] == "fail"


def test_gate_file_and_flag_syntax_errors(npz_files, tmp_path):
    good = npz_files["good"]
    gate = tmp_path / "gate.toml"
    gate.write_text("[min]\nnosuch_metric = 1\n")
    assert_one_line_error(run("audit", good, "--gate", gate), "unknown metric 'nosuch_metric'")
    assert_one_line_error(run("audit", good, "--min", "nosuchmetric=1"),
                          "unknown metric 'nosuchmetric'")
    assert_one_line_error(run("audit", good, "--min", "mcc"), "METRIC=VALUE")
    assert_one_line_error(run("audit", good, "--max", "mcc=high"), "must be a number")
    bad_table = tmp_path / "tables.toml"
    bad_table.write_text("[minimum]\nmcc = 1\n")
    assert_one_line_error(run("audit", good, "--gate", bad_table), "unknown tables")
    broken = tmp_path / "broken.toml"
    broken.write_text("[min\nmcc = ")
    assert_one_line_error(run("audit", good, "--gate", broken), "not valid TOML")
    assert_one_line_error(run("audit", good, "--gate", tmp_path / "none.toml"),
                          "gate file not found")


def test_circular_flag(npz_files, tmp_path):
    out = tmp_path / "a.json"
    res = run("audit", npz_files["good"], "--circular", "0, 2", "--json", out)
    assert res.exit_code == 0, res.output
    assert read_json(out)["metrics"]["circular_latents"] == [0, 2]
    assert_one_line_error(run("audit", npz_files["good"], "--circular", "0,x"), "--circular")
    assert_one_line_error(run("audit", npz_files["good"], "--circular", "9"), "out of range")


def test_reduce_flag(tmp_path):
    z, paths = three_runs(tmp_path)  # two good seeds and a poor one
    out = tmp_path / "r.json"
    res = run("audit", *paths, "--min-r2", "0.95", "--json", out)
    assert res.exit_code == 1 and res.stderr == "gate failed: r2_h_to_z_heldout\n", res.output
    assert read_json(out)["metrics"]["reduce"] == "worst" and len(read_json(out)["runs"]) == 3
    res = run("audit", *paths, "--min-r2", "0.95", "--reduce", "median", "--json", out)
    assert res.exit_code == 0, res.output
    assert read_json(out)["metrics"]["reduce"] == "median"
    assert_one_line_error(run("audit", paths[0], "--reduce", "median"), "several targets")
    assert_one_line_error(run("audit", *paths, "--reduce", "mean"), "--reduce must be")


def test_arch_kwargs_must_be_a_json_object(tmp_path):
    weights = tmp_path / "w.safetensors"
    save_file(identity_linear().state_dict(), str(weights))
    res = run("audit", weights, "--world", "coupling", "--dim", "4", "--arch", "myarch:make",
              "--arch-kwargs", "{dim: 4}")
    assert_one_line_error(res, "--arch-kwargs is not valid JSON")
    res = run("audit", weights, "--world", "coupling", "--dim", "4", "--arch", "myarch:make",
              "--arch-kwargs", "[4]")
    assert_one_line_error(res, "--arch-kwargs must be a JSON object, got list")
