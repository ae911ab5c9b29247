"""Errors the CLI turns into a one-line message and an exit code (never a traceback), one
class per exit code, and the one place text from outside becomes a line: an exception's
(:func:`first_line`, :func:`error_line`), a file's or a program's (:func:`printable`,
:func:`one_line`)."""

from __future__ import annotations

import math
import numbers
import os
import re
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = ["EXIT_GATE_FAILED", "EXIT_INCONCLUSIVE", "EXIT_INTERNAL", "EXIT_OK", "EXIT_RUNS_FAILED",
           "EXIT_USAGE", "GateFailed", "IdauditError", "Inconclusive", "MAX_SEED", "NOT_PARAMETERS",
           "RunsFailed", "UsageError", "check_seed", "command_line", "error_line", "first_line",
           "index_list", "internal_error_line", "latent_indices", "library_spelling", "one_line",
           "parameter_of", "printable", "require", "root_cause", "show_tracebacks"]

EXIT_OK = 0
EXIT_GATE_FAILED = 1
EXIT_USAGE = 2
EXIT_INCONCLUSIVE = 3
EXIT_RUNS_FAILED = 4  # a sweep finished with some runs failed (rerun to retry them)
EXIT_INTERNAL = 5  # idaudit itself failed (a bug): never mistaken for a failed gate


#: whether errors are being shown on the command line (set by the CLI around each command):
#: there an option is its flag (``--n-eval``), everywhere else its parameter (``n_eval``)
COMMAND_LINE: ContextVar[bool] = ContextVar("idaudit_command_line", default=False)

#: flags whose parameter is not the flag's words joined by underscores
FLAG_PARAMETERS = {"--trust-code": "trust_pickle", "--trust-pickle": "trust_pickle",
                   "--ou": "trajectory=False"}

#: flags an error may name that are no parameter of the library: the command line's own
#: (where its output goes, what it prints) and other programs' (pip's), kept as written
NOT_PARAMETERS = frozenset({"--help", "--version", "--json", "--junit", "--markdown", "--keys",
                            "--show-config", "--quiet", "--list", "--figures", "--no-figures",
                            "--name", "--force-reinstall"})

_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*(?![\w-])")


def parameter_of(flag: str) -> str:
    """The library's spelling of an option the command line spells ``flag``: ``--n-eval`` →
    ``n_eval``, ``--trust-code`` → ``trust_pickle`` (:data:`FLAG_PARAMETERS`); a flag of
    :data:`NOT_PARAMETERS` as it is."""
    if flag in NOT_PARAMETERS:
        return flag
    return FLAG_PARAMETERS.get(flag, flag[2:].replace("-", "_"))


def library_spelling(text: str) -> str:
    """``text`` with every flag spelled as the library's parameter (:func:`parameter_of`)."""
    return _FLAG.sub(lambda m: parameter_of(m.group()), text)


@contextmanager
def command_line():
    """Errors raised or shown inside spell options as the command line does (flags)."""
    token = COMMAND_LINE.set(True)
    try:
        yield
    finally:
        COMMAND_LINE.reset(token)


