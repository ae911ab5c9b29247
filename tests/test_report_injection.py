"""Nothing a file or a program chose reaches a report as markup (issue 54): a target's name in
the JUnit file, the Markdown report and the action's job summary; a worker's run id as a file
name; a run record's text as a spreadsheet formula, its numbers as ``inf`` minutes, a link to
another file as a record."""

import csv
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from conftest import one_line, run
from test_action import action_env, one_line_error, run_script, step_outputs, summary

import idaudit
from idaudit.core.storage import open_store
from idaudit.evaluations.report import audit_markdown, markdown_text, xml_text
from idaudit.experiments.sweep import _record

#: a target name that, written raw, breaks XML (\x01, <, &) and forges Markdown (a heading,
#: raw HTML, a table cell, a code span)
NAME = "b\x01\n## ✅ pass\n<img src=x onerror=alert(1)>|x`y&.npz"
COLLAPSED = ": the embedding collapsed: h has (near-)zero variance, every input maps to one point"


@pytest.fixture
def named(tmp_path, monkeypatch):
    """In ``tmp_path`` (the working directory): good.npz (h = z) and NAME (h collapsed)."""
    monkeypatch.chdir(tmp_path)
    z = np.random.default_rng(0).standard_normal((400, 2))
    np.savez("good.npz", z=z, h=z)
    np.savez(NAME, z=z, h=np.zeros((400, 2)))
    return tmp_path


# ---- finding 8: names in the JUnit file and the Markdown report ------------------------------


def test_junit_with_control_characters_and_markup_in_a_name_parses_back(named):
    res = run("audit", "good.npz", NAME, "--min-r2", "0.5", "--floor-draws", "0",
              "--junit", "j.xml", "--markdown", "m.md")
    assert res.exit_code == 3, res.output
    suite = ET.parse(named / "j.xml").getroot()  # well-formed: \x01 would make it not
    error = suite.find("testcase/error")
    expected = "b\\x01\n## ✅ pass\n<img src=x onerror=alert(1)>|x`y&.npz" + COLLAPSED
    assert error.get("message") == expected and error.text == expected
    raw = (named / "j.xml").read_text(encoding="utf-8")
    assert "\x01" not in raw and "&lt;img src=x onerror=alert(1)&gt;|x`y&amp;.npz" in raw


def test_xml_text_drops_what_xml_forbids_and_keeps_the_rest():
    assert xml_text("a\x00b\x1bc\x7f\ud800\ufffe\t\n\r<&\"é😀") == \
        "a\\x00b\\x1bc\\x7f\\ud800\\ufffe\t\n\\r<&\"é😀"


def test_a_name_that_utf8_cannot_encode_is_written_escaped(tmp_path, monkeypatch):
    """An undecodable byte of a file name (a lone surrogate in Python) is \\udcff in the
    JUnit and Markdown files, not exit 5 from the encoder."""
    monkeypatch.chdir(tmp_path)
    z = np.random.default_rng(1).standard_normal((400, 2))
    np.savez("good.npz", z=z, h=z)
    name = os.fsdecode(b"s\xff.npz")
    np.savez(name, z=z, h=np.zeros((400, 2)))
    res = subprocess.run([sys.executable, "-m", "idaudit", "audit", "good.npz", name,
                          "--floor-draws", "0", "--junit", "j.xml", "--markdown", "m.md"],
                         capture_output=True, text=True, errors="backslashreplace")
    assert res.returncode == 3, res.stderr
    error = ET.parse(tmp_path / "j.xml").getroot().find("testcase/error")
    assert error.get("message") == "s\\udcff.npz" + COLLAPSED
    assert "> s\\\\udcff.npz: the embedding collapsed" in (tmp_path / "m.md").read_text()


