"""Sweeps on a Ray cluster whose nodes share no disk.

Everything travels through Ray's object store: the files a run reads (a rendered Reacher
dataset, a stored pairs file) go to each node once, and the files a run makes (its
``--checkpoints`` encoder and log) come back with its record, which the driver writes under
its own ``OUT``. A node keeps what it received in a mirror of the driver's paths under its
temporary directory (``$TMPDIR/idaudit-ray/TOKEN/<driver path>``), so a checkpoint's stored
path to its dataset, relative to the checkpoint, is the same on the node and on the driver.

Datasets not yet rendered are rendered by one cluster task each (its render pool sized to the
task's CPUs) and written under the driver's ``OUT/data``. Every node's idaudit is checked
before the runs (:mod:`idaudit.experiments.ray_nodes`), and each task checks its own node's
(one that joined later with another version is avoided, its runs sent elsewhere). A task
that Ray cannot finish (a node lost past its retries, a crashed worker, an OOM kill) becomes
that run's ``ID.failed.json`` and the sweep goes on. Records are filed under the driver's run ids.

With ``OUT`` in object storage (``--out s3://bucket/prefix``) nothing comes back through Ray:
a render task puts its dataset in the store (``data/NAME``, its ``meta.json`` last) and the
nodes fetch it from there into their mirror; each node files its own run into the store
(:func:`idaudit.experiments.filing.store_on_node`: checkpoint and log, then the record, the
commit point), so the driver may die and any machine with access resumes the sweep.

The node checks (the version probe, the room for a run, the autoscaler wait, Ray Client's
reasons) live in :mod:`idaudit.experiments.ray_nodes`, with the driver's version the tasks
are sent (:func:`~idaudit.experiments.ray_nodes.driver_version`: one name to compare with);
here, the files, the tasks run on a node and the sweep's phases.
"""

from __future__ import annotations

import contextlib
import hashlib
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from idaudit.core.errors import IdauditError, one_line
from idaudit.core.version import __version__
from idaudit.experiments import ray_nodes
from idaudit.experiments.ray_nodes import (
    MAX_RETRIES,
    WAIT_SLICE,
    Stop,
    TaskShape,
    alive_nodes,
    check_nodes,
    connected,
    error_line,
    node_info,
    probe_timeout,
    release_request,
    signals_noted,
)

__all__ = ["ray_results"]

#: the key of what a task answers on a node whose idaudit is not the driver's (one that joined
#: after the sweep checked its nodes): the run goes back to the queue, that node avoided
WRONG_NODE = "wrong_node"
_NODE_ID_LABEL = "ray.io/node-id"  # Ray's own label of every node: its id


# ---- files through the object store -------------------------------------------------------

def pack(path: Path) -> dict[str, bytes]:
    """A file (``{"": bytes}``) or a directory's files (``{relative posix path: bytes}``)."""
    path = Path(path)
    if path.is_file():
        return {"": path.read_bytes()}
    return {p.relative_to(path).as_posix(): p.read_bytes()
            for p in sorted(path.rglob("*")) if p.is_file()}


