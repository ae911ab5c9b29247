"""``idaudit sweep``: a suite of trainings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from idaudit.cli.application import app, cli_errors, out
from idaudit.cli.options import option_flags
from idaudit.core.command_options import SWEEP
from idaudit.core.errors import EXIT_RUNS_FAILED
from idaudit.core.requests import SweepRequest

__all__: list[str] = []  # the command registers itself with the app; nothing to import


def _print_runs(title: str, runs: list[dict[str, Any]]) -> None:
    """The runs of a sweep as a table, one row each (``--list``)."""
    from rich.table import Table

    from idaudit.experiments.sweep import run_id

    table = Table(title=f"{title}: {len(runs)} runs")
    keys = sorted({k for r in runs for k in r})
    for k in ["id", *keys]:
        table.add_column(k)
    for r in runs:
        table.add_row(run_id(r), *[str(r.get(k, "")) for k in keys])
    out.print(table)


@app.command(short_help="Run a suite of trainings, resumably, locally or on Ray.")
@cli_errors
@option_flags("options", SWEEP)
def sweep(
    suite: str = typer.Argument(..., help="2d | scaling | gennorm | grid | reacher, or a TOML "
                                "file with [fixed] options and [grid] lists of train options"),
    options: dict = None,  # type: ignore[assignment] - sweep's own options (core/options.SWEEP)
    list_only: bool = typer.Option(False, "--list", help="print the runs, run nothing"),
) -> None:
    """Run a suite of trainings (resumable: finished runs are skipped) in a process pool or
    on a Ray cluster (--executor ray; the nodes need idaudit, no shared disk).

    Each run writes OUT/runs/ID.json; rerunning the same command runs only what is missing.
    Reacher datasets are rendered first, under OUT/data. See docs/sweeps.md.
    """
    from idaudit.experiments.sweep import outcome_text, run_sweep_request, sweep_runs

    req = SweepRequest(suite=suite, **options)
    runs = sweep_runs(req)
    if list_only:
        _print_runs(suite, runs)
        return
    from idaudit.core.storage import is_uri

    counts = run_sweep_request(req, runs, progress=True)
    where = f"{str(req.out).rstrip('/')}/runs" if is_uri(str(req.out)) else Path(req.out) / "runs"
    out.print(f"{counts['total']} runs: {counts['skipped']} already done, "
              f"{outcome_text(counts)}; results in {where}")
    if counts["failed"]:  # not 1: that code means a gate failed
        raise typer.Exit(EXIT_RUNS_FAILED)
