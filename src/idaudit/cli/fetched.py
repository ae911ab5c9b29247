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
            dest = Path(tmp) / str(i) / name
            try:
                store.download(name, dest)
            except FileNotFoundError:
                raise IdauditError(f"{target}: no such file") from None
            if name.endswith(".safetensors"):  # its training log, read beside it
                log = name.removesuffix(".safetensors") + ".log.json"
                with contextlib.suppress(FileNotFoundError):
                    store.download(log, dest.parent / log)
            local.append(dest)
        yield local
