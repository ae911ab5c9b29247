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

__all__ = ["MAX_FILE_BYTES", "confine", "import_path_listing", "landlock_abi", "seccomp_program",
           "system_read_paths", "why_no_cage"]

#: Landlock's ABI must be at least this (6.2: truncation is a right of its own)
MIN_LANDLOCK_ABI = 3
#: the largest file a caged program may write (RLIMIT_FSIZE: SIGXFSZ past it), in its private
#: directory, the one place it may write
MAX_FILE_BYTES = 64 << 20
#: ``IDAUDIT_CAGE=off`` turns the cage off, as on a machine that cannot build one
OFF_VARIABLE = "IDAUDIT_CAGE"

_PR_SET_NO_NEW_PRIVS = 38
_PR_GET_SECCOMP = 21
_SECCOMP_SET_MODE_FILTER = 1
_CLONE_THREAD = 0x00010000

#: per architecture: (AUDIT_ARCH, the seccomp call's number)
_ARCHES: dict[str, tuple[int, int]] = {"x86_64": (0xC000003E, 317), "aarch64": (0xC00000B7, 277)}


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


def seccomp_program(machine: str | None = None, pid: int | None = None) -> bytes:
    """The cage's seccomp BPF program for ``machine`` (this one by default), as bytes: the
    allow list of :mod:`idaudit.loading.syscalls` — each allowed call passes, ``clone`` only
    for a thread, ``clone3`` answers ENOSYS, ``prctl`` refuses the options that detach,
    ``ioctl`` passes only its listed requests, and the calls aimed at a process pass only for
    ``pid`` (this process by default) — and EPERM for every other call. Another architecture's
    calls (x32 included) kill the process.

    Args:
        machine: ``x86_64`` or ``aarch64``.
        pid: the process the filter will confine (the caller, by default).

    Returns:
        The program, 8 bytes an instruction.
    """
    from idaudit.loading import syscalls

    machine = machine or _machine()
    arch, _ = _ARCHES[machine]
    numbers = syscalls.NUMBERS[machine]
    pid = os.getpid() if pid is None else pid
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, …
    allow, kill = 0x7FFF0000, 0x80000000
    eperm, enosys = 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS

    def arg(i: int) -> bytes:  # the low 32 bits of argument i (little-endian seccomp_data)
        return _bpf(ld, 16 + 8 * i)

    def only(nr: int, rule: list[bytes]) -> list[bytes]:
        """nr: run ``rule`` (which ends every path in a return); other calls skip it."""
        return [_bpf(jeq, nr, 0, len(rule))] + rule

    def one_of(values: tuple[int, ...], then: int, otherwise: int) -> list[bytes]:
        out = []
        for i, v in enumerate(values):  # jump to the `then` return past the rest
            out.append(_bpf(jeq, v, len(values) - i, 0))
        return out + [_bpf(ret, otherwise), _bpf(ret, then)]

    prog = [_bpf(ld, 4), _bpf(jeq, arch, 1, 0), _bpf(ret, kill),  # seccomp_data.arch
            _bpf(ld, 0),                                          # seccomp_data.nr
            _bpf(jge, 0x40000000, 0, 1), _bpf(ret, kill)]          # x32 calls
    plain = [n for names in syscalls.ALLOWED.values() for n in names if n in numbers]
    for name in plain:
        prog += [_bpf(jeq, numbers[name], 0, 1), _bpf(ret, allow)]
    prog += only(numbers[syscalls.CLONE3], [_bpf(ret, enosys)])
    prog += only(numbers[syscalls.CLONE], [arg(0), _bpf(jset, syscalls.CLONE_THREAD, 0, 1),
                                           _bpf(ret, allow), _bpf(ret, eperm)])
    prog += only(numbers["prctl"], [arg(0), *one_of(syscalls.PRCTL_REFUSED, eperm, allow)])
    prog += only(numbers["ioctl"], [arg(1), *one_of(syscalls.IOCTLS, allow, eperm)])
    for name in syscalls.OWN_PROCESS:
        if name in numbers:
            own = (0, pid) if name in syscalls.ZERO_IS_SELF else (pid,)
            prog += only(numbers[name], [arg(0), *one_of(own, allow, eperm)])
    prog += [_bpf(ret, eperm)]
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
    number = _ARCHES[_machine()][1]  # the filter allows no more seccomp calls
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


_PR_CAPBSET_DROP = 24
_PR_SET_SECUREBITS = 28
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
#: noroot, no_setuid_fixup, keep_caps off, no_cap_ambient_raise — each with its lock
_SECUREBITS = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80
_CAP_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def capabilities() -> dict[str, int]:
    """This process's capability sets as /proc/self/status gives them (``CapEff``,
    ``CapPrm``, ``CapInh``, ``CapBnd``, ``CapAmb``), as integers."""
    with open("/proc/self/status") as f:
        return {k: int(v, 16) for k, _, v in (ln.partition(":\t") for ln in f)
                if k.startswith("Cap")}


