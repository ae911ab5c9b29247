"""TOML files from users (gate and suite files), read with a size bound."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from idaudit.core.errors import IdauditError, first_line
from idaudit.core.jsontext import MAX_TEXT_INPUT

__all__ = ["load_toml"]


def load_toml(path: str | Path, kind: str) -> dict[str, Any]:
    """Parse a TOML file; a missing or malformed file is a one-line input error naming ``kind``."""
    import tomllib

    path = Path(path)
    if not path.exists():
        raise IdauditError(f"{kind} file not found: {path}")
    if not path.is_file():
        raise IdauditError(f"{kind} file {path} is not a regular file")
    try:
        if path.stat().st_size > MAX_TEXT_INPUT:
            raise IdauditError(f"{kind} file {path} is larger than 1 MiB; not a {kind} file")
        return tomllib.loads(path.read_text())
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise IdauditError(f"{kind} file {path} is nested too deeply to be a {kind} file") \
            from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise IdauditError(f"{kind} file {path} is not valid TOML ({first_line(exc)})") from None
    except OSError as exc:
        raise IdauditError(f"cannot read {kind} file {path} ({exc.strerror or exc})") from None
