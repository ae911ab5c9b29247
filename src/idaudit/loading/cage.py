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
import signal
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from idaudit.core.atomic import remove_tree
from idaudit.core.errors import EXIT_INCONCLUSIVE, EXIT_USAGE, IdauditError, one_line
from idaudit.loading.confine import why_no_cage  # noqa: F401 - the cage's one availability test
from idaudit.loading.trust import memory_budget
from idaudit.loading.wire import Declared
from idaudit.loading.zygote import _Zygote, import_path, zygote

__all__ = ["Cage", "CagedModule", "LAST_LINE_LIMIT", "MAX_WIDTH", "TEXT_LIMIT"]

#: the widest embedding (float32 values a row) a program's answer may declare for inputs of a
#: shape it has not embedded yet; once it has, its answers for that shape must keep the width
#: it gave. The widest a supported encoder gives: a pooled output is at most a network's
#: hidden size (18 432 for the widest published transformers), flattened tokens or feature
#: maps (``--pool none``) reach 2 104 320 (DINOv2-giant at 518 px, 1 370 tokens × 1 536);
#: 2²² (16 MiB a row) holds that twice. idaudit tries an encoder on 2 inputs first, so an
#: answer it has not yet seen the width of is at most 32 MiB there.
MAX_WIDTH = 1 << 22
#: the most characters of a text from the cage (an error, a failure's reason) shown in a line
TEXT_LIMIT = 1000
#: the most characters of the cage's last line of stderr quoted when its process dies
LAST_LINE_LIMIT = 300


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
        self._asking = threading.Lock()
        self.timed_out = False

    @property
    def pid(self) -> int:
        with self._asking:  # asked once: a second asker (the timer's thread) waits, then
            if self._pid is None:  # reads it (it would wait forever for a taken answer)
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
    left = remove_tree(private)
    if left:  # what the program made there resists removal: said, in one line
        sys.stderr.write(f"idaudit: {left}\n")


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
                   "cpu_seconds": int(seconds * max(threads, 1)) + 1, "seconds": seconds}
        z = zygote()
        try:
            self.process = _Process(z, z.send(request, [to_r, from_w, err]))
        finally:
            for fd in (to_r, from_w, err):
                os.close(fd)
        self.to = os.fdopen(to_w, "wb")
        self.frm = os.fdopen(from_r, "rb")
        self.started = time.monotonic()
        self.timer = threading.Timer(seconds, self.process.time_out)
        self.timer.daemon = True
        self.timer.start()
        self._finalize = weakref.finalize(self, _end, self.process, [self.to, self.frm],
                                          self.private, self.timer)
        self._opened: dict[str, Any] | None = None
        self._widths: dict[tuple[int, ...], int] = {}  # input shape (a row's) → its width
        self._send({"op": "load", "target": str(target), "options": options,
                    "embedding": embedding})

    def _send(self, message: dict[str, Any]) -> None:
        from idaudit.loading.wire import write_frame

        try:
            write_frame(self.to, message)
        except (BrokenPipeError, OSError):
            raise self._ended() from None

    def _broke(self, why: Any) -> IdauditError:
        """The cage closed, and the error to raise for an answer that breaks the protocol.

        Args:
            why: what was wrong with it (from the cage's bytes: shown as one line).

        Returns:
            The error (exit 2).
        """
        self.close()
        return IdauditError(f"{self.target}: the program's process broke the cage's protocol "
                            f"({one_line(why, 300)})")

    def _answer(self, max_bytes: float,
                check: Callable[[list[Declared]], None] | None = None) -> dict[str, Any]:
        """The process's next answer, its arrays checked from the frame's header before a
        byte of them is read.

        Args:
            max_bytes: the most bytes its arrays may hold together (what the request expects).
            check: refuses (raises) the arrays the header declares
                (:func:`idaudit.loading.wire.read_frame`).

        Returns:
            The answer, a dict; a refusal the process answered (``error``) is raised as
            :class:`IdauditError`, every text from the cage one line.
        """
        from idaudit.loading.wire import WireError, read_frame

        try:
            answer = read_frame(self.frm, max_bytes, check)
        except (EOFError, OSError):
            raise self._ended() from None
        except WireError as exc:
            raise self._broke(exc) from None
        except IdauditError:  # refused from its header: the rest is never read
            self.close()
            raise
        if not isinstance(answer, dict):
            raise self._broke(f"an answer that is no object but {type(answer).__name__}")
        if "error" in answer:
            code = EXIT_INCONCLUSIVE if answer.get("exit") == EXIT_INCONCLUSIVE else EXIT_USAGE
            raise IdauditError(one_line(answer["error"], TEXT_LIMIT), code)
        return answer

    def _ended(self) -> IdauditError:
        """Why the process ended before it answered, as the error to raise."""
        self.process.kill()
        status = self.process.status()
        last = self._last_line()
        self._finalize()
        # past its time limit whoever killed it: idaudit's timer, or the zygote while idaudit
        # was stopped (the timer's thread may not have run yet when the answer's EOF comes)
        if self.process.timed_out or time.monotonic() - self.started >= self.seconds:
            return IdauditError(f"{self.target}: the program ran past the cage's time limit "
                                f"({self.seconds:g} s); --time-limit gives it more",
                                EXIT_INCONCLUSIVE)
        if status == -signal.SIGXCPU:
            return IdauditError(f"{self.target}: the program used up the cage's CPU time "
                                f"({self.seconds:g} s per thread); --time-limit gives it more",
                                EXIT_INCONCLUSIVE)
        how = "ended" if status is None else \
            f"was killed by {_signal_name(status)}" if status < 0 else f"exited ({status})"
        said = f"; it said last: {last}" if last else ""  # one line already (_last_line)
        return IdauditError(f"{self.target}: the program's process {how} before it answered "
                            f"(inside the cage){said}")

    def _last_line(self) -> str:
        """The last line the process wrote to its stderr, as one line of at most
        :data:`LAST_LINE_LIMIT` characters ("" for none).

        Returns:
            The line.
        """
        try:
            with open(os.path.join(self.private, "stderr.txt"), "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - 2000))
                lines = f.read().decode("utf-8", "replace").strip().splitlines()
        except OSError:
            return ""
        return one_line(lines[-1].strip(), LAST_LINE_LIMIT) if lines else ""

    def result(self, arrays: Callable[[list[Declared]], None] | None = None
               ) -> dict[str, Any]:
        """What the target opened as: ``{"encoder": True}``, ``{"arrays": {name: array}}`` or
        ``{"embedding": h}``; anything else breaks the protocol.

        Args:
            arrays: where the load may answer with arrays (a pickle unpickled whole), the
                check of those its answer declares (place, dtype, shape), before their bytes
                are read: it raises to refuse them (arrays that cannot apply, more than the
                memory left); None: it may answer with none (a program that opens as an
                encoder). Only the first call's counts: the answer is kept.

        Returns:
            The answer.
        """
        if self._opened is None:
            def check(declared: list[Declared]) -> None:
                if arrays is not None:
                    arrays(declared)
                elif declared:
                    from idaudit.loading.wire import WireError

                    raise WireError(f"{len(declared)} arrays in the answer to a load that "
                                    "opens as an encoder")

            answer = self._answer(self.memory if arrays is not None else 0, check)
            kinds = [k for k in ("encoder", "arrays", "embedding") if k in answer]
            got = answer.get(kinds[0]) if len(kinds) == 1 else None
            if not (kinds == ["encoder"] and got is True or kinds == ["embedding"] and
                    isinstance(got, np.ndarray) or kinds == ["arrays"] and
                    isinstance(got, dict) and
                    all(isinstance(v, np.ndarray) for v in got.values())):
                raise self._broke("an answer to its load that is none of an encoder, arrays "
                                  f"by name and an embedding (keys: {sorted(answer)})")
            self._opened = answer
        return self._opened

    def embed(self, x: np.ndarray) -> np.ndarray:
        """The embeddings of inputs ``x``; the answer's size is bounded before a byte of it is
        read: ``len(x)`` rows of the width the program gave for inputs of this shape before,
        else of at most :data:`MAX_WIDTH` values, float32.

        Args:
            x: the inputs (batch, …).

        Returns:
            The embeddings (len(x), m), float32.

        Raises:
            CallFailed: the program's own call failed (its reason, one line).
            IdauditError: idaudit's refusals (and an answer of another size or type).
        """
        self.result()
        rows, key = len(x), tuple(int(d) for d in np.shape(x)[1:])
        width = self._widths.get(key)

        def check(declared: list[Declared]) -> None:
            if not declared:  # a refusal or a failure: text only
                return
            place, dtype, shape = declared[0]
            if len(declared) != 1 or place != "h" or dtype != "float32" or len(shape) != 2 \
                    or shape[0] != rows:
                shown = ", ".join(f"{d} {s}" for _, d, s in declared[:3])
                raise IdauditError(f"{self.target}: the program's process answered an array "
                                   f"{one_line(shown, 200)} for {rows} inputs; expected "
                                   "(batch, m) float32")
            if width is None and shape[1] > MAX_WIDTH:
                raise IdauditError(f"{self.target}: the program's process answered "
                                   f"embeddings {shape[1]} values wide for {rows} inputs, "
                                   f"wider than the {MAX_WIDTH} a supported encoder gives")
            if width is not None and shape[1] != width:
                raise IdauditError(f"{self.target}: the program's process answered "
                                   f"embeddings {shape[1]} values wide for {rows} inputs of "
                                   f"shape {key}, after {width} for inputs of that shape")

        self._send({"op": "embed", "x": np.ascontiguousarray(x)})
        most = rows * (MAX_WIDTH if width is None else width) * 4
        answer = self._answer(min(most, self.memory), check)
        if "failed" in answer:
            raise CallFailed(one_line(answer["failed"], TEXT_LIMIT))
        h = answer.get("h")
        if not isinstance(h, np.ndarray) or h.dtype != np.float32 or h.ndim != 2 or \
                h.shape[0] != rows:
            raise IdauditError(f"{self.target}: the program's process answered "
                               f"{_describe(h)} for {rows} inputs; expected (batch, m) "
                               "float32")
        self._widths.setdefault(key, h.shape[1])
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
