"""The kernel's side of the cage: what a process does to confine itself before it runs a
program from a file (:mod:`idaudit.loading.cage_child`), and whether that can be done here.

Three locks, each applied by the process to itself while it is still single-threaded, so that
every thread and process it makes later inherits them:

* **Landlock** (Linux ≥ 5.13, ABI ≥ 3 — kernel 6.2 — so that truncation is controlled too),
  through the ``py-landlock`` bindings: every file-system right handled, reads allowed beneath
  the paths given (the inputs, the Python environment, the system's libraries), every right
  beneath one private directory, nothing else — no write, truncate, link, rename or remove
  anywhere else, and no ``execve`` at all; TCP bind/connect with no port allowed (ABI ≥ 4);
  signals and abstract Unix sockets scoped to the cage (ABI ≥ 6).
* **seccomp** (a BPF filter written here): no ``socket`` (no network of any kind;
  ``socketpair``, a connected pair inside the process as asyncio makes, stays), no new
  process (``fork``, ``vfork``, ``execve``, ``clone`` without ``CLONE_THREAD``; ``clone3``
  answers ENOSYS so that C libraries fall back to ``clone``, which is checked), and none of
  the calls that reach past the file rules (``io_uring``, ``ptrace``, ``process_vm_*``,
  ``unshare``, ``setns``, ``mount``, ``bpf``, ``userfaultfd``, ``perf_event_open``, keyrings).
  An unknown architecture kills the process.
* **rlimits**: data and address space (memory), CPU seconds, no core files.

:func:`why_no_cage` says why the cage cannot be built here (None where it can); nothing here
imports torch or numpy.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import struct
import sys
from collections.abc import Iterable

#: Landlock's ABI must be at least this (6.2: truncation is a right of its own)
MIN_LANDLOCK_ABI = 3
#: ``IDAUDIT_CAGE=off`` turns the cage off, as on a machine that cannot build one
OFF_VARIABLE = "IDAUDIT_CAGE"

_PR_SET_NO_NEW_PRIVS = 38
_PR_GET_SECCOMP = 21
_SECCOMP_SET_MODE_FILTER = 1
_CLONE_THREAD = 0x00010000

#: per architecture: (AUDIT_ARCH, seccomp syscall number, denied calls, clone, clone3)
_ARCHES: dict[str, tuple[int, int, tuple[int, ...], int, int]] = {
    # socket 41, fork 57, vfork 58, execve 59, execveat 322, io_uring 425-427,
    # ptrace 101, process_vm_readv/writev 310/311, unshare 272, setns 308, mount 165,
    # bpf 321, userfaultfd 323, perf_event_open 298, keyctl 250, add_key 248, request_key 249
    "x86_64": (0xC000003E, 317, (41, 57, 58, 59, 322, 425, 426, 427, 101, 310, 311, 272,
                                 308, 165, 321, 323, 298, 250, 248, 249), 56, 435),
    # socket 198, execve 221, execveat 281, io_uring 425-427, ptrace 117,
    # process_vm 270/271, unshare 97, setns 268, mount 40, bpf 280, userfaultfd 282,
    # perf_event_open 241, keyctl 219, add_key 217, request_key 218
    "aarch64": (0xC00000B7, 277, (198, 221, 281, 425, 426, 427, 117, 270, 271, 97, 268,
                                  40, 280, 282, 241, 219, 217, 218), 220, 435),
}


def _machine() -> str:
    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


def landlock_abi() -> int | None:
    """The kernel's Landlock ABI version, or None where it has none (or it is disabled)."""
    if sys.platform != "linux":
        return None
    try:
        from py_landlock import get_abi_version
    except ImportError:
        return None
    try:
        return int(get_abi_version())
    except Exception:  # the bindings' own errors: not available, disabled at boot
        return None


def _seccomp_supported() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_GET_SECCOMP, 0, 0, 0, 0) >= 0
    except (OSError, AttributeError):
        return False


def why_no_cage() -> str | None:
    """Why programs from files cannot be confined on this machine (one phrase), or None."""
    if os.environ.get(OFF_VARIABLE, "").strip().lower() in ("0", "off", "no", "false"):
        return f"the cage is turned off ({OFF_VARIABLE}={os.environ[OFF_VARIABLE]})"
    if sys.platform != "linux":
        return f"the cage needs Linux (Landlock and seccomp); this is {platform.system()}"
    if _machine() not in _ARCHES:
        return f"idaudit's seccomp filter knows x86_64 and aarch64, not {platform.machine()}"
    try:
        import py_landlock  # noqa: F401
    except ImportError:
        return "the py-landlock package is not installed (pip install py-landlock)"
    abi = landlock_abi()
    if abi is None:
        return (f"this kernel ({platform.release()}) has no Landlock, or it is disabled at "
                "boot (Linux 6.2 or newer with landlock in its LSM list is needed)")
    if abi < MIN_LANDLOCK_ABI:
        return (f"this kernel's Landlock is ABI {abi}, which does not control truncation "
                f"(ABI {MIN_LANDLOCK_ABI}, Linux 6.2, is needed)")
    if not _seccomp_supported():
        return "this kernel has no seccomp"
    return None


