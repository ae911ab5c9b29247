"""The driver's side of a Ray sweep before and around its runs: connecting to the cluster
(:func:`connected`; Ray Client's reasons in one line, :func:`connect_failure`), SIGTERM and
Ctrl-C (:class:`Stop`), and the nodes' checks (:func:`check_nodes`).

Every alive node is asked for its idaudit version (:func:`probe`, a zero-CPU task pinned to
it). Only a definite answer refuses (another version, no idaudit): a probe lost to a system
failure is tried again after 1, 2, 4 s; a node still alive that has not answered within
``$IDAUDIT_RAY_PROBE_TIMEOUT`` seconds (default 120; a bad value is refused, exit 2) is kept
with a note on stderr, its tasks' own check guarding it; one Ray marks dead meanwhile is
skipped with a note. When no alive node can hold a run (:func:`room_for_a_run`), the cluster's
autoscaler (Ray's v1 with node types of its own, or v2) is asked for one
(``request_resources``) and the sweep waits for it, a line on stderr every ~10 s; with no
autoscaler, or where the autoscaler reports that no node type fits (v2), or the node types
the GCS publishes (when it does) are all too small, one refusal says so (exit 2).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from idaudit.core.errors import IdauditError, first_line, one_line
from idaudit.core.version import __version__

__all__ = ["MAX_RETRIES", "PROBE_TIMEOUT_ENV", "WAIT_SLICE", "Stop", "TaskShape", "alive_nodes",
           "check_nodes", "check_shape", "connect_failure", "connected", "driver_version",
           "error_line",
           "node_info", "probe", "probe_failure_is_system", "probe_timeout",
           "refuse_if_all_avoided", "release_request", "room_for_a_run", "signals_noted"]

#: a task Ray loses to a system failure (its node died, its worker crashed) runs again this
#: many times, on whichever node can take it
MAX_RETRIES = 3
_PROBE_TIMEOUT = 120.0  # seconds every node has to answer the version probe
WAIT_SLICE = 0.5  # seconds ray.wait blocks, so that SIGTERM and Ctrl-C are handled promptly


@dataclass(frozen=True)
class TaskShape:
    """What each run asks of Ray: ``cpus`` (also torch's threads and the render pool's
    size), ``gpus`` (a run with a GPU follows the GPU recipe, and its dataset is the one that
    recipe renders), ``memory_gib`` (None: not declared) and ``in_flight`` (most runs
    submitted at once; None: all)."""

    cpus: float = 1
    gpus: float = 0
    memory_gib: float | None = None
    in_flight: int | None = None

    @property
    def device(self) -> str:
        return "cuda" if self.gpus else "cpu"

    @property
    def threads(self) -> int:
        return max(1, int(self.cpus))

    def options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"num_cpus": self.cpus, "num_gpus": self.gpus,
                                "max_retries": MAX_RETRIES, "retry_exceptions": False}
        if self.memory_gib:
            opts["memory"] = int(self.memory_gib * 2**30)
        return opts


def check_shape(shape: TaskShape) -> None:
    """Refuse resources Ray cannot mean (the flag named)."""
    from idaudit.core.limits import check

    for value, flag in ((shape.cpus, "--cpus-per-run"), (shape.gpus, "--gpus-per-run"),
                        (shape.memory_gib, "--memory-per-run")):
        if value is not None:
            check("per_run", value, flag)
    if not shape.cpus and not shape.gpus:
        raise IdauditError("--cpus-per-run 0 needs --gpus-per-run > 0 (a run must ask for "
                           "something)")


# ---- what runs on a node -----------------------------------------------------------------

def node_info() -> dict[str, str]:
    """The Ray node this process is on: its id, IP address and host name."""
    import ray

    return {"id": ray.get_runtime_context().get_node_id(),
            "ip": ray.util.get_node_ip_address(), "host": socket.gethostname()}


def probe() -> dict[str, str]:
    """What the driver checks on every node before it sends runs: versions and where."""
    import sys


    return {**node_info(), "idaudit": __version__, "python": sys.version.split()[0]}





# ---- the driver --------------------------------------------------------------------------

def _ray():
    try:
        import ray
    except ImportError:
        raise IdauditError('--executor ray needs Ray: pip install "idaudit[ray]"') from None
    return ray


@contextlib.contextmanager
def connected(address: str | None, runtime_env: dict[str, Any] | None = None
              ) -> Iterator[Any]:
    """Ray, connected to the cluster at ``address`` (or the one Ray finds: ``RAY_ADDRESS``,
    the last ``ray start`` here, else a local instance), every task of this driver in
    ``runtime_env`` (Ray's), its own logging kept off stdout; disconnected on the way out if
    this call connected. A runtime environment for a Ray this process already joined is
    refused (it is fixed when Ray starts)."""
    ray = _ray()
    started = not ray.is_initialized()
    if not started and runtime_env is not None:
        raise IdauditError("--runtime-env: Ray is already initialised in this process; give "
                           "the runtime environment to ray.init instead")
    if started:
        import warnings

        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
        try:
            with warnings.catch_warnings():  # Ray Client's multi-line UserWarning: not shown
                warnings.simplefilter("ignore", UserWarning)
                ray.init(address=address, include_dashboard=False, log_to_driver=False,
                         logging_level=logging.ERROR, ignore_reinit_error=True,
                         runtime_env=runtime_env)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise IdauditError(f"cannot reach the Ray cluster at {address or 'a local Ray'}: "
                               f"{connect_failure(exc, address)}") from None
    restore = _raylet_notes_to_stderr()
    try:
        yield ray
    finally:
        restore()
        if started:
            with contextlib.suppress(Exception):
                ray.shutdown()


def connect_failure(exc: BaseException, address: str | None) -> str:
    """Why ``ray.init(address)`` failed, as one printable line: the exception's text with its
    later lines too (Ray Client's "Initialization failure from server:" puts the server's
    reason, a traceback, after its first line: its last line is kept), else the chained
    cause's; for a ``ray://`` address that timed out, what answers at that port (nothing, or
    something that is not a Ray Client server).

    Args:
        exc: what ``ray.init`` raised.
        address: the address it was given (None: a local Ray).

    Returns:
        The reason, at most 500 characters, never empty.
    """
    lines = [li.strip() for li in str(exc).splitlines() if li.strip()]
    reason = lines[0] if lines else ""
    if len(lines) > 1 and reason.endswith(":"):
        reason = f"{reason} {lines[-1]}"
    cause = exc.__cause__ or exc.__context__
    if (not lines or reason.endswith(":")) and cause is not None:
        reason = f"{reason} {first_line(cause)}".strip()
    if not reason:
        reason = type(exc).__name__
    if reason.endswith(":"):  # the server sent no reason: where it wrote one
        reason += (" no reason given; the head's Ray Client server logs it in "
                   "ray_client_server*.err/.out under its session's logs directory "
                   "(/tmp/ray/session_latest/logs by default)")
    if address and address.startswith("ray://") and "timeout" in reason:
        reason += f" ({_client_port_answer(address[len('ray://'):])})"
    return one_line(reason, 500)


def _client_port_answer(hostport: str, timeout: float = 3.0) -> str:
    """What a plain TCP connection to ``hostport`` finds: nothing listening, or a server
    that did not answer as a Ray Client server."""
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except ValueError:
        return f"{hostport!r} is not HOST:PORT"
    except OSError as exc:
        return f"nothing answers at {hostport}: {exc.strerror or type(exc).__name__}"
    return (f"{hostport} accepts connections but is no Ray Client server: give the head's "
            "Ray Client port (10001 unless its ray start named another)")


def _raylet_notes_to_stderr() -> Callable[[], None]:
    """Route the notes Ray's driver thread prints about the cluster (a node marked dead, a
    task retried: 5-47 lines each, on stdout) to stderr, one line each, so that stdout holds
    only idaudit's summary; returns the undo. A Ray without that hook is left as it is."""
    import ray._private.worker as worker  # noqa: PLC0415

    original = getattr(worker, "print_to_stdstream", None)
    if original is None:
        return lambda: None

    def to_stderr(data: dict, ignore_prefix: bool) -> None:
        if data.get("pid") != "raylet":
            original(data, ignore_prefix)
            return
        for text in data.get("lines", []):
            first = next((line.strip() for line in str(text).splitlines() if line.strip()), "")
            if first:
                print(f"ray: {first[:300]}", file=sys.stderr, flush=True)

    worker.print_to_stdstream = to_stderr
    return lambda: setattr(worker, "print_to_stdstream", original)


