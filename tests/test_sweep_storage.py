"""Sweeps whose OUT is in object storage (``--out s3://bucket/prefix``), against a real S3
endpoint: moto's S3 server on 127.0.0.1 (tests/s3_server.py), reached through s3fs as any
S3 would be. The same sweep into S3 and into a local directory gives the same numbers; a
rerun skips what is recorded; ``idaudit report`` and ``idaudit audit`` read from S3; a sweep
killed mid-run leaves every record whole, and its resumption records each run once."""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import one_line, run
from s3_server import BUCKET, client_env, keys, make_bucket, threaded_server, unique_prefix
from spiral_suite import write_suite

pytest.importorskip("s3fs")
pytest.importorskip("moto")

IDAUDIT = [sys.executable, "-m", "idaudit"]


def _env() -> dict[str, str]:
    """This process's environment, with this idaudit first on the path of a subprocess that
    runs in another working directory."""
    import idaudit

    src = str(Path(idaudit.__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [src, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])}


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server with the bucket :data:`BUCKET`; this process's environment (and so
    its subprocesses') points at it while the module's tests run. Gives the endpoint."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    with threaded_server() as endpoint:
        env = client_env(endpoint)
        before = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            make_bucket(endpoint)
            yield endpoint
        finally:
            for k, v in before.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _records(endpoint: str, prefix: str) -> dict[str, dict]:
    """The finished records under ``s3://BUCKET/prefix/runs``, by run id (read with boto3)."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint)
    found = {}
    for key in keys(endpoint, BUCKET, f"{prefix}/runs/"):
        if key.endswith(".json") and not key.endswith(".failed.json"):
            body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
            found[key.rsplit("/", 1)[1].removesuffix(".json")] = json.loads(body)
    return found


def test_a_sweep_into_s3_matches_a_local_one_resumes_and_reports(s3, tmp_path):
    suite = write_suite(tmp_path / "s.toml", steps=40, seeds="[0, 1]")
    prefix, local = unique_prefix(), tmp_path / "local"
    uri = f"s3://{BUCKET}/{prefix}"
    for out in (str(local), uri):
        res = run("sweep", suite, "--out", out, "--workers", 1, "--checkpoints")
        assert res.exit_code == 0, res.output
        assert "2 runs: 0 already done, 2 ok, 0 failed" in res.output
    stored = _records(s3, prefix)
    assert len(stored) == 2
    for rid, rec in stored.items():
        mine = json.loads((local / "runs" / f"{rid}.json").read_text())
        for key, value in mine["metrics"].items():
            if isinstance(value, float):
                assert rec["metrics"][key] == pytest.approx(value, rel=1e-6), key
        assert rec["checkpoint"] == mine["checkpoint"] == f"checkpoints/{rid}.safetensors"
        assert rec["log"] == f"checkpoints/{rid}.log.json"
    assert sorted(k.removeprefix(prefix + "/") for k in keys(s3, BUCKET, prefix)) == sorted(
        ["sweep.json"] + [f"runs/{rid}.json" for rid in stored]
        + [f"checkpoints/{rid}.{ext}" for rid in stored for ext in ("safetensors", "log.json")])
    # the same command again: every run already done, nothing written
    res = run("sweep", suite, "--out", uri, "--workers", 1, "--checkpoints")
    assert res.exit_code == 0 and " ".join(res.output.split()).endswith(  # (wrapped at 80)
        f"2 runs: 2 already done, 0 ok, 0 failed; results in {uri}/runs"), res.output
    assert _records(s3, prefix) == stored
    # the report from S3 is the local one's, its tables written beside the runs in S3
    for out in (str(local), uri):
        res = run("report", out, "--no-figures")
        assert res.exit_code == 0, res.output
    import boto3

    body = boto3.client("s3", endpoint_url=s3).get_object(
        Bucket=BUCKET, Key=f"{prefix}/summary.csv")["Body"].read().decode()
    rows = [list(csv.DictReader(io.StringIO(text)))
            for text in (body, (local / "summary.csv").read_text())]
    assert len(rows[0]) == len(rows[1]) == 1 and rows[0][0].keys() == rows[1][0].keys()
    for key, value in rows[1][0].items():
        if key.startswith("minutes_"):  # wall time, this machine's
            continue
        try:
            assert float(rows[0][0][key]) == pytest.approx(float(value), rel=1e-6), key
        except ValueError:
            assert rows[0][0][key] == value, key
    # the audit of a checkpoint in S3 gives the local checkpoint's numbers
    rid = sorted(stored)[0]
    audits = []
    for where, name in ((str(local / "checkpoints"), "l.json"), (f"{uri}/checkpoints", "s.json")):
        res = run("audit", f"{where}/{rid}.safetensors", "--json", tmp_path / name)
        assert res.exit_code in (0, 1), res.output  # a verdict
        audits.append(json.loads((tmp_path / name).read_text())["metrics"])
    assert audits[0]["r2_h_to_z"] == pytest.approx(audits[1]["r2_h_to_z"], rel=1e-12)
    assert audits[0] == audits[1]


def test_a_uri_no_store_reads_is_one_line_exit_2(s3, tmp_path):
    suite = write_suite(tmp_path / "s.toml", steps=40, seeds="[0]")
    one_line(run("sweep", suite, "--out", "zzz://b/x"), 2, "unknown protocol 'zzz'")
    one_line(run("sweep", suite, "--out", "gs://b/x"), 2, "needs gcsfs: pip install gcsfs")
    one_line(run("sweep", suite, "--out", "s3://"), 2, "give a bucket")
    one_line(run("report", f"s3://{BUCKET}/{unique_prefix()}"), 2, "has no run records")
    one_line(run("audit", f"s3://{BUCKET}/{unique_prefix()}/x.safetensors"), 2,
             "no such file")
    # s3fs missing: the extra that brings it named (the import blocked, as where it is absent)
    code = ("import sys; sys.modules['s3fs'] = None; sys.argv = ['idaudit'] + sys.argv[1:]\n"
            "from idaudit._entry import main; main()")
    res = subprocess.run([sys.executable, "-c", code, "sweep", str(suite), "--out",
                          f"s3://{BUCKET}/x"], capture_output=True, text=True, timeout=300,
                         env=_env())
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [
        f'error: --out s3://{BUCKET}/x needs s3fs: pip install "idaudit[s3]"'], res.stderr
    assert keys(s3, BUCKET, "x") == []


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_sweep_killed_mid_run_records_each_run_once(s3, tmp_path, where):
    suite = write_suite(tmp_path / "s.toml", steps=300, seeds="[0, 1, 2, 3]")
    prefix = unique_prefix()
    out = str(tmp_path / "out") if where == "local" else f"s3://{BUCKET}/{prefix}"

    def recorded() -> dict[str, dict]:
        if where == "s3":
            return _records(s3, prefix)
        return {p.name.removesuffix(".json"): json.loads(p.read_text())
                for p in (tmp_path / "out" / "runs").glob("*.json")
                if not p.name.endswith(".failed.json")}

    cmd = [*IDAUDIT, "sweep", str(suite), "--out", out, "--workers", "1", "--checkpoints"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, env=_env())
    deadline = time.monotonic() + 300
    try:
        while not recorded() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # mid-run: the next run is training or being filed
        proc.communicate(timeout=60)
    before = recorded()
    assert 1 <= len(before) < 4, before.keys()
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                         cwd=tmp_path / "..", env=_env())  # another working directory
    assert res.returncode == 0, res.stderr
    assert f"4 runs: {len(before)} already done, {4 - len(before)} ok, 0 failed" in res.stdout
    after = recorded()
    assert len(after) == 4 and {r["run"]["seed"] for r in after.values()} == {0, 1, 2, 3}
    assert all(after[rid] == rec for rid, rec in before.items())  # never redone
    for rid, rec in after.items():
        assert rec["status"] == "ok" and rec["checkpoint"] == f"checkpoints/{rid}.safetensors"
    if where == "s3":
        left = keys(s3, BUCKET, prefix)
        assert sorted(k for k in left if "/checkpoints/" in k and k.endswith(".safetensors")) \
            == sorted(f"{prefix}/checkpoints/{rid}.safetensors" for rid in after)
    else:
        runs = sorted(p.name for p in (tmp_path / "out" / "runs").iterdir())
        assert runs == sorted(f"{rid}.json" for rid in after)  # no temporaries, no failures
        assert all((tmp_path / "out" / rec["checkpoint"]).is_file() for rec in after.values())


@pytest.mark.parametrize("kind", ["local", "memory", "s3"])
def test_a_store_writes_whole_files_lists_removes_and_copies_trees(s3, tmp_path, kind):
    from idaudit.core.storage import open_store

    where = {"local": str(tmp_path / "st"), "memory": f"memory://{unique_prefix()}/st",
             "s3": f"s3://{BUCKET}/{unique_prefix()}"}[kind]
    store = open_store(where)
    assert store.is_local == (kind == "local") and store.listdir("runs") == []
    store.write_text("runs/a.json", '{"x": 1}')
    store.write_bytes("runs/b.bin", bytes(range(256)))
    assert store.listdir("runs") == ["a.json", "b.bin"] and store.exists("runs/a.json")
    assert store.read_text("runs/a.json") == '{"x": 1}'
    assert store.read_bytes("runs/b.bin") == bytes(range(256))
    store.remove("runs/a.json")
    store.remove("runs/a.json")  # a missing file: no error
    assert store.listdir("runs") == ["b.bin"] and not store.exists("runs/a.json")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "meta.json").write_text('{"status": "complete"}')
    (tree / "sub" / "f.npy").write_bytes(b"\0" * 1000)
    store.upload(tree, "data/ds")
    assert store.listdir("data/ds") == ["meta.json", "sub"]
    back = store.download("data/ds", tmp_path / "back" / "ds")
    assert sorted(p.relative_to(back).as_posix() for p in back.rglob("*") if p.is_file()) == \
        ["meta.json", "sub/f.npy"]
    assert (back / "sub" / "f.npy").read_bytes() == b"\0" * 1000
    if kind == "local":  # no temporaries left beside what was written
        assert sorted(os.listdir(tmp_path / "st" / "runs")) == ["b.bin"]


def test_importing_idaudit_imports_no_fsspec():
    code = ("import sys, idaudit, idaudit.cli, idaudit.experiments.sweep, "
            "idaudit.experiments.aggregate, idaudit.core.storage\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fsspec', 's3fs', "
            "'botocore', 'aiobotocore')))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=_env())
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stdout + res.stderr


def test_a_reacher_sweep_into_s3_puts_its_dataset_there_and_a_rerun_fetches_it(s3, tmp_path):
    pytest.importorskip("mujoco")
    from idaudit.experiments.suites import SUITES, shrink
    from idaudit.experiments.sweep import run_sweep

    def runs(lambdas: list[float]) -> list[dict]:
        return shrink(SUITES["reacher"](), seeds=1,
                      only={"rho": [0.9], "mode": ["ou"], "lamb": lambdas},
                      overrides={"pairs": 120, "epochs": 1, "n_eval": 60, "batch": 64})

    prefix = unique_prefix()
    uri = f"s3://{BUCKET}/{prefix}"
    assert run_sweep(runs([5e-3]), uri, workers=1, checkpoints=True)["ok"] == 1
    name = "reacher-ou-rho0.9-n120-s0-px32-e60"
    data = [k.removeprefix(f"{prefix}/data/{name}/") for k in keys(s3, BUCKET, f"{prefix}/data/")]
    assert "meta.json" in data and len(data) > 1, data
    import boto3

    meta = boto3.client("s3", endpoint_url=s3).get_object(
        Bucket=BUCKET, Key=f"{prefix}/data/{name}/meta.json")["Body"].read()
    assert json.loads(meta)["status"] == "complete"
    before = _objects_etags(s3, f"{prefix}/data/")
    # a second run reading the same dataset: fetched from the store, not rendered and put again
    counts = run_sweep(runs([5e-3, 1e-2]), uri, workers=1, checkpoints=True)
    assert (counts["skipped"], counts["ok"], counts["failed"]) == (1, 1, 0), counts
    assert _objects_etags(s3, f"{prefix}/data/") == before
    recs = _records(s3, prefix)
    assert len(recs) == 2
    # the audit of an S3 checkpoint fetches the dataset it names (../data/NAME) beside it
    rid, rec = sorted(recs.items())[0]
    res = run("audit", f"{uri}/{rec['checkpoint']}", "--json", tmp_path / "a.json")
    assert res.exit_code in (0, 1, 3), res.output  # a verdict (two steps may collapse h)
    audited = json.loads((tmp_path / "a.json").read_text())["metrics"]["r2_h_to_z"]
    assert audited == pytest.approx(rec["metrics"]["r2_h_to_z"], abs=1e-9)


def _objects_etags(endpoint: str, prefix: str) -> dict[str, tuple[str, str]]:
    """{key: (ETag, last modified)} of every object under ``prefix``."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint)
    return {o["Key"]: (o["ETag"], str(o["LastModified"]))
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
            for o in page.get("Contents", [])}
