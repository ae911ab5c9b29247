"""The ``idaudit`` console script: starts the CLI, so that even a failure to import it (a
missing dependency, a broken install) ends in one line and exit 5, never a traceback with
exit 1, the code of a failed gate. Only the standard library is imported before the CLI."""

from __future__ import annotations

import os
import sys

EXIT_INTERNAL = 5  # as idaudit.errors.EXIT_INTERNAL; kept here so nothing else is imported


def internal_error(exc: BaseException, what: str) -> SystemExit:
    """The one line for an exception nothing else handled; ``IDAUDIT_TRACEBACK=1`` re-raises."""
    if os.environ.get("IDAUDIT_TRACEBACK"):
        raise exc
    sys.stderr.write(f"internal error: {what}: {type(exc).__name__}: {exc} (a bug in idaudit "
                     "or a broken install; rerun with IDAUDIT_TRACEBACK=1 for the traceback "
                     "and please report it)\n")
    return SystemExit(EXIT_INTERNAL)


def main() -> None:
    try:
        from .cli import main as cli_main
    except Exception as exc:  # noqa: BLE001 - the CLI could not even be imported
        raise internal_error(exc, "idaudit could not start") from None
    cli_main()
