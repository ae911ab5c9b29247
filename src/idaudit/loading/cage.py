"""Programs from files run in a cage: a process of their own that the kernel confines.

TorchScript, ``torch.export`` programs, Hugging Face / timm / LeWM networks built from a
config and ``--trust-code`` (``--trust-pickle``) objects are loaded and called in a process
forked by the **zygote** (:mod:`idaudit.loading.cage_child`, one per idaudit process, started
on first need: torch is imported once, a cage then costs a fork) and confined there
(:mod:`idaudit.loading.confine`: Landlock, seccomp, rlimits). idaudit sends it inputs and gets
embeddings back as arrays (:mod:`idaudit.loading.wire`, no pickle); everything else — the
evaluation set, the metrics, every report — stays here. A :class:`CagedModule` stands for the
program: called on inputs it returns their embeddings (batch, m).

:func:`why_no_cage` says why no cage can be built here; then a program from a file is refused
unless trusted (:func:`idaudit.loading.loaders.open_target`).
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from idaudit.core.errors import EXIT_INCONCLUSIVE, EXIT_USAGE, IdauditError, printable
from idaudit.loading.confine import why_no_cage  # noqa: F401 - the cage's one availability test
from idaudit.loading.trust import memory_budget
from idaudit.loading.zygote import _Zygote, import_path, zygote


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class _Process:
    """A cage's process as the zygote forked it: its id, asked for once and then known."""

    def __init__(self, zygote: _Zygote, spawned: int) -> None:
        self.zygote, self.spawned = zygote, spawned
        self._pid: int | None = None
        self.timed_out = False

    @property
    def pid(self) -> int:
        if self._pid is None:
            self._pid = int(self.zygote.answer(self.spawned)["pid"])
        return self._pid

    def time_out(self) -> None:
        self.timed_out = True
        self.kill()

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except (ProcessLookupError, IdauditError):
            pass

    def status(self) -> int | None:
        """How it ended (its exit code, or minus the signal that killed it), reaped."""
        if not self.zygote.alive():
            return None
        try:
            return self.zygote.ask({"op": "status", "pid": self.pid}).get("status")
        except IdauditError:
            return None


def _end(process: _Process, files: list[Any], private: str, timer: threading.Timer) -> None:
    timer.cancel()
    for f in files:
        try:
            f.close()
        except OSError:
            pass
    process.kill()
    process.status()
    shutil.rmtree(private, ignore_errors=True)


