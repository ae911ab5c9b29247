"""``idaudit sweep``: a suite of trainings."""

from __future__ import annotations

from pathlib import Path

import typer

from idaudit.cli.application import app, cli_errors, out
from idaudit.core.errors import EXIT_RUNS_FAILED
from idaudit.core.requests import SweepRequest, default

__all__: list[str] = []  # the command registers itself with the app; nothing to import


@app.command()
@cli_errors
def sweep(
    suite: str = typer.Argument(..., help="2d | scaling | gennorm | grid | reacher, or a TOML "
                                "file with [fixed] options and [grid] lists of train options"),
    out_dir: Path = typer.Option(Path(default(SweepRequest, "out")), "--out", "-o",
                                 help="results directory"),
    seeds: int | None = typer.Option(None, "--seeds", help="keep the first N seeds"),
    steps: int | None = typer.Option(None, "--steps", help="cap the training steps"),
    dims: str | None = typer.Option(None, "--dims", help="comma-separated dims to keep"),
    objectives: str | None = typer.Option(None, "--objectives", help="comma-separated "
                                          "objectives to keep"),
    only: list[str] = typer.Option([], "--only", help="keep runs whose option is one of the "
                                   "values, e.g. --only world=spiral --only lamb=1e-3,5e-3; a "
                                   "run without that option is kept (--only rho=0.9 keeps the "
                                   "trajectory runs too: add --only mode=ou)"),
    set_: list[str] = typer.Option([], "--set", help="override an option on every run, e.g. "
                                   "--set pairs=3000 --set epochs=10 (Reacher)"),
    workers: int | None = typer.Option(None, "--workers", help="parallel runs (default: cores, "
                                       "or one per GPU; under Ray: the most runs in flight, "
                                       "default all)"),
    executor: str = typer.Option(default(SweepRequest, "executor"), "--executor",
                                 help="local (process pool) | ray"),
    address: str | None = typer.Option(None, "--address", help="Ray cluster address (default: "
                                       "a local Ray instance)"),
    cpus_per_run: float | None = typer.Option(None, "--cpus-per-run", help="Ray: CPUs each "
                                              "run asks for (torch threads, render "
                                              "processes; default 1)"),
    gpus_per_run: float | None = typer.Option(None, "--gpus-per-run", help="Ray: GPUs each run "
                                              "asks for (default 0; > 0 trains the GPU "
                                              "recipe on CUDA)"),
    memory_per_run: float | None = typer.Option(None, "--memory-per-run", help="Ray: memory "
                                                "each run declares, GiB (default: none)"),
    list_only: bool = typer.Option(False, "--list", help="print the runs, run nothing"),
    checkpoints: bool = typer.Option(default(SweepRequest, "checkpoints"), "--checkpoints",
                                     help="keep each trained encoder as "
                                     "OUT/checkpoints/ID.safetensors (for audit and plan)"),
) -> None:
    """Run a suite of trainings (resumable: finished runs are skipped) in a process pool or
    on a Ray cluster (--executor ray; the nodes need idaudit, no shared disk).

    Each run writes OUT/runs/ID.json; rerunning the same command runs only what is missing.
    Reacher datasets are rendered first, under OUT/data. See docs/sweeps.md.
    """
    from rich.table import Table

    from idaudit.experiments.sweep import run_id, run_sweep_request, sweep_runs

    req = SweepRequest(suite=suite, out=out_dir, seeds=seeds, steps=steps, dims=dims,
                       objectives=objectives, only=only, set=set_, workers=workers,
                       executor=executor, address=address, cpus_per_run=cpus_per_run,
                       gpus_per_run=gpus_per_run, memory_per_run=memory_per_run,
                       checkpoints=checkpoints)
    runs = sweep_runs(req)
    if list_only:
        table = Table(title=f"{suite}: {len(runs)} runs")
        keys = sorted({k for r in runs for k in r})
        for k in ["id", *keys]:
            table.add_column(k)
        for r in runs:
            table.add_row(run_id(r), *[str(r.get(k, "")) for k in keys])
        out.print(table)
        return
    counts = run_sweep_request(req, runs, progress=True)
    out.print(f"{counts['total']} runs: {counts['skipped']} already done, {counts['ok']} ok, "
              f"{counts['failed']} failed; results in {out_dir / 'runs'}")
    if counts["failed"]:  # not 1: that code means a gate failed
        raise typer.Exit(EXIT_RUNS_FAILED)