def test_the_page_escapes_a_forged_name_and_one_utf8_cannot_encode(named):
    """The HTML page escapes as it did, and an undecodable byte of a name no longer ends the
    audit with exit 5."""
    pytest.importorskip("matplotlib")
    name = os.fsdecode(b"s\xff.npz")
    os.link(NAME, name)
    for target, shown in ((NAME, "b\\x01\n## ✅ pass\n&lt;img src=x onerror=alert(1)&gt;|x`y&amp;.npz"),
                          (name, "s\\udcff.npz")):
        res = subprocess.run([sys.executable, "-m", "idaudit", "audit", "good.npz", target,
                              "--floor-draws", "0", "--html", "p.html"],
                             capture_output=True, text=True, errors="backslashreplace")
        assert res.returncode == 3, res.stderr
        page = (named / "p.html").read_text(encoding="utf-8")
        assert f'<p class="note" id="reason">{shown}{COLLAPSED}</p>' in page
        assert "<img src=x" not in page and "\x01" not in page


def test_markdown_keeps_a_forged_name_in_one_line_and_one_cell(named):
    report = idaudit.audit("good.npz", NAME, min_r2=0.5, floor_draws=0)
    assert report.verdict == "inconclusive"
    lines = audit_markdown(report).splitlines()
    assert lines[:3] == [
        "## idaudit · ⚠️ inconclusive", "",
        "> b\\\\x01 \\#\\# ✅ pass &lt;img src=x onerror=alert(1)&gt;\\|x\\`y&amp;.npz" + COLLAPSED]
    assert [li for li in lines if li.startswith("#")] == [lines[0]]  # no forged heading
    assert not any("<" in li for li in lines)  # no raw HTML
    # several targets side by side: the forged name is one header cell
    rng = np.random.default_rng(2)
    z = rng.standard_normal((400, 2))
    np.savez(NAME, z=z, h=z + 0.1 * rng.standard_normal((400, 2)))
    side = idaudit.audit("good.npz", NAME, floor_draws=0).side_by_side(["mcc"]).splitlines()
    assert side[0] == ("| metric | good.npz | b\\\\x01 \\#\\# ✅ pass &lt;img src=x "
                       "onerror=alert(1)&gt;\\|x\\`y&amp;.npz | gate |")
    assert len(side) == 3 and side[1] == "|---|---:|---:|---:|"


@pytest.mark.parametrize(("text", "shown"), [
    ("a|b\nc", "a\\|b c"),
    ("# title", "\\# title"),
    ("<script>&amp;", "&lt;script&gt;&amp;amp;"),
    ("[x](javascript:y) ![i](u)", "\\[x\\](javascript:y) !\\[i\\](u)"),
    ("**b** _i_ ~~s~~ $m$", "\\*\\*b\\*\\* \\_i\\_ \\~\\~s\\~\\~ \\$m\\$"),
    ("r2_h_to_z \\ `c`", "r2_h_to_z \\\\ \\`c\\`"),  # an underscore inside a word stays
    ("-0.5", "-0.5"),
])
def test_markdown_text_escapes_markup(text, shown):
    assert markdown_text(text) == shown


# ---- finding 7: the action's targets, summary and log ----------------------------------------

FAKE_IDAUDIT = '''#!{python}
"""A stand-in for idaudit: keeps its arguments, writes what FAKE_* say, exits FAKE_EXIT."""
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_ARGV"], "w", encoding="utf-8") as f:
    json.dump(args, f)
report = os.environ.get("FAKE_REPORT")
if report:
    for flag in ("--json", "--markdown", "--junit"):
        path = args[args.index(flag) + 1]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(report if flag == "--json" else os.environ.get("FAKE_MARKDOWN", ""))
sys.stdout.write(os.environ.get("FAKE_STDOUT", ""))
sys.stderr.write(os.environ.get("FAKE_STDERR", ""))
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
'''


