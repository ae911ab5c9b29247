"""The speed guard's verdicts (benchmarks/guard.py): usage errors exit 2, and a check exits 1
only through its floor. No timing is asserted here: CI's stage 2b runs the guard itself."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

GUARD = Path(__file__).resolve().parents[1] / "benchmarks" / "guard.py"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(GUARD), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def test_unknown_check_and_bad_rounds_are_usage_errors(tmp_path):
    got = run("--only", "train_step,nope", cwd=tmp_path)
    assert got.returncode == 2 and "unknown check nope" in got.stderr
    got = run("--rounds", "0", cwd=tmp_path)
    assert got.returncode == 2 and "--rounds" in got.stderr
    got = run("--retries", "-1", cwd=tmp_path)
    assert got.returncode == 2 and "--retries" in got.stderr


def test_unwritable_json_is_refused_before_measuring(tmp_path):
    (tmp_path / "file").write_text("x")
    got = run("--json", str(tmp_path / "file" / "out.json"), cwd=tmp_path)
    assert got.returncode == 2 and "cannot write" in got.stderr
    assert "median" not in got.stdout  # nothing was measured


@pytest.fixture
def guard():
    sys.path.insert(0, str(GUARD.parent))
    try:
        import guard
    finally:
        sys.path.remove(str(GUARD.parent))
    return guard


def fixed(guard, *ratio_lists):
    """A check that returns the given ratios, one list per call."""
    calls = iter(ratio_lists)
    return lambda rounds, slow: guard.Measured(next(calls), {"base": [2.0], "fast": [1.0]})


def test_a_floor_above_any_ratio_fails_with_exit_1(tmp_path, monkeypatch, guard):
    """The verdict is the median ratio against the floor: with the floor raised past any
    plausible ratio the audit check fails (exit 1) and the JSON says why."""
    monkeypatch.setitem(guard.FLOORS, "audit", 1e9)
    monkeypatch.setitem(guard.CHECKS, "audit", fixed(guard, [2.0, 3.0, 4.0], [2.0, 3.0, 4.0]))
    out = tmp_path / "g.json"
    monkeypatch.setattr(sys, "argv", ["guard.py", "--only", "audit", "--json", str(out)])
    assert guard.main() == 1
    got = json.loads(out.read_text())["checks"]["audit"]
    assert got["median_ratio"] == 3.0 and got["passed"] is False
    monkeypatch.setitem(guard.FLOORS, "audit", 3.0)  # at the floor passes
    assert guard.main() == 0
    assert json.loads(out.read_text())["checks"]["audit"]["passed"] is True


def test_retries_measure_a_failed_check_again_and_keep_the_last(tmp_path, monkeypatch, guard):
    monkeypatch.setitem(guard.FLOORS, "audit", 3.0)
    out = tmp_path / "g.json"
    argv = ["guard.py", "--only", "audit", "--retries", "1", "--json", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setitem(guard.CHECKS, "audit", fixed(guard, [1.0, 2.0, 2.5], [3.0, 4.0, 5.0]))
    assert guard.main() == 0  # a burst: the second measurement passes
    got = json.loads(out.read_text())["checks"]["audit"]
    assert got["attempt"] == 2 and got["median_ratio"] == 4.0
    monkeypatch.setitem(guard.CHECKS, "audit", fixed(guard, [1.0, 2.0, 2.5], [1.5, 2.0, 2.5]))
    assert guard.main() == 1  # a regression fails both
    assert json.loads(out.read_text())["checks"]["audit"]["median_ratio"] == 2.0


@pytest.mark.parametrize("slow", [False, True])
def test_slow_doubles_the_work(slow, guard):
    calls = []
    guard._twice(lambda: calls.append(1), slow)()
    assert len(calls) == (2 if slow else 1)