def unpack(files: dict[str, bytes], dest: Path) -> Path:
    """Write what :func:`pack` gave at ``dest``, whole or not at all (a temporary beside it,
    renamed); an existing ``dest`` is replaced."""
    import shutil

    from idaudit.core.atomic import replace_path

    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        if set(files) == {""}:
            target = tmp / "file"
            target.write_bytes(files[""])
        else:
            target = tmp / "dir"
            for rel, data in files.items():
                if rel.startswith("/") or ".." in Path(rel).parts:
                    raise IdauditError(f"refusing a path outside the dataset: {rel!r}")
                (target / rel).parent.mkdir(parents=True, exist_ok=True)
                (target / rel).write_bytes(data)
        replace_path(target, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def mirror_root(token: str) -> Path:
    """Where this node keeps the sweep ``token``'s files (under its temporary directory)."""
    return Path(tempfile.gettempdir()) / "idaudit-ray" / token


def mirrored(driver_path: str | Path, token: str) -> Path:
    """The node's copy of the driver's absolute path ``driver_path``."""
    return mirror_root(token) / Path(driver_path).relative_to(Path(driver_path).anchor)


def _materialize(driver_path: str, ref_box: list | dict[str, str], token: str) -> Path:
    """The node's copy of ``driver_path``, fetched once per node (a file lock keeps
    concurrent tasks on one node from fetching it twice): from Ray's object store
    (``ref_box``: [the object]) or from the sweep's store (``{"uri": OUT, "key":
    "data/NAME"}``, :func:`stored_input`)."""
    import fcntl

    dest = mirrored(driver_path, token)
    key = hashlib.sha1(driver_path.encode()).hexdigest()[:16]
    root = mirror_root(token)
    root.mkdir(parents=True, exist_ok=True)
    done = root / f".done-{key}"
    with open(root / f".lock-{key}", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            if isinstance(ref_box, dict):
                from idaudit.core.storage import open_store

                open_store(ref_box["uri"]).download(ref_box["key"], dest)
            else:
                import ray

                unpack(ray.get(ref_box[0]), dest)
            done.touch()
    return dest


def stored_input(uri: str, path: Path) -> dict[str, str]:
    """What :func:`_materialize` fetches from the sweep's store at ``uri``: the dataset
    directory ``path`` (under the driver's ``OUT/data``) as the store's ``data/NAME``."""
    return {"uri": uri, "key": f"data/{Path(path).name}"}


def _stored_complete(uri: str, path: Path) -> bool:
    """Whether the store at ``uri`` holds the dataset ``path`` complete (its meta.json,
    put last, says so)."""
    import json

    from idaudit.core.storage import open_store

    try:
        meta = open_store(uri).read_text(f"data/{Path(path).name}/meta.json")
        return json.loads(meta).get("status") == "complete"
    except (OSError, ValueError, AttributeError, IdauditError):
        return False


# ---- what runs on a node -----------------------------------------------------------------

def render_on_node(spec_dict: dict[str, Any], name: str, driver_data_root: str, token: str,
                   workers: int, store_uri: str | None = None) -> dict[str, bytes]:
    """Render (or resume) one dataset into the node's mirror of the driver's ``OUT/data``
    with ``workers`` render processes; return its files, or, with ``store_uri`` (the
    sweep's OUT in object storage), put it there as ``data/NAME`` (its meta.json last) and
    return nothing: the other nodes fetch it from there."""
    from idaudit.worlds import KINDS
    from idaudit.worlds.spec import WorldSpec

    spec = WorldSpec.from_dict(spec_dict)
    root = mirrored(driver_data_root, token)
    KINDS.get(spec.name).prepare(spec, root, workers, False)
    if store_uri is not None:
        from idaudit.core.storage import open_store

        open_store(store_uri).upload(root / name, f"data/{name}")
        return {}
    return pack(root / name)


def run_on_node(run: dict[str, Any], rid: str, version: str, inputs: list[tuple[str, Any]],
                data_root: str, checkpoint_dir: str | None, device: str, threads: int,
                token: str, store_uri: str | None = None) -> dict[str, Any]:
    """One run on this node: its inputs fetched into the node's mirror, trained there, its
    checkpoint and log (with ``checkpoint_dir``) read back into the record as ``files``
    (``{driver path: bytes}``) and removed from the node. With ``store_uri`` (the sweep's
    OUT in object storage) the node files the run there itself (:func:`store_on_node`) and
    returns only its outcome. Never raises."""
    from idaudit.core.threads import share_cpu

    share_cpu()  # as the idaudit command does, before this worker first loads torch
    from idaudit.experiments.execute import execute

    t0, started = time.perf_counter(), time.time()
    where = node_info()
    if __version__ != version:  # not this run's failure: the driver sends it elsewhere
        return {"id": rid, "node": where, WRONG_NODE: f"node {where['ip']} ({where['host']}) "
                f"has idaudit {__version__}, this machine {version}"}
    from idaudit.experiments.filing import already_stored, store_on_node

    if store_uri is not None and already_stored(store_uri, rid):  # another attempt's
        return {"id": rid, "node": where, "stored": True, "already": True, "status": "ok"}
    try:
        local = dict(run)
        for driver_path, ref_box in inputs:
            node_path = _materialize(driver_path, ref_box, token)
            if run.get("data") is not None:
                local["data"] = str(node_path)
    except Exception as exc:  # recorded, the sweep goes on
        return {"run": run, "id": rid, "status": "failed", "node": where,
                "error": f"fetching the run's data: {type(exc).__name__}: {exc}",
                "seconds": time.perf_counter() - t0}
    node_ckpt = None if checkpoint_dir is None else str(mirrored(checkpoint_dir, token))
    rec = execute(local, str(mirrored(data_root, token)), device, node_ckpt, threads=threads)
    rec.update(run=run, id=rid, node=where, started=started, finished=time.time())
    from idaudit.experiments.execute import FINISHED

    if store_uri is not None:
        return store_on_node(store_uri, rid, rec, node_ckpt)
    if rec["status"] in FINISHED and node_ckpt is not None:  # a collapsed run's files too
        files = {}
        for key, name in (("checkpoint", f"{rid}.safetensors"), ("log", f"{rid}.log.json")):
            node_file = Path(node_ckpt) / name
            files[str(Path(checkpoint_dir) / name)] = node_file.read_bytes()
            node_file.unlink()
            rec[key] = str(Path(checkpoint_dir) / name)
        rec["files"] = files
    return rec

@contextlib.contextmanager
def ray_results(todo: list[dict[str, Any]], ids: list[str], address: str | None,
                data_root: Path, checkpoint_dir: Path | None, shape: TaskShape,
                prepare: list[tuple[Any, Path]], progress: bool = False,
                avoided: dict[str, str] | None = None, store: Any = None,
                runtime_env: dict[str, Any] | None = None
                ) -> Iterator[Iterator[tuple[int, dict[str, Any]]]]:
    """The runs ``todo`` on the cluster at ``address``, in three phases. Entering: the
    cluster reached and its nodes checked (:func:`_cluster`), then the datasets rendered and
    shipped (:func:`_ship_inputs`); what it gives is the third, :func:`_collect`: ``(i, the
    record of todo[i])`` (with ``id``, ``node``, and ``files`` to write) as the cluster
    finishes each run: ``i`` is the driver's, the record the node's, to be filed under
    ``ids[i]`` (:func:`idaudit.experiments.sweep.own_record`), never under an id the record
    names. ``prepare``: (world spec, the driver's dataset directory) for every dataset the
    runs read under ``data_root``, rendered on the cluster when missing on the driver.
    Leaving early (an error, Ctrl-C, SIGTERM) cancels the runs still on the cluster.
    ``avoided`` gets ``{node id: why}`` of each node a task found with another idaudit.
    ``store``: the sweep's OUT in object storage (:class:`~idaudit.core.storage.Store`), or
    None: with one, the nodes read the datasets from it and file their runs into it
    themselves (the records then say ``stored``)."""
    uri = None if store is None else store.uri
    with _cluster(address, shape, runtime_env) as (ray, stop):
        token = hashlib.sha1(f"{socket.gethostname()}:{data_root}".encode()).hexdigest()[:12]
        inputs = _ship_inputs(ray, stop, todo, data_root, shape, prepare, token, progress,
                              uri)
        results = _collect(ray, stop, todo, ids, inputs, data_root, checkpoint_dir, shape,
                           token, {} if avoided is None else avoided, uri)
        with contextlib.closing(results):
            yield results


@contextlib.contextmanager
def _cluster(address: str | None, shape: TaskShape,
             runtime_env: dict[str, Any] | None = None) -> Iterator[tuple[Any, Stop]]:
    """Phase 1: Ray connected to the cluster at ``address`` (:func:`connected`), SIGTERM and
    Ctrl-C noted (:func:`signals_noted`), and every alive node's idaudit version probed and
    the cluster's room for one run of ``shape`` checked (:func:`check_nodes`); gives Ray
    and the :class:`Stop`."""
    timeout = probe_timeout()  # a bad value refused before the cluster is reached
    with connected(address, runtime_env) as ray, signals_noted() as stop:
        asked: list[dict[str, float]] = []
        try:
            check_nodes(ray, shape, stop, timeout, asked)
            yield ray, stop
        finally:
            if asked:
                release_request()


def _ship_inputs(ray, stop: Stop, todo: list[dict[str, Any]], data_root: Path,
                 shape: TaskShape, prepare: list[tuple[Any, Path]], token: str,
                 progress: bool, uri: str | None = None) -> list[list[tuple[str, Any]]]:
    """Phase 2: the datasets of ``prepare`` missing on the driver (with ``uri``, the sweep's
    store: missing there) rendered on the cluster (:func:`_render_missing`), every other
    dataset of ``prepare`` and every run's own ``data`` file put in the object store;
    returns, for each run of ``todo``, the inputs :func:`run_on_node` fetches: (driver path,
    [the object holding its files]), or, for a dataset in the sweep's store, (driver path,
    :func:`stored_input`)."""
    refs: dict[str, Any] = _render_missing(ray, stop, prepare, data_root, shape, token,
                                           progress, uri)
    for _, path in prepare:
        if str(path) not in refs:
            refs[str(path)] = stored_input(uri, path) if uri is not None else ray.put(pack(path))
    for r in todo:
        if r.get("data") is not None and str(Path(r["data"]).resolve()) not in refs:
            data = Path(r["data"]).resolve()
            if data.exists():
                refs[str(data)] = ray.put(pack(data))
    inputs = []
    for r in todo:
        reads = _run_reads(r, data_root, shape.device)
        needs = [str(Path(r["data"]).resolve())] if r.get("data") is not None else [
            str(p) for _, p in prepare if p in reads]
        inputs.append([(p, refs[p] if isinstance(refs[p], dict) else [refs[p]])
                       for p in needs if p in refs])
    return inputs


def _render_missing(ray, stop: Stop, prepare: list[tuple[Any, Path]], data_root: Path,
                    shape: TaskShape, token: str, progress: bool, uri: str | None = None
                    ) -> dict[str, Any]:
    """The datasets of ``prepare`` not complete on the driver rendered by one cluster task
    each (:func:`render_on_node`) and written at their driver paths; returns {driver path:
    the object holding its files}. With ``uri`` (the sweep's store): those not complete
    there, put there by the task that rendered them ({driver path: :func:`stored_input`}),
    nothing written on the driver. A render that fails raises :class:`IdauditError`."""
    from idaudit.core.progress import ProgressBar

    refs: dict[str, Any] = {}
    renders = [(spec, path) for spec, path in prepare
               if not (_complete(path) if uri is None else _stored_complete(uri, path))]
    if not renders:
        return refs
    render = ray.remote(render_on_node).options(
        num_cpus=shape.cpus or 1, max_retries=MAX_RETRIES, retry_exceptions=False)
    pending = {render.remote(spec.to_dict(), path.name, str(data_root), token,
                             shape.threads, uri): path for spec, path in renders}
    with ProgressBar(progress, len(pending), "render on the cluster") as bar, \
            _cancelled_on_exit(ray, pending):
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_SLICE)
            stop.check()
            for ref in done:
                path = pending.pop(ref)
                try:
                    files = ray.get(ref)
                    if uri is None:
                        unpack(files, path)
                except Exception as exc:
                    raise IdauditError(f"rendering {path.name} on the cluster failed: "
                                       f"{error_line(exc)}") from None
                refs[str(path)] = ref if uri is None else stored_input(uri, path)
                bar.advance(1)
    return refs


def _collect(ray, stop: Stop, todo: list[dict[str, Any]], ids: list[str],
             inputs: list[list[tuple[str, list]]], data_root: Path,
             checkpoint_dir: Path | None, shape: TaskShape, token: str,
             avoided: dict[str, str], uri: str | None = None
             ) -> Iterator[tuple[int, dict[str, Any]]]:
    """Phase 3: the runs submitted as :func:`run_on_node` tasks (at most
    ``shape.in_flight`` at once), ``(i, record)`` yielded as each finishes (a task Ray
    could not finish: a failed record); the nodes' copies removed once all are in. A task
    that found another idaudit on its node (:data:`WRONG_NODE`) is no failure: its run goes
    back to the queue, and that node, noted in ``avoided`` ({node id: why}), is kept out of
    every later task by Ray's scheduler (a label selector on the node id). With ``uri``
    each task files its run into the sweep's store itself (:func:`store_on_node`)."""
    import re

    task = ray.remote(run_on_node)
    queue = list(range(len(todo)))
    pending: dict[Any, int] = {}
    sent_back = [0] * len(todo)
    with _cancelled_on_exit(ray, pending):
        while queue or pending:
            while queue and (shape.in_flight is None or len(pending) < shape.in_flight):
                i = queue.pop(0)
                where = {} if not avoided else {
                    "label_selector": {_NODE_ID_LABEL: f"!in({','.join(sorted(avoided))})"}}
                pending[task.options(**shape.options(), **where).remote(
                    todo[i], ids[i], ray_nodes.driver_version(), inputs[i], str(data_root),
                    None if checkpoint_dir is None else str(checkpoint_dir), shape.device,
                    shape.threads, token, uri)] = i
            done, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_SLICE)
            stop.check()
            for ref in done:
                i = pending.pop(ref)
                try:
                    rec = ray.get(ref)
                except Exception as exc:  # Ray could not finish it: recorded, go on
                    rec = {"run": todo[i], "id": ids[i], "status": "failed",
                           "error": error_line(exc), "seconds": None}
                node = rec.get("node") if isinstance(rec, dict) else None
                node_id = node.get("id") if isinstance(node, dict) else None
                if (isinstance(rec, dict) and WRONG_NODE in rec and sent_back[i] < MAX_RETRIES
                        and isinstance(node_id, str) and re.fullmatch(r"[0-9a-f]{8,64}", node_id)):
                    avoided.setdefault(node_id, one_line(rec[WRONG_NODE], 300))
                    ray_nodes.refuse_if_all_avoided(ray, shape, avoided)
                    sent_back[i] += 1
                    queue.insert(0, i)
                    continue
                if isinstance(rec, dict) and WRONG_NODE in rec:  # sent back too often
                    rec = {"run": todo[i], "id": ids[i], "status": "failed", "seconds": None,
                           "error": one_line(rec[WRONG_NODE], 300)}
                yield i, rec
    _clean_nodes(ray, token)