class IdauditError(ValueError):
    """A user-facing problem: bad input, an unknown name, an unreadable file.

    ``exit_code`` is what the CLI exits with. Each code is a class of its own, which library
    callers catch by type: :class:`UsageError` (2: bad input or usage), :class:`GateFailed`
    (1: a gate failed, as the Lightning monitor's), :class:`Inconclusive` (3: a collapsed or
    diverged run, too few rows), :class:`RunsFailed` (4: a sweep with failed runs);
    ``IdauditError(message[, code])`` makes the class of that code (2 by default; another
    code, such as 5, stays an ``IdauditError``). A ``ValueError``, so library users can catch it as one.

    The message is written as the command line says it, naming flags (``--n-eval must be an
    integer ≥ 10``); shown outside the CLI (:data:`COMMAND_LINE` unset) each flag reads as the
    library's parameter (``n_eval must be …``: :func:`library_spelling`), or as ``library``
    where one is given (a line that reads otherwise in Python, ``embed=`` a function where
    the command line names ``--embed module:function``).

    Args:
        message: the one line, as the command line shows it.
        exit_code: the CLI's exit code; by default the class's own.
        library: the line as the library shows it, where it reads otherwise.

    Example:
        >>> err = IdauditError("run diverged", EXIT_INCONCLUSIVE)
        >>> isinstance(err, Inconclusive), err.exit_code
        (True, 3)
    """

    exit_code: int = EXIT_USAGE

    def __new__(cls, *args: Any, **kwargs: Any) -> IdauditError:
        if cls is IdauditError:  # (message, exit_code): the class of that code
            code = args[1] if len(args) > 1 else kwargs.get("exit_code")
            cls = _KINDS.get(EXIT_USAGE if code is None else code, IdauditError)
        return super().__new__(cls, *args[:1])

    def __init__(self, message: str = "", exit_code: int | None = None, *,
                 library: str | None = None) -> None:
        super().__init__(message)
        self.exit_code = type(self).exit_code if exit_code is None else exit_code
        self.library = library

    def __reduce__(self) -> tuple:  # pickled (a Ray task's error) as it is, subclasses too
        return (_rebuilt, (type(self), self.args, self.__dict__))

    @property
    def flags_text(self) -> str:
        """The message as the command line shows it."""
        return str(self.args[0]) if self.args else ""

    @property
    def library_text(self) -> str:
        """The message as the library shows it."""
        return self.library if self.library is not None else library_spelling(self.flags_text)

    def __str__(self) -> str:
        return self.flags_text if COMMAND_LINE.get() else self.library_text


class UsageError(IdauditError):
    """Bad input or usage: a value out of range, an unknown name, an unreadable file (exit 2)."""

    exit_code = EXIT_USAGE


class GateFailed(IdauditError):
    """A gate failed: a metric past its threshold (exit 1, and nothing else exits 1)."""

    exit_code = EXIT_GATE_FAILED


class Inconclusive(IdauditError):
    """No verdict can be given: a collapsed or diverged run, NaN or Inf, too few rows
    (exit 3)."""

    exit_code = EXIT_INCONCLUSIVE


class RunsFailed(IdauditError):
    """A sweep finished with some of its runs failed; a rerun retries them (exit 4)."""

    exit_code = EXIT_RUNS_FAILED


def _rebuilt(cls: type[IdauditError], args: tuple, state: dict[str, Any]) -> IdauditError:
    """An unpickled :class:`IdauditError`: its class, message and attributes, as they were
    (without its ``__init__``, whose arguments a subclass may choose)."""
    err = Exception.__new__(cls, *args)
    err.args = args
    err.__dict__.update(state)
    return err


#: the class of each exit code (:class:`IdauditError` makes them)
_KINDS: dict[int, type[IdauditError]] = {k.exit_code: k for k in (UsageError, GateFailed,
                                                                   Inconclusive, RunsFailed)}


def require(condition: bool, message: str) -> None:
    """Raise :class:`IdauditError` (exit 2) with ``message`` unless ``condition`` holds."""
    if not condition:
        raise IdauditError(message)


MAX_SEED = 2**32 - 1


def check_seed(seed: int | None, flag: str = "--seed") -> None:
    """Seeds are integers in [0, 2³² − 1] (every generator idaudit seeds takes them)."""
    if seed is not None and not (isinstance(seed, int) and 0 <= seed <= MAX_SEED):
        raise IdauditError(f"{flag} must be an integer in [0, {MAX_SEED}], got {seed}")


