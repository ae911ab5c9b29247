"""Where a command's results go: report files (``-`` for stdout) written atomically, checked
before any work, and a gated report's exit."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.markup import escape

from idaudit.cli.application import err, out
from idaudit.core.errors import IdauditError
from idaudit.core.jsontext import json_text
from idaudit.core.outputs import check_outputs

__all__ = ["check_reports", "emit", "finish", "report_outputs", "to_stdout"]


def to_stdout(path: Path | None) -> bool:
    """``-`` for a report path means standard output (the table then goes to stderr)."""
    return path is not None and str(path) == "-"


def report_outputs(named: list[tuple[Path | None, str]]) -> list[tuple[Path | None, str]]:
    """The report paths to check as files: ``-`` (stdout) left out, and at most one of them."""
    dashes = [flag for path, flag in named if to_stdout(path)]
    if len(dashes) > 1:
        raise IdauditError(f"{' and '.join(dashes)} both name standard output (-); give one "
                           "of them a file")
    return [(path, flag) for path, flag in named if not to_stdout(path)]


def emit(path: Path, text: str) -> None:
    """Write a report's ``text`` to ``path`` atomically, or to stdout for ``-``."""
    from idaudit.core.atomic import atomic_write

    if to_stdout(path):
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
    else:
        atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def check_reports(flags: dict, inputs: list, files: list | None = None) -> None:
    """The report files of ``flags`` (and the command's own output ``files``, (path, flag))
    checked writable and none of ``inputs`` (every file the command reads:
    :func:`idaudit.evaluations.pipeline.files_read`) nor each other before any work; a stale
    report at their paths removed."""
    check_outputs(report_outputs([(flags["json_path"], "--json"), (flags["junit"], "--junit"),
                                   (flags["markdown"], "--markdown")]) + list(files or []),
                  inputs, remove_stale=True)


def finish(report, table, flags: dict, kind: str = "audit", lead: list[str] = (),
           more: list = ()) -> None:
    """Write the --json/--junit/--markdown files its ``flags`` name, print a gated report — the
    ``lead`` lines (what its verdict rests on), its table, then the ``more`` tables —, then the
    reports asked for on stdout (``-``), and exit with its code."""
    from idaudit.core.errors import one_line
    from idaudit.evaluations.report import audit_junit, audit_markdown

    json_path, junit, markdown = flags["json_path"], flags["junit"], flags["markdown"]
    reports = [(path, make) for path, make in (
        (json_path, lambda: json_text(report.to_dict())), (junit, lambda: audit_junit(report)),
        (markdown, lambda: audit_markdown(report, kind))) if path is not None]
    for path, make in reports:  # files first: a reader of stdout that leaves early (`| head`)
        if not to_stdout(path):  # must not cost them
            emit(path, make())
    piped = any(to_stdout(p) for p, _ in reports)
    console = err if piped else out  # stdout carries the report alone
    for line in lead:
        console.print(escape(line), highlight=False, soft_wrap=True)
    for shown in (table, *more):
        console.print(shown)
    if report.reason:
        err.print(f"[yellow]inconclusive:[/yellow] {escape(one_line(report.reason))}",
                  highlight=False, soft_wrap=True)  # a reason may quote a file's name
    for path, make in reports:
        if to_stdout(path):
            emit(path, make())
    failed = [t.metric for t in report.failed]
    if failed:
        err.print(f"[red]gate failed:[/red] {', '.join(failed)}", highlight=False, soft_wrap=True)
    raise typer.Exit(report.exit_code)