def _bpf(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def seccomp_program(machine: str | None = None) -> bytes:
    """The cage's seccomp BPF program for ``machine`` (this one by default), as bytes."""
    arch, _, denied, clone, clone3 = _ARCHES[machine or _machine()]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, …
    allow, kill = 0x7FFF0000, 0x80000000
    eperm, enosys = 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
    prog = [_bpf(ld, 4), _bpf(jeq, arch, 1, 0), _bpf(ret, kill),  # seccomp_data.arch
            _bpf(ld, 0),                                          # seccomp_data.nr
            _bpf(jge, 0x40000000, 0, 1), _bpf(ret, eperm)]         # x32 calls
    for nr in denied:
        prog += [_bpf(jeq, nr, 0, 1), _bpf(ret, eperm)]
    prog += [_bpf(jeq, clone3, 0, 1), _bpf(ret, enosys)]
    prog += [_bpf(jeq, clone, 0, 3), _bpf(ld, 16),                # args[0]: the clone flags
             _bpf(jset, _CLONE_THREAD, 1, 0), _bpf(ret, eperm)]
    prog += [_bpf(ret, allow)]
    return b"".join(prog)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _apply_seccomp() -> None:
    code = seccomp_program()
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(code) // 8, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    number = _ARCHES[_machine()][1]
    if libc.syscall(number, _SECCOMP_SET_MODE_FILTER, 0, ctypes.byref(prog)) != 0:
        raise OSError(ctypes.get_errno(), "seccomp(SECCOMP_SET_MODE_FILTER) failed")


def _apply_landlock(read: Iterable[str], write: Iterable[str], listing: Iterable[str]) -> None:
    from py_landlock import AccessFs, Landlock

    rules = Landlock(strict=False)  # every right this kernel knows is handled
    for path in dict.fromkeys(read):
        if os.path.isdir(path):
            rules.add_path_rule(path, access=AccessFs.READ_FILE | AccessFs.READ_DIR)
        elif os.path.exists(path):
            rules.add_path_rule(path, access=AccessFs.READ_FILE)
    for path in dict.fromkeys(listing):
        if os.path.isdir(path):
            rules.add_path_rule(path, access=AccessFs.READ_DIR)
    for path in dict.fromkeys(write):
        rules.allow_read_write(path)
    # /dev/null writable: libraries open it to silence output (dill does at import)
    rules.add_path_rule("/dev/null", access=AccessFs.READ_FILE | AccessFs.WRITE_FILE |
                        AccessFs.TRUNCATE)
    rules.apply()


def _limit(which: int, value: int) -> None:
    _, hard = resource.getrlimit(which)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(which, (value, value if hard == resource.RLIM_INFINITY else hard))


def confine(read: Iterable[str], write: Iterable[str], listing: Iterable[str] = (), *,
            memory_bytes: int | None = None, address_bytes: int | None = None,
            cpu_seconds: int | None = None) -> None:
    """Confine this process for good (see the module's docstring): ``read`` the paths it may
    read beneath, ``write`` the directories it may do anything in, ``listing`` directories
    whose names (not contents) it may list; ``memory_bytes`` its private data (RLIMIT_DATA),
    ``address_bytes`` its address space (RLIMIT_AS), ``cpu_seconds`` its CPU time, all threads
    together (RLIMIT_CPU: SIGXCPU past it). Call it before any thread is started."""
    _limit(resource.RLIMIT_CORE, 0)
    if memory_bytes is not None:
        _limit(resource.RLIMIT_DATA, int(memory_bytes))
    if address_bytes is not None:
        _limit(resource.RLIMIT_AS, int(address_bytes))
    if cpu_seconds is not None:
        _limit(resource.RLIMIT_CPU, max(1, int(cpu_seconds)))
    _apply_landlock(read, write, listing)
    _apply_seccomp()


def system_read_paths() -> list[str]:
    """What any Python process here reads: its interpreter and import path (less the working
    directory, which ``python -m`` puts on it), the system's shared libraries, and the few
    /proc, /sys and /dev files that libraries consult."""
    paths = [sys.prefix, sys.exec_prefix, sys.base_prefix, os.path.dirname(sys.executable),
             os.path.realpath(sys.executable)]
    here = os.getcwd()  # on the import path under ``python -m``: its files are not the
    paths += [p for p in sys.path if p and os.path.isabs(p) and p != here]  # environment
    paths += ["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/share/zoneinfo",
              "/etc/ld.so.cache", "/etc/localtime", "/proc/self", "/proc/cpuinfo",
              "/proc/meminfo", "/sys/devices/system/cpu", "/sys/fs/cgroup", "/dev/null",
              "/dev/urandom", "/dev/zero"]
    return [os.path.realpath(p) for p in paths if os.path.exists(p)]