class Stop:
    """SIGTERM and Ctrl-C noted by their handlers and acted on by :meth:`check` between
    Ray's calls (raised inside one, Ray turns either into ``SystemExit(1)``: the code of a
    failed gate)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def note(self, signum: int, frame: Any) -> None:
        self.signum = self.signum or signum

    def check(self) -> None:
        """SIGTERM: exit 143 (``finally`` blocks run: the sweep cancels its tasks); Ctrl-C:
        KeyboardInterrupt (the CLI exits 130)."""
        import signal
        import threading

        from idaudit.experiments.execute import _EXIT_GRACE, EXIT_TERMINATED

        if self.signum == signal.SIGINT:
            raise KeyboardInterrupt
        if self.signum is not None:
            watchdog = threading.Timer(_EXIT_GRACE, os._exit, (EXIT_TERMINATED,))
            watchdog.daemon = True
            watchdog.start()
            raise SystemExit(EXIT_TERMINATED)


@contextlib.contextmanager
def signals_noted() -> Iterator[Stop]:
    """While inside, SIGTERM and SIGINT are noted on the :class:`Stop` given (entered after
    ``ray.init``, whose own SIGTERM handler it replaces); the caller's handlers afterwards."""
    import signal
    import threading

    stop = Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = {s: signal.signal(s, stop.note) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)


