"""Sweeps: run many independent trainings, resumably, in a local process pool or on Ray.

Each run's result is one JSON file named after its run id (a hash of the resolved config and
the idaudit version) under ``OUT/runs/``, so a killed sweep resumes by skipping runs whose
file exists. Runs execute in a local process pool (one single-threaded run per core, or one
per GPU); a failed run is recorded with its error and does not stop the others. Worlds that
need data on disk (Reacher) have it prepared first, under ``OUT/data``. A run whose embedding
collapsed is recorded with the status ``collapsed`` (:data:`FINISHED`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from idaudit.core.errors import IdauditError
from idaudit.core.requests import SweepRequest, unknown_options
from idaudit.core.storage import Store
from idaudit.experiments.execute import (  # noqa: F401 (run_id, execute: the sweep's API too)
    _EXIT_GRACE,
    EXIT_TERMINATED,
    FINISHED,
    _init_worker,
    execute,
    run_id,
)
from idaudit.training.runs import ResolvedRun, resolve
from idaudit.worlds import KINDS

__all__ = ["outcome_text", "plan_workers", "run_id", "run_sweep", "run_sweep_request", "sweep", "sweep_runs"]


def prepare_data(runs: list[ResolvedRun], data_root: Path, workers: int | None = None,
                 progress: bool = False) -> None:
    """Prepare (render or resume) the data every run's world needs, each dataset once."""
    done: set[str] = set()
    for r in runs:
        key = repr(r.world)
        if key not in done:
            done.add(key)
            KINDS.get(r.world.name).prepare(r.world, data_root, workers, progress)


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # no usable CUDA runtime
        return 0


def plan_workers(gpus: int, workers: int | None, n_runs: int) -> tuple[int, list[str]]:
    """(pool size, worker devices): one run per GPU when there are GPUs (at most one worker
    per GPU), else one single-threaded CPU run per core (or ``workers``); never more workers
    than runs."""
    if gpus:
        n = min(workers or gpus, gpus)
        devices = [f"cuda:{i}" for i in range(n)]
    else:
        n = workers or os.cpu_count() or 1
        devices = ["cpu"] * n
    n = max(1, min(n, n_runs or 1))
    return n, devices[:n]


def sweep_inputs(runs: list[dict[str, Any]], suite: str | Path | None = None
                 ) -> list[tuple[Path, str]]:
    """The files a sweep reads: its ``suite`` file (a TOML, not a built-in suite's name) and
    every run's data."""
    from idaudit.experiments.suites import SUITES

    files = [] if suite is None or str(suite) in SUITES else [(Path(suite), "the suite file")]
    return files + [(Path(data), "a run's data") for data in
                    dict.fromkeys(str(r["data"]) for r in runs if r.get("data") is not None)]


def run_files(out_dir: str | Path, ids: list[str], checkpoints: bool = False
              ) -> list[tuple[Path, str]]:
    """Every file a sweep under ``out_dir`` may write for runs ``ids``: a record (or a failed
    one) each, and with ``checkpoints`` a checkpoint and its log."""
    runs, kept = Path(out_dir) / "runs", Path(out_dir) / "checkpoints"
    files = []
    for rid in dict.fromkeys(ids):
        files += [(runs / f"{rid}.json", "--out (a run's record)"),
                  (runs / f"{rid}.failed.json", "--out (a run's record)")]
        if checkpoints:
            files += [(kept / f"{rid}.safetensors", "--out (a run's checkpoint)"),
                      (kept / f"{rid}.log.json", "--out (a run's checkpoint log)")]
    return files


