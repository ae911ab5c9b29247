"""Atomic file writing: write to a temporary file beside the target, then rename."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def atomic_write(path: str | Path, write: Callable[[str], None]) -> Path:
    """Call ``write(tmp_path)`` then rename onto ``path``; nothing half-written is left."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def jsonable(obj: Any) -> Any:
    """Replace NaN/Inf with None and tensors/numpy scalars with Python numbers."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):
        return jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json(path: str | Path, data: Any) -> Path:
    text = json.dumps(jsonable(data), indent=2, sort_keys=False, allow_nan=False) + "\n"

    def write(tmp: str) -> None:
        Path(tmp).write_text(text)

    return atomic_write(path, write)


def load_toml(path: str | Path, kind: str) -> dict[str, Any]:
    """Parse a TOML file; a missing or malformed file is a one-line input error naming ``kind``."""
    import tomllib

    from .errors import IdauditError

    path = Path(path)
    if not path.exists():
        raise IdauditError(f"{kind} file not found: {path}")
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise IdauditError(f"{kind} file {path} is not valid TOML ({exc})") from None


def read_metadata(path: str | Path) -> dict[str, str]:
    """The raw metadata dict of a safetensors file (errors are one-line, exit 2)."""
    from safetensors import safe_open

    from .errors import IdauditError

    path = Path(path)
    if not path.exists():
        raise IdauditError(f"not found: {path}")
    if path.is_dir():
        raise IdauditError(f"path is a directory: {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            return dict(f.metadata() or {})
    except Exception as exc:  # safetensors raises several types for corrupt headers
        raise IdauditError(f"not a readable safetensors file: {path} ({first_line(exc)})") \
            from None


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
