"""``idaudit world``: write a world's positive pairs (z, z′, x, x′) as a dataset.

One function, :func:`write_world`, takes a :class:`~idaudit.core.requests.WorldRequest` or its
options as keywords; the CLI and ``idaudit.write_world`` are both it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from idaudit.core.errors import IdauditError, check_seed
from idaudit.core.outputs import check_outputs
from idaudit.core.requests import WorldRequest, unknown_options

__all__ = ["write_world"]


def write_world(request: WorldRequest | str | None = None, /, *, progress: bool = False,
                **options: Any) -> str:
    """Write a world's pairs as ``idaudit world`` does: ``request`` a
    :class:`~idaudit.core.requests.WorldRequest`, or the world's name with its options as
    keywords (``write_world("banana", rho=0.7, pairs=300, out="p.safetensors")``). Writes
    ``pairs`` pairs to ``out`` (a ``.safetensors`` file, or a directory for Reacher, whose
    rendering resumes after an interruption); returns a one-line summary. Bad input raises
    :class:`~idaudit.core.errors.IdauditError` before any work, the output's writability
    included."""
    if isinstance(request, WorldRequest):
        if options:
            raise IdauditError("give a WorldRequest alone, or options, not both")
        req = request
    else:
        unknown_options(WorldRequest, options, "write_world")
        if request is not None and options.get("world") not in (None, request):
            raise IdauditError(f"two worlds given: {request!r} and --world {options['world']!r}")
        options["world"] = request or options.get("world")
        req = WorldRequest(**options)
    from idaudit.core.limits import check
    from idaudit.worlds import KINDS, make_spec
    from idaudit.worlds.kind import not_writable

    check("pairs", req.pairs)
    if req.out is None:
        raise IdauditError("--out is required: the file (or Reacher directory) to write")
    check_seed(req.seed, "--seed")
    if isinstance(req.world, str) and req.world in KINDS and not KINDS.get(req.world).writes:
        raise not_writable(req.world)  # before anything is read, collected or rendered
    spec = make_spec(req.world, **req.world_options())
    kind = KINDS.get(spec.name)
    out = Path(req.out)
    check_outputs([(out, "--out")], directory=kind.writes_directory)
    return kind.write(spec, out, req.pairs, req.seed, req.workers, progress=progress)
