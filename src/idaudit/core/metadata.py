"""Safetensors metadata: the raw metadata dict of a file, and the "format" values idaudit's own
files carry."""

from __future__ import annotations

from pathlib import Path

from idaudit.core.errors import IdauditError, first_line

__all__ = ["CHECKPOINT_FORMAT", "PAIRS_FORMAT", "is_checkpoint", "read_metadata"]

CHECKPOINT_FORMAT = "idaudit-checkpoint"  # safetensors metadata "format" of a checkpoint
PAIRS_FORMAT = "idaudit-world"  # … of a pairs file written by `idaudit world`


def read_metadata(path: str | Path) -> dict[str, str]:
    """The raw metadata dict of a safetensors file (errors are one-line, exit 2)."""
    from safetensors import safe_open

    path = Path(path)
    if not path.exists():
        raise IdauditError(f"not found: {path}")
    if path.is_dir():
        raise IdauditError(f"path is a directory: {path}")
    try:
        with safe_open(str(path), framework="numpy") as f:  # the header only: no torch
            return dict(f.metadata() or {})
    except Exception as exc:  # safetensors raises several types for corrupt headers
        raise IdauditError(f"not a readable safetensors file: {path} ({first_line(exc)})") \
            from None


def is_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` is a file whose safetensors header names idaudit's checkpoint format.

    Reads the header only (no tensor, no torch); any unreadable file is not a checkpoint.

    Args:
        path: any path.

    Returns:
        True for an idaudit checkpoint.

    Example:
        >>> is_checkpoint("no-such-file.safetensors")
        False
    """
    if not Path(path).is_file():
        return False
    try:
        return read_metadata(path).get("format") == CHECKPOINT_FORMAT
    except IdauditError:
        return False
