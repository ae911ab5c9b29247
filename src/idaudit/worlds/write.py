"""``idaudit world``: write a world's positive pairs (z, z′, x, x′) as a dataset.

One function, :func:`write_world`, takes a :class:`~idaudit.core.requests.WorldRequest`; the
CLI and :func:`world` (its keyword form) both call it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from idaudit.core.errors import IdauditError, check_seed
from idaudit.core.outputs import check_outputs
from idaudit.core.requests import WorldRequest, unknown_options


def write_world(req: WorldRequest, progress: bool = False) -> str:
    """Write ``req.pairs`` pairs of the requested world to ``req.out`` (a ``.safetensors``
    file, or a directory for Reacher, whose rendering resumes after an interruption); return
    a one-line summary. Bad input raises :class:`~idaudit.core.errors.IdauditError` before any
    work, the output's writability included."""
    from idaudit.core.limits import check
    from idaudit.worlds import KINDS, make_spec

    check("pairs", req.pairs)
    if req.out is None:
        raise IdauditError("--out is required: the file (or Reacher directory) to write")
    check_seed(req.seed, "--seed")
    spec = make_spec(req.world, **req.world_options())
    kind = KINDS.get(spec.name)
    out = Path(req.out)
    check_outputs([(out, "--out")], directory=kind.writes_directory)
    return kind.write(spec, out, req.pairs, req.seed, req.workers, progress=progress)


def world(name: str | None = None, *, progress: bool = False, **options: Any) -> str:
    """Write a world's pairs as ``idaudit world`` does, with its options as keywords (see
    :class:`~idaudit.core.requests.WorldRequest`); return the one-line summary."""
    unknown_options(WorldRequest, options, "world")
    if name is not None and options.get("world") not in (None, name):
        raise IdauditError(f"two worlds given: {name!r} and --world {options['world']!r}")
    options["world"] = name or options.get("world")
    return write_world(WorldRequest(**options), progress=progress)
