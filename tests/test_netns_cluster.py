"""Smoke test of tests/netns_cluster.py: a real 3-node Ray cluster (head + 2 workers), each node
in its own network namespace, the workers with private views of the disk."""

import ipaddress
import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from netns_cluster import Cluster, pid_alive, skip_unless_available

pytestmark = pytest.mark.cluster

PROBE = """
import json, os, sys, time, uuid
import ray

marker = sys.argv[2]
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)


@ray.remote(num_cpus=1)
def probe(k):
    time.sleep(0.5)
    path = os.path.join(os.environ["TMPDIR"], f"task{k}-{uuid.uuid4().hex}.txt")
    with open(path, "w") as f:
        f.write("written on a worker")
    return {"node": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address(),
            "marker": os.path.exists(marker), "path": path, "seen": os.path.exists(path)}


out = {"head": ray.get_runtime_context().get_node_id(), "driver_marker": os.path.exists(marker),
       "tasks": ray.get([probe.remote(k) for k in range(8)])}
print("RESULT " + json.dumps(out), flush=True)
"""

# sequenced by the test: RUNNING (a task runs on each worker) -> test kills worker 1 and writes a
# line to stdin -> the driver collects the first batch, runs a second, waits for the node's death
SURVIVE = """
import json, sys, threading, time
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
killed_ip = sys.argv[2]


@ray.remote(num_cpus=0)
class Started:
    def __init__(self):
        self.ips = []

    def add(self, ip):
        self.ips.append(ip)

    def get(self):
        return self.ips


head = ray.get_runtime_context().get_node_id()
started = Started.options(scheduling_strategy=NodeAffinitySchedulingStrategy(head, soft=False)).remote()


@ray.remote(num_cpus=1)
def slow(secs, started):
    ip = ray.util.get_node_ip_address()
    if started is not None:
        ray.get(started.add.remote(ip))
    time.sleep(secs)
    return ip


first = [slow.remote(2.0, started) for _ in range(4)]
deadline = time.monotonic() + 30
while len(set(ray.get(started.get.remote()))) < 2 and time.monotonic() < deadline:
    time.sleep(0.05)
print("RUNNING " + json.dumps(sorted(set(ray.get(started.get.remote())))), flush=True)
sys.stdin.readline()
t_kill = time.monotonic()
dead_after = []


def watch():  # when ray.nodes() first reports the killed node dead
    while time.monotonic() - t_kill < 45:
        if not any(n["Alive"] for n in ray.nodes() if n["NodeManagerAddress"] == killed_ip):
            dead_after.append(time.monotonic() - t_kill)
            return
        time.sleep(0.2)


watcher = threading.Thread(target=watch)
watcher.start()
first_ips = ray.get(first, timeout=60)
t_first = time.monotonic() - t_kill
second_ips = ray.get([slow.remote(0.2, None) for _ in range(4)], timeout=60)
watcher.join()
dead_after = dead_after[0] if dead_after else None
out = {"first": first_ips, "second": second_ips, "first_s": t_first, "dead_after": dead_after,
       "alive": sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])}
print("RESULT " + json.dumps(out), flush=True)
"""


def _links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    return {line.split(":")[1].strip() for line in out.splitlines()}


def _result(text: str) -> dict:
    lines = [ln for ln in text.splitlines() if ln.startswith("RESULT ")]
    assert lines, text[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


@pytest.fixture(scope="module")
def cluster():
    skip_unless_available()
    links_before = _links()
    c = Cluster(workers=2, cpus_per_worker=1)
    marker = c.root / "marker.txt"  # on the real disk, before any node starts
    marker.write_text("only the head's view has this")
    c.marker, c.links_before = marker, links_before
    t0 = time.monotonic()
    with c:
        print(f"cluster start-up: {time.monotonic() - t0:.1f} s")
        yield c


def test_tasks_run_on_both_workers_with_private_disks(cluster):
    res = cluster.run_driver([sys.executable, "-c", PROBE, cluster.address, str(cluster.marker)],
                             timeout=120)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = _result(res.stdout)
    tasks = out["tasks"]
    assert len(tasks) == 8
    assert {t["ip"] for t in tasks} == set(cluster.worker_ips)  # both workers, by their own IPs
    assert len({t["node"] for t in tasks}) == 2
    assert out["head"] not in {t["node"] for t in tasks}  # the head has 0 CPUs
    assert out["driver_marker"] is True  # the head's view is the real disk…
    assert not any(t["marker"] for t in tasks)  # …a worker's is not
    for t in tasks:
        node_dir = cluster.node_dir(cluster.worker_ips.index(t["ip"]) + 1)
        assert t["path"].startswith(f"{node_dir}/tmp/"), t
        assert t["seen"] is True
        assert not Path(t["path"]).exists()  # written inside the worker's tmpfs only
    assert not cluster.node_dir(1).exists() and not cluster.node_dir(2).exists()


def test_root_network_namespace_untouched(cluster):
    out = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, check=True).stdout
    addrs = [ipaddress.ip_interface(line.split()[3]) for line in out.splitlines()]
    assert addrs and not any(a.ip in cluster.subnet for a in addrs), out
    routes = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True,
                            text=True, check=True).stdout
    assert str(cluster.subnet.network_address)[:-1] not in routes, routes
    assert _links() == cluster.links_before  # no veth end, no bridge here


def test_killed_worker_is_survived(cluster):
    killed_ip, other_ip = cluster.worker_ips
    proc = cluster.popen_driver([sys.executable, "-c", SURVIVE, cluster.address, killed_ip],
                                stdin=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines: queue.Queue = queue.Queue()
    seen: list[str] = []
    threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout], daemon=True).start()

    def next_line(prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            seen.append(line)
            if line.startswith(prefix):
                return line
        proc.kill()
        pytest.fail(f"no {prefix!r} line within {timeout} s:\n" + "".join(seen)[-4000:])

    try:
        running = json.loads(next_line("RUNNING ", 60)[len("RUNNING "):])
        assert running == sorted(cluster.worker_ips)  # a task is running on each worker
        t0 = time.monotonic()
        cluster.kill_node(1)
        kill_s = time.monotonic() - t0
        proc.stdin.write("killed\n")
        proc.stdin.flush()
        out = json.loads(next_line("RESULT ", 90)[len("RESULT "):])
        assert proc.wait(timeout=30) == 0, "".join(seen)[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print(f"kill_node: {kill_s:.2f} s; first batch done {out['first_s']:.1f} s after the kill; "
          f"node reported dead {out['dead_after']:.1f} s after the kill")
    assert out["first"] == [other_ip] * 4  # the task killed on worker 1 was retried on worker 2
    assert out["second"] == [other_ip] * 4
    assert out["dead_after"] is not None and out["dead_after"] < 30
    assert out["alive"] == sorted([cluster.head_ip, other_ip])


def test_teardown_leaves_nothing(cluster):
    pids = set(cluster.seen_pids)
    assert len(pids) > 10  # the head's and workers' processes were recorded
    cluster.close()
    cluster.close()  # idempotent
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert cluster.prefix not in names
    assert [p for p in pids if pid_alive(p)] == []
    assert not cluster.root.exists() and not cluster.logs.exists()