class Cage:
    """One confined process holding one program from a file: ``load`` is sent at once (the
    process loads while idaudit goes on), :meth:`result` waits for what it opened,
    :meth:`embed` embeds inputs. ``read``: the paths the program may read beneath besides the
    Python environment, ``listing``: directories it may list (the working directory, where
    the user's project modules are imported from), ``seconds``: its whole life, wall clock and
    (per thread) CPU time."""

    def __init__(self, target: Path, options: dict[str, Any], embedding: bool,
                 read: list[str], listing: list[str], seconds: float) -> None:
        self.target, self.seconds = target, seconds
        self.private = tempfile.mkdtemp(prefix="idaudit-cage-")
        self.memory = int(max(min(memory_budget(), 2.0**62), 1 << 30))
        threads = torch.get_num_threads()
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        err = os.open(os.path.join(self.private, "stderr.txt"), os.O_WRONLY | os.O_CREAT, 0o600)
        request = {"op": "spawn", "private": self.private, "read": read, "listing": listing,
                   "cwd": os.getcwd(), "sys_path": import_path(),
                   "memory": self.memory, "threads": threads,
                   "cpu_seconds": int(seconds * max(threads, 1)) + 1}
        z = zygote()
        try:
            self.process = _Process(z, z.send(request, [to_r, from_w, err]))
        finally:
            for fd in (to_r, from_w, err):
                os.close(fd)
        self.to = os.fdopen(to_w, "wb")
        self.frm = os.fdopen(from_r, "rb")
        self.timer = threading.Timer(seconds, self.process.time_out)
        self.timer.daemon = True
        self.timer.start()
        self._finalize = weakref.finalize(self, _end, self.process, [self.to, self.frm],
                                          self.private, self.timer)
        self._opened: dict[str, Any] | None = None
        self._send({"op": "load", "target": str(target), "options": options,
                    "embedding": embedding})

    def _send(self, message: dict[str, Any]) -> None:
        from idaudit.loading.wire import write_frame

        try:
            write_frame(self.to, message)
        except (BrokenPipeError, OSError):
            raise self._ended() from None

    def _answer(self, max_bytes: float) -> dict[str, Any]:
        from idaudit.loading.wire import WireError, read_frame

        try:
            answer = read_frame(self.frm, max_bytes)
        except (EOFError, OSError):
            raise self._ended() from None
        except WireError as exc:
            self.close()
            raise IdauditError(f"{self.target}: the program's process broke the cage's "
                               f"protocol ({printable(str(exc))})") from None
        if not isinstance(answer, dict):
            raise IdauditError(f"{self.target}: the program's process sent no answer")
        if "error" in answer:
            code = EXIT_INCONCLUSIVE if answer.get("exit") == EXIT_INCONCLUSIVE else EXIT_USAGE
            raise IdauditError(printable(str(answer["error"]))[:4000], code)
        return answer

    def _ended(self) -> IdauditError:
        """Why the process ended before it answered, as the error to raise."""
        self.process.kill()
        status = self.process.status()
        last = self._last_line()
        self._finalize()
        if self.process.timed_out:
            return IdauditError(f"{self.target}: the program ran past the cage's time limit "
                                f"({self.seconds:g} s); --time-limit gives it more",
                                EXIT_INCONCLUSIVE)
        if status == -signal.SIGXCPU:
            return IdauditError(f"{self.target}: the program used up the cage's CPU time "
                                f"({self.seconds:g} s per thread); --time-limit gives it more",
                                EXIT_INCONCLUSIVE)
        how = "ended" if status is None else \
            f"was killed by {_signal_name(status)}" if status < 0 else f"exited ({status})"
        said = f"; it said last: {last}" if last else ""
        return IdauditError(f"{self.target}: the program's process {how} before it answered "
                            f"(inside the cage){said}")

    def _last_line(self) -> str:
        try:
            with open(os.path.join(self.private, "stderr.txt"), "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - 2000))
                lines = f.read().decode("utf-8", "replace").strip().splitlines()
        except OSError:
            return ""
        return printable(lines[-1].strip())[:300] if lines else ""

    def result(self) -> dict[str, Any]:
        """What the target opened as: ``{"encoder": True}``, ``{"arrays": {…}}`` or
        ``{"embedding": h}``."""
        if self._opened is None:
            self._opened = self._answer(self.memory)
        return self._opened

    def embed(self, x: np.ndarray) -> np.ndarray:
        """The embeddings (len(x), m), float32, of inputs ``x``; a failure of the program's own
        call is :class:`CallFailed`, idaudit's refusals :class:`IdauditError`."""
        self.result()
        self._send({"op": "embed", "x": np.ascontiguousarray(x)})
        answer = self._answer(self.memory)
        if "failed" in answer:
            raise CallFailed(printable(str(answer["failed"]))[:2000])
        h = answer.get("h")
        if not isinstance(h, np.ndarray) or h.dtype != np.float32 or h.ndim != 2 or \
                h.shape[0] != len(x):
            raise IdauditError(f"{self.target}: the program's process answered "
                               f"{_describe(h)} for {len(x)} inputs; expected (batch, m) "
                               "float32")
        return h

    def close(self) -> None:
        if self._finalize.alive:
            try:
                self._send({"op": "close"})
            except IdauditError:
                pass
            self._finalize()


class CallFailed(Exception):
    """The program's call raised inside the cage; the text is its line (as the call's own
    exception would give it here)."""


def _describe(h: Any) -> str:
    return f"an array {h.dtype} {tuple(h.shape)}" if isinstance(h, np.ndarray) else \
        type(h).__name__


class CagedModule(nn.Module):
    """A program in a :class:`Cage`: called on inputs (batch, …) it returns their
    embeddings (batch, m), as the program's embedding choice (``pool``, ``output``,
    ``embed``) gives them."""

    def __init__(self, cage: Cage) -> None:
        super().__init__()
        object.__setattr__(self, "cage", cage)  # not a submodule

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(self.cage.embed(x.detach().cpu().numpy()))

    def extra_repr(self) -> str:
        return f"{self.cage.target}, in its cage"
