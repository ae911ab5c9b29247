"""A real multi-node Ray cluster on one machine, each node in its own network namespace.

Layout: a hub namespace holds a bridge ``br0``; every node namespace (``-n0`` the head, ``-n1`` …
the workers) has an ``eth0`` whose veth peer sits on that bridge, addressed in a /24 of
10.231.0.0/16 that the root namespace does not route. Nothing is created in the root network
namespace. Each worker runs in a private mount namespace with a tmpfs over :attr:`Cluster.root`,
so it sees neither the driver's files there nor the other workers'; the head (and every driver
run through :meth:`Cluster.run_driver`) sees the real disk. Root only (see :func:`unavailable`).

Only processes found inside our own namespaces (``ip netns pids``) are ever signalled.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = Path(sys.executable).parent / "ray"
PORT = 6379
DASHBOARD_PORT = 8265  # Ray's default: the dashboard and the job API (Cluster(dashboard=True))
# a killed node is declared dead after about period × threshold (defaults: 3 s × 5, 5 s delay)
HEALTH_ENV = {
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
}
_counter = itertools.count()
_ROUTE_TYPES = {"unicast", "local", "broadcast", "multicast", "unreachable", "prohibit", "blackhole", "nat"}

_ALIVE_SCRIPT = """
import sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print("ALIVE", len([n for n in ray.nodes() if n["Alive"]]))
"""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def _ns_pids(ns: str) -> list[int]:
    res = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in res.stdout.split() if p.isdigit()] if res.returncode == 0 else []


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def unavailable() -> str | None:
    """Why the harness cannot run here, or None when it can (probes a real namespace)."""
    if os.geteuid() != 0:
        return "needs root (network and mount namespaces)"
    for tool in ("ip", "unshare", "mount"):
        if shutil.which(tool) is None:
            return f"no `{tool}` executable"
    if not RAY.exists():
        return f"no ray executable at {RAY}"
    name = f"idr{os.getpid()}-probe{next(_counter)}"
    try:
        res = _ip("netns", "add", name, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"`ip netns add` failed: {exc}"
    if res.returncode != 0:
        return f"`ip netns add` failed: {res.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return None


def skip_unless_available() -> None:
    """Skip the calling test (or module) saying why no namespace cluster can be made here;
    under ``IDAUDIT_CLUSTER_REQUIRED=1`` (CI's cluster stage, which must make them) fail."""
    import pytest

    reason = unavailable()
    if reason is None:
        return
    if os.environ.get("IDAUDIT_CLUSTER_REQUIRED") == "1":
        pytest.fail(f"IDAUDIT_CLUSTER_REQUIRED=1 but no namespace cluster here: {reason}",
                    pytrace=False)
    pytest.skip(f"no namespace cluster here: {reason}", allow_module_level=True)


def _free_subnet(seed: int) -> ipaddress.IPv4Network:
    """A 10.231.B.0/24 that overlaps no route of the root namespace."""
    routed = []
    for line in _ip("-4", "route", "show", "table", "all").stdout.splitlines():
        tokens = line.split()
        if tokens and tokens[0] in _ROUTE_TYPES:
            tokens = tokens[1:]
        if not tokens or tokens[0] == "default":
            continue
        try:
            routed.append(ipaddress.ip_network(tokens[0], strict=False))
        except ValueError:
            continue
    for k in range(254):
        net = ipaddress.ip_network(f"10.231.{(seed + k) % 254 + 1}.0/24")
        if not any(net.overlaps(r) for r in routed):
            return net
    raise RuntimeError("no free 10.231.x.0/24 subnet")


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"<{exc}>"


class Cluster:
    """A head (0 CPUs) and ``workers`` worker nodes, each in its own network namespace.

    Worker nodes are numbered 1 … ``workers`` (node 0 is the head). ``__init__`` only makes
    :attr:`root`; entering the context (or :meth:`start`) starts the nodes and waits until all
    are alive; leaving it (or :meth:`close`) kills everything in our namespaces and removes them.
    """

    def __init__(self, workers: int = 2, cpus_per_worker: int = 1, env: dict[str, str] | None = None,
                 node_python: dict[int, str] | None = None,
                 node_env: dict[int, dict[str, str]] | None = None, later: set[int] | None = None,
                 dashboard: bool = False):
        """``node_python``: worker i's nodes run ``ray start`` with that Python (its tasks run
        in it too) instead of this one's; ``node_env``: worker i's extra environment; ``later``:
        workers started only by :meth:`add_node` (a node joining a running cluster);
        ``dashboard``: the head serves Ray's dashboard, and with it the job API
        (``ray job submit``), at :attr:`dashboard_url`."""
        self.dashboard = dashboard
        self.node_python = node_python or {}
        self.node_env = node_env or {}
        self.later = set(later or ())
        self.alive_wanted = workers + 1 - len(self.later)
        n = next(_counter)
        self.prefix = f"idr{os.getpid()}-{n}"
        self.hub = f"{self.prefix}-hub"
        self.namespaces = [f"{self.prefix}-n{i}" for i in range(workers + 1)]
        self.workers = workers
        self.cpus_per_worker = cpus_per_worker
        # Ray 2.60's head turns token authentication on when ~/.ray/auth_token exists, but a
        # joining node does not read that file: every node and driver gets one fresh token instead
        auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **auth, **HEALTH_ENV, **(env or {})}
        self.root = Path(tempfile.mkdtemp(prefix="idr", dir="/tmp"))
        self.logs = Path(f"{self.root}-logs")  # outside root: the workers' tmpfs does not hide it
        self.logs.mkdir()
        self.subnet = _free_subnet(os.getpid() * 7 + n)
        hosts = list(self.subnet.hosts())
        self.ips = [str(hosts[i]) for i in range(workers + 1)]
        self.head_ip = self.ips[0]
        self.address = f"{self.head_ip}:{PORT}"
        self.dashboard_url = f"http://{self.head_ip}:{DASHBOARD_PORT}"
        self.seen_pids: set[int] = set()  # every pid ever found in (or started into) our namespaces
        self.startup_s: float | None = None
        self._made: list[str] = []  # namespaces actually created, in order
        self._procs: list[subprocess.Popen] = []
        self._node_of: dict[int, int] = {}  # a spawned process's pid → its node
        self._killed: set[int] = set()  # nodes killed on purpose (kill_node)
        self._closed = False

    @property
    def worker_ips(self) -> list[str]:
        """The workers' IPs, worker 1 first."""
        return self.ips[1:]

    def node_ip(self, i: int) -> str:
        """Node ``i``'s IP (0: the head)."""
        return self.ips[i]

    def node_dir(self, i: int) -> Path:
        """Worker ``i``'s private directory (seen only by that worker, empty on the real disk)."""
        if not 1 <= i <= self.workers:
            raise IndexError(f"no worker {i}")
        return self.root / f"node{i}"

    def log_path(self, i: int) -> Path:
        """Where node ``i``'s ``ray start`` writes its stdout and stderr."""
        return self.logs / f"node{i}.log"

    # -- start-up --------------------------------------------------------------------------

    def __enter__(self) -> Cluster:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _add_ns(self, name: str) -> None:
        _ip("netns", "add", name)
        self._made.append(name)

    def _network(self) -> None:
        self._add_ns(self.hub)
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        for i, ns in enumerate(self.namespaces):
            self._add_ns(ns)
            veth = f"v{i}"
            _ip("-n", self.hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("-n", self.hub, "link", "set", veth, "master", "br0")
            _ip("-n", self.hub, "link", "set", veth, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", f"{self.ips[i]}/{self.subnet.prefixlen}", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")

    def _spawn(self, i: int, argv: list[str]) -> None:
        with open(self.log_path(i), "wb") as log:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", self.namespaces[i], *argv],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=self.env, start_new_session=True,
            )
        self._procs.append(proc)
        self._node_of[proc.pid] = i
        self.seen_pids.add(proc.pid)

    def start(self) -> None:
        """Build the namespaces, start every node, wait (≤ 90 s) until all are alive."""
        t0 = time.monotonic()
        self._network()
        common = ["--disable-usage-stats", "--num-gpus", "0", "--object-store-memory", str(200 << 20),
                  "--block"]
        self._spawn(0, [str(RAY), "start", "--head", "--node-ip-address", self.head_ip,
                        "--port", str(PORT), "--num-cpus", "0", "--temp-dir", str(self.root / "head"),
                        *(["--include-dashboard=true", "--dashboard-host", self.head_ip,
                           "--dashboard-port", str(DASHBOARD_PORT)] if self.dashboard
                          else ["--include-dashboard=false"]), *common])
        for i in range(1, self.workers + 1):
            if i not in self.later:
                self._start_worker(i, common)
        self._wait_alive(time.monotonic() + 90)
        self.startup_s = time.monotonic() - t0
        for ns in self.namespaces:
            self.seen_pids.update(_ns_pids(ns))
        self._common = common

    def _start_worker(self, i: int, common: list[str]) -> None:
        d = self.node_dir(i)
        launcher = ([self.node_python[i], "-c", "import sys; from ray.scripts.scripts import "
                     "main; sys.argv[0] = 'ray'; sys.exit(main())"]
                    if i in self.node_python else [str(RAY)])
        extra = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.node_env.get(i, {}).items())
        ray = extra + " " + shlex.join([*launcher, "start", "--address", self.address,
                                        "--node-ip-address", self.ips[i], "--num-cpus",
                                        str(self.cpus_per_worker), "--temp-dir",
                                        str(d / "ray"), *common])
        script = (f"mount -t tmpfs -o mode=0755 idr-node{i} {shlex.quote(str(self.root))} && "
                  f"mkdir -p {shlex.quote(str(d / 'tmp'))} && "
                  f"exec env TMPDIR={shlex.quote(str(d / 'tmp'))} {ray}")
        self._spawn(i, ["unshare", "--mount", "--propagation", "private", "sh", "-c", script])

    def add_node(self, i: int) -> None:
        """Start worker ``i`` of ``later`` on the running cluster; wait (≤ 90 s) until it is alive."""
        self.later.discard(i)
        self.alive_wanted += 1
        self._start_worker(i, self._common)
        self._wait_alive(time.monotonic() + 90)
        self.seen_pids.update(_ns_pids(self.namespaces[i]))

    def _wait_alive(self, deadline: float) -> None:
        want, last = self.alive_wanted, ""
        while time.monotonic() < deadline:
            dead = [i for i, p in enumerate(self._procs)
                    if p.poll() is not None and self._node_of.get(p.pid) not in self._killed]
            if dead:
                raise RuntimeError(f"node(s) {dead} exited during start-up\n{self._log_tails()}")
            try:
                res = self.run_driver([sys.executable, "-c", _ALIVE_SCRIPT, self.address],
                                      timeout=max(5.0, min(30.0, deadline - time.monotonic())))
                last = (res.stdout + res.stderr)[-2000:]
                if f"ALIVE {want}\n" in res.stdout:
                    return
            except subprocess.TimeoutExpired:
                last = "probe timed out"
            time.sleep(0.5)
        raise RuntimeError(f"cluster not up within the deadline; last probe: {last}\n{self._log_tails()}")

    def _log_tails(self) -> str:
        paths = [self.log_path(i) for i in range(self.workers + 1)]
        return "\n".join(f"--- {p}\n{_tail(p)}" for p in paths)

    # -- drivers ---------------------------------------------------------------------------

    def _driver_argv(self, args: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[0], *args]

    def _driver_env(self, env: dict | None) -> dict[str, str]:
        return {**self.env, **(env or {})}

    def run_driver(
        self, args: list[str], timeout: float, env: dict | None = None
    ) -> subprocess.CompletedProcess:
        """Run ``args`` in the head's network namespace (real disk view); output captured as text."""
        return subprocess.run(self._driver_argv(args), capture_output=True, text=True, timeout=timeout,
                              env=self._driver_env(env), stdin=subprocess.DEVNULL)

    def popen_driver(self, args: list[str], env: dict | None = None, **kw) -> subprocess.Popen:
        """:meth:`run_driver` without waiting: stdout and stderr are pipes (text unless ``kw`` says)."""
        kw = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True,
              "stdin": subprocess.DEVNULL, **kw}
        proc = subprocess.Popen(self._driver_argv(args), env=self._driver_env(env), **kw)
        self.seen_pids.add(proc.pid)
        return proc

    # -- killing ---------------------------------------------------------------------------

    def _kill_ns(self, names: list[str], timeout: float = 10.0) -> list[int]:
        """SIGKILL every process in ``names`` until none is left; the pids still there at the end."""
        deadline = time.monotonic() + timeout
        while True:
            pids = [p for ns in names for p in _ns_pids(ns)]
            if not pids or time.monotonic() > deadline:
                return pids
            self.seen_pids.update(pids)
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)

    def kill_node(self, i: int) -> None:
        """SIGKILL every process in worker ``i``'s namespace (its raylet, its tasks); wait ≤ 10 s."""
        if not 1 <= i <= self.workers:
            raise IndexError(f"no worker {i}")
        left = self._kill_ns([self.namespaces[i]])
        if left:
            raise RuntimeError(f"processes {left} survived SIGKILL in {self.namespaces[i]}")
        if i not in self._killed:  # no longer counted among the nodes that should be alive
            self._killed.add(i)
            self.alive_wanted -= 1

    def close(self) -> None:
        """Kill everything in our namespaces, delete them, remove :attr:`root` (idempotent)."""
        if self._closed:
            return
        self._closed = True
        left = self._kill_ns(list(self._made))
        for proc in self._procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for ns in reversed(self._made):
            _ip("netns", "del", ns, check=False)
        self._made.clear()
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.logs, ignore_errors=True)
        if left:
            raise RuntimeError(f"processes {left} survived SIGKILL in our namespaces")

    # -- added: a slow node, an autoscaling head ---------------------------------------------

    def pause_node(self, i: int) -> list[int]:
        """SIGSTOP every process in worker ``i``'s namespace (its raylet, its workers): the
        node stays in the cluster but answers nothing until :meth:`resume_node`. Returns the
        pids stopped."""
        if not 1 <= i <= self.workers:
            raise IndexError(f"no worker {i}")
        pids = _ns_pids(self.namespaces[i])
        self.seen_pids.update(pids)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        return pids

    def resume_node(self, i: int) -> list[int]:
        """SIGCONT every process in worker ``i``'s namespace; returns the pids continued."""
        if not 1 <= i <= self.workers:
            raise IndexError(f"no worker {i}")
        pids = _ns_pids(self.namespaces[i])
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        return pids

    def start_autoscaling(self, head_cpus: int, node_types: dict[str, dict],
                          v2: bool = True) -> None:
        """Start only a head of ``head_cpus`` CPUs with Ray's own autoscaler on its fake
        multi-node provider (the config :class:`ray.cluster_utils.AutoscalingCluster` makes,
        written here: that class's ``start`` and ``shutdown`` run ``ray stop --force``, which
        would stop every Ray on this machine). ``node_types``: ``{name: {"resources": {...},
        "min_workers": n, "max_workers": m}}``. The nodes the autoscaler adds are processes of
        the head's namespace (its monitor starts them), stopped by :meth:`close`. ``v2``:
        Ray's autoscaler v2 (which publishes its node types to the GCS), else v1."""
        import json

        from ray.autoscaler._private.fake_multi_node.node_provider import FAKE_HEAD_NODE_ID

        self._network()
        types = {name: {"node_config": {}, **t} for name, t in node_types.items()}
        types["ray.head.default"] = {"resources": {"CPU": head_cpus}, "node_config": {},
                                     "max_workers": 0}
        config = {"cluster_name": "fake_multinode", "max_workers": 8,
                  "provider": {"type": "fake_multinode", "use_node_id_as_ip": True,
                               "disable_node_updaters": True,
                               "disable_launch_config_check": True,
                               "gcs_address": self.address},
                  "available_node_types": types, "head_node_type": "ray.head.default",
                  "auth": {}, "upscaling_speed": 1.0, "idle_timeout_minutes": 5, "docker": {},
                  "initialization_commands": [], "setup_commands": [],
                  "head_setup_commands": [], "worker_setup_commands": [],
                  "head_start_ray_commands": [], "worker_start_ray_commands": [],
                  "file_mounts": {}, "cluster_synced_files": [],
                  "file_mounts_sync_continuously": False, "rsync_exclude": [], "rsync_filter": []}
        self.env.update({"AUTOSCALER_UPDATE_INTERVAL_S": "1", "RAY_FAKE_CLUSTER": "1"})
        if v2:
            config["provider"].update(launch_multiple=True, head_node_id=FAKE_HEAD_NODE_ID)
            self.env.update({"RAY_enable_autoscaler_v2": "1",
                             "RAY_CLOUD_INSTANCE_ID": FAKE_HEAD_NODE_ID,
                             "RAY_OVERRIDE_NODE_ID_FOR_TESTING": FAKE_HEAD_NODE_ID})
        path = self.logs / "autoscaling.json"
        path.write_text(json.dumps(config))
        # the installed Ray lacks fake_multi_node/example.yaml, the provider's defaults that
        # autoscaler v2 (and AutoscalingCluster) read: the head's processes get this config as
        # those defaults (a sitecustomize on their PYTHONPATH)
        shim = self.logs / "shim"
        shim.mkdir(exist_ok=True)
        (shim / "sitecustomize.py").write_text(
            "import os\n"
            "if os.environ.get('IDR_FAKE_DEFAULTS'):\n"
            "    from ray.autoscaler._private import providers\n"
            "    providers._DEFAULT_CONFIGS['fake_multinode'] = "
            "lambda: os.environ['IDR_FAKE_DEFAULTS']\n")
        self.env.update({"IDR_FAKE_DEFAULTS": str(path), "PYTHONPATH": os.pathsep.join(
            [str(shim), *filter(None, [self.env.get("PYTHONPATH")])])})
        self._spawn(0, [str(RAY), "start", "--head", "--node-ip-address", self.head_ip,
                        "--port", str(PORT), "--num-cpus", str(head_cpus), "--num-gpus", "0",
                        f"--autoscaling-config={path}", "--temp-dir", str(self.root / "head"),
                        "--include-dashboard=false", "--disable-usage-stats",
                        "--object-store-memory", str(200 << 20), "--block"])
        self.alive_wanted = 1
        self._wait_alive(time.monotonic() + 90)
        self.seen_pids.update(_ns_pids(self.namespaces[0]))
