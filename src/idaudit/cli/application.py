"""The typer application: its error layer (one line and an exit code, never a traceback), the
root callback and :func:`main`."""

from __future__ import annotations

import functools
import sys

import typer
from rich.console import Console
from rich.markup import escape

from idaudit.core.errors import (
    EXIT_INTERNAL,
    IdauditError,
    command_line,
    internal_error_line,
    printable,
    show_tracebacks,
)
from idaudit.core.version import __version__

__all__ = ["app", "cli_errors", "err", "main", "out", "plain_help_texts", "say"]

app = typer.Typer(
    help="Did your self-supervised encoder learn the world? Worlds with known latents, "
         "LeJEPA/VICReg/InfoNCE training, identifiability audits and latent planning.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
out = Console()
err = Console(stderr=True)


# Exceptions the command layer hands on to typer as they are: exits, aborts and usage errors.
# typer ≥ 0.28 carries its own copy of click (typer._click) and older ones use click itself;
# both raise their usage errors as subclasses of a ClickException that typer.BadParameter
# derives from, so it is found there rather than imported from a package we do not depend on.
_PASS_THROUGH = (typer.Exit, typer.Abort,
                 *(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"))


EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader left


def _reader_left(console: Console) -> None:
    """rich's answer to a reader that left (``Console.on_broken_pipe``), made the shell's:
    exit :data:`EXIT_BROKEN_PIPE`. rich's own is ``SystemExit(1)``, which reads as a failed
    gate; a BrokenPipeError would not do either, as click turns one that reaches it (from
    --help, say) into exit 1 too."""
    console.quiet = True
    quiet_stdout()
    raise SystemExit(EXIT_BROKEN_PIPE)


def quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush cannot fail again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def cli_errors(fn):
    """Turn IdauditError into one line on stderr and its exit code; anything else that escapes
    is a bug in idaudit: one line and exit 5 (``IDAUDIT_TRACEBACK=1`` shows where), so that a
    crash never reads as a verdict (exit 1 is a failed gate and nothing else)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with command_line():  # errors name flags (--n-eval), not parameters (n_eval)
            try:
                return fn(*args, **kwargs)
            except IdauditError as exc:
                err.print(f"[red]error:[/red] {escape(printable(str(exc)))}", highlight=False,
                          soft_wrap=True)
                raise typer.Exit(exc.exit_code) from None
            except KeyboardInterrupt:
                err.print("interrupted")
                raise typer.Exit(130) from None
            except BrokenPipeError:  # `idaudit … | head`: the reader left; not a bug, not a verdict
                quiet_stdout()
                raise typer.Exit(EXIT_BROKEN_PIPE) from None
            except _PASS_THROUGH:
                raise
            except Exception as exc:  # noqa: BLE001 - the last line of defence
                if show_tracebacks():
                    raise
                err.print(escape(internal_error_line(exc)), highlight=False, soft_wrap=True)
                raise typer.Exit(EXIT_INTERNAL) from None

    return wrapper


def say(message: str) -> None:
    err.print(escape(message), soft_wrap=True, highlight=False)


def _print_version(value: bool) -> None:
    if value:
        out.print(f"idaudit {__version__}", highlight=False)
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", "-V", callback=_print_version,
                                 is_eager=True, help="print idaudit's version and exit"),
) -> None:
    """Did your self-supervised encoder learn the world? Worlds with known latents,
    LeJEPA/VICReg/InfoNCE training, identifiability audits and latent planning."""


def plain_help_texts(app: typer.Typer) -> None:
    """Escape rich markup in every help text and docstring, so that ``[min]``, ``[, h_prime]``
    and the like print as written (typer renders help through rich, which takes ``[word]`` for
    a style tag and drops it). Options shared by several commands are escaped once."""
    import inspect

    seen: set[int] = set()
    for cmd in app.registered_commands:
        doc = cmd.help if cmd.help is not None else inspect.getdoc(cmd.callback)
        if doc:
            cmd.help = escape(doc)
        for param in inspect.signature(cmd.callback).parameters.values():
            info = param.default
            if isinstance(info, typer.models.ParameterInfo) and id(info) not in seen:
                seen.add(id(info))
                if info.help:
                    info.help = escape(info.help)


def _click_class(name: str) -> type:
    """click's exception class ``name``, from typer's own copy of click or click itself."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


def main() -> None:
    """Run the CLI. A flag or argument a command does not take is one line on stderr and
    exit 2, as every other bad input is (not click's usage box). A reader that leaves early
    (``idaudit … | head``) ends the command with 141, whichever console wrote last: ours,
    the progress bar's or typer's help (rich's class is told so in this process only, the
    command's; the library leaves it as it is)."""
    import rich.console

    rich.console.Console.on_broken_pipe = _reader_left
    with command_line():  # errors name flags
        _main()


def _main() -> None:
    try:
        code = app(standalone_mode=False)
    except _click_class("ClickException") as exc:  # usage errors: an unknown flag, a missing
        where = getattr(getattr(exc, "ctx", None), "command_path", None) or "idaudit"  # argument
        message = exc.format_message().strip()
        if message:  # none when a bare command printed its help (no_args_is_help)
            err.print(f"error: {escape(printable(message))} (see {escape(where)} --help)",
                      highlight=False, soft_wrap=True)
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        err.print("interrupted")
        raise SystemExit(130) from None
    except IdauditError as exc:  # raised outside a command (should not happen)
        err.print(f"error: {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise SystemExit(exc.exit_code) from None
    except KeyboardInterrupt:
        err.print("interrupted")
        raise SystemExit(130) from None
    except BrokenPipeError:
        quiet_stdout()
        raise SystemExit(EXIT_BROKEN_PIPE) from None
    except Exception as exc:  # noqa: BLE001 - outside every command's own error layer
        if show_tracebacks():
            raise
        err.print(escape(internal_error_line(exc, "outside a command")), highlight=False,
                  soft_wrap=True)
        raise SystemExit(EXIT_INTERNAL) from None
    raise SystemExit(code if isinstance(code, int) else 0)
