"""Targets given as URIs (``s3://bucket/sweep/checkpoints/ID.safetensors``), fetched to this
machine for the commands that read them (``idaudit audit``)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["fetched"]


@contextlib.contextmanager
def fetched(targets: list[str]) -> Iterator[list[Path]]:
    """``targets`` as paths on this machine: each URI downloaded (with the ``.log.json``
    beside a checkpoint, where the store has one) into a private temporary directory,
    removed on the way out; paths as given. The files are read afterwards under the same
    rules as any local file (safetensors, or torch.load with weights_only).

    Args:
        targets: the command's targets, paths or URIs.

    Returns:
        A context giving the local paths, in order.
    """
    from idaudit.core.errors import IdauditError
    from idaudit.core.storage import is_uri, open_store

    if not any(is_uri(t) for t in targets):
        yield [Path(t) for t in targets]
        return
    with tempfile.TemporaryDirectory(prefix="idaudit-fetched-") as tmp:
        local: list[Path] = []
        for i, target in enumerate(targets):
            if not is_uri(target):
                local.append(Path(target))
                continue
            parent, _, name = target.rstrip("/").rpartition("/")
            if not name or parent.endswith(":/"):
                raise IdauditError(f"{target}: a URI of a file (PROTOCOL://bucket/path/FILE)")
            store = open_store(parent, "the target")
            dest = Path(tmp) / str(i) / "file" / name
            try:
                store.download(name, dest)
            except FileNotFoundError:
                raise IdauditError(f"{target}: no such file") from None
            if name.endswith(".safetensors"):  # its training log, read beside it
                log = name.removesuffix(".safetensors") + ".log.json"
                with contextlib.suppress(FileNotFoundError):
                    store.download(log, dest.parent / log)
                _fetch_dataset(parent, dest)
            local.append(dest)
        yield local


def _fetch_dataset(parent: str, checkpoint: Path) -> None:
    """The dataset an idaudit checkpoint fetched from the directory URI ``parent`` names
    relative to itself (``world.extra.data``: ``../data/NAME`` in a sweep's OUT), fetched
    beside it at the same relative place, where the store has it; a checkpoint that names
    none, or one outside the fetch's own folder, is left as it is (audit then says to pass
    --data)."""
    import json
    import posixpath

    from idaudit.core.errors import IdauditError
    from idaudit.core.metadata import read_metadata
    from idaudit.core.storage import open_store

    try:
        world = json.loads(read_metadata(checkpoint).get("world") or "{}")
        rel = world.get("extra", {}).get("data")
    except (IdauditError, ValueError, AttributeError):
        return
    if not isinstance(rel, str) or not rel or posixpath.isabs(rel):
        return
    scheme, _, path = parent.partition("://")
    full = posixpath.normpath(posixpath.join(path, rel))
    local = (checkpoint.parent / rel).resolve()
    top = checkpoint.parent.parent.resolve()  # the fetch's own folder (the tmp/i/)
    if not local.is_relative_to(top) or local == top or "/" not in full:
        return
    folder, _, name = full.rpartition("/")
    with contextlib.suppress(FileNotFoundError):
        open_store(f"{scheme}://{folder}", "the target").download(name, local)