def run_sweep(runs: list[dict[str, Any]], out_dir: str | Path, workers: int | None = None,
              progress: bool = False, executor: str = "local", address: str | None = None,
              checkpoints: bool = False, reads: list[tuple[Path, str]] | None = None,
              shape: Any = None, runtime_env: dict[str, Any] | None = None) -> dict[str, int]:
    """Execute the runs whose result file is missing; return counts.

    ``executor`` local: a spawn process pool, one single-threaded run per core (``workers``),
    or one run per GPU when the machine has GPUs; ray: Ray tasks on the cluster at
    ``address`` (or a local Ray instance), each asking for what ``shape``
    (:class:`~idaudit.experiments.ray_nodes.TaskShape`, default one CPU) says, at most
    ``workers`` in flight, the nodes sharing no disk with this machine
    (:mod:`idaudit.experiments.ray_executor`). Reacher datasets are rendered first, under
    ``OUT/data``. ``checkpoints`` keeps every trained encoder as
    ``OUT/checkpoints/ID.safetensors`` (for ``idaudit audit``/``plan`` afterwards). No file
    a run may write is one of ``reads`` (by default :func:`sweep_inputs` of ``runs``).
    ``out_dir`` may be a URI (``s3://bucket/prefix``: :func:`~idaudit.core.storage.open_store`):
    every file then goes to that store (on Ray, written by the nodes themselves).
    ``runtime_env``: Ray's runtime environment for every task (``ray.init``'s;
    :func:`~idaudit.experiments.runtime_env.read_runtime_env` reads one from a file).
    """
    from idaudit.core.outputs import refuse_clashes
    from idaudit.core.storage import open_store

    if executor not in ("local", "ray"):
        raise IdauditError(f"unknown executor {executor!r}; valid: local, ray")
    if executor == "local" and (address is not None or shape is not None
                                or runtime_env is not None):
        raise IdauditError("--address, --runtime-env and --cpus-per-run/--gpus-per-run/"
                           "--memory-per-run apply to --executor ray only")
    ids = [run_id(r) for r in runs]  # every run checked before any starts
    store = open_store(out_dir)
    if not store.is_local:
        import shutil
        import tempfile

        staging = Path(tempfile.mkdtemp(prefix="idaudit-sweep-"))  # this machine's mirror
        try:
            return _sweep_into(runs, ids, store, staging, workers, progress, executor,
                               address, checkpoints, shape, runtime_env)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    out_dir = Path(out_dir).resolve()  # the driver's: Ray tasks run elsewhere
    refuse_clashes(run_files(out_dir, ids, checkpoints),
                   sweep_inputs(runs) if reads is None else reads)
    with _unmade_on_refusal(out_dir / "runs", out_dir / "checkpoints"):
        return _sweep_into(runs, ids, open_store(out_dir), out_dir, workers, progress,
                           executor, address, checkpoints, shape, runtime_env)


@contextlib.contextmanager
def _unmade_on_refusal(*dirs: Path, note: Path | None = None):
    """A sweep refused inside (:class:`IdauditError`, exit 2) leaves none of ``dirs`` that it
    made and that are still empty (no run recorded in them); ``note``, a file it wrote in
    the last of them, goes too where it is all that directory holds."""
    made = [d for d in dirs if not d.exists()]
    try:
        yield
    except IdauditError:
        for d in made:
            with contextlib.suppress(OSError):
                if note is not None and note.parent == d and list(d.iterdir()) == [note]:
                    note.unlink()
                d.rmdir()
        raise


def _sweep_into(runs: list[dict[str, Any]], ids: list[str], store: Store, local: Path,
                workers: int | None, progress: bool, executor: str, address: str | None,
                checkpoints: bool, shape: Any, runtime_env: dict[str, Any] | None = None
                ) -> dict[str, int]:
    """:func:`run_sweep` once its runs are checked: into ``store``'s ``runs/``, with
    ``local`` this machine's directory of its files (OUT itself, or a mirror of a remote
    store: the datasets and checkpoints made here before they go to the store)."""
    if store.is_local:
        (local / "runs").mkdir(parents=True, exist_ok=True)
    data_root = local / "data"
    ckpt_dir = None
    if checkpoints:
        (local / "checkpoints").mkdir(parents=True, exist_ok=True)
        ckpt_dir = str(local / "checkpoints")
    recorded = set(store.listdir("runs"))
    todo = [(r, rid) for r, rid in zip(runs, ids) if f"{rid}.json" not in recorded]
    counts = {"total": len(runs), "skipped": len(runs) - len(todo), "ok": 0, "failed": 0}
    if executor == "ray":
        if todo:
            _ray_sweep(todo, store, address, data_root, ckpt_dir, workers, shape, counts,
                       progress, runtime_env)
        return counts
    _local_sweep(todo, store, data_root, ckpt_dir, workers, counts, progress)
    return counts


