"""One rich progress bar (on stderr) for every long loop; a no-op when disabled."""

from __future__ import annotations

__all__ = ["ProgressBar"]


class ProgressBar:
    def __init__(self, enabled: bool, total: int, label: str) -> None:
        self.enabled = enabled and total > 0
        if self.enabled:
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
        if self.enabled:
            self.p.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.p.__exit__(*exc)

    def advance(self, n: int = 1, info: str | None = None) -> None:
        if self.enabled:
            if info is None:
                self.p.advance(self.task, n)
            else:
                self.p.update(self.task, advance=n, info=info)

    def show(self, info: str) -> None:
        if self.enabled:
            self.p.update(self.task, info=info)
