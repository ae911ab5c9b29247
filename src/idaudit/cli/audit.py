"""``idaudit audit``: audit any encoder, gated."""

from __future__ import annotations

from pathlib import Path

import typer

from idaudit.cli.application import app, cli_errors
from idaudit.cli.options import encoder_flags, n_eval_option, report_flags
from idaudit.cli.output import check_reports, finish
from idaudit.core.defaults import FLOOR_DRAWS, TEST_FRACTION
from idaudit.core.errors import check_seed
from idaudit.core.request_parts import encoder_forms
from idaudit.core.requests import AuditRequest, default

__all__: list[str] = []  # the command registers itself with the app; nothing to import


@app.command()
@cli_errors
@report_flags
@encoder_flags
def audit(
    targets: list[Path] = typer.Argument(..., help="encoders or arrays to audit: "
                                         + encoder_forms() + "; several (e.g. seeds of one "
                                         "recipe) are gated together, see --reduce"),
    reduce: str = typer.Option(default(AuditRequest, "reduce"), "--reduce", help="with several "
                               "targets, gate the "
                               "worst run's value of each gated metric, or the median"),
    report: dict = None,  # the REPORT_FLAGS (report_flags)
    encoder: dict = None,  # the encoder flags (core/options.ENCODER)
    n_eval: int | None = n_eval_option("evaluation pairs"),
    seed: int | None = typer.Option(None, "--seed", help="eval-set and split seed (default: "
                                    "a checkpoint's training seed, else 0)"),
    bootstrap: int = typer.Option(default(AuditRequest, "bootstrap"), "--bootstrap",
                                  help="bootstrap resamples for CIs"),
    test_fraction: float | None = typer.Option(None, "--test-fraction", help="held-out share "
                                               f"of rows (default {TEST_FRACTION:g}; not where a "
                                               "world fixes its evaluation images, as Reacher "
                                               "does)"),
    circular: str | None = typer.Option(None, "--circular", help="comma-separated latent "
                                        "indices that are angles"),
    angle_sigma: float | None = typer.Option(None, "--angle-sigma", help="with --circular on "
                                             "arrays: the angles are drawn N(0, σ²) and seen "
                                             "mod 2π, so the audit reports the ceiling of "
                                             "R²(h → z) (a world that knows its law, as "
                                             "reacher, says it itself)"),
    gauss_sims: int = typer.Option(default(AuditRequest, "gauss_sims"), "--gauss-sims",
                                   help="Gaussianity p-value: 0 from the asymptotic null "
                                   "law; N > 0 from N simulated Gaussian data sets of the "
                                   "same size (exact, p ≥ 1/(N+1))"),
    floor_draws: int | None = typer.Option(None, "--floor-draws", help="shuffles of z against "
                                           "h behind the band an uninformative encoder of this "
                                           f"width reaches on these rows (default {FLOOR_DRAWS}; "
                                           "0: none)"),
    min_r2: float | None = typer.Option(None, "--min-r2", help="gate: held-out R²(h → z) ≥"),
    max_orth: float | None = typer.Option(None, "--max-orthogonality-error",
                                          help="gate: orthogonality error ≤"),
    label_free: bool = typer.Option(False, "--label-free", help="ignore the true latents z: "
                                    "the verdict a project without them would get (arrays "
                                    "without z are audited label-free anyway)"),
    plot: Path | None = typer.Option(None, "--plot", readable=False, help="write the audit's figures as one "
                                     "PNG (the plot extra)"),
    html: Path | None = typer.Option(None, "--html", readable=False, help="write one self-contained page: "
                                     "verdict, gates, figures, every metric with its meaning "
                                     "(the plot extra)"),
) -> None:
    """Audit any encoder: identifiability metrics, a pass/fail gate and CI-friendly reports.

    Exit codes: 0 pass, 1 a threshold failed, 2 bad input or usage, 3 inconclusive
    (collapsed or degenerate embedding, NaN/Inf, too few samples).
    """
    from idaudit.evaluations.audit import run_audit
    from idaudit.evaluations.pipeline import files_read
    from idaudit.evaluations.report import audit_table, side_by_side_table, verdict_lines

    check_seed(seed)
    check_reports(report, files_read(list(targets), encoder, report["gate"], "the input"),
                  [(plot, "--plot"), (html, "--html")])
    result = run_audit(AuditRequest.from_options(
        targets=list(targets), reduce=reduce, **encoder, n_eval=n_eval, seed=seed,
        bootstrap=bootstrap, test_fraction=test_fraction, circular=circular or (),
        angle_sigma=angle_sigma,
        gauss_sims=gauss_sims, floor_draws=floor_draws, min_r2=min_r2, max_orthogonality_error=max_orth,
        min=report["min"], max=report["max"], gate=report["gate"], label_free=label_free,
        plot=plot, html=html))
    finish(result, audit_table(result, report["keys"]), report, lead=verdict_lines(result),
           more=[side_by_side_table(result, report["keys"])] if result.runs else [])
