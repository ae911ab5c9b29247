"""JSON text from users and files, read with bounded nesting: one place for every JSON input."""

from __future__ import annotations

import json
from typing import Any

from idaudit.core.errors import IdauditError
from idaudit.core.errors import first_line as _first_line

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
