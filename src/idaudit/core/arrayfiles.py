"""Named arrays in files: ``.npz``, a folder of ``.npy`` files, safetensors and HDF5.

Each array's shape and dtype are read from the file's headers first and checked (elements,
and the memory reading them takes) before any array is read; arrays are then memory-mapped
where the format allows (a folder's ``.npy`` files, large uncompressed ``.npz`` members,
safetensors tensors) or left lazy (HDF5 datasets, read as rows are indexed) and read otherwise
(compressed ``.npz`` members). Array files of embeddings (``loading/arrays.py``) and a user's
recorded world (``worlds/recorded.py``) read through here.

Example:
    >>> import tempfile, numpy as np
    >>> from pathlib import Path
    >>> d = Path(tempfile.mkdtemp())
    >>> np.savez(d / "a.npz", z=np.zeros((3, 2)), x=np.ones((3, 4)))
    >>> {k: v.shape for k, v in sorted(read_arrays(d / "a.npz").items())}
    {'x': (3, 4), 'z': (3, 2)}
"""

from __future__ import annotations

import math
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from idaudit.core.errors import IdauditError, first_line
from idaudit.core.limits import check_elements
from idaudit.core.npzfiles import ZIP_MAGIC, Check, Declared, Entry, npy_header, npz_declared, read_npz

__all__ = ["ARRAY_FILE_FORMS", "NUMPY_SAFETENSORS_DTYPES", "Declared", "array_file_kind",
           "array_names", "check_arrays_fit", "npz_declared", "read_arrays", "read_npz",
           "safetensors_declared", "safetensors_dtypes"]

#: the forms :func:`read_arrays` reads, as messages name them
ARRAY_FILE_FORMS = (".npz, a folder of .npy files, .safetensors, HDF5 (.h5, needs h5py) or a "
                    "stable-worldmodel folder dataset")


_HDF5 = b"\x89HDF\r\n\x1a\n"


def array_file_kind(path: str | Path) -> str | None:
    """``npz``, ``npy`` (a folder holding ``.npy`` files), ``swm-folder`` (stable-worldmodel's
    folder format: :mod:`idaudit.core.swm_folder`), ``safetensors`` or ``hdf5`` from the bytes
    of ``path`` (a folder: the files it holds; never its name), or None for anything else."""
    from idaudit.core.swm_folder import is_swm_folder

    path = Path(path)
    if path.is_dir():
        if is_swm_folder(path):
            return "swm-folder"
        return "npy" if any(path.glob("*.npy")) else None
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return None
    if head.startswith(ZIP_MAGIC):
        return "npz"
    if head.startswith(_HDF5):
        return "hdf5"
    if len(head) > 8 and 0 < int.from_bytes(head[:8], "little") < 100_000_000 and \
            head[8:9] == b"{":
        return "safetensors"
    return None


def check_arrays_fit(source: str) -> Check:
    """The default check: each declared shape within the element limit, and the bytes reading
    them within the memory left (one line, exit 2, naming ``source``)."""
    def check(declared: Declared, read: int) -> None:
        from idaudit.core.memory import check_memory

        for name, (shape, _) in declared.items():
            check_elements(shape, f"{source}: array {name!r}")
        check_memory(read, f"{source}: reading its arrays", bound="up to ")
    return check


# ---- safetensors -------------------------------------------------------------------------

#: safetensors' dtypes numpy has (bfloat16 as float16: both two-byte floats)
SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "float16",
                      "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8",
                      "U64": "uint64", "U32": "uint32", "U16": "uint16", "U8": "uint8",
                      "BOOL": "bool"}
#: the safetensors dtypes numpy reads as they are (it has no bfloat16)
NUMPY_SAFETENSORS_DTYPES = frozenset(SAFETENSORS_DTYPES) - {"BF16"}


