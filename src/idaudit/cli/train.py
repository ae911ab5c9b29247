"""``idaudit train``: train an encoder on a world."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from idaudit.cli.application import app, cli_errors, out, say
from idaudit.cli.options import option_flags
from idaudit.core.options import TRAIN, WORLD
from idaudit.core.requests import TrainRequest

__all__ = ["rate_text", "summary_line"]  # the command registers itself with the app


def _train_fields(given: dict[str, Any]) -> dict[str, Any]:
    """The TrainRequest fields of the flags: ``--encoder-kwargs`` parsed."""
    from idaudit.core.jsontext import parse_json_object

    return {**given, "encoder_kwargs": parse_json_object(given["encoder_kwargs"],
                                                         "--encoder-kwargs")}


def rate_text(per_second: float) -> str:
    """A rate to two significant digits below 10 (0.012, 5.3), whole above: never "0"."""
    return f"{per_second:.0f}" if per_second >= 10 else f"{per_second:.2g}"


def summary_line(metrics: dict[str, Any], steps_per_second: float, device: str,
                 checkpoint: Any, log: Any) -> str:
    """The line after the training table: R²(h → z) in-sample and held-out, the speed, the
    files written."""
    r2 = [f"{label} {metrics[key]:.4f}" for key, label in (("r2_h_to_z", "in-sample"),
                                                           ("r2_h_to_z_heldout", "held-out"))
          if isinstance(metrics.get(key), (int, float))]
    head = f"R²(h → z) {', '.join(r2)}; " if r2 else ""
    return (f"{head}{rate_text(steps_per_second)} steps/s on {device}; checkpoint {checkpoint}; "
            f"log {log}")


@app.command(short_help="Train an encoder on a world; write a checkpoint and a log.")
@cli_errors
@option_flags("options", (*WORLD, *TRAIN), _train_fields)
def train(
    options: dict[str, Any],
    out_path: Path | None = typer.Option(None, "--out", "-o", readable=False,
                                         help="checkpoint path (.safetensors)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar or lines"),
    show_config: bool = typer.Option(False, "--show-config", help="print every resolved "
                                     "option with where its value comes from (given, recipe, "
                                     "world, default) and exit: nothing is trained, rendered "
                                     "or written"),
) -> None:
    """Train an encoder on a world; write a self-describing checkpoint and a JSON log.

    Every objective trains on every world. `--world reacher` renders (or reuses) a MuJoCo
    dataset and trains a CNN over epochs, following a recipe: without CUDA the CPU recipe
    (announced in one line), on CUDA the paper's (64×64, 100 000 pairs, 100 epochs); any
    option given explicitly wins. Options that do not apply to the world are refused.
    Defaults left unsaid here: `--show-config` prints each one and its source. Progress goes
    to stderr: a bar on a terminal, else a line each tenth of the steps or 30 s, with an ETA.
    A run whose embedding collapsed (tr Cov(h) ≤ 0.01·m) is warned of on stderr and logged
    `"collapsed": true`; it exits 0, as a finished run (docs/sweeps.md).
    """
    from idaudit.evaluations.report import metrics_table
    from idaudit.training.runs import default_checkpoint_path, resolve_request, run_train

    req = TrainRequest(**options, out=out_path)
    resolved = resolve_request(req)  # the device it trains on chooses the recipe
    if show_config:
        for line in resolved.config_lines():
            typer.echo(line)
        return
    if req.out is None:
        req.out = default_checkpoint_path(resolved)
    record = run_train(req, resolved, progress=not quiet, say=None if quiet else say)
    objective, seed = resolved.train.objective, resolved.train.seed
    out.print(metrics_table(record.metrics,
                            title=f"{record.world['name']} · {objective} · seed {seed} · "
                                  "in-sample (fitted and scored on the same rows)"))
    out.print(summary_line(record.metrics, record.steps_per_second, record.device,
                           record.checkpoint, record.log))
