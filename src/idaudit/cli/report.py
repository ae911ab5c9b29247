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
    out_dir: str = typer.Argument(..., help="a directory written by idaudit sweep, or its "
                                  "URI (s3://bucket/prefix)"),
    figures: bool = typer.Option(True, "--figures/--no-figures",
                                 help="draw the figures (needs matplotlib: the plot extra)"),
) -> None:
    """Aggregate a sweep: mean ± std over seeds as summary.csv and summary.md (the paper's
    table layouts), and the figures the runs support as PNGs under DIR/figures."""
    from idaudit.core.outputs import check_outputs
    from idaudit.core.storage import is_uri, open_store
    from idaudit.experiments.aggregate import (
        TABLES,
        aggregate,
        load_results,
        record_paths,
        sweep_suite,
        write_tables,
    )

    store = open_store(out_dir, "the sweep") if is_uri(out_dir) else None
    where: str | Path = out_dir if store is not None else Path(out_dir)
    ok, failed = load_results(where)
    if not ok:
        raise IdauditError(f"{out_dir} has no finished runs")
    if store is None:
        outputs = [(Path(where) / name, "the table") for name in TABLES.values()]
        if figures:
            from idaudit.experiments.figures import FIGURES

            outputs += [(Path(where) / "figures" / name, "the figure") for name in FIGURES]
        check_outputs(outputs, [(p, "the run record") for p in record_paths(where)])
    rows = aggregate(ok)
    paths = write_tables(rows, where, ok, suite=sweep_suite(where))
    markdown = store.read_text(TABLES["markdown"]) if store is not None else \
        Path(paths["markdown"]).read_text()
    out.print(markdown, markup=False, soft_wrap=True)
    if failed:
        err.print(f"{len(failed)} failed runs are not in the tables (see *.failed.json)")
    collapsed = sum(r.get("n_collapsed", 0) for r in rows)
    if collapsed:
        err.print(f"{collapsed} collapsed runs (h ≈ one point) are counted apart from the bound, "
                  "neither under nor above it (summary.csv: n_collapsed)")
    out.print(f"wrote {paths['csv']} and {paths['markdown']}")
    if figures:
        from idaudit.experiments.figures import draw_figures

        if store is None:
            for path in draw_figures(ok, rows, where):
                out.print(f"wrote {path}")
            return
        import tempfile

        with tempfile.TemporaryDirectory(prefix="idaudit-report-") as tmp:
            for path in draw_figures(ok, rows, tmp):  # drawn here, then put in the store
                key = store.join("figures", Path(path).name)
                store.upload(path, key)
                out.print(f"wrote {store.shown(key)}")
