"""A Ray sweep into object storage on a real cluster of three nodes on this machine
(tests/netns_cluster.py), with a real S3 endpoint: moto's S3 server in the head's network
namespace, which every node reaches (``AWS_ENDPOINT_URL`` in the cluster's environment). The
nodes file their runs into S3 themselves, so the driver may die: a second driver, from
another working directory, resumes the sweep, and every run is recorded exactly once."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from netns_cluster import Cluster, skip_unless_available
from s3_server import (
    BUCKET,
    LIST_SCRIPT,
    MAKE_BUCKET_SCRIPT,
    client_env,
    finished_records,
    server_process,
)
from spiral_suite import write_suite

pytestmark = pytest.mark.cluster

pytest.importorskip("ray")
pytest.importorskip("s3fs")
pytest.importorskip("moto")
skip_unless_available()

IDAUDIT = [sys.executable, "-m", "idaudit"]
S3_PORT = 7480  # in the head's own network namespace, where nothing else listens on it
SEEDS = 6

def _env() -> dict[str, str]:
    """This idaudit (and the tests' helpers) first on every process's path."""
    import idaudit

    src = str(Path(idaudit.__file__).resolve().parents[1])
    tests = str(Path(__file__).resolve().parent)
    return {"PYTHONPATH": os.pathsep.join(
        [src, tests, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])}


def _objects(cluster: Cluster, prefix: str) -> dict[str, object]:
    res = cluster.run_driver([sys.executable, "-c", LIST_SCRIPT, BUCKET, prefix], timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_a_driver_killed_mid_sweep_is_resumed_from_another_directory(tmp_path):
    cluster = Cluster(workers=2, cpus_per_worker=1)
    endpoint = f"http://{cluster.head_ip}:{S3_PORT}"
    cluster.env.update({**client_env(endpoint), **_env()})  # the nodes' and drivers' too
    suite = write_suite(tmp_path / "s.toml", steps=400, seeds=str(list(range(SEEDS))))
    prefix = "sweep"
    uri = f"s3://{BUCKET}/{prefix}"
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    cmd = [*IDAUDIT, "sweep", str(suite), "--executor", "ray", "--address", cluster.address,
           "--out", uri, "--checkpoints"]
    with cluster, server_process(cluster.head_ip, S3_PORT,
                                 ["ip", "netns", "exec", cluster.namespaces[0]]):
        made = cluster.run_driver([sys.executable, "-c", MAKE_BUCKET_SCRIPT, BUCKET], timeout=60)
        assert made.returncode == 0, made.stderr
        driver = cluster.popen_driver(cmd, cwd=first)
        deadline = time.monotonic() + 400
        try:
            while time.monotonic() < deadline and driver.poll() is None:
                if len(finished_records(_objects(cluster, prefix))) >= 2:
                    break
                time.sleep(1.0)
        finally:
            os.kill(driver.pid, signal.SIGKILL)  # the driver only: its nodes' tasks go on
            _, err = driver.communicate(timeout=60)
        before = finished_records(_objects(cluster, prefix))
        assert 2 <= len(before) < SEEDS, (len(before), err[-2000:])
        # a second driver, elsewhere (it writes nothing where it runs)
        res = cluster.run_driver(["sh", "-c", f"cd {second} && exec \"$@\"", "sh", *cmd],
                                 timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        objects = _objects(cluster, prefix)
    after = finished_records(objects)
    line = res.stdout.strip().splitlines()[-1]
    done, ok = int(line.split(": ")[1].split()[0]), int(line.split(", ")[1].split()[0])
    assert line.startswith(f"{SEEDS} runs: ") and done + ok == SEEDS and done >= len(before), line
    assert "0 failed" in line, line
    assert len(after) == SEEDS and {r["run"]["seed"] for r in after.values()} == set(range(SEEDS))
    # each run recorded once: a record once there is never written again (a node that finds
    # one keeps it), and no failure left beside a success
    assert all(after[rid] == rec for rid, rec in before.items())
    assert not [k for k in objects if k.endswith(".failed.json")]
    runs = [k for k in objects if "/runs/" in k]
    assert sorted(runs) == sorted(f"{prefix}/runs/{rid}.json" for rid in after)
    for rid, rec in after.items():
        assert rec["status"] == "ok" and rec["node"]["ip"] in cluster.worker_ips
        assert rec["checkpoint"] == f"checkpoints/{rid}.safetensors"
        assert objects[f"{prefix}/{rec['checkpoint']}"] > 10_000  # the node put it there
        assert f"{prefix}/checkpoints/{rid}.log.json" in objects
    assert not list(second.iterdir()) and not list(first.iterdir())  # nothing on the driver


def test_a_node_killed_while_it_trains_and_files_leaves_each_run_recorded_once(tmp_path):
    """The node that filed the first record is SIGKILLed while it works on its next run
    (training it, or putting its files): Ray runs that run again on the other node, and the
    store ends with exactly one record, one checkpoint and one log per run, no failure, and
    no other object."""
    cluster = Cluster(workers=2, cpus_per_worker=1)
    endpoint = f"http://{cluster.head_ip}:{S3_PORT}"
    cluster.env.update({**client_env(endpoint), **_env()})
    runs = 4
    suite = write_suite(tmp_path / "s.toml", steps=400, seeds=str(list(range(runs))))
    prefix = "killed"
    cmd = [*IDAUDIT, "sweep", str(suite), "--executor", "ray", "--address", cluster.address,
           "--out", f"s3://{BUCKET}/{prefix}", "--checkpoints"]
    with cluster, server_process(cluster.head_ip, S3_PORT,
                                 ["ip", "netns", "exec", cluster.namespaces[0]]):
        made = cluster.run_driver([sys.executable, "-c", MAKE_BUCKET_SCRIPT, BUCKET], timeout=60)
        assert made.returncode == 0, made.stderr
        driver = cluster.popen_driver(cmd, cwd=tmp_path)
        deadline, first = time.monotonic() + 400, {}
        while time.monotonic() < deadline and driver.poll() is None and not first:
            first = finished_records(_objects(cluster, prefix))
            time.sleep(0.5)
        assert first, driver.communicate(timeout=60)
        killed_ip = next(iter(first.values()))["node"]["ip"]
        cluster.kill_node(cluster.worker_ips.index(killed_ip) + 1)
        out, err = driver.communicate(timeout=600)
        objects = _objects(cluster, prefix)
    assert driver.returncode == 0, (out, err[-3000:])
    assert " ".join(out.split()).startswith(f"{runs} runs: 0 already done, {runs} ok, 0 failed")
    after = finished_records(objects)
    assert len(after) == runs and {r["run"]["seed"] for r in after.values()} == set(range(runs))
    assert all(after[rid] == rec for rid, rec in first.items())  # never written again
    assert sorted(objects) == sorted(
        [f"{prefix}/sweep.json"] + [f"{prefix}/runs/{rid}.json" for rid in after]
        + [f"{prefix}/checkpoints/{rid}.{ext}" for rid in after
           for ext in ("safetensors", "log.json")])
    assert all(objects[f"{prefix}/checkpoints/{rid}.safetensors"] > 10_000 for rid in after)
