"""What a target is, from its bytes (never its name): :func:`sniff`, which tries idaudit's own
file formats (:data:`idaudit.core.registered.FORMATS`, each a ``FileFormat`` whose ``sniff``
is one of the functions here) in their registered order, and :class:`FileKind`, their names,
that :func:`idaudit.loading.loaders.open_target` dispatches on."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from idaudit.core.errors import IdauditError
from idaudit.core.registered import FORMATS

if TYPE_CHECKING:
    from idaudit.core.registered import FileFormat

__all__ = ["FileKind", "file_format", "sniff", "sniff_export", "sniff_hf_dir", "sniff_lewm_dir", "sniff_npy",
           "sniff_npz", "sniff_safetensors", "sniff_torch_save", "sniff_torchscript"]

#: the bytes of a file its format's ``sniff`` reads (as plugins' are given)
HEAD = 64

_ZIP = b"PK\x03\x04"
_zip_seen: dict[tuple[str, int, int, int], list[str] | None] = {}


def _zip_names(path: Path, head: bytes) -> list[str] | None:
    """The member names of a zip file (None: not a zip, or an unreadable one), read once
    for the formats that ask in turn."""
    if not head.startswith(_ZIP):
        return None
    try:
        st = os.stat(path)
        key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        return None
    if key in (seen := dict(_zip_seen)):
        return seen[key]
    try:
        with zipfile.ZipFile(path) as z:
            names: list[str] | None = z.namelist()
    except (zipfile.BadZipFile, OSError):
        names = None
    _zip_seen.clear()  # one file at a time: its formats ask one after the other
    _zip_seen[key] = names
    return names


def sniff_npy(path: Path, head: bytes) -> bool:
    """A .npy array."""
    return head.startswith(b"\x93NUMPY")


def sniff_npz(path: Path, head: bytes) -> bool:
    """A zip of .npy arrays."""
    names = _zip_names(path, head)
    return bool(names) and all(n.endswith(".npy") for n in names or ())


def sniff_torchscript(path: Path, head: bytes) -> bool:
    """A zip holding ARCHIVE/code/… (the archive's own name may be "code": torch.save of
    code.pt writes code/data.pkl, which is no TorchScript)."""
    return any(n.partition("/")[2].startswith("code/") for n in _zip_names(path, head) or ())


def sniff_export(path: Path, head: bytes) -> bool:
    """A torch.export archive."""
    return any(n.endswith("archive_format") for n in _zip_names(path, head) or ())


def sniff_safetensors(path: Path, head: bytes) -> bool:
    """A header size then JSON (truncated files too: read_metadata says what is wrong with
    them); never a zip."""
    if len(head) < 9 or head.startswith(_ZIP):
        return False
    n = int.from_bytes(head[:8], "little")
    return 0 < n < 100_000_000 and head[8:9] == b"{"


def sniff_torch_save(path: Path, head: bytes) -> bool:
    """A torch.save zip (its data.pkl) or a legacy pickle."""
    if head.startswith(_ZIP):
        return any(n.endswith("data.pkl") for n in _zip_names(path, head) or ())
    return head[:1] == b"\x80"


def _model_dir(kind: str) -> Callable[[Path, bytes], bool]:
    def sniff_dir(path: Path, head: bytes) -> bool:
        from idaudit.loading.model_dirs import model_dir_kind

        return path.is_dir() and model_dir_kind(path) == kind

    sniff_dir.__doc__ = f"A {kind} model directory (a file is never one)."
    return sniff_dir


sniff_hf_dir = _model_dir("hf")
sniff_lewm_dir = _model_dir("lewm")


def sniff(path: Path) -> str:
    """What a file holds, from its bytes (never its name): the first of idaudit's own file
    formats whose ``sniff`` claims it (``safetensors``, ``npz``, ``npy``, ``torchscript``,
    ``export`` (torch.export), ``pickle`` (torch.save)), or ``unknown``."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD)
    except OSError as exc:
        raise IdauditError(f"cannot read {path} ({exc.strerror})") from None
    for name in FORMATS.builtin():
        if FORMATS.get(name).sniff(path, head):
            return name
    return "unknown"


def file_format(kind: FileKind) -> FileFormat | None:
    """The registered format of ``kind`` (None for ``unknown``)."""
    return None if kind is FileKind.UNKNOWN else FORMATS.get(kind.value)


class FileKind(StrEnum):
    """What a target is, from its bytes (never its name; :func:`sniff`), or a model
    directory: the names of idaudit's own formats in :data:`FORMATS` (a test checks they
    agree), and ``unknown``."""

    NPY = "npy"
    NPZ = "npz"
    SAFETENSORS = "safetensors"
    TORCH_SAVE = "pickle"
    TORCHSCRIPT = "torchscript"
    EXPORT = "export"
    HF_DIR = "hf_dir"
    LEWM_DIR = "lewm_dir"
    UNKNOWN = "unknown"


def _file_kind(target: str | Path) -> tuple[Path, FileKind]:
    """The path and what it holds: :func:`sniff` for a regular file (falling back on the name
    when the content is unreadable, so the named format's reader says what is wrong), or
    ``hf_dir`` / ``lewm_dir`` for a model directory."""
    path = Path(target)
    if not path.exists():
        raise IdauditError(f"not found: {path}")
    if path.is_dir():
        from idaudit.loading.model_dirs import model_dir_kind

        kind = model_dir_kind(path)
        if kind is None:
            raise IdauditError(f"{path} is a directory, not an encoder or array file (nor a model "
                               "directory: config.json with model.safetensors or "
                               "pytorch_model.bin, or with weights.pt and a _target_)")
        return path, FileKind(f"{kind}_dir")
    if not path.is_file():
        raise IdauditError(f"{path} is not a regular file")
    kind = FileKind(sniff(path))
    if kind is FileKind.UNKNOWN:
        kind = {".safetensors": FileKind.SAFETENSORS, ".npz": FileKind.NPZ}.get(
            path.suffix.lower(), kind)
    return path, kind
