"""Sweeps on a real Ray cluster of three nodes on this machine (tests/netns_cluster.py): a head
and two one-CPU workers, each in a network namespace of its own, the workers with a private
view of the disk (they see none of the driver's files). The driver runs in the head's
namespace. Checked against the local pool of the same runs."""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from netns_cluster import Cluster, skip_unless_available
from spiral_suite import write_suite

from idaudit.experiments.suites import load_suite, shrink
from idaudit.experiments.sweep import run_id, run_sweep

pytestmark = pytest.mark.cluster

pytest.importorskip("ray")
skip_unless_available()

IDAUDIT = [sys.executable, "-m", "idaudit"]
CPU_SCRIPT = ("import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR', "
              "log_to_driver=False); print('CPU', ray.available_resources().get('CPU', 0.0))")
REACHER = ["--seeds", "1", "--only", "rho=0.9", "--only", "mode=ou", "--only", "lamb=5e-3,1e-2",
           "--set", "pairs=120", "--set", "epochs=1", "--set", "n_eval=60", "--set", "batch=64"]


def _suite(path: Path, steps: int, seeds: str) -> Path:
    return write_suite(path, steps, seeds)


def _records(out: Path) -> dict[str, dict]:
    return {p.name.removesuffix(".json"): json.loads(p.read_text())
            for p in sorted((out / "runs").glob("*.json"))}


def _same_metrics(a: dict, b: dict) -> None:
    """Every number of two runs' metrics equal to float tolerance."""
    assert a.keys() == b.keys()
    for k, v in a.items():
        if isinstance(v, float) and not math.isnan(v):
            assert b[k] == pytest.approx(v, rel=1e-6, abs=1e-9), k
        elif not isinstance(v, float):
            assert b[k] == v, k


def _free_cpus(cluster: Cluster) -> float:
    res = cluster.run_driver([sys.executable, "-c", CPU_SCRIPT, cluster.address], timeout=60)
    line = next(li for li in res.stdout.splitlines() if li.startswith("CPU "))
    return float(line.split()[1])


