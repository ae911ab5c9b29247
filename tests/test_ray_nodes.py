"""The version probe and the room check on real multi-node Ray clusters on this machine
(tests/netns_cluster.py): a node frozen (SIGSTOP) while the sweep checks its nodes is slow,
not a wrong install; a run no node holds waits for Ray's own autoscaler (its fake
multi-node provider) to add a node that can, or is refused when none of its node types can."""

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest
from netns_cluster import Cluster, skip_unless_available
from spiral_suite import write_suite

from idaudit.experiments.suites import load_suite
from idaudit.experiments.sweep import run_id

pytestmark = pytest.mark.cluster

pytest.importorskip("ray")
skip_unless_available()

IDAUDIT = [sys.executable, "-m", "idaudit"]
# a frozen node is declared dead after about period × threshold: 3 s × 10 here, longer than
# the ~15 s it stays frozen
SLOW_HEALTH = {"RAY_health_check_period_ms": "3000", "RAY_health_check_failure_threshold": "10",
               "RAY_health_check_timeout_ms": "3000"}


def _records(out: Path) -> dict[str, dict]:
    return {p.name.removesuffix(".json"): json.loads(p.read_text())
            for p in sorted((out / "runs").glob("*.json"))}


class _Lines:
    """A pipe's lines, read on a thread as they come."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [li for li in self.lines if text in li]
            if found:
                return found[0]
            time.sleep(0.2)
        raise AssertionError(f"no line with {text!r} in {timeout} s: {self.lines}")

    def join(self) -> str:
        self._thread.join(timeout=30)
        return "\n".join(self.lines)


def test_a_node_frozen_during_the_version_check_is_slow_not_refused(tmp_path):
    suite = write_suite(tmp_path / "s.toml", 300, "[0, 1, 2, 3]")
    ids = sorted(run_id(r) for r in load_suite(str(suite)))
    out = tmp_path / "o"
    with Cluster(workers=2, cpus_per_worker=1, env=SLOW_HEALTH) as c:
        stopped = c.pause_node(2)
        assert stopped, "no process in node 2's namespace"
        t0 = time.monotonic()
        try:
            proc = c.popen_driver([*IDAUDIT, "sweep", str(suite), "--out", str(out),
                                   "--executor", "ray", "--address", c.address],
                                  env={"IDAUDIT_RAY_PROBE_TIMEOUT": "5"})
            err = _Lines(proc.stderr)
            note = err.wait_for("did not answer the version check", 120)
            noted_s = time.monotonic() - t0
            time.sleep(2.0)
        finally:
            c.resume_node(2)
        frozen_s = time.monotonic() - t0
        stdout, _ = proc.communicate(timeout=600)
        stderr = err.join()
        seconds = time.monotonic() - t0
    assert proc.returncode == 0, (stdout, stderr)
    assert note == (f"node {c.node_ip(2)} ({os.uname().nodename}) did not answer the version "
                    "check in 5 s: slow, not refused; its tasks check their own idaudit"), note
    assert sum("did not answer the version check" in li for li in stderr.splitlines()) == 1
    assert "install the same idaudit" not in stderr and "left the cluster" not in stderr
    assert " ".join(stdout.split()) == (f"4 runs: 0 already done, 4 ok, 0 failed; results "
                                        f"in {out / 'runs'}"), stdout
    recs = _records(out)
    assert sorted(recs) == ids and all(r["status"] == "ok" for r in recs.values())
    assert {r["node"]["ip"] for r in recs.values()} <= set(c.worker_ips)
    print(f"node 2 ({len(stopped)} processes) frozen {frozen_s:.1f} s; the note after "
          f"{noted_s:.1f} s; 4 runs ok in {seconds:.1f} s; runs per node "
          f"{[sum(r['node']['ip'] == ip for r in recs.values()) for ip in c.worker_ips]}")


NODE_TYPES = {"ray.worker.cpu2": {"resources": {"CPU": 2}, "min_workers": 0, "max_workers": 1}}


def test_a_run_no_node_holds_waits_for_the_autoscaler_or_is_refused(tmp_path):
    from ray.autoscaler._private.fake_multi_node.node_provider import FAKE_HEAD_NODE_ID

    suite = write_suite(tmp_path / "s.toml", 200, "[0, 1]")
    ids = sorted(run_id(r) for r in load_suite(str(suite)))
    out = tmp_path / "o"
    c = Cluster(workers=0)
    try:
        c.start_autoscaling(1, NODE_TYPES, v2=True)
        t0 = time.monotonic()
        res = c.run_driver([*IDAUDIT, "sweep", str(suite), "--out", str(out), "--executor",
                            "ray", "--address", c.address, "--cpus-per-run", "2"], timeout=400)
        grew_s = time.monotonic() - t0
        t0 = time.monotonic()
        big = c.run_driver([*IDAUDIT, "sweep", str(suite), "--out", str(tmp_path / "big"),
                            "--executor", "ray", "--address", c.address, "--cpus-per-run",
                            "4"], timeout=300)
        refused_s = time.monotonic() - t0
    finally:
        c.close()
    assert res.returncode == 0, (res.stdout, res.stderr)
    waits = [li for li in res.stderr.splitlines()
             if li.startswith("waiting for the cluster to add a node that can hold a run of "
                              "2 CPUs, 0 GPUs")]
    assert len(waits) >= 1, res.stderr
    recs = _records(out)
    assert sorted(recs) == ids and all(r["status"] == "ok" for r in recs.values())
    nodes = {r["node"]["id"] for r in recs.values()}
    assert len(nodes) == 1 and FAKE_HEAD_NODE_ID not in nodes, nodes
    assert big.returncode == 2, (big.stdout, big.stderr)
    lines = big.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("waiting for the cluster to add a node")
    assert lines[-1] == (
        "error: no node of the cluster can hold a run of 4 CPUs, 0 GPUs (the largest has 2 CPUs, 0 "
        "GPUs, and its autoscaler reports that none of the node types it can add can hold "
        "one): lower --cpus-per-run/--gpus-per-run/--memory-per-run"), big.stderr
    assert not (tmp_path / "big" / "runs").exists()
    print(f"grown and 2 runs ok in {grew_s:.1f} s ({len(waits)} waiting lines); 4 CPUs "
          f"refused in {refused_s:.1f} s")


def test_a_node_killed_just_before_the_sweep_is_not_a_wrong_install(tmp_path):
    """Node 2 is SIGKILLed just before the sweep starts; Ray marks it dead only ~30 s later
    (the slow health checks), while its version check waits: it is skipped with one note,
    and the sweep goes on, its runs on node 1."""
    suite = write_suite(tmp_path / "s.toml", 200, "[0, 1]")
    ids = sorted(run_id(r) for r in load_suite(str(suite)))
    out = tmp_path / "o"
    with Cluster(workers=2, cpus_per_worker=1, env=SLOW_HEALTH) as c:
        c.kill_node(2)
        t0 = time.monotonic()
        res = c.run_driver([*IDAUDIT, "sweep", str(suite), "--out", str(out), "--executor",
                            "ray", "--address", c.address], timeout=400,
                           env={"IDAUDIT_RAY_PROBE_TIMEOUT": "60"})
        seconds = time.monotonic() - t0
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert "install the same idaudit" not in res.stderr
    notes = [li for li in res.stderr.splitlines() if f"node {c.node_ip(2)} " in li]
    print(f"2 runs ok on node 1 in {seconds:.1f} s; notes about node 2: {notes}")
    assert notes == [f"node {c.node_ip(2)} ({os.uname().nodename}) left the cluster during "
                     "the version check: skipped"], res.stderr
    assert seconds < 60 + 30, seconds  # not held for the whole probe timeout and more
    recs = _records(out)
    assert sorted(recs) == ids and all(r["status"] == "ok" for r in recs.values())
    assert {r["node"]["ip"] for r in recs.values()} == {c.node_ip(1)}


def test_autoscaler_v1_adds_the_node_a_run_needs(tmp_path):
    suite = write_suite(tmp_path / "s.toml", 200, "[0]")
    out = tmp_path / "o"
    c = Cluster(workers=0)
    try:
        c.start_autoscaling(1, NODE_TYPES, v2=False)
        t0 = time.monotonic()
        res = c.run_driver([*IDAUDIT, "sweep", str(suite), "--out", str(out), "--executor",
                            "ray", "--address", c.address, "--cpus-per-run", "2"], timeout=400)
        seconds = time.monotonic() - t0
    finally:
        c.close()
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert sum(li.startswith("waiting for the cluster to add a node that can hold a run of 2 "
                             "CPUs, 0 GPUs") for li in res.stderr.splitlines()) >= 1, res.stderr
    recs = _records(out)
    assert len(recs) == 1 and all(r["status"] == "ok" for r in recs.values())
    # the fake provider's first added node: ff…f00001 (the head's id is Ray's own)
    (rec,) = recs.values()
    assert rec["node"]["id"] == "f" * 51 + "00001", rec["node"]
    print(f"v1: grown and 1 run ok in {seconds:.1f} s")
