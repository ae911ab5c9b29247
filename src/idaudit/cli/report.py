"""``idaudit report``: a sweep's tables and figures."""

from __future__ import annotations

from pathlib import Path

import typer

from idaudit.cli.application import app, cli_errors, err, out
from idaudit.core.errors import IdauditError

__all__: list[str] = []  # the command registers itself with the app; nothing to import


@app.command(short_help="Aggregate a sweep into tables and figures.")
@cli_errors
def report(
    out_dir: Path = typer.Argument(..., help="a directory written by idaudit sweep"),
    figures: bool = typer.Option(True, "--figures/--no-figures",
                                 help="draw the figures (needs matplotlib: the plot extra)"),
) -> None:
    """Aggregate a sweep: mean ± std over seeds as summary.csv and summary.md (the paper's
    table layouts), and the figures the runs support as PNGs under DIR/figures."""
    from idaudit.core.outputs import check_outputs
    from idaudit.experiments.aggregate import (
        TABLES,
        aggregate,
        load_results,
        record_paths,
        sweep_suite,
        write_tables,
    )

    ok, failed = load_results(out_dir)
    if not ok:
        raise IdauditError(f"{out_dir} has no finished runs")
    outputs = [(out_dir / name, "the table") for name in TABLES.values()]
    if figures:
        from idaudit.experiments.figures import FIGURES

        outputs += [(out_dir / "figures" / name, "the figure") for name in FIGURES]
    check_outputs(outputs, [(p, "the run record") for p in record_paths(out_dir)])
    rows = aggregate(ok)
    paths = write_tables(rows, out_dir, ok, suite=sweep_suite(out_dir))
    out.print(paths["markdown"].read_text(), markup=False, soft_wrap=True)
    if failed:
        err.print(f"{len(failed)} failed runs are not in the tables (see *.failed.json)")
    collapsed = sum(r.get("n_collapsed", 0) for r in rows)
    if collapsed:
        err.print(f"{collapsed} collapsed runs (h ≈ one point) are counted apart from the bound, "
                  "neither under nor above it (summary.csv: n_collapsed)")
    out.print(f"wrote {paths['csv']} and {paths['markdown']}")
    if figures:
        from idaudit.experiments.figures import draw_figures

        for path in draw_figures(ok, rows, out_dir):
            out.print(f"wrote {path}")
