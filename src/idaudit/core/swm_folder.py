"""stable-worldmodel's ``folder`` dataset format, read as named arrays.

``World.collect(path, format="folder")`` writes a directory holding ``ep_len.npz`` and
``ep_offset.npz`` (each episode's length and first row), one ``<column>.npz`` per numeric
column (its one array stored as ``arr_0``) and, per image column, a folder of JPEG frames
``<column>/ep_<e>_step_<j>.jpeg`` (``j`` counting from 0 inside episode ``e``). Here the
columns are read as :func:`idaudit.core.arrayfiles.read_arrays` reads any array file: the
``.npz`` columns after their headers are checked, the frames lazily (:class:`JpegFrames`: a
rows × H × W × 3 uint8 array-like that decodes the rows it is indexed with, with Pillow).

Example:
    >>> import tempfile, numpy as np
    >>> from pathlib import Path
    >>> d = Path(tempfile.mkdtemp())
    >>> for name, a in (("ep_len", [2]), ("ep_offset", [0]), ("qpos", np.zeros((2, 2)))):
    ...     np.savez(d / f"{name}.npz", np.asarray(a))
    >>> is_swm_folder(d), sorted(read_swm_folder(d, lambda declared, read: None))
    (True, ['ep_len', 'ep_offset', 'qpos'])
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from idaudit.core.errors import IdauditError, first_line
from idaudit.core.npzfiles import npz_declared

__all__ = ["JPEG_EXTRA", "JpegFrames", "is_swm_folder", "read_swm_folder"]

#: the files that make a directory stable-worldmodel's folder format
MARKERS = ("ep_len.npz", "ep_offset.npz")
#: what to install for the JPEG frames (Pillow is not a base dependency of idaudit)
JPEG_EXTRA = "pip install 'idaudit[swm]'"
_FRAME = re.compile(r"ep_(\d+)_step_(\d+)\.jpe?g")


def is_swm_folder(path: str | Path) -> bool:
    """Whether ``path`` is a directory in stable-worldmodel's folder format (it holds
    ``ep_len.npz`` and ``ep_offset.npz``)."""
    path = Path(path)
    return path.is_dir() and all((path / m).is_file() for m in MARKERS)


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError:
        raise IdauditError(f"stable-worldmodel's folder format stores frames as JPEG: reading "
                           f"them needs Pillow ({JPEG_EXTRA})") from None
    return Image


class JpegFrames:
    """The JPEG frames of one image column, as a rows × H × W × 3 uint8 array-like whose rows
    are decoded when indexed (an int, a slice or integer rows).

    Args:
        files: each row's file, in row order.
        shape: (rows, H, W, 3), read from the first frame.
    """

    dtype = np.dtype(np.uint8)

    def __init__(self, files: list[Path], shape: tuple[int, ...]) -> None:
        self.files, self.shape = files, shape

    def __len__(self) -> int:
        return len(self.files)

    def _decode(self, i: int) -> np.ndarray:
        image = _pillow()
        path = self.files[i]
        try:
            with image.open(path) as im:
                a = np.asarray(im.convert("RGB"))
        except (OSError, ValueError) as exc:
            raise IdauditError(f"cannot read the frame {path} ({first_line(exc)})") from None
        if a.shape != self.shape[1:]:
            raise IdauditError(f"the frame {path} is {a.shape[1]}×{a.shape[0]}, the first "
                               f"frame {self.shape[2]}×{self.shape[1]}: every frame of a "
                               "column must have one size")
        return a

    def __getitem__(self, index: Any) -> np.ndarray:
        if isinstance(index, (int, np.integer)):
            return self._decode(int(index))
        rows = np.arange(len(self))[index] if isinstance(index, slice) else \
            np.asarray(index).reshape(-1)
        out = np.empty((len(rows), *self.shape[1:]), np.uint8)
        for k, i in enumerate(rows):
            out[k] = self._decode(int(i))
        return out


def _column(path: Path) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of a column's ``arr_0`` from its ``.npy`` header, nothing read."""
    with zipfile.ZipFile(path) as zf:
        declared, _ = npz_declared(zf, ["arr_0"])
    if "arr_0" not in declared:
        raise IdauditError(f"{path} holds no array arr_0 (stable-worldmodel's folder format "
                           "stores each column as arr_0)")
    shape, dtype = declared["arr_0"]
    if dtype is None or dtype.hasobject:
        raise IdauditError(f"{path}: arr_0 is not an array of numbers")
    return shape, dtype


def _frames(folder: Path, lengths: np.ndarray) -> JpegFrames:
    """The frames of the image column ``folder``, each episode's steps in order; a missing
    frame refused in one line."""
    files = []
    for e, n in enumerate(lengths):
        for j in range(int(n)):
            f = folder / f"ep_{e}_step_{j}.jpeg"
            if not f.is_file():
                raise IdauditError(f"{folder}: the frame ep_{e}_step_{j}.jpeg is missing "
                                   f"(episode {e} has {int(n)} steps by ep_len.npz)")
            files.append(f)
    image = _pillow()
    try:
        with image.open(files[0]) as im:
            w, h = im.size
    except (OSError, ValueError) as exc:
        raise IdauditError(f"cannot read the frame {files[0]} ({first_line(exc)})") from None
    return JpegFrames(files, (len(files), h, w, 3))


def read_swm_folder(path: str | Path, check: Callable[[Any, int], None],
                    names: Iterable[str] | None = None) -> dict[str, Any]:
    """The columns of a stable-worldmodel folder dataset (``names``: only these; None: all).

    Args:
        path: the directory (:func:`is_swm_folder`).
        check: called with every wanted column's declared (shape, dtype) and the bytes reading
            the ``.npz`` columns takes, before any is read (frames are decoded lazily).
        names: the columns wanted; ``ep_len`` and ``ep_offset`` are read whenever frames are.

    Returns:
        column → array: numpy arrays for the ``.npz`` columns, :class:`JpegFrames` for image
        folders (rows in the order of ``ep_offset``'s episodes).
    """
    path = Path(path)
    npz = {p.stem: p for p in sorted(path.glob("*.npz"))}
    folders = {p.name: p for p in sorted(path.iterdir())
               if p.is_dir() and any(_FRAME.fullmatch(f.name) for f in p.iterdir())}
    wanted = set(npz) | set(folders) if names is None else set(names)
    declared = {k: _column(p) for k, p in npz.items() if k in wanted or k in MARKERS}
    check({k: v for k, v in declared.items() if k in wanted},
          sum(int(np.prod(s)) * d.itemsize for s, d in declared.values()))
    try:
        out: dict[str, Any] = {k: np.load(p, allow_pickle=False)["arr_0"]
                               for k, p in npz.items() if k in declared}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise IdauditError(f"cannot read {path} as stable-worldmodel's folder format "
                           f"({first_line(exc)})") from None
    lengths, offsets = out["ep_len"].reshape(-1), out["ep_offset"].reshape(-1)
    if len(lengths) != len(offsets) or (len(lengths) and not (
            np.array_equal(offsets, np.r_[0, np.cumsum(lengths)[:-1]]) and (lengths > 0).all())):
        raise IdauditError(f"{path}: ep_offset.npz and ep_len.npz must give each episode's "
                           "first row and length, episode after episode")
    for k, f in folders.items():
        if k in wanted:
            out[k] = _frames(f, lengths)
    return {k: v for k, v in out.items() if k in wanted}
