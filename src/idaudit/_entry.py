"""The ``idaudit`` console script: starts the CLI, so that even a failure to import it (a
missing dependency, a broken install) ends in one line and exit 5, never a traceback with
exit 1, the code of a failed gate. Only the standard library and idaudit.core.errors are imported
before the CLI (and, for a command whose target is a program from a file, the cage's zygote
is started first: :func:`idaudit.loading.zygote.start_early`)."""

from __future__ import annotations

import sys

from idaudit.core.errors import EXIT_INTERNAL, internal_error_line, show_tracebacks

__all__ = ["main"]


def main() -> None:
    from idaudit.core.threads import share_cpu

    share_cpu()  # before torch or numpy load: waiting threads sleep (docs: core/threads.py)
    try:
        from idaudit.loading.zygote import start_early

        start_early(sys.argv[1:])  # a program from a file: its cage's process starts first
        from idaudit.cli import main as cli_main
    except Exception as exc:  # noqa: BLE001 - the CLI could not even be imported
        if show_tracebacks():
            raise
        sys.stderr.write(internal_error_line(exc, "idaudit could not start") + "\n")
        raise SystemExit(EXIT_INTERNAL) from None
    cli_main()
