"""``idaudit metrics``: the metric catalogue."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Group
from rich.padding import Padding
from rich.text import Text

from idaudit.cli.application import app, cli_errors, out
from idaudit.cli.output import emit, report_outputs, to_stdout
from idaudit.core.errors import IdauditError
from idaudit.core.jsontext import json_text
from idaudit.core.outputs import check_outputs

__all__: list[str] = []  # the command registers itself with the app; nothing to import


#: the narrowest console the catalogue's table is printed on; narrower, each metric is a
#: block of lines (:func:`catalogue_list`)
WIDE = 120


def catalogue_list() -> Group:
    """The metric catalogue for a narrow console: each metric its key, which way is better
    and what it needs on one line, then its label and meaning, wrapped and indented."""
    from idaudit.maths.catalogue import NEEDS, catalogue

    entries = catalogue()
    blocks: list = [Text(f"idaudit metrics · {len(entries)}", style="bold")]
    for m in entries:
        needs = " ".join(n for n in NEEDS if n in m.needs)
        said = [*([f"{m.direction} is better"] if m.direction else []),
                *([f"needs {needs}"] if needs else [])]
        head = Text(m.key, style="bold")
        head.append("  " + " · ".join(said) if said else "")
        blocks += [head, Padding(Text(f"{m.label.strip()}: {m.meaning}", style="dim"),
                                 (0, 0, 0, 4))]
    return Group(*blocks)


@app.command("metrics", short_help="List every metric an audit reports and a gate can name.")
@cli_errors
def metrics_(
    json_path: Path | None = typer.Option(None, "--json", readable=False,
                                          help="write the catalogue here as a "
                                          "JSON list, one object per metric"),
    keys: bool = typer.Option(False, "--keys", help="print the keys only, one a line (what "
                              "--min, --max and gate files name), for scripts"),
) -> None:
    """Every metric idaudit reports: its key (what --min, --max and gate files name), label,
    which way is better, what the audit needs to report it (z, h_prime, rho, bootstrap) and
    what it means; docs/metrics.md says each at length."""
    from idaudit.evaluations.report import METRICS_DOC, catalogue_table
    from idaudit.maths.catalogue import catalogue, catalogue_json

    if keys and to_stdout(json_path):
        raise IdauditError("--keys and --json - both print to stdout: give --json a file")
    check_outputs(report_outputs([(json_path, "--json")]), remove_stale=True)
    if keys:  # plain lines, whatever the width: what a script reads
        typer.echo("\n".join(m.key for m in catalogue()))
    elif not to_stdout(json_path):  # stdout carries the JSON alone
        out.print(catalogue_table() if out.width >= WIDE else catalogue_list())
        out.print(f"each metric at length, with its formula: {METRICS_DOC}", highlight=False)
    if json_path is not None:
        emit(json_path, json_text(catalogue_json()))
        if not to_stdout(json_path):
            out.print(f"wrote {json_path}")