def _safetensors_header(path: Path) -> tuple[dict[str, Any], int] | None:
    """(the JSON header, its size in bytes) of a safetensors file, or None."""
    from idaudit.core.jsontext import parse_json_object

    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = parse_json_object(f.read(n).decode(), f"the header of {path}") \
                if 0 < n < 100_000_000 else None
    except (OSError, ValueError, IdauditError):  # UnicodeDecodeError is a ValueError
        return None
    return None if header is None else (header, n)


def safetensors_dtypes(path: Path) -> set[str] | None:
    """The dtype names (``"F32"``, ``"BF16"``, …) a safetensors header declares, read without
    mapping the file; None where the header is not one.

    Example:
        >>> safetensors_dtypes(Path("no-such-file.safetensors")) is None
        True
    """
    found = _safetensors_header(path)
    if found is None:
        return None
    entries = [e for k, e in found[0].items() if k != "__metadata__"]
    if not all(isinstance(e, dict) and isinstance(e.get("dtype"), str) for e in entries):
        return None
    return {e["dtype"] for e in entries}


def safetensors_declared(path: Path) -> tuple[dict[str, str], Declared, int] | None:
    """(metadata, each tensor's shape and dtype, the bytes reading its tensors takes: its data
    section, which safetensors checks they cover) from a safetensors header, read without
    mapping the file; None where the header is not one (safetensors' reading says why)."""
    found = _safetensors_header(path)
    if found is None:
        return None
    header, n = found
    data = path.stat().st_size - 8 - n
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict):
        return None
    declared: dict[str, Entry] = {}
    for name, entry in header.items():
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            return None
        kind = SAFETENSORS_DTYPES.get(entry.get("dtype"))
        declared[name] = tuple(shape), None if kind is None else np.dtype(kind)
    return meta, declared, max(data, 0)


def _mapped_safetensors(path: Path, check: Check, names: Iterable[str] | None
                        ) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file as read-only memory maps (little-endian, as the
    format stores them); bfloat16, which numpy lacks, is refused."""
    found = _safetensors_header(path)
    if found is None:
        raise IdauditError(f"cannot read {path} as safetensors (its header is not one)")
    header, n = found
    header.pop("__metadata__", None)
    wanted = set(header) if names is None else set(names) & set(header)
    declared: dict[str, Entry] = {}
    size = path.stat().st_size
    for name in wanted:
        entry = header[name]
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        dtype = entry.get("dtype")
        if dtype == "BF16" or dtype not in SAFETENSORS_DTYPES:
            raise IdauditError(f"{path}: tensor {name!r} is {dtype}, which numpy cannot map; "
                               "store it as float32")
        if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
                and isinstance(offsets, list) and len(offsets) == 2
                and all(type(o) is int for o in offsets)):
            raise IdauditError(f"{path}: tensor {name!r} has a malformed header entry")
        kind = np.dtype(SAFETENSORS_DTYPES[dtype]).newbyteorder("<")
        if offsets[1] - offsets[0] != math.prod(shape) * kind.itemsize or \
                8 + n + offsets[1] > size or offsets[0] < 0:
            raise IdauditError(f"{path}: tensor {name!r} does not lie inside the file as its "
                               "header says")
        declared[name] = tuple(shape), kind
    check(declared, 0)
    out = {}
    for name, (shape, kind) in declared.items():
        start = 8 + n + header[name]["data_offsets"][0]
        out[name] = np.memmap(path, dtype=kind, mode="r", offset=start, shape=shape) \
            if math.prod(shape) else np.zeros(shape, kind)
    return out


# ---- a folder of .npy files, HDF5 ----------------------------------------------------------

def _npy_folder(path: Path, check: Check, names: Iterable[str] | None) -> dict[str, np.ndarray]:
    """A folder's ``NAME.npy`` files, each memory-mapped once its header passes ``check``."""
    files = {p.stem: p for p in sorted(path.glob("*.npy"))}
    wanted = files if names is None else {k: files[k] for k in names if k in files}
    declared: dict[str, Entry] = {}
    for name, p in wanted.items():
        with open(p, "rb") as f:
            header = npy_header(f)
        if header is None or header[2].hasobject:
            raise IdauditError(f"{p} is not a .npy array of numbers")
        declared[name] = tuple(header[0]), header[2]
    check(declared, 0)
    return {name: np.load(p, mmap_mode="r", allow_pickle=False) for name, p in wanted.items()}


