"""``idaudit world``: write a world's positive pairs."""

from __future__ import annotations

import typer

from idaudit.cli.application import app, cli_errors, out
from idaudit.cli.options import option_flags
from idaudit.core.command_options import WRITE
from idaudit.core.options import WORLD

__all__: list[str] = []  # the command registers itself with the app; nothing to import


@app.command(short_help="Write a world's positive pairs and its spec to a file.")
@cli_errors
@option_flags("options", WORLD)
@option_flags("written", WRITE)
def world(
    name: str | None = typer.Argument(None, help="world name (same as --world)"),
    options: dict = None,  # type: ignore[assignment] - the WORLD flags, one dict
    written: dict = None,  # type: ignore[assignment] - world's own options (WRITE)
) -> None:
    """Write n positive pairs (z, z′, x, x′) of a world, its spec in the file's metadata.

    `idaudit world reacher --rho 0.95 --pairs N --out DIR` renders MuJoCo Reacher images
    (resumable: rerun the same command after an interruption).
    """
    from idaudit.worlds.write import write_world

    out.print(write_world(name, progress=True, **options, **written))