def _store_datasets(runs: list[ResolvedRun], store: Store, data_root: Path) -> list[Path]:
    """The datasets under ``data_root`` that ``runs`` read, each complete one in ``store``
    (``data/NAME``) copied to ``data_root`` first; returns those still to be put there."""
    from idaudit.experiments.filing import dataset_complete as _complete

    missing: list[Path] = []
    for path in dict.fromkeys(p for r in runs for p in _dataset_dirs(r, data_root)):
        key = store.join("data", path.name)
        if _complete(path):
            if not store.exists(store.join(key, "meta.json")):
                missing.append(path)
        elif store.exists(store.join(key, "meta.json")):
            store.download(key, path)
            if not _complete(path):
                missing.append(path)
        else:
            missing.append(path)
    return missing


def _dataset_dirs(run: ResolvedRun, data_root: Path) -> list[Path]:
    """The dataset directories under ``data_root`` that ``run``'s world reads."""
    data_root = Path(data_root).resolve()
    return [Path(p).resolve() for p in KINDS.get(run.world.name).files(run.world,
                                                                       data_root=data_root)
            if Path(p).resolve().is_relative_to(data_root) and Path(p).resolve() != data_root]


def _local_sweep(todo: list[tuple[dict[str, Any], str]], store: Store, data_root: Path,
                 ckpt_dir: str | None, workers: int | None, counts: dict[str, int],
                 progress: bool) -> None:
    """The ``todo`` runs in this process (one worker) or a spawn process pool, one run per
    worker, each worker on its own device; each record (and its checkpoint files) written here."""
    from idaudit.core.progress import ProgressBar

    workers, devices = plan_workers(_gpu_count(), workers, len(todo))
    # the data each run's world needs, for the device its worker trains on
    resolved = [resolve(r, devices[0]) for r, _ in todo]
    upload = [] if store.is_local else _store_datasets(resolved, store, data_root)
    prepare_data(resolved, data_root, progress=progress)
    for path in upload:  # rendered here: into the store, its meta.json (complete) last
        store.upload(path, store.join("data", path.name))
    with ProgressBar(progress, len(todo), "sweep") as bar:
        if workers == 1:
            for r, rid in todo:
                _record(store, rid, r, execute(r, str(data_root), devices[0], ckpt_dir),
                        counts, bar, ckpt_dir)
        else:
            import multiprocessing as mp

            ctx = mp.get_context("spawn")
            queue = ctx.Queue()
            for device in devices:
                queue.put(device)
            with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                                     initargs=(queue,)) as pool, _stop_on_sigterm(pool):
                futures = {pool.submit(execute, r, str(data_root), None, ckpt_dir): (r, rid)
                           for r, rid in todo}
                for fut in as_completed(futures):
                    r, rid = futures[fut]
                    _record(store, rid, r, fut.result(), counts, bar, ckpt_dir)


def _ray_sweep(todo: list[tuple[dict[str, Any], str]], store: Store, address: str | None,
               data_root: Path, ckpt_dir: str | None, workers: int | None, shape: Any,
               counts: dict[str, int], progress: bool,
               runtime_env: dict[str, Any] | None = None) -> None:
    """The ``todo`` runs as Ray tasks; each record (and its checkpoint files) written here,
    or, into a remote ``store``, by the node that ran it."""
    from idaudit.core.progress import ProgressBar
    from idaudit.experiments.ray_executor import ray_results
    from idaudit.experiments.ray_nodes import TaskShape, check_shape

    shape = shape or TaskShape()
    if workers is not None:
        shape = TaskShape(shape.cpus, shape.gpus, shape.memory_gib, in_flight=workers)
    check_shape(shape)
    # the datasets the runs read under OUT/data, for the recipe of the device a task asks for
    prepare: dict[str, tuple[Any, Path]] = {}
    for r, _ in todo:
        world = resolve(r, shape.device).world
        for path in KINDS.get(world.name).files(world, data_root=data_root):
            if Path(path).resolve().is_relative_to(data_root):
                prepare.setdefault(str(path), (world, Path(path).resolve()))
    runs, ids = [r for r, _ in todo], [rid for _, rid in todo]
    avoided: dict[str, str] = {}  # {node id: why}: nodes that joined with another idaudit
    # entered once the cluster is reached, its nodes checked and the datasets rendered: then
    # the bar
    try:
        with ray_results(runs, ids, address, data_root,
                         None if ckpt_dir is None else Path(ckpt_dir), shape,
                         list(prepare.values()), progress, avoided,
                         store=None if store.is_local else store,
                         runtime_env=runtime_env) as results, \
                ProgressBar(progress, len(todo), "sweep on Ray") as bar:
            for i, rec in results:  # filed under the id this driver gave todo[i]
                _record(store, todo[i][1], todo[i][0], rec, counts, bar, ckpt_dir)
    finally:  # the sweep's last lines: each node avoided, and why
        import sys

        for why in avoided.values():
            print(f"avoided {why}: its runs went to the other nodes", file=sys.stderr)