def drop_capabilities() -> None:
    """Give up every capability for good: the bounding and ambient sets emptied, the
    securebits that would give root's powers back on a uid change set and locked, then
    effective, permitted and inheritable set to nothing. Run as root, the process keeps uid 0
    but no privilege (no reboot, sethostname, settimeofday, raw I/O, immutable files, real-time
    scheduling, reading others' files); run as a user, it had none. Raises OSError where a
    capability survives."""
    libc = ctypes.CDLL(None, use_errno=True)
    held = capabilities()
    if held.get("CapEff", 0) or held.get("CapPrm", 0):  # root, or a binary given caps
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
        for cap in range(last + 1):
            libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
        libc.prctl(_PR_SET_SECUREBITS, _SECUREBITS, 0, 0, 0)
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
    left = capabilities()
    if left.get("CapEff") or left.get("CapPrm") or left.get("CapInh") or left.get("CapAmb") \
            or (held.get("CapPrm") and left.get("CapBnd")):
        raise OSError(errno.EPERM, f"capabilities survive the drop ({left})")


def _processes_of_this_user() -> int:
    """How many processes and threads this user has now (what RLIMIT_NPROC counts)."""
    uid, count = os.getuid(), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                count += len(os.listdir(f"/proc/{entry}/task")) if \
                    os.stat(f"/proc/{entry}").st_uid == uid else 0
            except OSError:
                pass
    return count


def _limit(which: int, value: int) -> None:
    _, hard = resource.getrlimit(which)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(which, (value, value if hard == resource.RLIM_INFINITY else hard))


def confine(read: Iterable[str], write: Iterable[str], listing: Iterable[str] = (), *,
            memory_bytes: int | None = None, address_bytes: int | None = None,
            cpu_seconds: int | None = None, threads: int = 256) -> None:
    """Confine this process for good (see the module's docstring): ``read`` the paths it may
    read beneath, ``write`` the directories it may do anything in, ``listing`` directories
    whose names (not contents) it may list; ``memory_bytes`` its private data (RLIMIT_DATA),
    ``address_bytes`` its address space (RLIMIT_AS), ``cpu_seconds`` its CPU time, all threads
    together (RLIMIT_CPU: SIGXCPU past it), ``threads`` how many more threads it may start
    (RLIMIT_NPROC, which counts this user's processes and threads together; root's count is
    not held to it by the kernel, seccomp's no-new-process is). Every capability is dropped
    first (:func:`drop_capabilities`). Call it before any thread is started."""
    _limit(resource.RLIMIT_NPROC, _processes_of_this_user() + threads)
    drop_capabilities()
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_FSIZE, MAX_FILE_BYTES)
    if memory_bytes is not None:
        _limit(resource.RLIMIT_DATA, int(memory_bytes))
    if address_bytes is not None:
        _limit(resource.RLIMIT_AS, int(address_bytes))
    if cpu_seconds is not None:
        _limit(resource.RLIMIT_CPU, max(1, int(cpu_seconds)))
    _apply_landlock(read, write, listing)
    _apply_seccomp()


def system_read_paths() -> list[str]:
    """What any Python process here reads: its interpreter, standard library and
    site-packages (the installation's prefixes), idaudit's own package, the system's shared
    libraries, and the few /proc, /sys and /dev files that libraries consult. Other entries of
    the import path (a project root on PYTHONPATH or in a ``.pth`` line, a flat-layout
    editable install) are not among them: their names may be listed
    (:func:`import_path_listing`), the modules a load names read (the loader adds them)."""
    package = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # idaudit's own
    paths = [sys.prefix, sys.exec_prefix, sys.base_prefix, os.path.dirname(sys.executable),
             os.path.realpath(sys.executable), package]
    paths += _installation_paths()
    paths += ["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/share/zoneinfo",
              "/etc/ld.so.cache", "/etc/localtime", "/proc/self", "/proc/cpuinfo",
              "/proc/meminfo", "/sys/devices/system/cpu", "/sys/fs/cgroup", "/dev/null",
              "/dev/urandom", "/dev/zero"]
    return [os.path.realpath(p) for p in paths if os.path.exists(p)]


def _installation_paths() -> list[str]:
    """The standard library's and site-packages' directories (sysconfig's and site's)."""
    import site
    import sysconfig

    found = [sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    found += site.getsitepackages() if hasattr(site, "getsitepackages") else []
    user = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    return found + ([user] if isinstance(user, str) else [])


def import_path_listing(reads: list[str]) -> list[str]:
    """The import path's entries outside ``reads`` (:func:`system_read_paths`, as the caller
    has them; real paths) and the working directory: the cage may list their names, as the
    import system does to find a module (idaudit's source tree in an editable install, a
    project on PYTHONPATH), never read their files."""
    here = os.path.realpath(os.getcwd())
    out = []
    for entry in sys.path:
        real = os.path.realpath(entry) if entry and os.path.isabs(entry) else None
        if real and real != here and os.path.isdir(real) and not any(
                real == r or real.startswith(r.rstrip("/") + "/") for r in reads):
            out.append(real)
    return out
