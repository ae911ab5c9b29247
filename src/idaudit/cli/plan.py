"""``idaudit plan``: latent straight-line plans against the oracle."""

from __future__ import annotations

from pathlib import Path

import typer

from idaudit.cli.application import app, cli_errors, err, out
from idaudit.cli.options import EncoderArg, encoder_flags, option_flags
from idaudit.cli.output import emit, report_outputs, to_stdout
from idaudit.core.command_options import PLAN
from idaudit.core.jsontext import json_text
from idaudit.core.outputs import check_outputs
from idaudit.core.requests import PlanRequest

__all__: list[str] = []  # the command registers itself with the app; nothing to import


@app.command(short_help="Plan straight lines in latent space against the oracle.")
@cli_errors
@option_flags("options", PLAN)
@encoder_flags
def plan(
    target: Path = EncoderArg,
    encoder: dict = None,  # the encoder flags (core/options.ENCODER)
    options: dict = None,  # plan's own options (core/options.PLAN)
    json_path: Path | None = typer.Option(None, "--json", readable=False, help="write the results here"),
    plot: Path | None = typer.Option(None, "--plot", readable=False, help="PNG of the planned paths next to "
                                     "the oracle's (needs the plot extra)"),
) -> None:
    """Latent straight-line plans against the oracle, and LQR value equivalence.

    Takes every encoder form `audit` takes, on its checkpoint's world, --world or --data; or
    an array file with a gallery of z and h (starts and goals are drawn from its rows). A
    median cost ratio near 1 means the embedding plans like the true latents.
    """
    from idaudit.evaluations.pipeline import files_read
    from idaudit.evaluations.plan import run_plan
    from idaudit.evaluations.report import plan_table

    check_outputs(report_outputs([(json_path, "--json")]) + [(plot, "--plot")],
                  files_read([target], encoder, name="the target"), remove_stale=True)
    report = run_plan(PlanRequest.from_options(
        target=target, **encoder, **options))
    say = err if to_stdout(json_path) else out  # stdout carries the JSON alone
    say.print(plan_table(report.metrics))
    if plot is not None:
        report.plot(plot)
        say.print(f"wrote {plot}")
    if json_path is not None:
        emit(json_path, json_text(report.to_dict()))
        if not to_stdout(json_path):
            out.print(f"wrote {json_path}")
