"""Arrays in ``.npz`` files (a zip of ``.npy`` members), read header first.

Each member's shape and dtype come from its ``.npy`` header (:func:`npz_declared`) and are
checked before anything is read; large uncompressed members are then memory-mapped, the others
read (:func:`read_npz`). :mod:`idaudit.core.arrayfiles` reads every array-file form through
this for ``.npz``, and :mod:`idaudit.core.swm_folder` for stable-worldmodel's column files.

Example:
    >>> import tempfile, zipfile, numpy as np
    >>> from pathlib import Path
    >>> path = Path(tempfile.mkdtemp()) / "a.npz"
    >>> np.savez(path, z=np.zeros((3, 2)))
    >>> with zipfile.ZipFile(path) as zf:
    ...     npz_declared(zf)[0]["z"][0]
    (3, 2)
"""

from __future__ import annotations

import math
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Check", "Declared", "Entry", "ZIP_MAGIC", "npy_header", "npz_declared", "read_npz"]

Entry = tuple[tuple[int, ...], np.dtype | None]  # a shape and a dtype (None: none numpy has)
#: a file's arrays as their headers declare them: name → (shape, dtype)
Declared = Mapping[str, Entry]
#: what is checked before arrays are read: (declared, the bytes reading them takes) → None
Check = Callable[[Declared, int], None]

#: the first bytes of a zip file (an ``.npz``)
ZIP_MAGIC = b"PK\x03\x04"


def npy_header(f: Any) -> tuple[tuple[int, ...], bool, np.dtype] | None:
    """(shape, fortran order, dtype) from the header of a ``.npy`` stream, or None."""
    try:
        version = np.lib.format.read_magic(f)
        read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                       (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        return None if read_header is None else read_header(f)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile):
        return None


def _mapped(info: zipfile.ZipInfo, header_bytes: int, header: tuple[Any, bool, np.dtype]
            ) -> bool:
    """Whether a ``.npy`` member of a zip is memory-mapped rather than read: large,
    uncompressed (as ``numpy.savez`` writes) and holding exactly what its header declares."""
    shape, _, dtype = header
    return info.compress_type == zipfile.ZIP_STORED and info.file_size >= (1 << 20) and \
        not dtype.hasobject and header_bytes + math.prod(shape) * dtype.itemsize == info.file_size


def _stored_npy(path: Path, info: zipfile.ZipInfo) -> np.ndarray | None:
    """A read-only memory map of a ``.npy`` member of a zip that :func:`_mapped` says is
    mapped, or None."""
    if info.compress_type != zipfile.ZIP_STORED or info.file_size < (1 << 20):
        return None
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        local = f.read(30)
        if len(local) < 30 or local[:4] != ZIP_MAGIC:
            return None
        start = info.header_offset + 30 + int.from_bytes(local[26:28], "little") + \
            int.from_bytes(local[28:30], "little")
        f.seek(start)
        header = npy_header(f)
        if header is None:
            return None
        shape, fortran, dtype = header
        offset = f.tell()
    if not _mapped(info, offset - start, header):
        return None
    mapped = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape,
                       order="F" if fortran else "C")
    return mapped.view(np.ndarray)


def npz_declared(zf: zipfile.ZipFile, names: Iterable[str] | None = None
                 ) -> tuple[dict[str, Entry], int]:
    """Each member's shape and dtype from its ``.npy`` header (only ``names`` where given), and
    the bytes reading them takes (all but the memory-mapped ones, :func:`_mapped`): so that a
    small file that declares or inflates to many GiB is refused before a member is read. A
    member whose header cannot be read is left out (numpy's reading it says what is wrong)."""
    wanted = None if names is None else set(names)
    declared: dict[str, Entry] = {}
    read = 0
    for info in zf.infolist():
        name = info.filename.removesuffix(".npy")
        if wanted is not None and name not in wanted:
            continue
        with zf.open(info) as member:
            header = npy_header(member)
            header_bytes = member.tell()
        if header is None:
            continue
        shape, _, dtype = header
        declared[name] = tuple(shape), dtype
        if not _mapped(info, header_bytes, header):
            read += math.prod(shape) * dtype.itemsize
    return declared, read


def read_npz(path: Path, check: Check, names: Iterable[str] | None = None
             ) -> dict[str, np.ndarray]:
    """The arrays of an .npz (only ``names`` where given), once their headers pass ``check``;
    large uncompressed members are memory-mapped (no copy into fresh memory), the others read."""
    out: dict[str, np.ndarray] = {}
    with np.load(path, allow_pickle=False) as f, zipfile.ZipFile(path) as zf:
        declared, read = npz_declared(zf, names)
        check(declared, read)
        for name in f.files:
            if names is not None and name not in declared:
                continue
            try:
                arr = _stored_npy(path, zf.getinfo(name + ".npy"))
            except (KeyError, ValueError, OSError):
                arr = None
            out[name] = f[name] if arr is None else arr
    return out
