"""What every idaudit worker process does first (render workers, sweep workers)."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys

__all__ = ["exit_with_parent"]

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def exit_with_parent() -> None:
    """End this worker (SIGTERM) when the process that started it dies, even by SIGKILL, so a
    killed sweep or render leaves no worker behind working for nobody. Linux only (elsewhere
    the pool's own shutdown is all there is); a worker whose parent is already gone exits."""
    parent = multiprocessing.parent_process()
    if sys.platform != "linux" or parent is None:
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl to call: the pool's shutdown still applies
        return
    if os.getppid() != parent.pid:  # the parent died before the request was made
        os._exit(0)
