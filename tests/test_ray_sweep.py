"""Sweeps through Ray on this machine (a local Ray instance): where files land, what each run
asks Ray for, a lost task, versions, signals. The multi-node checks, with no shared disk, are
tests/test_ray_cluster.py."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from spiral_suite import write_suite
from typer.testing import CliRunner

from idaudit.cli import app
from idaudit.core.errors import IdauditError
from idaudit.experiments.aggregate import load_results
from idaudit.experiments.ray_nodes import TaskShape
from idaudit.experiments.suites import load_suite
from idaudit.experiments.sweep import run_id, run_sweep

ray = pytest.importorskip("ray")
runner = CliRunner()



def _suite(tmp_path: Path, steps: int = 40, seeds: str = "[0, 1]", name: str = "s.toml"
           ) -> Path:
    return write_suite(tmp_path / name, steps, seeds)


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance for the module: 2 CPUs and a GPU it is told it has (none is
    here: a run that asked for it would fail to train on CUDA)."""
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _descendants(pid: int) -> list[int]:
    """Process ids below ``pid`` (from /proc), our own processes only."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1]
                                               .split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        found += kids
        frontier += kids
    return found


def _titled(pids: list[int], title: str) -> list[int]:
    out = []
    for p in pids:
        try:
            if Path(f"/proc/{p}/cmdline").read_bytes().startswith(title.encode()):
                out.append(p)
        except OSError:
            pass
    return out


def test_relative_out_checkpoints_and_node_land_on_the_driver(local_ray, tmp_path, monkeypatch):
    runs = load_suite(str(_suite(tmp_path)))
    monkeypatch.chdir(tmp_path)
    counts = run_sweep(runs, "rel", executor="ray", checkpoints=True)
    assert counts == {"total": 2, "skipped": 0, "ok": 2, "failed": 0}
    local = run_sweep(runs, tmp_path / "pool", workers=1)
    assert local["ok"] == 2
    for r in runs:
        rid = run_id(r)
        rec = json.loads((tmp_path / "rel" / "runs" / f"{rid}.json").read_text())
        ckpt = tmp_path / "rel" / "checkpoints" / f"{rid}.safetensors"
        # named relative to OUT (the sweep's directory, or its URI), in the log too
        assert rec["checkpoint"] == f"checkpoints/{rid}.safetensors"
        assert ckpt.stat().st_size > 10_000
        log = json.loads((tmp_path / "rel" / "checkpoints" / f"{rid}.log.json").read_text())
        assert log["checkpoint"] == rec["checkpoint"] and log["node"] == rec["node"]
        assert rec["node"]["ip"] and rec["node"]["host"] and rec["seconds"] > 0
        assert rec["finished"] >= rec["started"]
        pool = json.loads((tmp_path / "pool" / "runs" / f"{rid}.json").read_text())
        assert rec["metrics"] == pool["metrics"]
    # the nodes keep no copies of what they made
    assert not list(Path(os.environ.get("TMPDIR", "/tmp")).glob("idaudit-ray/*/**/*.safetensors"))
    res = runner.invoke(app, ["audit", str(ckpt), "--json", str(tmp_path / "a.json")])
    assert res.exit_code in (0, 1), res.output  # a verdict, whichever
    audited = json.loads((tmp_path / "a.json").read_text())
    assert abs(audited["targets"][0]["metrics"]["r2_h_to_z"] - rec["metrics"]["r2_h_to_z"]
               ) < 1e-6 if "targets" in audited else audited
    res = runner.invoke(app, ["report", str(tmp_path / "rel"), "--no-figures"])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "rel" / "summary.md").read_text()
    row = next(li for li in md.splitlines() if li.startswith(f"| {rec['node']['host']}"))
    assert row.split("|")[2].strip() == "2"  # both runs on the one node


def test_a_gpu_in_the_cluster_does_not_make_cpu_runs_ask_for_it(local_ray, tmp_path):
    runs = load_suite(str(_suite(tmp_path, seeds="[3]")))
    counts = run_sweep(runs, tmp_path / "o", executor="ray")
    assert counts["ok"] == 1, list((tmp_path / "o" / "runs").glob("*"))
    ok, _ = load_results(tmp_path / "o")
    assert ok[0]["device"] == "cpu"
    # asking for a GPU is the user's choice: the GPU recipe then (here: no CUDA, it fails)
    counts = run_sweep(runs, tmp_path / "g", executor="ray", shape=TaskShape(cpus=1, gpus=1))
    failed = json.loads(next((tmp_path / "g" / "runs").glob("*.failed.json")).read_text())
    assert counts["failed"] == 1 and "cuda" in failed["error"].lower(), failed["error"]


def test_another_idaudit_version_is_one_line_naming_the_node(local_ray, tmp_path, monkeypatch):
    from idaudit.experiments import ray_nodes

    runs = load_suite(str(_suite(tmp_path, seeds="[0]")))
    monkeypatch.setattr(ray_nodes, "__version__", "9.9.9")  # the driver's version
    with pytest.raises(IdauditError) as err:
        run_sweep(runs, tmp_path / "o", executor="ray")
    msg = str(err.value)
    assert "has idaudit 0." in msg and "this machine 9.9.9" in msg and "\n" not in msg, msg
    assert not list((tmp_path / "o" / "runs").glob("*"))


def test_a_run_no_node_can_hold_is_refused(local_ray, tmp_path):
    runs = load_suite(str(_suite(tmp_path, seeds="[0]")))
    with pytest.raises(IdauditError, match="no node of the cluster can hold a run of 8 CPUs"):
        run_sweep(runs, tmp_path / "o", executor="ray", shape=TaskShape(cpus=8))
    with pytest.raises(IdauditError, match="cpus_per_run must be a number"):
        run_sweep(runs, tmp_path / "o", executor="ray", shape=TaskShape(cpus=-1))


def test_workers_caps_the_runs_in_flight(local_ray, tmp_path):
    runs = load_suite(str(_suite(tmp_path, steps=300, seeds="[0, 1, 2, 3]")))

    def spans(out: Path) -> list[tuple[float, float]]:
        ok, _ = load_results(out)
        return sorted((r["started"], r["finished"]) for r in ok)

    run_sweep(runs, tmp_path / "one", executor="ray", workers=1)
    one = spans(tmp_path / "one")
    assert len(one) == 4 and all(a[1] <= b[0] for a, b in zip(one, one[1:])), one
    run_sweep(runs, tmp_path / "all", executor="ray")
    both = spans(tmp_path / "all")  # two CPUs: two at a time
    assert any(a[1] > b[0] for a, b in zip(both, both[1:])), both


def test_a_task_ray_loses_is_recorded_failed_and_the_sweep_goes_on(local_ray, tmp_path,
                                                                    monkeypatch):
    from idaudit.experiments import ray_nodes

    monkeypatch.setattr(ray_nodes, "MAX_RETRIES", 0)  # lost at once, not retried
    long = load_suite(str(_suite(tmp_path, steps=20_000, seeds="[7]", name="long.toml")))
    short = load_suite(str(_suite(tmp_path, seeds="[0, 1]")))
    killed: list[int] = []

    def kill_the_first_run():  # the worker process of the first task (ours: below us)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            pids = _titled(_descendants(os.getpid()), "ray::run_on_node")
            for p in pids:
                os.kill(p, signal.SIGKILL)
                killed.append(p)
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_first_run, daemon=True)
    killer.start()
    counts = run_sweep(long + short, tmp_path / "o", executor="ray", workers=1)
    killer.join()
    assert killed and counts == {"total": 3, "skipped": 0, "ok": 2, "failed": 1}, counts
    failed = json.loads((tmp_path / "o" / "runs" / f"{run_id(long[0])}.failed.json").read_text())
    assert failed["status"] == "failed" and "Worker" in failed["error"], failed["error"]
    assert failed["run"] == long[0]
    for r in short:
        assert (tmp_path / "o" / "runs" / f"{run_id(r)}.json").exists()


def test_uri_out_and_ray_options_under_the_local_pool_are_refused(tmp_path, monkeypatch):
    suite = _suite(tmp_path, seeds="[0]")
    monkeypatch.chdir(tmp_path)
    # a URI no store answers to (tests/test_sweep_storage.py sweeps into a real S3)
    res = runner.invoke(app, ["sweep", str(suite), "--out", "zzz://bucket/x", "--executor", "ray"])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert res.output.startswith("error: --out zzz://bucket/x: unknown protocol 'zzz'")
    assert not (tmp_path / "zzz:").exists()
    for flags in (["--address", "10.0.0.1:6379"], ["--cpus-per-run", "2"],
                  ["--gpus-per-run", "1"], ["--memory-per-run", "4"]):
        res = runner.invoke(app, ["sweep", str(suite), "--out", str(tmp_path / "o"), *flags])
        assert res.exit_code == 2 and "apply to --executor ray only" in res.output, res.output


def test_sigterm_stops_a_ray_sweep_with_143_and_its_tasks(tmp_path):
    suite = _suite(tmp_path, steps=200_000, seeds="[0]")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "idaudit", "sweep", str(suite), "--out",
                             str(tmp_path / "o"), "--executor", "ray"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, task = time.monotonic() + 120, []
    while time.monotonic() < deadline and not task and proc.poll() is None:
        task = _titled(_descendants(proc.pid), "ray::run_on_node")
        time.sleep(0.2)
    assert task, proc.communicate(timeout=30)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, (proc.returncode, out, err)
    time.sleep(1.0)
    assert not any(Path(f"/proc/{p}").exists() for p in task), task
    assert not list((tmp_path / "o" / "runs").glob("*.json"))
