"""The ``idaudit`` command: a thin typer layer over the library, one module per command.

``application`` holds the typer app and its error layer (one line and an exit code, never a
traceback); ``options`` the flags several commands share, each declared once; ``output`` where
results go (report files, ``-`` for stdout, the gated exit). Each command — ``world``,
``train``, ``audit``, ``consistency``, ``embed``, ``metrics``, ``plan``, ``demo``, ``sweep``,
``report``, ``doctor`` — is the module of its name: it parses its flags into its request,
calls the library and renders the result.
"""

from __future__ import annotations

import importlib

from idaudit.cli.application import app, main, plain_help_texts

#: the commands, each the module of its name; importing one registers it on ``app``, in this
#: order (--help's)
COMMANDS = ("world", "train", "audit", "consistency", "embed", "metrics", "plan", "demo", "sweep",
            "report", "doctor")
for _command in COMMANDS:
    importlib.import_module(f"idaudit.cli.{_command}")
plain_help_texts(app)

__all__ = ["COMMANDS", "app", "main"]
