"""One run of a sweep, wherever it runs (a local pool's worker, a Ray task): its id, and
:func:`execute`, which trains it and returns its record without ever raising."""

from __future__ import annotations

import contextlib
import signal
import time
import traceback
from pathlib import Path
from typing import Any

from idaudit.core.defaults import DATA_ROOT
from idaudit.core.workers import exit_with_parent
from idaudit.training.runs import resolve
from idaudit.training.runs import run as run_one

__all__ = ["EXIT_TERMINATED", "FINISHED", "execute", "run_id", "run_one"]

#: the statuses of a finished run (filed as RID.json, skipped on rerun): ``collapsed`` is a run
#: that trained to the end with an embedding that collapsed (:mod:`idaudit.training.collapse`),
#: a result — not a failure, never retried — that ``idaudit report`` counts and draws apart
FINISHED = ("ok", "collapsed")

EXIT_TERMINATED = 128 + signal.SIGTERM  # what a shell reports for a process SIGTERM ended
_EXIT_GRACE = 10.0  # seconds a terminated sweep has to wind down before it exits regardless


def run_id(run: dict[str, Any]) -> str:
    """The id of a run's resolved configuration (its result file's name): computed from the
    run's options alone, the same on every machine whatever device it would train on."""
    return resolve(run).id


_WORKER_DEVICE = "cpu"  # set per pool worker: "cuda:i" when the machine has GPUs


def _init_worker(devices) -> None:
    global _WORKER_DEVICE
    exit_with_parent()
    _WORKER_DEVICE = devices.get()


@contextlib.contextmanager
def _threads(n: int = 1):
    """torch on ``n`` threads inside, the caller's thread count restored on the way out (a
    one-worker sweep runs in the caller's process)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def execute(run: dict[str, Any], data_root: str | None = None,
            device: str | None = None, checkpoint_dir: str | None = None,
            threads: int = 1) -> dict[str, Any]:
    """Train one run (on ``threads`` CPU threads) and return its result record (never raises).

    ``device`` defaults to this worker's device (CPU, or the GPU a pool assigned it); worlds
    with data on disk read it under ``data_root`` (prepared beforehand). With
    ``checkpoint_dir`` the trained encoder is kept there as ``ID.safetensors`` (+ its log).
    torch's thread count is ``threads`` during the run and the caller's again afterwards.
    """
    t0 = time.perf_counter()
    try:
        device = device or _WORKER_DEVICE
        ckpt = None if checkpoint_dir is None else Path(checkpoint_dir) / f"{run_id(run)}.safetensors"
        with _threads(threads):
            rec = run_one({**run, "device": device}, ckpt, data_root=data_root or DATA_ROOT,
                          sample=True, label_free=True)
        return {"run": run, "status": "collapsed" if rec.collapsed else "ok", **rec.to_dict(),
                "config": {"world": rec.world, "train": rec.train},
                "seconds": time.perf_counter() - t0}
    except Exception as exc:  # recorded, the sweep goes on
        return {"run": run, "status": "failed", "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=5), "seconds": time.perf_counter() - t0}
