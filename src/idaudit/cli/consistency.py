"""``idaudit consistency``: do runs differ by a rotation?"""

from __future__ import annotations

from pathlib import Path

import typer

from idaudit.cli.application import app, cli_errors
from idaudit.cli.options import encoder_flags, option_flags, report_flags
from idaudit.cli.output import check_reports, finish
from idaudit.core.command_options import CONSISTENCY
from idaudit.core.errors import check_seed
from idaudit.core.requests import ConsistencyRequest

__all__: list[str] = []  # the command registers itself with the app; nothing to import


@app.command(short_help="Check whether runs agree up to a rotation, without z.")
@cli_errors
@option_flags("options", CONSISTENCY)
@report_flags
@encoder_flags
def consistency(
    targets: list[Path] = typer.Argument(..., help="two or more runs: arrays with h (.npy, or h "
                                         "in .npz/.safetensors) embedding the same inputs, or "
                                         "encoders in any form audit takes"),
    options: dict = None,  # consistency's own options (core/options.CONSISTENCY)
    report: dict = None,  # the REPORT_FLAGS (report_flags)
    encoder: dict = None,  # the encoder flags (core/options.ENCODER)
) -> None:
    """Do two or more runs agree up to a rotation? No true latents needed.

    Embeddings of the same inputs from different seeds, checkpoints or architectures: for
    every pair and both directions, the held-out R² of the linear map between them, its
    orthogonality error and the Procrustes error. Runs that each recovered the latents up to
    a rotation differ by a rotation. Exit codes as audit: 0 pass, 1 a threshold failed, 2 bad
    input or usage, 3 inconclusive (a collapsed run, NaN/Inf, different numbers of inputs).
    """
    from idaudit.evaluations.consistency import run_consistency
    from idaudit.evaluations.pipeline import files_read
    from idaudit.evaluations.report import consistency_table

    check_seed(options["seed"])
    from idaudit.core.limits import check_runs

    check_runs(len(targets))
    check_reports(report, files_read(list(targets), encoder, report["gate"], "the run"))
    result = run_consistency(ConsistencyRequest.from_options(
        targets=list(targets), **encoder, **options, min=report["min"], max=report["max"],
        gate=report["gate"]))
    finish(result, consistency_table(result, report["keys"]), report, "consistency")