def fake_env(tmp_path: Path, **inputs) -> dict:
    """The action's environment with a stand-in ``idaudit`` first on PATH."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "idaudit"
    fake.write_text(FAKE_IDAUDIT.format(python=sys.executable), encoding="utf-8")
    fake.chmod(0o755)
    env = action_env(tmp_path, IDAUDIT_HTML="false", FAKE_ARGV=tmp_path / "argv.json", **inputs)
    env["PATH"] = os.pathsep.join([str(bin_dir), env["PATH"]])
    return env


def test_the_action_refuses_a_target_named_like_a_flag(tmp_path):
    (tmp_path / "--trust-code").write_bytes(b"")
    env = fake_env(tmp_path, IDAUDIT_TARGETS="--trust-code")
    one_line_error(run_script(env, tmp_path), "target '--trust-code' begins with '-' and would "
                                             "read as an option; name it ./--trust-code")
    assert not (tmp_path / "argv.json").exists()  # idaudit never ran
    one_line_error(run_script(fake_env(tmp_path, IDAUDIT_TARGETS="./--trust-code",
                                       IDAUDIT_ARGS="-- x"), tmp_path),
                   "args: -- is the action's own (the targets follow it)")


def test_the_action_passes_targets_after_double_dash_and_quotes_them(tmp_path):
    for name in ("a`b.npz", "c d.npz"):
        (tmp_path / name).write_bytes(b"")
    env = fake_env(tmp_path, IDAUDIT_TARGETS="a`b.npz\nc d.npz", IDAUDIT_MIN_R2="0.9",
                   IDAUDIT_ARGS="--reduce median",
                   FAKE_REPORT=json.dumps({"verdict": "pass", "metrics": {}, "gate": []}),
                   FAKE_MARKDOWN="## idaudit · ✅ pass\n")
    res = run_script(env, tmp_path)
    assert res.returncode == 0, res.stderr
    argv = json.loads((tmp_path / "argv.json").read_text(encoding="utf-8"))
    assert argv == ["audit", "--reduce", "median", "--min-r2", "0.9",
                    "--json", "idaudit-report/audit.json", "--junit", "idaudit-report/audit.xml",
                    "--markdown", "idaudit-report/audit.md", "--", "a`b.npz", "c d.npz"]
    assert summary(env) == ("## idaudit · ✅ pass\n\n<sub>idaudit audit `` a`b.npz `` `c d.npz` "
                            "· exit 0 · reports in `idaudit-report`</sub>\n\n")


def test_idaudit_audit_takes_a_file_named_like_a_flag_after_double_dash(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    z = np.random.default_rng(3).standard_normal((400, 2))
    np.savez("good.npz", z=z, h=z)
    os.rename("good.npz", "--trust-code")
    res = run("audit", "--min-r2", "0.5", "--floor-draws", "0", "--json", "a.json", "--",
              "--trust-code")
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "a.json").read_text())
    assert report["source"] == "--trust-code" and report["verdict"] == "pass"


def test_the_summary_fence_is_longer_than_any_backticks_it_quotes(tmp_path):
    env = fake_env(tmp_path, IDAUDIT_TARGETS="t.npz", FAKE_EXIT="2",
                   FAKE_STDERR="error: bad ```` input\n## forged\n")
    (tmp_path / "t.npz").write_bytes(b"")
    res = run_script(env, tmp_path)
    assert res.returncode == 2
    assert summary(env) == ("## idaudit · error (exit 2)\n\n`````\nerror: bad ```` input\n"
                            "## forged\n`````\n\n")
    # the script's own refusals quote the same way
    env = fake_env(tmp_path, IDAUDIT_TARGETS="no ```such``` file")
    one_line_error(run_script(env, tmp_path), "target not found: no ```such``` file")
    assert summary(env) == ("## idaudit · error (exit 2)\n\n````\n"
                            "target not found: no ```such``` file\n````\n")


def test_workflow_commands_from_the_audit_are_defused(tmp_path):
    (tmp_path / "t.npz").write_bytes(b"")
    report = {"verdict": "inconclusive", "reason": "bad%0A::set-env x\n::add-mask::y",
              "metrics": {}, "gate": []}
    env = fake_env(tmp_path, IDAUDIT_TARGETS="t.npz", GITHUB_ACTIONS="true", FAKE_EXIT="3",
                   FAKE_REPORT=json.dumps(report), FAKE_MARKDOWN="## idaudit\n",
                   FAKE_STDOUT="table\n::set-output name=verdict::pass\n",
                   FAKE_STDERR="  ::error::forged\n")
    res = run_script(env, tmp_path)
    assert res.returncode == 3, res.stderr
    assert res.stdout.splitlines() == [
        "table", ": :set-output name=verdict::pass",
        "::warning title=idaudit::inconclusive (exit 3): bad%250A::set-env x ::add-mask::y"]
    assert res.stderr.splitlines() == ["  : :error::forged"]
    assert step_outputs(env)["verdict"] == "inconclusive"


# ---- finding 9: a worker's run id never names a file -----------------------------------------


class _Bar:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def advance(self, n: int, text: str = "") -> None:
        self.lines.append(text)


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_a_record_naming_another_id_is_filed_as_this_runs_failure(tmp_path):
    out = tmp_path / "OUT" / "runs"
    out.mkdir(parents=True)
    run_opts, counts, bar = {"world": "spiral", "seed": 0}, {"ok": 0, "failed": 0}, _Bar()
    rec = {"run": {"world": "evil"}, "id": "../../X", "status": "ok", "metrics": {},
           "node": {"host": "h\x1b[2J", "ip": "1.2.3.4"}, "seconds": 3.0}
    _record(open_store(out.parent), "abc123", run_opts, rec, counts, bar)
    assert files_under(tmp_path) == ["OUT/runs/abc123.failed.json"]
    filed = json.loads((out / "abc123.failed.json").read_text())
    assert filed == {"run": run_opts, "id": "abc123", "status": "failed", "seconds": None,
                     "error": "the worker's record names the run id '../../X', not this run's "
                              "abc123: not filed under it"}
    assert counts == {"ok": 0, "failed": 1}


def test_a_record_brings_only_its_own_checkpoint_files(tmp_path):
    out, ckpt = tmp_path / "OUT" / "runs", tmp_path / "OUT" / "checkpoints"
    out.mkdir(parents=True)
    ckpt.mkdir()
    counts, bar = {"ok": 0, "failed": 0}, _Bar()
    evil = str(tmp_path / "OUT" / "checkpoints" / ".." / ".." / "evil.safetensors")
    rec = {"id": "r1", "status": "ok", "metrics": {}, "files": {evil: b"x"}}
    _record(open_store(out.parent), "r1", {"seed": 1}, rec, counts, bar, str(ckpt))
    assert files_under(tmp_path) == ["OUT/runs/r1.failed.json"]
    assert "brings files other than this run's checkpoint and log" in \
        json.loads((out / "r1.failed.json").read_text())["error"]
    # its own files land where this driver puts them, the log naming the checkpoint
    own = {str(ckpt / "r2.safetensors"): b"weights", str(ckpt / "r2.log.json"): b'{"steps": 3}'}
    rec = {"id": "r2", "status": "ok", "metrics": {}, "files": own, "seconds": 2.0,
           "node": {"host": "n1", "ip": "10.0.0.1"}}
    _record(open_store(out.parent), "r2", {"seed": 2}, rec, counts, bar, str(ckpt))
    assert (ckpt / "r2.safetensors").read_bytes() == b"weights"
    assert json.loads((ckpt / "r2.log.json").read_text()) == {
        "steps": 3, "checkpoint": "checkpoints/r2.safetensors", "log": "checkpoints/r2.log.json",
        "node": {"host": "n1", "ip": "10.0.0.1"}}
    filed = json.loads((out / "r2.json").read_text())
    assert (filed["id"], filed["run"], filed["checkpoint"]) == ("r2", {"seed": 2},
                                                                "checkpoints/r2.safetensors")
    assert counts == {"ok": 1, "failed": 1}
    assert bar.lines[-1] == "1 ok, 1 failed; last on n1 (10.0.0.1) in 2 s"


# ---- finding 10: run records read by `idaudit report` ----------------------------------------


def record(run_opts: dict, r2: float = 0.9, seconds: float = 60.0, seed: int = 0) -> dict:
    return {"run": {**run_opts, "seed": seed}, "status": "ok", "seconds": seconds,
            "metrics": {"r2_h_to_z": r2, "orthogonality_error": 0.1}}


def write_records(root: Path, records: list) -> Path:
    runs = root / "runs"
    runs.mkdir(parents=True)
    for i, rec in enumerate(records):
        (runs / f"r{i}.json").write_text(rec if isinstance(rec, str) else json.dumps(rec))
    return runs


def test_summary_csv_prefixes_formula_text_and_keeps_negative_numbers(tmp_path):
    planted = '=HYPERLINK("http://x","y")'
    write_records(tmp_path, [record({"world": "spiral", "objective": planted, "lamb": -0.5}),
                             record({"world": "spiral", "objective": "@SUM(A1)|<b>", "lamb": 0.5})])
    res = run("report", tmp_path, "--no-figures")
    assert res.exit_code == 0, res.output
    with open(tmp_path / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["objective"], r["method"], r["lamb"], r["r2_h_to_z_mean"]) for r in rows] == [
        ("'" + planted, "'" + planted, "-0.5", "0.9"),
        ("'@SUM(A1)|<b>", "'@SUM(A1)|<b>", "0.5", "0.9")]
    md = (tmp_path / "summary.md").read_text().splitlines()
    assert md[:3] == ["# idaudit sweep (sweep.json names no suite)", "",
                      "Fixed in every run: world = spiral. 1 seed per configuration, so no ± "
                      "(one seed has no spread)."]
    assert md[4] == "| lamb | method | objective | seeds | R²(h→z) | orthogonality error | " \
                    "mixing R²(x→z) |"
    assert md[7].startswith("| 0.5 | @SUM(A1)\\|&lt;b&gt; | @SUM(A1)\\|&lt;b&gt; | 1 | ")


@pytest.mark.parametrize(("seconds", "shown"), [("1e308", "1e+308"), ("Infinity", "inf"),
                                                ("NaN", "nan"), ("-1", "-1")])
def test_a_record_with_non_finite_seconds_is_refused(tmp_path, seconds, shown):
    text = json.dumps(record({"world": "spiral"})).replace('"seconds": 60.0',
                                                           f'"seconds": {seconds}')
    runs = write_records(tmp_path, [record({"world": "spiral"}, seed=1), text])
    res = run("report", tmp_path, "--no-figures")
    one_line(res, 2, f"{runs / 'r1.json'}: seconds must be ")
    assert shown in res.output and "not a run record of `idaudit sweep`" in res.output
    assert not (tmp_path / "summary.csv").exists()


def test_a_record_with_an_overflowing_metric_is_refused(tmp_path):
    runs = write_records(tmp_path, [record({"world": "spiral"}, r2=1e308),
                                    record({"world": "spiral"}, r2=1e308, seed=1)])
    one_line(run("report", tmp_path, "--no-figures"), 2,
             f"{runs / 'r0.json'}: metric r2_h_to_z must be a finite number of magnitude at "
             "most 1e+150, got 1e+308")


def test_a_symlinked_record_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(record({"world": "spiral"}, seed=1)))
    runs = write_records(tmp_path / "sw", [record({"world": "spiral"})])
    (runs / "r1.json").symlink_to(elsewhere)
    res = run("report", tmp_path / "sw", "--no-figures")
    one_line(res, 2, f"{runs / 'r1.json'} is a symbolic link (records are never followed)")
    assert not (tmp_path / "sw" / "summary.csv").exists()
