"""A real S3 endpoint for the tests: moto's S3 server on 127.0.0.1 (a free port), a bucket
made with boto3, and the environment a client (this process, the ``idaudit`` subprocesses,
Ray's nodes) needs to reach it: dummy credentials and ``AWS_ENDPOINT_URL``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

BUCKET = "idaudit-test"

# run with the endpoint's environment where a namespace cluster's head is (Cluster.run_driver):
# make the bucket (argv: BUCKET), or print every object under a prefix as JSON (argv: BUCKET,
# PREFIX; {key: the object's text, for the records under runs/; its size, for the rest})
MAKE_BUCKET_SCRIPT = "import boto3, sys; boto3.client('s3').create_bucket(Bucket=sys.argv[1])"
LIST_SCRIPT = """
import boto3, json, sys
s3 = boto3.client("s3")
found = {}
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=sys.argv[1], Prefix=sys.argv[2]):
    for o in page.get("Contents", []):
        k = o["Key"]
        found[k] = (s3.get_object(Bucket=sys.argv[1], Key=k)["Body"].read().decode()
                    if "/runs/" in k else o["Size"])
print(json.dumps(found))
"""


def finished_records(objects: dict[str, object]) -> dict[str, dict]:
    """The finished records among ``objects`` (what :data:`LIST_SCRIPT` prints), by run id."""
    import json

    return {k.rsplit("/", 1)[1].removesuffix(".json"): json.loads(v)
            for k, v in objects.items()
            if "/runs/" in k and k.endswith(".json") and not k.endswith(".failed.json")}


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on at ``host`` now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def client_env(endpoint: str) -> dict[str, str]:
    """What a client of the server at ``endpoint`` needs in its environment."""
    return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint}


def make_bucket(endpoint: str, name: str = BUCKET) -> str:
    """Create the bucket ``name`` on the server at ``endpoint`` (boto3); returns its name."""
    import boto3

    env = client_env(endpoint)
    boto3.client("s3", endpoint_url=endpoint, region_name=env["AWS_DEFAULT_REGION"],
                 aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                 aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"]).create_bucket(Bucket=name)
    return name


def keys(endpoint: str, bucket: str, prefix: str = "") -> list[str]:
    """Every object key in ``bucket`` under ``prefix`` (boto3, no cache)."""
    import boto3

    env = client_env(endpoint)
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name=env["AWS_DEFAULT_REGION"],
                      aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    found = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        found += [o["Key"] for o in page.get("Contents", [])]
    return sorted(found)


@contextmanager
def threaded_server() -> Iterator[str]:
    """moto's S3 server in a thread of this process on 127.0.0.1; gives its endpoint URL."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def wait_listening(host: str, port: int, proc: subprocess.Popen, prefix: list[str],
                   timeout: float = 60.0) -> None:
    """Wait until ``host:port`` accepts connections (checked through ``prefix``, e.g.
    ``ip netns exec NS``), or raise when ``proc`` exits or ``timeout`` passes."""
    probe = [*prefix, sys.executable, "-c",
             f"import socket; socket.create_connection(({host!r}, {port}), 2).close()"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto's server exited {proc.returncode}")
        if subprocess.run(probe, capture_output=True).returncode == 0:
            return
        time.sleep(0.3)
    raise RuntimeError(f"moto's server did not listen on {host}:{port} in {timeout:.0f} s")


@contextmanager
def server_process(host: str, port: int, prefix: list[str] | None = None) -> Iterator[str]:
    """moto's S3 server as a process of its own (``prefix`` before the command, e.g. ``ip
    netns exec NS`` to serve inside a network namespace), stopped by its pid on the way out;
    gives its endpoint URL."""
    prefix = prefix or []
    proc = subprocess.Popen([*prefix, sys.executable, "-m", "moto.server", "-H", host, "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ})
    try:
        wait_listening(host, port, proc, prefix)
        yield f"http://{host}:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def unique_prefix() -> str:
    """A fresh key prefix, so tests sharing one bucket never see each other's objects."""
    return uuid.uuid4().hex[:12]
