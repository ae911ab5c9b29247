"""What a target is, from its bytes (never its name): :func:`sniff`, and the one enumeration
of file kinds (:class:`FileKind`) that :func:`idaudit.loading.loaders.open_target` dispatches on."""

from __future__ import annotations

import zipfile
from enum import StrEnum
from pathlib import Path

from idaudit.core.errors import IdauditError


def sniff(path: Path) -> str:
    """What a file holds, from its bytes (never its name): ``npz``, ``npy``, ``safetensors``,
    ``torchscript``, ``export`` (torch.export), ``pickle`` (torch.save), or ``unknown``."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as exc:
        raise IdauditError(f"cannot read {path} ({exc.strerror})") from None
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if head.startswith(b"PK\x03\x04"):
        try:
            with zipfile.ZipFile(path) as z:
                names = z.namelist()
        except (zipfile.BadZipFile, OSError):
            return "unknown"
        if names and all(n.endswith(".npy") for n in names):
            return "npz"
        # TorchScript: ARCHIVE/code/… (the archive's own name may be "code": torch.save of
        # code.pt writes code/data.pkl, which is no TorchScript)
        if any(n.partition("/")[2].startswith("code/") for n in names):
            return "torchscript"
        if any(n.endswith("archive_format") for n in names):
            return "export"
        if any(n.endswith("data.pkl") for n in names):
            return "pickle"
        return "unknown"
    if len(head) >= 9:
        n = int.from_bytes(head[:8], "little")
        if 0 < n < 100_000_000 and head[8:9] == b"{":  # truncated files too: read_metadata
            return "safetensors"                       # says what is wrong with them
    if head[:1] == b"\x80":
        return "pickle"
    return "unknown"


class FileKind(StrEnum):
    """What a target is, from its bytes (never its name; :func:`sniff`), or a model
    directory: the one enumeration :func:`open_target` dispatches on."""

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
        from idaudit.loading.architectures import model_dir_kind

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
