"""``idaudit metrics``: the metric catalogue."""

from __future__ import annotations

from pathlib import Path

import typer

from idaudit.cli.application import app, cli_errors, out
from idaudit.cli.output import emit, report_outputs, to_stdout
from idaudit.core.jsontext import json_text
from idaudit.core.outputs import check_outputs

__all__: list[str] = []  # the command registers itself with the app; nothing to import


@app.command("metrics")
@cli_errors
def metrics_(
    json_path: Path | None = typer.Option(None, "--json", readable=False,
                                          help="write the catalogue here as a "
                                          "JSON list, one object per metric"),
) -> None:
    """Every metric idaudit reports: its key (what --min, --max and gate files name), label,
    which way is better, what the audit needs to report it (z, h_prime, rho, bootstrap) and
    what it means; docs/metrics.md says each at length."""
    from idaudit.evaluations.report import METRICS_DOC, catalogue_table
    from idaudit.maths.catalogue import catalogue_json

    check_outputs(report_outputs([(json_path, "--json")]), remove_stale=True)
    if not to_stdout(json_path):  # stdout carries the JSON alone
        out.print(catalogue_table())
        out.print(f"each metric at length, with its formula: {METRICS_DOC}", highlight=False)
    if json_path is not None:
        emit(json_path, json_text(catalogue_json()))
        if not to_stdout(json_path):
            out.print(f"wrote {json_path}")
