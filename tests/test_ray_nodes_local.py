"""The version probe's failure classes, its timeout setting and Ray Client's messages, on a
local Ray instance and real sockets (no mocks). The multi-node checks (a slow node, an
autoscaling cluster) are tests/test_ray_nodes.py."""

import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from spiral_suite import write_suite

from idaudit.core.errors import IdauditError
from idaudit.experiments.ray_nodes import (
    PROBE_TIMEOUT_ENV,
    TaskShape,
    check_nodes,
    probe_failure_is_system,
    probe_timeout,
)

ray = pytest.importorskip("ray")
IDAUDIT = [sys.executable, "-m", "idaudit"]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _error_of(ref) -> BaseException:
    with pytest.raises(Exception) as info:
        ray.get(ref, timeout=60)
    return info.value


def test_a_probe_lost_to_the_system_is_retried_a_task_error_is_an_answer(local_ray):
    # defined here, the tasks travel by value (a worker cannot import this test module)
    def _crash() -> None:
        os._exit(1)

    def _no_module() -> None:
        import idaudit_not_installed  # noqa: F401

    def _sleep(seconds: float) -> None:
        time.sleep(seconds)

    crashed = _error_of(ray.remote(max_retries=0)(_crash).remote())
    assert type(crashed).__name__ == "WorkerCrashedError" and probe_failure_is_system(crashed)
    slow = ray.remote(num_cpus=0, max_retries=0)(_sleep).remote(60)
    time.sleep(1.0)
    ray.cancel(slow, force=True)
    cancelled = _error_of(slow)
    assert type(cancelled).__name__ in ("TaskCancelledError", "WorkerCrashedError")
    assert probe_failure_is_system(cancelled)
    missing = _error_of(ray.remote(max_retries=0)(_no_module).remote())
    assert isinstance(missing, ray.exceptions.RayTaskError)
    assert not probe_failure_is_system(missing)
    assert "No module named 'idaudit_not_installed'" in str(missing)


def test_check_nodes_on_one_local_node_answers_once_and_refuses_a_run_too_big(local_ray):
    t0 = time.monotonic()
    found = check_nodes(ray, TaskShape(cpus=1), timeout=30)
    assert len(found) == 1 and found[0]["idaudit"]
    assert time.monotonic() - t0 < 30
    with pytest.raises(IdauditError) as info:
        check_nodes(ray, TaskShape(cpus=4), timeout=30)
    msg = str(info.value)
    assert "no node of the cluster can hold a run of 4 CPUs, 0 GPUs (the largest has 1 CPUs" \
        in msg and "no autoscaler" in msg, msg


@pytest.mark.parametrize("value, ok", [("", 120.0), ("7.5", 7.5), ("0", None), ("-1", None),
                                       ("nan", None), ("inf", None), ("ten", None)])
def test_the_probe_timeout_comes_from_its_environment_variable(monkeypatch, value, ok):
    monkeypatch.setenv(PROBE_TIMEOUT_ENV, value)
    if ok is not None:
        assert probe_timeout() == ok
        return
    with pytest.raises(IdauditError) as info:
        probe_timeout()
    assert str(info.value).startswith(f"{PROBE_TIMEOUT_ENV}=") and "\n" not in str(info.value)


def test_a_bad_probe_timeout_is_one_line_exit_2_before_any_cluster(tmp_path):
    suite = write_suite(tmp_path / "s.toml", 40, "[0]")
    t0 = time.monotonic()
    res = subprocess.run([*IDAUDIT, "sweep", str(suite), "--out", str(tmp_path / "o"),
                          "--executor", "ray", "--address", "127.0.0.1:9"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, PROBE_TIMEOUT_ENV: "soon"})
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(
        f"{PROBE_TIMEOUT_ENV}=soon: expected the seconds every node has to answer the version "
        "check (> 0; default 120)"), res.stderr
    assert time.monotonic() - t0 < 60


def _tcp_server() -> tuple[socket.socket, int]:
    """A non-Ray server: answers every connection with one HTTP line and closes it."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"HTTP/1.0 200 OK\r\n\r\nnot ray\n")

    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ray_client_addresses_that_fail_say_why_in_one_line(tmp_path):
    suite = write_suite(tmp_path / "s.toml", 40, "[0]")
    srv, port = _tcp_server()
    env = {**os.environ, "RAY_CLIENT_INITIAL_CONNECTION_TIMEOUT_S": "1",
           "RAY_CLIENT_MAX_CONNECTION_TIMEOUT_S": "1"}
    try:
        seen = {}
        for name, p in (("nothing", _free_port()), ("not ray", port)):
            res = subprocess.run([*IDAUDIT, "sweep", str(suite), "--out", str(tmp_path / name),
                                  "--executor", "ray", "--address", f"ray://127.0.0.1:{p}"],
                                 capture_output=True, text=True, timeout=180, env=env)
            assert res.returncode == 2, (res.stdout, res.stderr)
            lines = res.stderr.strip().splitlines()
            assert len(lines) == 1, res.stderr
            seen[name] = lines[0]
            assert not (tmp_path / name / "runs").exists()
    finally:
        srv.close()
    head = "cannot reach the Ray cluster at ray://127.0.0.1:"
    assert head in seen["nothing"] and "nothing answers at 127.0.0.1:" in seen["nothing"] \
        and "Connection refused" in seen["nothing"], seen
    assert head in seen["not ray"] and (f"127.0.0.1:{port} accepts connections but is no Ray "
                                        "Client server") in seen["not ray"], seen
    assert not any(line.rstrip().endswith(":") for line in seen.values()), seen


def test_a_server_that_gives_no_reason_names_where_its_log_is():
    from idaudit.experiments.ray_nodes import connect_failure

    # the text Ray Client raises when the server refuses the init with an empty message,
    # and with a traceback
    empty = ConnectionAbortedError("Initialization failure from server:\n")
    told = ConnectionAbortedError("Initialization failure from server:\nTraceback (most recent "
                                  "call last):\n  File \"x\", line 1\nRuntimeError: no GPU here")
    assert connect_failure(empty, "ray://h:10001").startswith(
        "Initialization failure from server: no reason given; the head's Ray Client server "
        "logs it in ray_client_server")
    assert connect_failure(told, "ray://h:10001") == (
        "Initialization failure from server: RuntimeError: no GPU here")
    chained = ConnectionError("")
    chained.__cause__ = OSError("route to host lost")
    assert connect_failure(chained, None) == "route to host lost"
