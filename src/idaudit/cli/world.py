"""``idaudit world``: write a world's positive pairs."""

from __future__ import annotations

from pathlib import Path

import typer

from idaudit.cli.application import app, cli_errors, out
from idaudit.cli.options import (
    AlphaOpt,
    DimOpt,
    ImageSizeOpt,
    LayersOpt,
    RhoOpt,
    SourceOpt,
    StrideOpt,
    TrajectoryOpt,
    WorkersOpt,
    WorldOpt,
    world_default,
)
from idaudit.core.requests import WorldRequest, default


@app.command()
@cli_errors
def world(
    name: str | None = typer.Argument(None, help="world name (same as --world)"),
    world_: str | None = WorldOpt,
    dim: int | None = DimOpt,
    source: str | None = SourceOpt,
    alpha: float | None = AlphaOpt,
    rho: float | None = RhoOpt,
    layers: int | None = LayersOpt,
    pairs: int = typer.Option(default(WorldRequest, "pairs"), "--pairs",
                              help="number of (z, z′) pairs"),
    seed: int = typer.Option(default(WorldRequest, "seed"), "--seed", help="the dataset's seed"),
    out_path: Path = typer.Option(..., "--out", "-o", readable=False,
                                  help="output file (.safetensors), or "
                                  "a directory for reacher"),
    trajectory: bool | None = TrajectoryOpt,
    stride: int | None = StrideOpt,
    n_eval: int | None = typer.Option(None, "--n-eval", help="reacher: shared evaluation "
                                      f"images (default {world_default('n_eval')})"),
    image_size: int | None = ImageSizeOpt,
    workers: int | None = WorkersOpt,
) -> None:
    """Write n positive pairs (z, z′, x, x′) of a world, its spec in the file's metadata.

    `idaudit world reacher --rho 0.95 --pairs N --out DIR` renders MuJoCo Reacher images
    (resumable: rerun the same command after an interruption).
    """
    from idaudit.worlds.write import write_world

    out.print(write_world(
        name, progress=True, world=world_, dim=dim, source=source, alpha=alpha, rho=rho,
        layers=layers, trajectory=trajectory, stride=stride, n_eval=n_eval,
        image_size=image_size, out=out_path, pairs=pairs, seed=seed, workers=workers))
