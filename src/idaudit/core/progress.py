"""One progress display (on stderr) for every long loop; a no-op when disabled.

On a terminal it is a rich bar. Elsewhere (a log file, a pipe, CI) a bar would only appear
when the loop ends, so it writes plain lines instead: one each time the work crosses another
tenth of its total or :data:`PLAIN_EVERY_S` seconds after the last line, whichever comes
first, each with the count, the percentage, the time elapsed and an ETA. Whether shown or
not, the same lines go to the standard logger ``idaudit`` (at INFO, through
``idaudit.progress``), so a program that configures logging sees every long loop progress.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TextIO

__all__ = ["PLAIN_EVERY_S", "PLAIN_STEPS", "ProgressBar", "logger"]

#: the most seconds between two plain progress lines (off a terminal)
PLAIN_EVERY_S = 30.0
#: a plain progress line each time the work crosses another 1/PLAIN_STEPS of its total
PLAIN_STEPS = 10

#: the loggers of idaudit: progress lines at INFO here, warnings (a collapsed run) beside it
logger = logging.getLogger("idaudit.progress")


def _clock(seconds: float) -> str:
    s = max(0, round(seconds))
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class ProgressBar:
    """Progress of ``total`` units of work named ``label``.

    Args:
        enabled: show it (on stderr); the lines go to the ``idaudit`` logger either way.
        total: the units of work (0: nothing to show).
        label: the name shown.
        plain: plain lines instead of a bar; None: when stderr is not a terminal.
        stream: where plain lines go (None: ``sys.stderr`` at the time of writing).
        every_s: the most seconds between two plain lines.
    """

    def __init__(self, enabled: bool, total: int, label: str, plain: bool | None = None,
                 stream: TextIO | None = None, every_s: float = PLAIN_EVERY_S) -> None:
        self.enabled = enabled and total > 0
        self.total, self.label, self.stream, self.every_s = total, label, stream, every_s
        self.done, self.info = 0, ""
        self.t0 = self.last_t = time.monotonic()
        self.last_tenth = 0
        if plain is None:
            plain = not (stream or sys.stderr).isatty() if self.enabled else True
        self.plain = plain
        if self.enabled and not plain:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.p = Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(),
                              TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                              TimeRemainingColumn(), console=Console(stderr=True))
            self.task = self.p.add_task(label, total=total, info="")

    def __enter__(self) -> ProgressBar:
        self.t0 = self.last_t = time.monotonic()
        if self.enabled and not self.plain:
            self.p.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled and not self.plain:
            self.p.__exit__(*exc)

    def line(self) -> str:
        """The plain line of where the work is: ``label: done/total (p %), elapsed, ETA``."""
        elapsed = time.monotonic() - self.t0
        pct = 100.0 * self.done / self.total if self.total else 100.0
        eta = (_clock(elapsed * (self.total - self.done) / self.done) if self.done
               else "unknown")
        info = f" — {self.info}" if self.info else ""
        return (f"{self.label}: {self.done}/{self.total} ({pct:.0f} %), {_clock(elapsed)} "
                f"elapsed, ETA {eta}{info}")

    def _tick(self) -> None:
        """Write (and log) a plain line where the work crossed another tenth or
        ``every_s`` seconds passed since the last line."""
        if self.total <= 0:
            return
        now = time.monotonic()
        tenth = min(PLAIN_STEPS, self.done * PLAIN_STEPS // self.total)
        if tenth <= self.last_tenth and now - self.last_t < self.every_s:
            return
        self.last_tenth, self.last_t = max(tenth, self.last_tenth), now
        text = self.line()
        logger.info(text)
        if self.enabled and self.plain:
            stream = self.stream or sys.stderr
            print(text, file=stream, flush=True)

    def advance(self, n: int = 1, info: str | None = None) -> None:
        self.done += n
        if info is not None:
            self.info = info
        if self.enabled and not self.plain:
            if info is None:
                self.p.advance(self.task, n)
            else:
                self.p.update(self.task, advance=n, info=info)
        self._tick()

    def show(self, info: str) -> None:
        self.info = info
        if self.enabled and not self.plain:
            self.p.update(self.task, info=info)
        self._tick()
