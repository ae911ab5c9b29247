"""The zygote: the one process per idaudit process that forks cages
(:mod:`idaudit.loading.cage`; its own side is :func:`idaudit.loading.cage_child.zygote`).

It imports torch and idaudit's readers once, so that a cage costs a fork; it is started
before this process imports torch itself, so that the two imports overlap. Nothing here
imports torch.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from typing import Any

from idaudit.core.errors import IdauditError

__all__ = ["import_path", "start_early", "zygote"]

#: the environment variables a cage sees, by name: what the system's libraries, torch's
#: thread pools, GL and the loaders read; every other one — tokens, URLs holding passwords,
#: proxies, connection strings, whatever a runner holds — stays out. (The zygote has HOME and
#: TMPDIR; in a cage they and the caches are its private directory, and HF_HUB_OFFLINE is 1.)
ENVIRONMENT = ("PATH", "HOME", "TMPDIR", "LANG", "LANGUAGE", "TZ", "TERM", "NO_COLOR",
               "COLUMNS", "LD_LIBRARY_PATH", "MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY",
               "CUDA_VISIBLE_DEVICES", "IDAUDIT_TRACEBACK")
#: … and those whose names begin with one of these: locale, OpenMP and BLAS threads, torch's
#: own switches, numba, Mesa's software GL
ENVIRONMENT_PREFIXES = ("LC_", "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "TORCH_",
                        "PYTORCH_", "NUMBA_", "LP_", "MESA_", "EGL_", "NVIDIA_")
_BOOT = ("import json, sys; s = json.loads(sys.argv[1]); sys.path[:] = s['sys_path']; "
         "from idaudit.loading.cage_child import main; main()")


def import_path() -> list[str]:
    """This process's import path, absolute (a cage imports as this process does)."""
    return [os.path.abspath(p or os.getcwd()) for p in sys.path]


def cage_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables of ``environ`` (this process's by default) a cage may see: those
    :data:`ENVIRONMENT` names, or whose names begin with an :data:`ENVIRONMENT_PREFIXES` entry.

    Args:
        environ: the environment to filter; ``os.environ`` when None.

    Returns:
        The filtered copy.

    Example:
        >>> cage_environment({"OMP_NUM_THREADS": "2", "DATABASE_URL": "postgres://u:p@h/db"})
        {'OMP_NUM_THREADS': '2'}
    """
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items()
            if k in ENVIRONMENT or k.startswith(ENVIRONMENT_PREFIXES)}


class _Zygote:
    """The process that forks cages (see the module's docstring). Requests are answered in
    order: :meth:`send` returns a request's number, :meth:`answer` waits for its answer, so
    a cage is asked for at once and waited for only when it is needed."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        setup = {"fd": theirs.fileno(), "parent": os.getpid(), "sys_path": import_path()}
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-c", _BOOT, json.dumps(setup)], pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL, env=cage_environment(), close_fds=True)
        theirs.close()
        self.sock = ours
        self.answers = ours.makefile("rb")
        self.lock = threading.Lock()
        self.sent = self.read = 0
        self.waiting: dict[int, dict[str, Any]] = {}

    def send(self, request: dict[str, Any], fds: list[int] = ()) -> int:
        with self.lock:
            try:
                socket.send_fds(self.sock, [json.dumps(request).encode()], list(fds))
            except OSError:
                raise self._gone() from None
            self.sent += 1
            return self.sent

    def answer(self, number: int) -> dict[str, Any]:
        with self.lock:
            while number not in self.waiting:
                try:
                    line = self.answers.readline()
                except OSError:
                    line = b""
                if not line:
                    raise self._gone()
                self.read += 1
                self.waiting[self.read] = json.loads(line)
            return self.waiting.pop(number)

    def ask(self, request: dict[str, Any], fds: list[int] = ()) -> dict[str, Any]:
        return self.answer(self.send(request, fds))

    @staticmethod
    def _gone() -> IdauditError:
        return IdauditError("the cage's zygote process ended (see the lines above); programs "
                            "from files cannot run", 5)

    def alive(self) -> bool:
        return self.process.poll() is None


_ZYGOTE: _Zygote | None = None
_ZYGOTE_LOCK = threading.Lock()


def zygote() -> _Zygote:
    """This process's zygote, started on first use (again if it died)."""
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        if _ZYGOTE is None or not _ZYGOTE.alive():
            _ZYGOTE = _Zygote()
        return _ZYGOTE


#: the commands whose targets may be programs from files
EMBEDDING_COMMANDS = ("audit", "plan", "embed", "consistency")


def _looks_like_program(arg: str) -> bool:
    """Whether a command-line argument names what runs in the cage: TorchScript or .pt2
    (their zip members), a model directory (config.json), or a timm architecture."""
    import zipfile

    if arg.startswith("timm:") or arg in ("--trust-code", "--trust-pickle"):
        return True
    try:
        if os.path.isdir(arg):
            return os.path.isfile(os.path.join(arg, "config.json"))
        if not os.path.isfile(arg):
            return False
        with open(arg, "rb") as f:
            if f.read(4) != b"PK\x03\x04":
                return False
        with zipfile.ZipFile(arg) as z:
            return any("/code/" in n or n.endswith("archive_format") for n in z.namelist())
    except (OSError, zipfile.BadZipFile, ValueError):
        return False


def start_early(argv: list[str]) -> None:
    """Start the zygote at once when ``argv`` (the command line) will need one, so that its
    torch import overlaps all of this process's start, not only its tail; nothing otherwise
    (and never where no cage can be built)."""
    if not argv or argv[0] not in EMBEDDING_COMMANDS or \
            not any(_looks_like_program(a) for a in argv[1:]):
        return
    from idaudit.loading.confine import why_no_cage

    if why_no_cage() is None:
        zygote()