def sweep_runs(req: SweepRequest) -> list[dict[str, Any]]:
    """The runs :class:`~idaudit.core.requests.SweepRequest` ``req`` asks for: its suite, kept and
    overridden as its options say (bad options raise :class:`IdauditError`)."""
    from idaudit.experiments.suites import load_suite, parse_assignments, shrink

    dims = req.dims
    if isinstance(dims, str):
        try:
            dims = [int(d) for d in dims.split(",")]
        except ValueError:
            raise IdauditError(f"--dims expects comma-separated integers, got {dims!r}") from None
    objectives = req.objectives.split(",") if isinstance(req.objectives, str) else req.objectives
    only = req.only if isinstance(req.only, dict) else parse_assignments(req.only, "--only")
    if isinstance(req.set, dict):
        overrides = dict(req.set)
    else:
        parsed = parse_assignments(req.set, "--set")
        if any(len(v) > 1 for v in parsed.values()):
            raise IdauditError("--set takes one value per option (use --only or a TOML grid to "
                               "vary)")
        overrides = {k: v[0] for k, v in parsed.items()}
    for value, flag in ((req.seeds, "--seeds"), (req.steps, "--steps"),
                        (req.workers, "--workers")):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise IdauditError(f"{flag} must be ≥ 1, got {value!r}")
    runs = shrink(load_suite(str(req.suite)), seeds=req.seeds, steps=req.steps, dims=dims or None,
                  objectives=objectives or None, only=only, overrides=overrides)
    if not runs:
        raise IdauditError("no runs left after --seeds/--dims/--objectives/--only")
    return runs


def _note_suite(store: Store | Path, suite: str) -> None:
    """``OUT/sweep.json``: the suite this sweep runs (``idaudit report``'s title); ``store``
    the sweep's OUT (a directory, or a :class:`~idaudit.core.storage.Store`)."""
    from idaudit.core.jsontext import json_text
    from idaudit.core.storage import open_store
    from idaudit.experiments.aggregate import SWEEP_FILE

    store = store if isinstance(store, Store) else open_store(Path(store))
    if store.is_local:
        Path(store.root).mkdir(parents=True, exist_ok=True)
    store.write_text(SWEEP_FILE, json_text({"suite": suite}))


def run_sweep_request(req: SweepRequest, runs: list[dict[str, Any]] | None = None,
                      progress: bool = False) -> dict[str, int]:
    """Run the sweep of ``req`` (``runs``: its :func:`sweep_runs`, when the caller has them)
    resumably under ``req.out`` (a directory, or a URI such as ``s3://bucket/prefix``);
    return the counts (total, skipped, ok, failed; and collapsed, among the ok, where
    any)."""
    from idaudit.core.outputs import check_outputs
    from idaudit.core.storage import is_uri, open_store

    shape = None
    if (req.cpus_per_run, req.gpus_per_run, req.memory_per_run) != (None, None, None):
        from idaudit.experiments.ray_nodes import TaskShape

        shape = TaskShape(1 if req.cpus_per_run is None else req.cpus_per_run,
                          req.gpus_per_run or 0, req.memory_per_run)
    runtime_env = None
    if req.runtime_env is not None:
        if req.executor != "ray":
            raise IdauditError("--runtime-env applies to --executor ray only")
        from idaudit.experiments.runtime_env import read_runtime_env

        runtime_env = read_runtime_env(req.runtime_env)  # checked before any run
    # a URI, not a path (a Path reads "s3://b" as "s3:/b": the command line gives --out as
    # typed): the store checked before any run is
    store = open_store(str(req.out)) if is_uri(str(req.out)) else None
    runs = runs if runs is not None else sweep_runs(req)
    reads = sweep_inputs(runs, req.suite)

    def into(out: str | Path) -> dict[str, int]:
        return run_sweep(runs, out, workers=req.workers, progress=progress,
                         executor=req.executor, address=req.address,
                         checkpoints=req.checkpoints, reads=reads, shape=shape,
                         runtime_env=runtime_env)

    if store is not None:
        _note_suite(store, str(req.suite))
        return into(str(req.out))
    check_outputs([(Path(req.out), "--out")], reads, directory=True)
    from idaudit.experiments.aggregate import SWEEP_FILE

    with _unmade_on_refusal(Path(req.out), note=Path(req.out) / SWEEP_FILE):
        _note_suite(open_store(Path(req.out)), str(req.suite))
        return into(req.out)


