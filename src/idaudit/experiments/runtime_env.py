"""A Ray runtime environment read from a file, for ``idaudit sweep --runtime-env FILE``.

The file holds what ``ray job submit --runtime-env`` takes — a JSON (``.json``) or YAML
(``.yaml``, ``.yml``) mapping of Ray's own keys (``py_modules``, ``pip``, ``uv``,
``env_vars``, ``working_dir``, ``image_uri`` …) — and the sweep passes it to ``ray.init``, so
every task of the sweep runs in it: a node without idaudit gets it from ``py_modules`` (the
driver's source, uploaded by Ray) or ``pip``. Relative local paths in it are Ray's to resolve:
against the directory the sweep is started from, as ``ray job submit`` does.

Example:
    >>> import json, tempfile
    >>> from pathlib import Path
    >>> f = Path(tempfile.mkdtemp()) / "env.json"
    >>> _ = f.write_text(json.dumps({"env_vars": {"MUJOCO_GL": "egl"}}))
    >>> read_runtime_env(f)
    {'env_vars': {'MUJOCO_GL': 'egl'}}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from idaudit.core.errors import IdauditError, one_line

__all__ = ["read_runtime_env"]

_FORMATS = {".json": "JSON", ".yaml": "YAML", ".yml": "YAML"}


def read_runtime_env(path: str | Path) -> dict[str, Any]:
    """The runtime environment in ``path``, checked as far as Ray checks one before a task
    starts: a mapping of Ray's known keys whose values Ray accepts.

    Args:
        path: a ``.json``, ``.yaml`` or ``.yml`` file.

    Returns:
        The mapping, as ``ray.init(runtime_env=...)`` takes it.

    Raises:
        IdauditError: (exit 2) the file is unreadable, not JSON/YAML, not a mapping, or names
            a key or value Ray does not accept — one line naming the file.
    """
    path = Path(path)
    where = f"--runtime-env {path}"
    kind = _FORMATS.get(path.suffix.lower())
    if kind is None:
        raise IdauditError(f"{where}: a runtime environment is a .json, .yaml or .yml file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise IdauditError(f"{where}: cannot read it ({getattr(exc, 'strerror', None) or exc})"
                           ) from None
    try:
        if kind == "JSON":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # json's and yaml's errors: either is bad input
        mark = getattr(exc, "problem_mark", None)  # yaml's: what and where, not its excerpt
        why = (f"{exc.problem} at line {mark.line + 1}" if mark is not None
               and getattr(exc, "problem", None) else str(exc))
        raise IdauditError(one_line(f"{where}: not {kind}: {why}", 300)) from None
    if not isinstance(data, dict):
        raise IdauditError(f"{where}: a runtime environment is a mapping of Ray's keys, got "
                           f"{type(data).__name__}")
    try:
        from ray.runtime_env import RuntimeEnv
    except ImportError:
        raise IdauditError('--runtime-env needs Ray: pip install "idaudit[ray]"') from None
    unknown = sorted(str(k) for k in data if k not in RuntimeEnv.known_fields)
    if unknown:
        known = ", ".join(sorted(k for k in RuntimeEnv.known_fields if not k.startswith("_")))
        raise IdauditError(one_line(f"{where}: unknown key(s) {', '.join(unknown)}; Ray knows "
                                    f"{known}", 400))
    try:
        RuntimeEnv(**data)
    except Exception as exc:  # Ray's own check of each value (TypeError, ValueError)
        raise IdauditError(one_line(f"{where}: {exc}", 300)) from None
    return data
