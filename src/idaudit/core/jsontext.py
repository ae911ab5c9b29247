"""JSON text: read from users and files with bounded nesting (one place for every JSON input),
and written as idaudit writes it (NaN and ±inf as null, atomically)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from idaudit.core.atomic import atomic_write
from idaudit.core.errors import IdauditError
from idaudit.core.errors import first_line as _first_line

__all__ = ["MAX_TEXT_INPUT", "json_text", "jsonable", "parse_json_object", "write_json"]

MAX_TEXT_INPUT = 1 << 20  # gate and suite files larger than 1 MiB are refused
MAX_DEPTH = 100  # levels of [ or {: deeper would exhaust Python's recursion limit downstream


def parse_json_object(text: str | None, flag: str) -> dict[str, Any] | None:
    """``text`` (None stays None) as a JSON object, or a one-line error naming ``flag``: text
    that is not JSON, JSON that is not an object, or nesting deeper than 100 levels (which
    would otherwise exhaust Python's recursion limit here or wherever the value goes next).
    Every JSON text idaudit reads comes through here: --arch-kwargs, --encoder-kwargs,
    checkpoint and pairs-file metadata, a dataset's meta.json, sweep run records."""
    if text is None:
        return None
    limit = MAX_DEPTH
    deep = f"{flag} is nested too deeply (more than {limit} levels of [ or {{)"
    if not isinstance(text, str):
        raise IdauditError(f"{flag} must be JSON text, got {type(text).__name__}")
    try:
        value = json.loads(text)
    except RecursionError:
        raise IdauditError(deep) from None
    except ValueError as exc:
        raise IdauditError(f"{flag} is not valid JSON ({_first_line(exc)})") from None
    if not isinstance(value, dict):
        raise IdauditError(f"{flag} must be a JSON object, got {type(value).__name__}")
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise IdauditError(deep)
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return value


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


def json_text(data: Any) -> str:
    """The JSON idaudit writes: NaN and ±inf as null (:func:`jsonable`), indented, one line
    break at the end."""
    return json.dumps(jsonable(data), indent=2, sort_keys=False, allow_nan=False) + "\n"


def write_json(path: str | Path, data: Any) -> Path:
    text = json_text(data)

    def write(tmp: str) -> None:
        Path(tmp).write_text(text)

    return atomic_write(path, write)