def alive_nodes(ray) -> list[dict[str, Any]]:
    return [n for n in ray.nodes() if n.get("Alive")]


#: the environment variable that sets how long (seconds) every node has to answer the
#: version probe (default :data:`_PROBE_TIMEOUT`)
PROBE_TIMEOUT_ENV = "IDAUDIT_RAY_PROBE_TIMEOUT"
#: seconds before each new try of a probe lost to a system failure (a crashed worker, a
#: lost task, a node that died): then the node counts as not answering
_PROBE_BACKOFF = (1.0, 2.0, 4.0)
_NODES_REREAD = 2.0  # seconds between reads of ray.nodes() while probes are out


def probe_timeout() -> float:
    """How long every node has to answer the version probe: ``$IDAUDIT_RAY_PROBE_TIMEOUT``
    seconds, else :data:`_PROBE_TIMEOUT`.

    Returns:
        The seconds, > 0.

    Raises:
        IdauditError: the variable is set to something other than a number of seconds > 0.
    """
    import math

    raw = os.environ.get(PROBE_TIMEOUT_ENV)
    if raw is None or not raw.strip():
        return _PROBE_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise IdauditError(f"{PROBE_TIMEOUT_ENV}={one_line(raw, 60)}: expected the seconds "
                           f"every node has to answer the version check (> 0; default "
                           f"{_PROBE_TIMEOUT:g})")
    return value


def probe_failure_is_system(exc: BaseException) -> bool:
    """Whether a version probe failed for a system reason (its worker crashed, its node died,
    its task or its result was lost, it was cancelled): worth another try, and no answer
    about the node's idaudit. A failure of the task itself (no idaudit to import, an
    error in it) is a definite answer.

    Args:
        exc: what ``ray.get`` raised for the probe.

    Returns:
        True for a system failure.
    """
    import ray.exceptions as rex

    if isinstance(exc, rex.RayTaskError):
        return False
    system = tuple(getattr(rex, name) for name in (
        "WorkerCrashedError", "NodeDiedError", "ObjectLostError", "LocalRayletDiedError",
        "TaskUnschedulableError", "TaskCancelledError", "RaySystemError", "GetTimeoutError",
        "ActorUnavailableError", "OutOfMemoryError") if hasattr(rex, name))
    return isinstance(exc, system)


def _where(node: dict[str, Any]) -> str:
    return f"node {node.get('NodeManagerAddress')} ({node.get('NodeManagerHostname')})"


def _note(text: str) -> None:
    print(one_line(text, 500), file=sys.stderr, flush=True)


