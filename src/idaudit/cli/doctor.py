"""``idaudit doctor``: check the installation."""

from __future__ import annotations

import typer
from rich.markup import escape

from idaudit.cli.application import app, cli_errors, out

__all__: list[str] = []  # the command registers itself with the app; nothing to import


@app.command(short_help="Check the installation and say what to install.")
@cli_errors
def doctor() -> None:
    """Check the installation (torch, numba, MuJoCo, headless GL) and say what to install."""
    from rich.table import Table

    from idaudit.doctor import run_checks

    checks = run_checks()
    table = Table(title="idaudit doctor")
    table.add_column("check")
    table.add_column("")
    table.add_column("detail")
    table.add_column("fix", style="dim")
    for c in checks:
        table.add_row(c["name"], "[green]ok[/green]" if c["ok"] else "[red]missing[/red]",
                      escape(c["detail"]), escape(c["fix"] or ""))
    out.print(table)
    if not all(c["ok"] for c in checks):
        raise typer.Exit(1)