#: control characters (C0 but tab and newline, DEL, C1) and bidirectional overrides: what
#: could drive a terminal (ANSI escapes, OSC titles) or reorder a line when echoed
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with every control character shown as ``\\xNN`` / ``\\uNNNN``: names read
    from a file (state dict keys, paths, messages) are echoed as data, never as terminal
    commands."""
    return _CONTROL.sub(lambda m: ascii(m.group())[1:-1], text)


#: what breaks a line besides the control characters :func:`printable` escapes: newline, tab
#: and Unicode's line and paragraph separators
_BREAKS = re.compile("[\t\n\u2028\u2029]")


def one_line(text: Any, limit: int = 1000) -> str:
    """``text`` (any value, as ``str`` gives it) as ONE printable line of at most ``limit``
    characters, for text from outside idaudit (what a caged program sent) before any layer
    prints it: control characters escaped (:func:`printable`), newlines, tabs and line
    separators escaped too (``\\n``), and a longer text cut in its middle (`` … ``), so that
    both its start and its end (where a note such as the cage's says why) stay.

    Args:
        text: what to show; not a ``str`` is shown as ``str(text)`` gives it.
        limit: the most characters the line may have (at least 20).

    Returns:
        The line, ``len(line) <= max(limit, 20)``.
    """
    limit = max(int(limit), 20)
    line = printable(_BREAKS.sub(lambda m: ascii(m.group())[1:-1], str(text)))
    if len(line) <= limit:
        return line
    tail = (limit - 3) // 3
    return f"{line[:limit - 3 - tail]} … {line[len(line) - tail:]}"


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text (its type's name where it has none): the
    exception text in a one-line refusal.

    Example:
        >>> first_line(ValueError("bad value\\nmore detail"))
        'bad value'
    """
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def root_cause(exc: BaseException) -> BaseException:
    """The innermost exception ``exc`` was raised from (``raise … from``, or raised while
    handling): ``exc`` itself when there is none."""
    seen = {id(exc)}
    while True:
        inner = exc.__cause__ if exc.__cause__ is not None else \
            (None if exc.__suppress_context__ else exc.__context__)
        if inner is None or id(inner) in seen:
            return exc
        seen.add(id(inner))
        exc = inner


def error_line(exc: BaseException) -> str:
    """``Type: first line`` of ``exc``, with its root cause's where that says more:
    transformers' "Failed to import transformers.models.vit.modeling_vit because of the
    following error (look up to see its traceback):" becomes "…; caused by
    ModuleNotFoundError: No module named 'torchvision'"."""
    text = f"{type(exc).__name__}: {first_line(exc)}"
    cause = root_cause(exc)
    inner = first_line(cause)
    if cause is not exc and inner not in text:
        text += f"; caused by {type(cause).__name__}: {inner}"
    return text


def internal_error_line(exc: BaseException, what: str | None = None) -> str:
    """The one line for an exception nothing handled (exit 5, never mistaken for a verdict).
    Callers re-raise instead when :func:`show_tracebacks` (``IDAUDIT_TRACEBACK=1``)."""
    where = f"{what}: " if what else ""
    return printable(f"internal error: {where}{type(exc).__name__}: {exc} (a bug in idaudit or "
                     "a broken install; rerun with IDAUDIT_TRACEBACK=1 for the traceback and "
                     "please report it)")


def show_tracebacks() -> bool:
    return bool(os.environ.get("IDAUDIT_TRACEBACK"))


def index_list(value: Any, flag: str) -> tuple[int, ...]:
    """Indices as a flag gives them, "0,2" (comma-separated text), or as Python does (a list
    or tuple): a tuple of ints, or a line naming ``flag`` (checked further by
    :func:`latent_indices`).

    Example:
        >>> index_list("0, 2", "--circular")
        (0, 2)
    """
    if not isinstance(value, str):
        return tuple(value)
    try:
        return tuple(int(c) for c in value.split(",") if c.strip())
    except ValueError:
        raise IdauditError(f"{flag} expects comma-separated integers, got {value!r}") from None


def latent_indices(values: Any, what: str) -> tuple[int, ...]:
    """Latent indices (e.g. which latents are angles) as distinct non-negative integers; NaN,
    ±inf, fractions, negatives and repeats are refused with a line naming the value."""
    out: list[int] = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise IdauditError(f"{what}: latent indices must be integers, got {v!r}")
        if not math.isfinite(v) or v != int(v):
            raise IdauditError(f"{what}: latent indices must be integers, got {v!r}")
        i = int(v)
        if i < 0:
            raise IdauditError(f"{what}: latent indices must be ≥ 0, got {i}")
        if i in out:
            raise IdauditError(f"{what}: latent index {i} is given twice")
        out.append(i)
    return tuple(out)
