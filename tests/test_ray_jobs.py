"""A sweep submitted as a Ray job (``ray job submit``) to a real cluster of network namespaces
(tests/netns_cluster.py): the head serves Ray's job API; the submitting process sends the suite
as the job's working directory and exits; the sweep runs on the head, joins the cluster it
runs in (no ``--address``: Ray's job sets ``RAY_ADDRESS``), and its nodes file the results in
object storage (moto's real S3 server, in the head's namespace), from which another process
reports them."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from netns_cluster import Cluster, skip_unless_available
from s3_server import BUCKET, LIST_SCRIPT, MAKE_BUCKET_SCRIPT, client_env, finished_records, server_process
from spiral_suite import write_suite

from idaudit.experiments.suites import load_suite
from idaudit.experiments.sweep import run_id

pytestmark = pytest.mark.cluster

pytest.importorskip("ray")
pytest.importorskip("ray.dashboard.modules.job.sdk")  # ray[default]: the job API
pytest.importorskip("s3fs")
pytest.importorskip("moto")
skip_unless_available()

RAY = str(Path(sys.executable).parent / "ray")
S3_PORT = 7480  # in the head's own network namespace
STATUS = ("import sys; from ray.job_submission import JobSubmissionClient; "
          "print(JobSubmissionClient(sys.argv[1]).get_job_status(sys.argv[2]).value)")


def _job_status(c: Cluster, job: str) -> str:
    """The job's status, as Ray's job API gives it (``JobStatus``: PENDING … SUCCEEDED)."""
    res = c.run_driver([sys.executable, "-c", STATUS, c.dashboard_url, job], timeout=60)
    return res.stdout.strip() or f"unknown: {res.stderr[-300:]}"


def _path_env() -> dict[str, str]:
    """This idaudit and the tests' helpers first on every process's path (the job's too)."""
    import idaudit

    paths = [str(Path(idaudit.__file__).resolve().parents[1]), str(Path(__file__).parent)]
    return {"PYTHONPATH": os.pathsep.join(
        [*paths, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])}


def test_a_sweep_submitted_as_a_ray_job_runs_on_the_cluster_after_the_submitter_left(tmp_path):
    work = tmp_path / "job"
    work.mkdir()
    suite = write_suite(work / "s.toml", 300, "[0, 1, 2, 3]")
    ids = sorted(run_id(r) for r in load_suite(str(suite)))
    uri = f"s3://{BUCKET}/job-sweep"
    c = Cluster(workers=2, cpus_per_worker=1, dashboard=True)
    c.env.update({**client_env(f"http://{c.head_ip}:{S3_PORT}"), **_path_env()})
    with c, server_process(c.head_ip, S3_PORT, ["ip", "netns", "exec", c.namespaces[0]]):
        made = c.run_driver([sys.executable, "-c", MAKE_BUCKET_SCRIPT, BUCKET], timeout=60)
        assert made.returncode == 0, made.stderr
        t0 = time.monotonic()
        submit = c.run_driver(
            [RAY, "job", "submit", "--address", c.dashboard_url, "--submission-id", "sweep-1",
             "--working-dir", str(work), "--no-wait", "--", sys.executable, "-m", "idaudit",
             "sweep", "s.toml", "--out", uri, "--executor", "ray"], timeout=120)
        assert submit.returncode == 0, (submit.stdout, submit.stderr)
        submitted_s = time.monotonic() - t0  # the submitter is gone from here on
        deadline, status = time.monotonic() + 600, ""
        while time.monotonic() < deadline:
            status = _job_status(c, "sweep-1")
            if status in ("SUCCEEDED", "FAILED", "STOPPED"):
                break
            time.sleep(2)
        logs = c.run_driver([RAY, "job", "logs", "--address", c.dashboard_url, "sweep-1"],
                            timeout=60).stdout
        listed = c.run_driver([sys.executable, "-c", LIST_SCRIPT, BUCKET, "job-sweep"],
                              timeout=60)
        report = c.run_driver([sys.executable, "-m", "idaudit", "report", uri, "--no-figures"],
                              timeout=300)
        summary = c.run_driver([sys.executable, "-c", LIST_SCRIPT.replace('"/runs/" in k',
                                                                          'k.endswith(".csv")'),
                                BUCKET, "job-sweep/summary"], timeout=60)
    assert status == "SUCCEEDED", logs[-3000:]
    assert submitted_s < 60, submitted_s
    assert " ".join(logs.split()).endswith(
        f"4 runs: 0 already done, 4 ok, 0 failed; results in {uri}/runs"), logs[-2000:]
    records = finished_records(json.loads(listed.stdout))
    assert sorted(records) == ids
    assert {r["status"] for r in records.values()} == {"ok"}
    assert {r["node"]["ip"] for r in records.values()} <= set(c.worker_ips)
    assert all(r["metrics"]["r2_h_to_z_heldout"] > 0.5 for r in records.values()), records
    # the report, from another process, reads the job's records in the store and writes there
    assert report.returncode == 0, report.stderr[-2000:]
    csv = json.loads(summary.stdout)["job-sweep/summary.csv"]
    assert csv.count("\n") >= 2 and "r2" in csv.splitlines()[0], csv[:500]


def test_runtime_env_brings_idaudit_to_a_node_without_it(tmp_path):
    """Node 2 runs a Python that has torch and Ray but no idaudit: without --runtime-env the
    sweep is refused in one line naming it; with a runtime environment whose py_modules is
    the driver's idaudit, Ray ships it and every run is ok, node 2's included."""
    import idaudit

    site = next(p for p in sys.path if p.endswith("site-packages"))
    base = str(Path(sys.base_prefix) / "bin" / "python3")  # no venv: no idaudit, Ray by path
    suite = write_suite(tmp_path / "s.toml", 300, "[0, 1, 2, 3]")
    env_file = tmp_path / "env.yaml"
    env_file.write_text(f"py_modules:\n  - {Path(idaudit.__file__).parent}\n")
    with Cluster(workers=2, cpus_per_worker=1, node_env={2: {"PYTHONPATH": site}},
                 node_python={2: base}) as c:
        cmd = [sys.executable, "-m", "idaudit", "sweep", str(suite), "--executor", "ray",
               "--address", c.address]
        refused = c.run_driver([*cmd, "--out", str(tmp_path / "a")], timeout=300)
        res = c.run_driver([*cmd, "--out", str(tmp_path / "b"), "--runtime-env", str(env_file)],
                           timeout=600)
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    assert f"node {c.node_ip(2)} " in refused.stderr and "has no idaudit" in refused.stderr
    assert res.returncode == 0, (res.stdout, res.stderr[-3000:])
    assert " ".join(res.stdout.split()).startswith("4 runs: 0 already done, 4 ok, 0 failed")
    recs = [json.loads(p.read_text()) for p in (tmp_path / "b" / "runs").glob("*.json")]
    assert len(recs) == 4 and {r["status"] for r in recs} == {"ok"}
    assert c.node_ip(2) in {r["node"]["ip"] for r in recs}  # the node without idaudit ran some