def sweep(suite: str | Path, *, progress: bool = False, **options: Any) -> dict[str, int]:
    """Run a sweep as ``idaudit sweep`` does, with its options as keywords (see
    :class:`~idaudit.core.requests.SweepRequest`); return the counts."""
    unknown_options(SweepRequest, options, "sweep", positional=("suite",))
    return run_sweep_request(SweepRequest(suite=suite, **options), progress=progress)



def _stop_workers(pool: ProcessPoolExecutor, grace: float = 5.0) -> None:
    """Terminate the pool's worker processes (SIGTERM, then SIGKILL after ``grace`` s)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for proc in procs:
        with contextlib.suppress(Exception):
            proc.terminate()
    deadline = time.monotonic() + grace
    for proc in procs:
        with contextlib.suppress(Exception):
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(1.0)


@contextlib.contextmanager
def _stop_on_sigterm(pool: ProcessPoolExecutor):
    """While the pool runs, SIGTERM to this process stops its workers first (so none is left
    training, or blocked on a parent that is gone, with the multiprocessing resource tracker
    waiting on them) and then exits 143. Finished runs are already on disk: a rerun resumes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM changes nothing
        _stop_workers(pool)  # (no pool.shutdown here: the interrupted code may hold its lock;
        # leaving the with-block shuts the broken pool down; should that ever hang, this exits)
        watchdog = threading.Timer(_EXIT_GRACE, os._exit, (EXIT_TERMINATED,))
        watchdog.daemon = True
        watchdog.start()
        raise SystemExit(EXIT_TERMINATED)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def own_record(rid: str, run: dict[str, Any], rec: Any, checkpoint_dir: str | None = None
               ) -> tuple[dict[str, Any], dict[Path, bytes | dict[str, Any]]]:
    """What a worker returned for the run ``run`` that this driver submitted under the id
    ``rid``, made this driver's: the record with ``run`` and ``id`` its own, and the files
    it brought (a Ray node's ``files``: the run's checkpoint and log, ``{driver path:
    bytes}``) at the paths this driver builds from ``checkpoint_dir`` and ``rid`` — never
    at a path the record names. A record that is not an object, names another run id
    (``../../X`` would otherwise be a file outside ``OUT``), has a status other than ok or
    failed, or brings any other file (or a log that is not a JSON object) becomes this
    run's failure, with no file of it written.

    Args:
        rid: the run id this driver gave the run (:func:`run_id`).
        run: the run's options, as this driver submitted them.
        rec: what the worker returned (untrusted: a Ray node's answer).
        checkpoint_dir: where ``--checkpoints`` keeps the run's files, or None.

    Returns:
        (the record to file, {path: the checkpoint's bytes, or the log as an object}).
    """
    from idaudit.core.jsontext import parse_json_object
    from idaudit.worlds.spec import shown

    def failed(why: str) -> tuple[dict[str, Any], dict[Path, bytes | dict[str, Any]]]:
        return {"run": run, "id": rid, "status": "failed", "error": why, "seconds": None}, {}

    if not isinstance(rec, dict):
        return failed(f"the worker returned {type(rec).__name__}, not a run record")
    if rec.get("id", rid) != rid:
        return failed(f"the worker's record names the run id {shown(rec.get('id'))}, not this "
                      f"run's {rid}: not filed under it")
    if rec.get("status") not in FINISHED + ("failed",):
        return failed(f"the worker's record has the status {shown(rec.get('status'))}, not ok, "
                      "collapsed or failed")
    rec = {**rec, "run": run, "id": rid}
    sent = rec.pop("files", None) or {}
    names = {} if checkpoint_dir is None else {
        str(Path(checkpoint_dir) / f"{rid}.safetensors"): "checkpoint",
        str(Path(checkpoint_dir) / f"{rid}.log.json"): "log"}
    if not isinstance(sent, dict) or any(
            path not in names or not isinstance(data, bytes) for path, data in sent.items()):
        return failed("the worker's record brings files other than this run's checkpoint and "
                      f"log: {shown(list(sent) if isinstance(sent, dict) else sent)}")
    files: dict[Path, bytes | dict[str, Any]] = {}
    for path, key in names.items():
        if path not in sent:
            continue
        data: bytes | dict[str, Any] = sent[path]
        if key == "log":
            try:
                data = parse_json_object(sent[path].decode("utf-8"), "the run's log")
            except (IdauditError, UnicodeDecodeError) as exc:
                return failed(f"the worker's record brings a log that is not one: {exc}")
        files[Path(path)] = data
        rec[key] = path
    return rec, files


