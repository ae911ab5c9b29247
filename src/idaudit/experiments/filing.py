"""Filing a finished or failed run into a sweep's OUT (a directory, or a store such as
``s3://bucket/prefix``: :mod:`idaudit.core.storage`), wherever the filing runs (the driver,
or a Ray node writing to the store itself): the checkpoint and log first, the record last,
the commit point; paths in the record relative to OUT."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from idaudit.core.errors import first_line
from idaudit.core.storage import Store
from idaudit.experiments.execute import FINISHED

__all__ = ["CHECKPOINTS", "already_stored", "dataset_complete", "file_run", "local_files",
           "store_on_node"]


def dataset_complete(path: Path) -> bool:
    """Whether a rendered dataset directory is complete (its ``meta.json`` says so).

    Args:
        path: the dataset's directory on this machine.

    Returns:
        True where its meta.json reads ``"status": "complete"``.
    """
    import json

    try:
        return json.loads((Path(path) / "meta.json").read_text()).get("status") == "complete"
    except (OSError, ValueError, AttributeError):
        return False


CHECKPOINTS = "checkpoints"  # OUT's folder of --checkpoints files


def local_files(rid: str, checkpoint_dir: str) -> dict[Path, bytes | dict[str, Any]]:
    """The checkpoint and log a worker on this machine left in ``checkpoint_dir`` for the
    run ``rid``.

    Args:
        rid: the run id.
        checkpoint_dir: where the worker kept them.

    Returns:
        {the checkpoint's path: None (read from there when filed), the log's path: the log
        as an object}, each where it exists.
    """
    from idaudit.core.jsontext import parse_json_object

    files: dict[Path, Any] = {}
    ckpt, log = Path(checkpoint_dir) / f"{rid}.safetensors", Path(checkpoint_dir) / f"{rid}.log.json"
    if ckpt.is_file():
        files[ckpt] = None
    if log.is_file():
        files[log] = parse_json_object(log.read_text(), "the run's log") or {}
    return files


def file_run(store: Store, rid: str, rec: dict[str, Any],
             files: dict[Path, bytes | dict[str, Any] | None]) -> None:
    """Write the run ``rid``'s checkpoint files, then its record (the commit point), into
    ``store``; a finished run's earlier ``RID.failed.json`` removed after. A failure is not
    filed where the run's finished record is already there (a Ray node filed it and was lost
    before it answered).

    Args:
        store: the sweep's OUT.
        rid: the run id.
        rec: the record (its ``checkpoint`` and ``log`` set here, relative to OUT).
        files: {a path whose name is the file's: its bytes (None: read from that path on
            this machine), or the log as an object}.
    """
    from idaudit.core.jsontext import json_text

    finished = rec["status"] in FINISHED
    if not finished and store.exists(store.join("runs", f"{rid}.json")):
        return  # a node filed it, then was lost before it answered: no failure beside it
    keys = {}
    for path in files:
        key = store.join(CHECKPOINTS, Path(path).name)
        keys["log" if Path(path).name.endswith(".log.json") else "checkpoint"] = key
    rec.update(keys)
    for path, data in sorted(files.items(), key=lambda kv: isinstance(kv[1], dict)):
        key = store.join(CHECKPOINTS, Path(path).name)
        if isinstance(data, dict):  # the log names the checkpoint where it now lies
            data.update(checkpoint=rec.get("checkpoint"), log=rec.get("log"),
                        node=rec.get("node"))
            store.write_text(key, json_text(data))
        elif data is not None:
            store.write_bytes(key, data)
        elif not (store.is_local and Path(store.path(key)).resolve() == Path(path).resolve()):
            store.upload(path, key)
    if not store.is_local:  # what this machine kept of them goes once they are in the store
        for path in files:
            Path(path).unlink(missing_ok=True)
    store.write_text(store.join("runs", f"{rid}.json" if finished else f"{rid}.failed.json"),
                     json_text(rec))
    if finished:  # its record in place: an earlier attempt's failure is no longer this run's
        store.remove(store.join("runs", f"{rid}.failed.json"))


def already_stored(store_uri: str, rid: str) -> bool:
    """Whether the sweep's store at ``store_uri`` holds the run ``rid``'s record.

    Args:
        store_uri: the sweep's OUT (a URI).
        rid: the run id.

    Returns:
        True where the record is there; False where it is not or the store cannot be asked
        (the run goes on, and its filing says what is wrong).
    """
    from idaudit.core.storage import open_store

    try:
        return open_store(store_uri).exists(f"runs/{rid}.json")
    except Exception:
        return False


def store_on_node(store_uri: str, rid: str, rec: dict[str, Any], node_ckpt: str | None
                  ) -> dict[str, Any]:
    """File the run ``rid`` from this node into the sweep's store at ``store_uri``: its
    checkpoint and log (from ``node_ckpt``) first, the record last — the commit point: a node
    killed before it leaves no record, and the run is done again on a rerun. A record that
    another attempt put there meanwhile is kept, not overwritten. Returns the outcome the
    driver counts (``stored``), or, where the store refused, the run's failure for the
    driver to file.

    Args:
        store_uri: the sweep's OUT (a URI).
        rid: the run id the driver gave.
        rec: the run's record, as :func:`~idaudit.experiments.execute.execute` made it.
        node_ckpt: where this node left the run's checkpoint and log, or None.

    Returns:
        ``{"id", "status", "node", "seconds", "stored": True}``, or a failed record.
    """
    from idaudit.core.storage import open_store

    outcome = {"id": rid, "status": rec["status"], "node": rec.get("node"),
               "seconds": rec.get("seconds"), "stored": True}
    files: dict[Path, Any] = {}
    try:
        store = open_store(store_uri)
        if rec["status"] in FINISHED and node_ckpt is not None:
            import json

            ckpt, log = Path(node_ckpt) / f"{rid}.safetensors", Path(node_ckpt) / f"{rid}.log.json"
            files = {ckpt: None, log: json.loads(log.read_text())}
        if store.exists(f"runs/{rid}.json"):  # another attempt recorded it meanwhile
            for path in files:
                Path(path).unlink(missing_ok=True)
            return {**outcome, "status": "ok", "already": True}
        file_run(store, rid, rec, files)
    except Exception as exc:  # the driver files it (as a failure: retried on a rerun)
        for path in files:
            Path(path).unlink(missing_ok=True)
        return {"run": rec.get("run"), "id": rid, "status": "failed", "node": rec.get("node"),
                "seconds": rec.get("seconds"),
                "error": f"writing to {store_uri}: {type(exc).__name__}: {first_line(exc)}"}
    return outcome