def _hdf5(path: Path, check: Check, names: Iterable[str] | None) -> dict[str, Any]:
    """An HDF5 file's datasets (``names``: paths inside it, ``group/name``), lazy: rows are
    read when indexed. Needs h5py (the ``hdf5`` extra)."""
    try:
        import h5py
    except ImportError:
        raise IdauditError(f"{path} is HDF5: reading it needs h5py (pip install "
                           "'idaudit[hdf5]')") from None
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise IdauditError(f"cannot read {path} as HDF5 ({first_line(exc)})") from None
    found: dict[str, Any] = {}

    def visit(name: str, obj: Any) -> None:  # a value returned would stop the visit
        if isinstance(obj, h5py.Dataset):
            found[name] = obj

    f.visititems(visit)
    wanted = found if names is None else {k: found[k] for k in names if k in found}
    declared = {k: (tuple(d.shape), d.dtype) for k, d in wanted.items()}
    check(declared, 0)
    return dict(wanted)


class _Listed(Exception):
    """Raised by :func:`array_names`' check: the names, with nothing read."""

    def __init__(self, names: list[str]) -> None:
        super().__init__()
        self.names = names


def array_names(path: str | Path) -> list[str]:
    """The names of the arrays ``path`` holds, sorted, from its headers alone (no array read).

    Example:
        >>> import tempfile, numpy as np
        >>> from pathlib import Path
        >>> d = Path(tempfile.mkdtemp())
        >>> np.savez(d / "a.npz", z=np.zeros(3), x=np.ones(2))
        >>> array_names(d / "a.npz")
        ['x', 'z']
    """
    def listed(declared: Declared, read: int) -> None:
        raise _Listed(sorted(declared))

    try:
        read_arrays(path, check=listed)
    except _Listed as found:
        return found.names
    return []


def read_arrays(path: str | Path, names: Iterable[str] | None = None,
                check: Check | None = None) -> dict[str, Any]:
    """The named arrays of ``path`` (``names``: only these, where the file has them; None: all).

    Args:
        path: an ``.npz``, a folder of ``.npy`` files, a safetensors or an HDF5 file (told
            apart by their bytes), or a stable-worldmodel folder dataset (by its files).
        names: the arrays wanted; the others are neither checked nor read.
        check: called with the declared shapes and dtypes and the bytes reading takes before
            anything is read (default :func:`check_arrays_fit`).

    Returns:
        name → array: numpy arrays (memory maps where the format allows), HDF5 datasets
        (lazy; index them with sorted rows) or JPEG frames (lazy, decoded as indexed).

    Example:
        >>> import tempfile, numpy as np
        >>> from pathlib import Path
        >>> d = Path(tempfile.mkdtemp())
        >>> np.save(d / "z.npy", np.arange(6.0).reshape(3, 2))
        >>> read_arrays(d)["z"][2].tolist()
        [4.0, 5.0]
    """
    path = Path(path)
    check = check or check_arrays_fit(str(path))
    kind = array_file_kind(path)
    try:
        if kind == "npz":
            return read_npz(path, check, names)
        if kind == "npy":
            return _npy_folder(path, check, names)
        if kind == "safetensors":
            return _mapped_safetensors(path, check, names)
        if kind == "hdf5":
            return _hdf5(path, check, names)
        if kind == "swm-folder":
            from idaudit.core.swm_folder import read_swm_folder

            return read_swm_folder(path, check, names)
    except IdauditError:
        raise
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise IdauditError(f"cannot read {path} as {kind} ({first_line(exc)})") from None
    if not path.exists():
        raise IdauditError(f"not found: {path}")
    raise IdauditError(f"{path} is not an array file: {ARRAY_FILE_FORMS}")
