"""Sweeps: suites, shrinking, resumable execution, failures recorded, report tables."""

import json

import pytest
from typer.testing import CliRunner

from idaudit.cli import app
from idaudit.errors import IdauditError
from idaudit.sweep import SUITES, aggregate, load_results, load_suite, run_id, run_sweep, shrink

runner = CliRunner()

TINY = """
[fixed]
world = "coupling"
steps = 40
eval_every = 40
n_eval = 300
rho = 0.9
[grid]
dim = [2, 4]
seed = [0, 1]
"""


def test_builtin_suites_carry_the_paper_configurations():
    grid = SUITES["grid"]()
    assert len(grid) == 9 * 7 * 3
    assert {r["lamb"] for r in grid} >= {1e-6, 0.5} and {r["rho"] for r in grid} >= {0.3, 0.99}
    scaling = SUITES["scaling"]()
    assert {r["dim"] for r in scaling} == {2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}
    assert all(r["inits"] == (3 if r["dim"] <= 32 else 1) for r in scaling)
    assert {r.get("sigma") for r in scaling if r["objective"] == "infonce"} == {"1.0", "auto"}
    gennorm = SUITES["gennorm"]()
    assert {r["alpha"] for r in gennorm} == {0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0}
    small = shrink(scaling, seeds=1, steps=100, dims=[2, 8], objectives=["lejepa"])
    assert len(small) == 2 and all(r["steps"] == 100 and r["seed"] == 0 for r in small)
    assert len({run_id(r) for r in scaling}) == len(scaling)


def test_sweep_resumes_and_reports(tmp_path):
    suite = tmp_path / "tiny.toml"
    suite.write_text(TINY)
    runs = load_suite(str(suite))
    assert len(runs) == 4
    counts = run_sweep(runs, tmp_path / "out", workers=1)
    assert counts == {"total": 4, "skipped": 0, "ok": 4, "failed": 0}
    files = sorted((tmp_path / "out" / "runs").glob("*.json"))
    assert len(files) == 4
    first = json.loads(files[0].read_text())
    files[1].unlink()  # as if the sweep had been killed before this run finished
    again = run_sweep(runs, tmp_path / "out", workers=1)
    assert again == {"total": 4, "skipped": 3, "ok": 1, "failed": 0}
    assert json.loads(files[0].read_text()) == first  # untouched
    ok, failed = load_results(tmp_path / "out")
    rows = aggregate(ok)
    assert len(rows) == 2 and all(r["n_seeds"] == 2 for r in rows)
    res = runner.invoke(app, ["report", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "out" / "summary.md").read_text()
    assert md.startswith("| N | mixing R²(x→z) |") and "| 2 |" in md and "| 4 |" in md
    csv = (tmp_path / "out" / "summary.csv").read_text().splitlines()
    assert len(csv) == 3 and "r2_h_to_z_mean" in csv[0]


def test_pool_gives_the_same_numbers_as_one_process(tmp_path):
    runs = load_suite(str(_write(tmp_path, TINY)))[:2]
    run_sweep(runs, tmp_path / "a", workers=1)
    run_sweep(runs, tmp_path / "b", workers=2)
    for r in runs:
        a = json.loads((tmp_path / "a" / "runs" / f"{run_id(r)}.json").read_text())
        b = json.loads((tmp_path / "b" / "runs" / f"{run_id(r)}.json").read_text())
        assert a["metrics"] == b["metrics"]


def test_failed_runs_are_recorded_and_retried(tmp_path):
    bad = _write(tmp_path, TINY.replace("rho = 0.9", "rho = 1.5").replace("dim = [2, 4]",
                                                                          "dim = [2]"))
    res = runner.invoke(app, ["sweep", str(bad), "--out", str(tmp_path / "o"), "--workers", "1"])
    assert res.exit_code == 1
    failed = list((tmp_path / "o" / "runs").glob("*.failed.json"))
    assert len(failed) == 2
    assert "--rho" in json.loads(failed[0].read_text())["error"]
    res = runner.invoke(app, ["report", str(tmp_path / "o")])
    assert res.exit_code == 2 and "no finished runs" in res.output


def test_bad_suites(tmp_path):
    with pytest.raises(IdauditError, match="valid: 2d, scaling, gennorm, grid"):
        load_suite("nope")
    with pytest.raises(IdauditError, match="unknown train options"):
        load_suite(str(_write(tmp_path, "[grid]\nflavour = [1]\n")))
    res = runner.invoke(app, ["sweep", "grid", "--seeds", "1", "--steps", "10", "--list"])
    assert res.exit_code == 0 and "63 runs" in res.output


def _write(tmp_path, text):
    path = tmp_path / "suite.toml"
    path.write_text(text)
    return path


def test_ray_executor_gives_the_same_numbers(tmp_path):
    pytest.importorskip("ray")
    runs = load_suite(str(_write(tmp_path, TINY)))[:2]
    run_sweep(runs, tmp_path / "local", workers=1)
    counts = run_sweep(runs, tmp_path / "ray", executor="ray")
    assert counts["ok"] == 2
    for r in runs:
        a = json.loads((tmp_path / "local" / "runs" / f"{run_id(r)}.json").read_text())
        b = json.loads((tmp_path / "ray" / "runs" / f"{run_id(r)}.json").read_text())
        assert a["metrics"] == b["metrics"]