def _record(store: Store, rid: str, run: dict[str, Any], rec: Any, counts: dict[str, int],
            bar, checkpoint_dir: str | None = None) -> None:
    """File what a worker returned for ``run``, submitted under the id ``rid``
    (:func:`own_record`): a finished run is ``runs/RID.json`` in ``store`` (skipped on rerun;
    an earlier attempt's ``RID.failed.json`` removed once it is in place), a failed one
    ``RID.failed.json`` (retried). The run's checkpoint and log (a Ray node's ``files``, or
    what a local worker left in ``checkpoint_dir``) go to ``checkpoints/`` first, the record
    last: it is the commit point. The record names them relative to OUT
    (``checkpoints/RID.safetensors``). A record a Ray node already wrote into the store
    (``stored``) is only counted.

    Args:
        store: the sweep's OUT (:func:`~idaudit.core.storage.open_store`).
        rid: the run id this driver gave the run.
        run: the run's options, as this driver submitted them.
        rec: what the worker returned.
        counts: the sweep's counts of ok and failed runs, updated.
        bar: the progress bar, advanced by one.
        checkpoint_dir: where ``--checkpoints`` keeps the run's files on this machine, or None.
    """
    from idaudit.core.errors import printable
    from idaudit.experiments.filing import file_run, local_files

    if isinstance(rec, dict) and rec.get("stored") is True:  # a node filed it in the store
        if rec.get("already"):  # another attempt (an earlier driver's task) recorded it
            counts["skipped"] = counts.get("skipped", 0) + 1
            bar.advance(1, outcome_text(counts))
            return
        rec = {"status": rec.get("status"), "node": rec.get("node"),
               "seconds": rec.get("seconds")}
        finished = rec["status"] in FINISHED
    else:
        rec, files = own_record(rid, run, rec, checkpoint_dir)
        finished = rec["status"] in FINISHED
        if finished and checkpoint_dir is not None and not files:  # a local worker's
            files = local_files(rid, checkpoint_dir)
        file_run(store, rid, rec, files)
    counts["ok" if finished else "failed"] += 1  # a collapsed run finished: ok, and counted
    if rec["status"] == "collapsed":
        counts["collapsed"] = counts.get("collapsed", 0) + 1
    node, seconds = rec.get("node"), rec.get("seconds")
    where = (f"; last on {printable(str(node.get('host')))} ({printable(str(node.get('ip')))}) "
             f"in {seconds:.0f} s") if isinstance(node, dict) and isinstance(
        seconds, (int, float)) else ""
    bar.advance(1, f"{outcome_text(counts)}{where}")


def outcome_text(counts: dict[str, int]) -> str:
    """``counts``' finished runs in words: ``k ok (j collapsed), f failed``."""
    collapsed = f" ({counts['collapsed']} collapsed)" if counts.get("collapsed") else ""
    return f"{counts['ok']} ok{collapsed}, {counts['failed']} failed"


