"""Memory probes: what this process can still allocate, and the refusal of work whose arrays
would not fit."""

from __future__ import annotations

import os
from pathlib import Path

from idaudit.core.errors import IdauditError

__all__ = ["check_memory", "memory_left"]


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().split()[0]
    except (OSError, IndexError):
        return None
    return int(text) if text.isdigit() else None


def available_memory() -> int | None:
    """Bytes this process can still allocate, or None if unknown: the smallest of the
    machine's available memory (``MemAvailable``), the cgroup's headroom (``memory.max`` −
    ``memory.current``) and the address-space limit's headroom (``ulimit -v`` − ``VmSize``)."""
    import resource

    limits = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                limits.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    cg_max, cg_cur = _read_int("/sys/fs/cgroup/memory.max"), _read_int(
        "/sys/fs/cgroup/memory.current")
    if cg_max is not None and cg_cur is not None:
        limits.append(max(cg_max - cg_cur, 0))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        used = 0
        try:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmSize:"):
                    used = int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        limits.append(max(soft - used, 0))
    return min(limits) if limits else None


def physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


SMALL = 1 << 26  # 64 MiB: never worth a look at the memory left


def memory_left() -> int | None:
    """Bytes this process can still get: :func:`available_memory`, else the machine's memory
    (None when neither is known)."""
    have = available_memory()
    return physical_memory() if have is None else have


def check_memory(nbytes: float, what: str, bound: str = "about ", purpose: str = "") -> None:
    """Refuse (exit 2, before anything is allocated or read) work whose arrays would not fit in
    the memory this process can still get (:func:`available_memory`; else the machine's
    memory): one line saying what needs how many GiB, e.g. "an evaluation set of 10¹¹ pairs …
    needs about 5960.5 GiB" (``bound``: "at least " where ``nbytes`` is a lower bound, "" where
    it is exact; ``purpose`` follows "of memory", e.g. " to read")."""
    if nbytes < SMALL:
        return
    have = memory_left()
    if have is not None and nbytes > have:
        raise IdauditError(f"{what} needs {bound}{nbytes / 2**30:.1f} GiB of memory{purpose}, "
                           f"but only {have / 2**30:.1f} GiB is available")