def check_nodes(ray, shape: TaskShape, stop: Stop | None = None,
                timeout: float | None = None,
                asked: list[dict[str, float]] | None = None) -> list[dict[str, str]]:
    """Ask every alive node for its idaudit version; refuse in one line (exit 2) when a node
    answers that it cannot import idaudit or has another version, or when no node can hold
    one run (nor can the cluster's autoscaler add one: :func:`room_for_a_run`).

    A probe lost to a system failure is tried again after 1, 2, 4 s
    (:func:`probe_failure_is_system`). A node that gives no answer within ``timeout`` is no
    wrong install: still alive, it is kept with a note on stderr (its tasks check their own
    idaudit); one Ray has marked dead meanwhile is skipped with a note.

    Args:
        ray: the connected ``ray`` module.
        shape: what each run asks for.
        stop: SIGTERM and Ctrl-C, checked while waiting.
        timeout: seconds every node has to answer (None: :func:`probe_timeout`).
        asked: gets the bundle asked of the autoscaler, if one was (:func:`release_request`).

    Returns:
        What each node that answered said (:func:`probe`).

    Raises:
        IdauditError: a node answered with another version or without idaudit, or no node
            can hold a run.
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    timeout = probe_timeout() if timeout is None else timeout
    nodes = {n["NodeID"]: n for n in alive_nodes(ray)}
    task = ray.remote(num_cpus=0, max_retries=0)(probe)

    def send(node_id: str) -> Any:
        return task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            node_id, soft=False)).remote()

    refs = {send(nid): nid for nid in nodes}  # the probes out now
    tries = dict.fromkeys(nodes, 1)
    retry_at: dict[str, float] = {}  # node id: when its next try goes out
    lost: dict[str, str] = {}  # node id: the last system failure of its probe
    answers: dict[str, dict[str, str]] = {}
    problems: list[str] = []
    dead: set[str] = set()
    t0 = time.monotonic()
    deadline, reread = t0 + timeout, t0 + _NODES_REREAD
    while (refs or retry_at) and time.monotonic() < deadline:
        if refs:
            ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=WAIT_SLICE)
        else:
            ready = []
            time.sleep(WAIT_SLICE)
        if stop is not None:
            stop.check()
        for ref in ready:
            nid = refs.pop(ref)
            try:
                answers[nid] = ray.get(ref, timeout=1.0)
            except Exception as exc:
                if probe_failure_is_system(exc):
                    lost[nid] = error_line(exc)
                    if tries[nid] <= len(_PROBE_BACKOFF):
                        retry_at[nid] = time.monotonic() + _PROBE_BACKOFF[tries[nid] - 1]
                    reread = time.monotonic()  # a node may have died: look now
                    continue
                cause = getattr(exc, "cause", None) or exc
                text = str(cause).strip().splitlines()
                last = text[-1] if text else type(cause).__name__
                problems.append(f"{_where(nodes[nid])} has no idaudit"
                                if "No module named 'idaudit'" in last
                                else f"{_where(nodes[nid])}: cannot run idaudit ({last})")
        now = time.monotonic()
        if now >= reread:
            reread = now + _NODES_REREAD
            alive = {n["NodeID"] for n in alive_nodes(ray)}
            for nid in set(nodes) - alive - dead - set(answers):
                dead.add(nid)
                retry_at.pop(nid, None)
                for ref in [r for r, n in refs.items() if n == nid]:
                    refs.pop(ref)
        for nid, when in list(retry_at.items()):
            if when <= now:
                del retry_at[nid]
                tries[nid] += 1
                refs[send(nid)] = nid
    for ref in refs:  # a slow node's probe: not waited for
        with contextlib.suppress(Exception):
            ray.cancel(ref)
    for nid, info in answers.items():
        if info["idaudit"] != __version__:
            problems.append(f"{_where(nodes[nid])} has idaudit {info['idaudit']}, this "
                            f"machine {__version__}")
    if problems:  # definite answers only, in one line
        raise IdauditError("; ".join(problems) + " — install the same idaudit on every node")
    alive = {n["NodeID"] for n in alive_nodes(ray)}
    for nid, node in nodes.items():
        if nid in answers:
            continue
        if nid in dead or nid not in alive:
            dead.add(nid)
            _note(f"{_where(node)} left the cluster during the version check: skipped")
        elif nid in lost and nid not in retry_at and not any(n == nid for n in refs.values()):
            _note(f"{_where(node)}: its version check was lost {tries[nid]} times to the "
                  f"system ({lost[nid]}): not refused; its tasks check their own idaudit")
        else:
            _note(f"{_where(node)} did not answer the version check in {timeout:g} s: "
                  "slow, not refused; its tasks check their own idaudit")
    live = [n for nid, n in nodes.items() if nid not in dead]
    room_for_a_run(ray, shape, live, stop, asked)
    if not answers:
        holders = sum(_fits(n.get("Resources", {}), shape) for n in alive_nodes(ray))
        _note(f"no node answered the version check in {timeout:g} s; going on, since "
              f"{holders} alive node(s) can hold a run: each task checks its own idaudit")
    return list(answers.values())


def _fits(resources: dict[str, Any], shape: TaskShape) -> bool:
    return (resources.get("CPU", 0) >= shape.cpus and resources.get("GPU", 0) >= shape.gpus
            and (not shape.memory_gib or resources.get("memory", 0) >= shape.memory_gib * 2**30))


def _shape_text(shape: TaskShape) -> str:
    return (f"{shape.cpus:g} CPUs, {shape.gpus:g} GPUs"
            + (f", {shape.memory_gib:g} GiB" if shape.memory_gib else ""))


def room_for_a_run(ray, shape: TaskShape, nodes: list[dict[str, Any]] | None = None,
                   stop: Stop | None = None,
                   asked: list[dict[str, float]] | None = None) -> None:
    """Make sure some node can hold one run of ``shape``: an alive node that fits, or else
    one the cluster's autoscaler adds (:func:`addable_node_types`): then Ray is asked for it
    (``ray.autoscaler.sdk.request_resources``) and this waits, one line on stderr every
    ~10 s, until such a node is alive.

    Args:
        ray: the connected ``ray`` module.
        shape: what each run asks for.
        nodes: the alive nodes (None: read now).
        stop: SIGTERM and Ctrl-C, checked while waiting.
        asked: gets the bundle asked of the autoscaler, if one was.

    Raises:
        IdauditError: no alive node fits and the cluster has no autoscaler, or none of the
            node types it can add fits (the largest named).
    """
    nodes = alive_nodes(ray) if nodes is None else nodes
    if any(_fits(n.get("Resources", {}), shape) for n in nodes):
        return
    most = max((n.get("Resources", {}).get("CPU", 0) for n in nodes), default=0)
    gpus = max((n.get("Resources", {}).get("GPU", 0) for n in nodes), default=0)
    head = (f"no node of the cluster can hold a run of {_shape_text(shape)} (the largest has "
            f"{most:g} CPUs, {gpus:g} GPUs")
    lower = "lower --cpus-per-run/--gpus-per-run/--memory-per-run"
    types = addable_node_types(ray)
    kind = autoscaler_kind(ray) if types is None else "published"
    if kind is None:
        raise IdauditError(f"{head}, and the cluster has no autoscaler to add one): {lower}")
    if types is not None and not any(t["max_count"] != 0 and _fits(t["resources"], shape)
                                     for t in types):
        if not types:
            raise IdauditError(f"{head}, and its autoscaler can add no node type): {lower}")
        big = max(types, key=lambda t: (t["resources"].get("GPU", 0),
                                        t["resources"].get("CPU", 0)))
        raise IdauditError(f"{head}, and the largest node type its autoscaler can add, "
                           f"{big['name']}, has {big['resources'].get('CPU', 0):g} CPUs, "
                           f"{big['resources'].get('GPU', 0):g} GPUs): {lower}")
    if not _wait_for_a_node(ray, shape, stop, [] if asked is None else asked, kind):
        raise IdauditError(f"{head}, and its autoscaler reports that none of the node types "
                           f"it can add can hold one): {lower}")


def driver_version() -> str:
    """This driver's idaudit version, the one every node is compared with (at the start, by
    :func:`check_nodes`, and in every task)."""
    return __version__


def refuse_if_all_avoided(ray, shape: TaskShape, avoided: dict[str, str]) -> None:
    """Stop a sweep whose every alive node that can hold a run was found with another
    idaudit (``avoided``: {node id: why}): its tasks could never be placed, and Ray would
    keep them pending for ever.

    Args:
        ray: the connected ``ray`` module.
        shape: what each run asks for.
        avoided: the nodes the sweep keeps its tasks off, and why.

    Raises:
        IdauditError: (exit 2) no such node is left, each avoided node's reason named.
    """
    if not any(n["NodeID"] not in avoided and _fits(n.get("Resources", {}), shape)
               for n in alive_nodes(ray)):
        raise IdauditError(one_line("no node left that can hold a run with this idaudit: "
                                    + "; ".join(avoided.values())
                                    + " — install the same idaudit on every node", 1000))


def autoscaler_kind(ray) -> str | None:
    """Which autoscaler adds nodes to the cluster: ``"v2"`` (Ray's autoscaler v2, as its
    GCS says), ``"v1"`` (Ray's v1 monitor with node types of its own, as its status in the
    GCS shows), or None (none: a cluster started with no autoscaling config runs the v1
    monitor on a read-only provider, whose node types are its nodes, ``node_<id>``).

    Args:
        ray: the connected ``ray`` module.

    Returns:
        ``"v2"``, ``"v1"`` or None.
    """
    import json

    try:
        from ray.autoscaler.v2.utils import is_autoscaler_v2

        if is_autoscaler_v2(fetch_from_server=True):
            return "v2"
    except Exception:
        pass
    try:
        from ray._private import ray_constants
        from ray.experimental.internal_kv import _internal_kv_get

        status = json.loads(_internal_kv_get(ray_constants.DEBUG_AUTOSCALING_STATUS) or "{}")
        mapping = (status.get("autoscaler_report") or {}).get("node_type_mapping") or {}
    except Exception:
        return None
    own = [t for k, t in mapping.items() if t != f"node_{k}"]
    return "v1" if own else None


def _infeasible(ray, bundle: dict[str, float]) -> bool:
    """Whether Ray's autoscaler v2 reports ``bundle`` (a cluster resource constraint) as one
    no node type it can add can hold."""
    try:
        from ray._raylet import GcsClient
        from ray.core.generated.autoscaler_pb2 import GetClusterStatusReply

        reply = GetClusterStatusReply()
        reply.ParseFromString(GcsClient(ray.get_runtime_context().gcs_address)
                              .get_cluster_status(timeout_s=10))
    except Exception:
        return False
    for constraint in reply.autoscaling_state.infeasible_cluster_resource_constraints:
        for by_count in constraint.resource_requests:
            if dict(by_count.request.resources_bundle) == bundle:
                return True
    return False


def addable_node_types(ray) -> list[dict[str, Any]] | None:
    """The node types the cluster's autoscaler can add, as the GCS holds them (Ray's
    autoscaler v2, KubeRay: ``ray._private.state.state.get_cluster_config()``).

    Args:
        ray: the connected ``ray`` module.

    Returns:
        ``[{"name", "resources", "max_count"}]`` (``max_count`` -1: no limit), or None where
        the cluster publishes none (no autoscaler, or Ray's autoscaler v1, whose node types
        only its own config file holds).
    """
    try:
        from ray._private.state import state

        config = state.get_cluster_config()
    except Exception:
        return None
    if config is None:
        return None
    return [{"name": g.name, "resources": {k: float(v) for k, v in g.resources.items()},
             "max_count": int(g.max_count)} for g in config.node_group_configs]


def _wait_for_a_node(ray, shape: TaskShape, stop: Stop | None, asked: list[dict[str, float]],
                     kind: str, every: float = 10.0) -> bool:
    """Ask the autoscaler for one node of ``shape`` and wait until one is alive (True), a
    line on stderr every ``every`` s; False as soon as autoscaler v2 (``kind``) reports the
    request infeasible."""
    from ray.autoscaler.sdk import request_resources

    bundle = {"CPU": float(shape.cpus)} if shape.cpus else {}
    if shape.gpus:
        bundle["GPU"] = float(shape.gpus)
    if shape.memory_gib:
        bundle["memory"] = float(int(shape.memory_gib * 2**30))
    request_resources(bundles=[bundle])
    asked.append(bundle)
    t0 = told = asked_v2 = time.monotonic()
    line = f"waiting for the cluster to add a node that can hold a run of {_shape_text(shape)}"
    _note(f"{line} (Ctrl-C to stop)")
    while not any(_fits(n.get("Resources", {}), shape) for n in alive_nodes(ray)):
        time.sleep(WAIT_SLICE)
        if stop is not None:
            stop.check()
        now = time.monotonic()
        if kind == "v2" and now - asked_v2 >= 2.0:
            asked_v2 = now
            if _infeasible(ray, bundle):
                return False
        if now - told >= every:
            told = now
            _note(f"{line} ({now - t0:.0f} s)")
    return True


def release_request() -> None:
    """Withdraw the ``request_resources`` :func:`room_for_a_run` made (the autoscaler may
    then remove idle nodes)."""
    with contextlib.suppress(Exception):
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=[])



def error_line(exc: BaseException) -> str:
    """``Type: first line`` of a Ray error's own cause (the task's exception), else of it."""
    cause = getattr(exc, "cause", None)
    shown = cause if isinstance(cause, BaseException) else exc
    return one_line(f"{type(shown).__name__}: {first_line(shown)}", 500)