@contextlib.contextmanager
def _cancelled_on_exit(ray, pending: dict) -> Iterator[None]:
    """Tasks still in ``pending`` when the block is left (Ctrl-C, SIGTERM, an error, the
    caller stopping early) are cancelled on the cluster."""
    try:
        yield
    finally:
        for ref in list(pending):
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)


def clean_node(token: str) -> None:
    """Remove this node's copies of the sweep ``token``'s files."""
    import shutil

    shutil.rmtree(mirror_root(token), ignore_errors=True)


def _clean_nodes(ray, token: str, timeout: float = 5.0) -> None:
    """Best effort: every alive node drops its copies of the sweep's files."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    with contextlib.suppress(Exception):
        task = ray.remote(num_cpus=0, max_retries=0)(clean_node)
        refs = [task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            n["NodeID"], soft=False)).remote(token) for n in alive_nodes(ray)]
        ray.wait(refs, num_returns=len(refs), timeout=timeout)


def _complete(path: Path) -> bool:
    """Whether a rendered dataset directory is complete (its ``meta.json`` says so)."""
    from idaudit.experiments.filing import dataset_complete

    return dataset_complete(path)


def _run_reads(run: dict[str, Any], data_root: Path, device: str) -> list[Path]:
    from idaudit.training.runs import resolve
    from idaudit.worlds import KINDS

    world = resolve(run, device).world
    return [Path(p) for p in KINDS.get(world.name).files(world, data_root=data_root)]
