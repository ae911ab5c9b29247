"""The processes of the cage: the zygote, and the confined processes it forks.

The **zygote** is started once per idaudit process (:mod:`idaudit.loading.cage`), imports
torch and idaudit's readers while it runs nothing from any file, and forks a process for each
program from a file. It never reads what a program makes: it takes requests on its socket
(``spawn``: fork one, with the pipes and the stderr file passed as descriptors; ``status``:
how one ended) from idaudit alone.

A **forked process** keeps only its two pipes (descriptors 3 and 4: a print in a forward
goes to stderr, not into the protocol) and its stderr file, confines itself
(:func:`idaudit.loading.confine.confine`) while it has one thread, then serves
:mod:`idaudit.loading.wire` frames: ``load`` (the target opened as in-process, its vetting
included), ``embed`` (inputs → embeddings (batch, m), float32), ``close``. Every answer is
data; a refusal is ``{"error", "exit"}``, a failure of the encoder's own call
``{"failed": reason}``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from typing import Any

__all__ = ["ZYGOTE_GRACE"]

_IN, _OUT = 3, 4
#: the text an error is given where the cage refused what the program tried
CAGE_REFUSED = ("the cage refused it: a program from a file may read only its inputs and the "
                "Python environment, write only its private temporary directory, and has no "
                "network and no processes of its own")
_MAX_REQUEST = 1 << 20


def _die_with_parent(sig: int) -> None:
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, sig, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


#: seconds past a cage's own time limit at which its zygote kills it (idaudit's timer fires
#: first and says why; the zygote's is for an idaudit that is stopped or hung)
ZYGOTE_GRACE = 5.0


class _Cages:
    """The zygote's own record of the cages it forked: their deadlines and private
    directories, so that it kills a cage past its time limit whatever idaudit does, and,
    when idaudit leaves (its socket closes, or the zygote is told so by SIGTERM, its
    parent-death signal), kills every cage and removes what they wrote."""

    def __init__(self) -> None:
        self.deadline: dict[int, float] = {}
        self.private: dict[int, str] = {}

    def add(self, pid: int, seconds: float, private: str) -> None:
        import time

        self.deadline[pid] = time.monotonic() + seconds + ZYGOTE_GRACE
        self.private[pid] = private

    def wait(self) -> float | None:
        """Seconds until the next deadline (None: none), the overdue cages killed first."""
        import time

        now = time.monotonic()
        for pid, when in list(self.deadline.items()):
            if when <= now:
                self.kill(pid)
        return max(0.0, min(self.deadline.values()) - now) if self.deadline else None

    def kill(self, pid: int) -> None:
        self.deadline.pop(pid, None)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def reaped(self, pid: int) -> None:
        self.deadline.pop(pid, None)
        self.private.pop(pid, None)

    def end_all(self) -> None:
        """Kill every cage, reap it and remove its private directory; then exit."""
        from idaudit.core.atomic import remove_tree

        for pid in list(self.private):
            self.kill(pid)
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            left = remove_tree(self.private.pop(pid))
            if left:
                os.write(2, f"idaudit's cage: {left}\n".encode())
        os._exit(0)


def zygote(setup: dict[str, Any]) -> None:
    """Serve spawn and status requests on the socket descriptor ``setup["fd"]`` until it
    closes (or the idaudit process that started it dies: then every cage is killed and its
    private directory removed)."""
    cages = _Cages()

    def parent_died(signum: int, frame: Any) -> None:
        cages.end_all()

    signal.signal(signal.SIGTERM, parent_died)
    _die_with_parent(signal.SIGTERM)
    if os.getppid() != setup["parent"]:
        os._exit(0)
    import select

    import numpy  # noqa: F401 - warm: every forked process needs them
    import torch  # noqa: F401

    import idaudit.loading.loaders  # noqa: F401
    import idaudit.models.embedding_choice  # noqa: F401
    import idaudit.models.encoders  # noqa: F401

    sock = socket.socket(fileno=setup["fd"])
    while True:
        try:
            if not select.select([sock], [], [], cages.wait())[0]:
                continue  # a deadline passed: wait() killed the cage
            data, fds, _, _ = socket.recv_fds(sock, _MAX_REQUEST, 3)
        except OSError:
            cages.end_all()
        if not data:
            cages.end_all()
        request = json.loads(data)
        if request["op"] == "spawn":
            pid = os.fork()
            if pid == 0:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                sock.close()
                _confined(request, fds)  # never returns
            for fd in fds:
                os.close(fd)
            cages.add(pid, float(request["seconds"]), request["private"])
            answer = {"pid": pid}
        else:
            try:
                _, status = os.waitpid(int(request["pid"]), 0)
                answer = {"status": os.waitstatus_to_exitcode(status)}
            except ChildProcessError:
                answer = {"status": None}
            cages.reaped(int(request["pid"]))
        sock.sendall(json.dumps(answer).encode() + b"\n")


def _confined(request: dict[str, Any], fds: list[int]) -> None:
    """The forked process: its descriptors, its environment, the cage, then the protocol."""
    code = 0
    try:
        _die_with_parent(signal.SIGKILL)
        import fcntl

        to_child, from_child, err = (fcntl.fcntl(fd, fcntl.F_DUPFD, 16) for fd in fds)
        os.dup2(err, 2)
        os.dup2(err, 1)
        os.dup2(to_child, _IN)
        os.dup2(from_child, _OUT)
        os.closerange(_OUT + 1, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1024)
        private = request["private"]
        os.chdir(request["cwd"])  # the working directory and import path idaudit has now
        sys.path[:] = request["sys_path"]
        for name in ("HOME", "TMPDIR", "HF_HOME", "TORCH_HOME", "XDG_CACHE_HOME",
                     "MPLCONFIGDIR"):
            os.environ[name] = private
        os.environ["HF_HUB_OFFLINE"] = "1"
        import tempfile

        tempfile.tempdir = private
        from idaudit.loading.confine import confine, import_path_listing, system_read_paths

        status = {k.split(":")[0]: k.split(":")[1].split()[0] for k in
                  open("/proc/self/status").read().splitlines() if k.startswith("Vm")}
        data_now, size_now = int(status["VmData"]) * 1024, int(status["VmSize"]) * 1024
        memory = int(request["memory"])
        system = system_read_paths()
        confine(system + request["read"], [private],
                request["listing"] + import_path_listing(system), memory_bytes=data_now + memory,
                address_bytes=size_now + memory + (8 << 30), cpu_seconds=request["cpu_seconds"],
                threads=max(64, 4 * int(request["threads"])))
        _serve(os.fdopen(_IN, "rb"), os.fdopen(_OUT, "wb"), request)
    except BaseException:  # noqa: BLE001 - the process ends here whatever happened
        code = 70
    os._exit(code)


def _note(exc: BaseException | None, memory: int) -> str:
    """What the cage adds to a failure: that it refused a file, a socket or a process, or
    that memory ran past its limit."""
    text = f"{type(exc).__name__}: {exc}" if exc is not None else ""
    if isinstance(exc, MemoryError) or "can't allocate memory" in text or \
            "Cannot allocate memory" in text:
        return f" (past the cage's memory limit, {memory / 2**30:.1f} GiB)"
    if "File too large" in text:
        from idaudit.loading.confine import MAX_FILE_BYTES

        return f" (past the cage's file-size limit, {MAX_FILE_BYTES >> 20} MiB)"
    if isinstance(exc, PermissionError) or "Permission denied" in text or \
            "Operation not permitted" in text:
        return f" ({CAGE_REFUSED})"
    return ""


def _serve(inp, out, request: dict[str, Any]) -> None:
    import numpy as np
    import torch

    import idaudit.loading.loaders as loaders
    import idaudit.loading.programs as programs
    from idaudit.core.errors import IdauditError, first_line
    from idaudit.core.request_parts import LoadOptions
    from idaudit.loading.arrays import ARRAY_KEYS, Arrays
    from idaudit.loading.opened import LoadedEncoder
    from idaudit.loading.wire import read_frame, write_frame
    from idaudit.models.encoders import EncoderFailed, embed

    programs.IN_CAGE = True
    torch.set_num_threads(max(1, int(request["threads"])))
    memory = int(request["memory"])
    loaded: Any = None
    while True:
        msg = read_frame(inp, float("inf"))  # from idaudit itself
        op = msg.get("op")
        try:
            if op == "close":
                return
            if op == "load":
                opts = LoadOptions(**msg["options"])
                got = loaders.open_target(msg["target"], opts, msg["embedding"])
                if isinstance(got, LoadedEncoder):
                    loaded = got
                    answer: dict[str, Any] = {"encoder": True}
                elif isinstance(got, Arrays):
                    answer = {"arrays": {k: np.asarray(v) for k in ARRAY_KEYS
                                         if (v := getattr(got, k, None)) is not None}}
                else:
                    answer = {"embedding": np.asarray(got)}
            else:
                answer = {"h": embed(loaded.module, torch.from_numpy(msg["x"])).numpy()}
        except EncoderFailed as exc:
            answer = {"failed": exc.reason + _note(exc.error, memory)}
        except IdauditError as exc:
            answer = {"error": exc.flags_text + _note(exc.__context__, memory),
                      "exit": exc.exit_code}
        except (MemoryError, Exception) as exc:  # a program from a file can raise anything
            answer = {"error": f"{type(exc).__name__}: {first_line(exc)}{_note(exc, memory)}",
                      "exit": 2}
        write_frame(out, answer)


def main() -> None:
    """The zygote's entry: ``python -I -c … SETUP`` (see :mod:`idaudit.loading.cage`)."""
    zygote(json.loads(sys.argv[1]))
