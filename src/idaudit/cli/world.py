"""``idaudit world``: write a world's positive pairs."""

from __future__ import annotations

from pathlib import Path

import typer

from idaudit.cli.application import app, cli_errors, out
from idaudit.cli.options import option_flags, world_default
from idaudit.core.options import WORLD
from idaudit.core.requests import WorldRequest, default

__all__: list[str] = []  # the command registers itself with the app; nothing to import


@app.command()
@cli_errors
@option_flags("options", WORLD)
def world(
    name: str | None = typer.Argument(None, help="world name (same as --world)"),
    options: dict = None,  # type: ignore[assignment] - the WORLD flags, one dict
    pairs: int = typer.Option(default(WorldRequest, "pairs"), "--pairs",
                              help="number of (z, z′) pairs"),
    seed: int = typer.Option(default(WorldRequest, "seed"), "--seed", help="the dataset's seed"),
    out_path: Path = typer.Option(..., "--out", "-o", readable=False,
                                  help="output file (.safetensors), or "
                                  "a directory for reacher"),
    n_eval: int | None = typer.Option(None, "--n-eval", help="reacher: shared evaluation "
                                      f"images (default {world_default('n_eval')})"),
) -> None:
    """Write n positive pairs (z, z′, x, x′) of a world, its spec in the file's metadata.

    `idaudit world reacher --rho 0.95 --pairs N --out DIR` renders MuJoCo Reacher images
    (resumable: rerun the same command after an interruption).
    """
    from idaudit.worlds.write import write_world

    out.print(write_world(name, progress=True, **options, n_eval=n_eval, out=out_path,
                          pairs=pairs, seed=seed))
