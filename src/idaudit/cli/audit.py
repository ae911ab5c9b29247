"""``idaudit audit``: audit any encoder, gated."""

from __future__ import annotations

import typer

from idaudit.cli.application import app, cli_errors
from idaudit.cli.options import encoder_flags, option_flags, report_flags
from idaudit.cli.output import check_reports, finish
from idaudit.core.command_options import AUDIT
from idaudit.core.errors import check_seed
from idaudit.core.request_parts import encoder_forms
from idaudit.core.requests import AuditRequest

__all__: list[str] = []  # the command registers itself with the app; nothing to import


@app.command(short_help="Audit an encoder: identifiability metrics and a gate.")
@cli_errors
@option_flags("options", AUDIT)
@report_flags
@encoder_flags
def audit(
    targets: list[str] = typer.Argument(..., help="encoders or arrays to audit: "
                                        + encoder_forms() + "; several (e.g. seeds of one "
                                        "recipe) are gated together, see --reduce"),
    options: dict = None,  # audit's own options (core/options.AUDIT)
    report: dict = None,  # the REPORT_FLAGS (report_flags)
    encoder: dict = None,  # the encoder flags (core/options.ENCODER)
) -> None:
    """Audit any encoder: identifiability metrics, a pass/fail gate and CI-friendly reports.

    Exit codes: 0 pass, 1 a threshold failed, 2 bad input or usage, 3 inconclusive
    (collapsed or degenerate embedding, NaN/Inf, too few samples).
    """
    from idaudit.cli.fetched import fetched
    from idaudit.evaluations.audit import run_audit
    from idaudit.evaluations.pipeline import files_read
    from idaudit.evaluations.report import audit_table, side_by_side_table, verdict_lines

    check_seed(options["seed"])
    with fetched(targets) as local:
        check_reports(report, files_read(local, encoder, report["gate"], "the input"),
                      [(options["plot"], "--plot"), (options["html"], "--html")])
        result = run_audit(AuditRequest.from_options(
            targets=local, **encoder, **{**options, "circular": options["circular"] or ()},
            min=report["min"], max=report["max"], gate=report["gate"]))
    table = audit_table(result, report["keys"])
    if result.runs:
        say_which_value(table, result)
    finish(result, table, report, lead=verdict_lines(result),
           more=[side_by_side_table(result, report["keys"])] if result.runs else [])


def say_which_value(table, result) -> None:
    """Several targets: the audit table's value column says which value each row holds (the
    median over the targets; a gated row, the value the gate took: the worst target's or the
    median), in its header and a first line of its caption."""
    reduce = result.metrics.get("reduce", "worst")
    gated = reduce == "worst" and any(t.passed is not None for t in result.thresholds)
    for column in table.columns:
        if column.header == "value":
            column.header = "median" + (" · gated: worst" if gated else "")
    line = (f"the median of the {len(result.runs)} targets"
            + ("; a gated row, the worst target's value" if gated else ""))
    table.caption = "\n".join(c for c in (line, table.caption) if c)