def _wait_for(predicate, timeout: float, what: str, step: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def cluster():
    with Cluster(workers=2, cpus_per_worker=1, env={"MUJOCO_GL": "egl"}) as c:
        yield c


@pytest.mark.skipif(__import__("importlib").util.find_spec("dm_control") is None,
                    reason="needs the reacher extra")
def test_reacher_renders_once_on_the_cluster_and_checkpoints_return(cluster, tmp_path):
    driver = tmp_path / "driver"
    driver.mkdir()
    proc = cluster.popen_driver([*IDAUDIT, "sweep", "reacher", "--out", "r", "--executor", "ray",
                                 "--address", cluster.address, "--checkpoints", *REACHER],
                                cwd=driver)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, (out, err)
    recs = _records(driver / "r")
    # two training steps on 120 pairs may leave h near constant: such runs are ok and counted
    # as collapsed, as their records say (training/collapse.py)
    collapsed = sum(r["status"] == "collapsed" for r in recs.values())
    said = f" ({collapsed} collapsed)" if collapsed else ""
    assert out.strip().splitlines() == [f"2 runs: 0 already done, 2 ok{said}, 0 failed; "
                                        "results in r/runs"], out  # Ray's lines: not stdout
    assert "render on the cluster" in err
    data = driver / "r" / "data" / "reacher-ou-rho0.9-n120-s0-px32-e60"
    assert json.loads((data / "meta.json").read_text())["status"] == "complete"
    assert len(recs) == 2 and {r["node"]["ip"] for r in recs.values()} <= set(cluster.worker_ips)
    # the encoders came back to the driver, and audit there finds their dataset
    for rid, rec in recs.items():
        ckpt = driver / "r" / "checkpoints" / f"{rid}.safetensors"
        assert rec["checkpoint"] == f"checkpoints/{rid}.safetensors" and ckpt.exists()
    rid, rec = next(iter(recs.items()))  # (a record's paths are relative to OUT)
    audit = subprocess.run([*IDAUDIT, "audit", str(driver / "r" / rec["checkpoint"]), "--json",
                            str(tmp_path / "audit.json")], capture_output=True, text=True,
                           timeout=300, env={**os.environ, "MUJOCO_GL": "egl"})
    assert audit.returncode in (0, 1), audit.stderr  # a verdict, not an error
    audited = json.loads((tmp_path / "audit.json").read_text())
    print(f"reacher checkpoint {rid} from {rec['node']['ip']} audited on the driver: "
          f"exit {audit.returncode}, held-out R² {rec['metrics']['r2_h_to_z_heldout']:.4f}")
    assert json.dumps(audited)  # a report was written
    # the same runs in the local pool: the same numbers
    from idaudit.experiments.suites import SUITES

    runs = shrink(SUITES["reacher"](), seeds=1,
                  only={"rho": [0.9], "mode": ["ou"], "lamb": [5e-3, 1e-2]},
                  overrides={"pairs": 120, "epochs": 1, "n_eval": 60, "batch": 64})
    run_sweep(runs, tmp_path / "pool", workers=1)
    pool = _records(tmp_path / "pool")
    assert pool.keys() == recs.keys()
    for rid in recs:
        _same_metrics(pool[rid]["metrics"], recs[rid]["metrics"])


def test_sigterm_to_the_driver_exits_143_and_frees_the_cluster(cluster, tmp_path):
    suite = _suite(tmp_path / "long.toml", 200_000, "[0, 1]")
    proc = cluster.popen_driver([*IDAUDIT, "sweep", str(suite), "--out", str(tmp_path / "o"),
                                 "--executor", "ray", "--address", cluster.address])
    _wait_for(lambda: _free_cpus(cluster) == 0.0, 120, "both workers busy")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, (proc.returncode, out, err)
    _wait_for(lambda: _free_cpus(cluster) == 2.0, 30, "the cancelled tasks' CPUs back")
    assert not list((tmp_path / "o" / "runs").glob("*.json"))


def test_sweep_across_nodes_with_a_node_killed_matches_the_local_pool(cluster, tmp_path):
    suite = _suite(tmp_path / "s.toml", 400, "[0, 1, 2, 3]")
    driver = tmp_path / "driver"
    driver.mkdir()
    argv = [*IDAUDIT, "sweep", str(suite), "--out", "sw", "--executor", "ray", "--address",
            cluster.address, "--checkpoints"]
    t0 = time.monotonic()
    proc = cluster.popen_driver(argv, cwd=driver)
    first = _wait_for(lambda: sorted((driver / "sw" / "runs").glob("*.json")), 300,
                      "the first record")
    killed_ip = json.loads(first[0].read_text())["node"]["ip"]
    cluster.kill_node(cluster.worker_ips.index(killed_ip) + 1)
    out, err = proc.communicate(timeout=600)
    seconds = time.monotonic() - t0
    assert proc.returncode == 0, (out, err)
    assert out.strip().splitlines() == ["4 runs: 0 already done, 4 ok, 0 failed; results in "
                                        "sw/runs"], out
    # Ray's notes about the lost node: on stderr, one line each, not its 5-47-line reports
    notes = [li for li in err.splitlines() if li.startswith("ray: ")]
    assert "(raylet)" not in err and all(len(li) <= 305 for li in notes), err
    print("\n".join(notes))
    recs = _records(driver / "sw")
    assert len(recs) == 4 and not list((driver / "sw" / "runs").glob("*.failed.json"))
    per_node: dict[str, int] = {}
    for rec in recs.values():
        per_node[rec["node"]["ip"]] = per_node.get(rec["node"]["ip"], 0) + 1
    print(f"runs per node {per_node}; killed {killed_ip} after its first run; {seconds:.0f} s")
    assert killed_ip in per_node and set(per_node) == set(cluster.worker_ips), per_node
    for rid, rec in recs.items():
        ckpt = driver / "sw" / "checkpoints" / f"{rid}.safetensors"
        assert rec["checkpoint"] == f"checkpoints/{rid}.safetensors"
        assert ckpt.stat().st_size > 10_000
        log = json.loads((driver / "sw" / "checkpoints" / f"{rid}.log.json").read_text())
        assert log["checkpoint"] == rec["checkpoint"]
    # no half-written or duplicated file: exactly a record, a checkpoint and a log per run (and
    # the suite's name, sweep.json)
    assert sorted(p.name for p in (driver / "sw").rglob("*") if p.is_file()) == sorted(
        [f"{rid}.json" for rid in recs] + [f"{rid}.safetensors" for rid in recs]
        + [f"{rid}.log.json" for rid in recs] + ["sweep.json"])
    # the local pool of the same runs gives the same numbers
    runs = load_suite(str(suite))
    run_sweep(runs, tmp_path / "pool", workers=1)
    pool = _records(tmp_path / "pool")
    assert pool.keys() == recs.keys() == {run_id(r) for r in runs}
    for rid in recs:
        _same_metrics(pool[rid]["metrics"], recs[rid]["metrics"])
    # a rerun on the one node left runs nothing; the report counts runs per node
    res = cluster.run_driver([*IDAUDIT, "sweep", str(suite), "--out", str(driver / "sw"),
                              "--executor", "ray", "--address", cluster.address,
                              "--checkpoints"], timeout=300)
    assert res.returncode == 0 and "4 already done, 0 ok" in res.stdout, (res.stdout, res.stderr)
    res = subprocess.run([*IDAUDIT, "report", str(driver / "sw"), "--no-figures"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    md = (driver / "sw" / "summary.md").read_text()
    for ip, n in per_node.items():
        assert any(li.startswith("| ") and f"({ip}) | {n} |" in li for li in md.splitlines()), md


def _other_idaudit(tmp_path: Path) -> Path:
    """A directory holding this idaudit as version 0.0.0+other (a node's PYTHONPATH)."""
    import idaudit

    other = tmp_path / "other"
    shutil.copytree(Path(idaudit.__file__).parent, other / "idaudit")
    version = other / "idaudit" / "core" / "version.py"
    text = version.read_text()
    assert idaudit.__version__ in text
    version.write_text(text.replace(idaudit.__version__, "0.0.0+other"))
    return other


def test_a_node_without_idaudit_or_with_another_version_is_one_line(tmp_path):
    other = _other_idaudit(tmp_path)
    site = next(p for p in sys.path if p.endswith("site-packages"))
    base = str(Path(sys.base_prefix) / "bin" / "python3")  # no venv: no idaudit, Ray by path
    suite = _suite(tmp_path / "s.toml", 40, "[0]")
    with Cluster(workers=3, cpus_per_worker=1,
                 node_env={2: {"PYTHONPATH": str(other)}, 3: {"PYTHONPATH": site}},
                 node_python={3: base}) as c:
        res = c.run_driver([*IDAUDIT, "sweep", str(suite), "--out", str(tmp_path / "o"),
                            "--executor", "ray", "--address", c.address], timeout=300)
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    msg = lines[0]
    assert f"node {c.node_ip(2)} " in msg and "has idaudit 0.0.0+other, this machine" in msg, msg
    assert f"node {c.node_ip(3)} " in msg and "has no idaudit" in msg, msg
    assert c.node_ip(1) not in msg
    assert not list((tmp_path / "o" / "runs").glob("*"))


def test_a_node_that_joins_with_another_idaudit_is_avoided_and_its_runs_go_elsewhere(tmp_path):
    """Node 2 joins after the sweep checked its nodes, with another idaudit: the runs it is
    given go back to the queue (none fails), Ray's scheduler keeps it out from then on, and
    the sweep's last line names it."""
    import socket

    import idaudit

    suite = _suite(tmp_path / "s.toml", 300, "[0, 1, 2, 3, 4, 5]")
    ids = sorted(run_id(r) for r in load_suite(str(suite)))
    runs_dir = tmp_path / "o" / "runs"
    with Cluster(workers=2, cpus_per_worker=1, later={2},
                 node_env={2: {"PYTHONPATH": str(_other_idaudit(tmp_path))}}) as c:
        proc = c.popen_driver([*IDAUDIT, "sweep", str(suite), "--out", str(tmp_path / "o"),
                               "--executor", "ray", "--address", c.address])
        _wait_for(lambda: sorted(runs_dir.glob("*.json")), 300, "the first record")
        c.add_node(2)
        out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, (out, err)
    assert " ".join(out.split()) == (  # (the console wraps the long path)
        f"6 runs: 0 already done, 6 ok, 0 failed; results in {runs_dir}"), out
    assert sorted(p.name for p in runs_dir.iterdir()) == [f"{i}.json" for i in ids]
    assert {rec["node"]["ip"] for rec in _records(tmp_path / "o").values()} == {c.node_ip(1)}
    assert err.strip().splitlines()[-1] == (
        f"avoided node {c.node_ip(2)} ({socket.gethostname()}) has idaudit 0.0.0+other, this "
        f"machine {idaudit.__version__}: its runs went to the other nodes"), err


def test_a_sweep_left_with_only_nodes_of_another_idaudit_stops_in_one_line(tmp_path):
    """The one good node dies mid-sweep and its replacement joins with another idaudit: the
    tasks sent there come back, the node is avoided, and with no node left that could run
    them the sweep stops (exit 2, one line naming the node) instead of waiting for ever; the
    runs already recorded stay."""
    suite = _suite(tmp_path / "s.toml", 400, "[0, 1, 2, 3, 4, 5]")
    runs_dir = tmp_path / "o" / "runs"
    with Cluster(workers=2, cpus_per_worker=1, later={2},
                 node_env={2: {"PYTHONPATH": str(_other_idaudit(tmp_path))}}) as c:
        proc = c.popen_driver([*IDAUDIT, "sweep", str(suite), "--out", str(tmp_path / "o"),
                               "--executor", "ray", "--address", c.address])
        _wait_for(lambda: sorted(runs_dir.glob("*.json")), 300, "the first record")
        c.kill_node(1)
        c.add_node(2)
        out, err = proc.communicate(timeout=600)
    assert proc.returncode == 2, (out, err[-3000:])
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: no node left that can hold a run with this idaudit: "), err
    assert f"node {c.node_ip(2)} " in last and "has idaudit 0.0.0+other" in last, last
    assert "install the same idaudit on every node" in last, last
    done = [p for p in runs_dir.glob("*.json") if not p.name.endswith(".failed.json")]
    assert 1 <= len(done) < 6
