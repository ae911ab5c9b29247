"""What reading a ``torch.save`` file will allocate, found before ``torch.load`` reads it.

``torch.load`` allocates what the file declares: every zip member it reads at the size the zip
directory gives (``data.pkl`` and each ``data/KEY`` storage; a 3 MB deflated member may inflate
to GiBs), each storage at the ``numel`` its pickled persistent id declares (the legacy format
allocates it before reading a byte of it), arrays and buffers at the shapes their constructors
are given (numpy's ``_reconstruct``, ``_rebuild_qtensor``, ``bytearray(n)``), and the Python
objects the pickle builds, at most :data:`OBJECT_BYTES_PER_PICKLE_BYTE` bytes per pickle byte.
torch.save never compresses a member (:func:`compressed_members` finds those that are).

:func:`torch_file_bytes` adds these up from the zip directory and a *dry run* of the pickle: a
:class:`pickle.Unpickler` whose ``find_class`` returns inert stand-ins (:class:`_Stub`), so no
global of the file is imported or called; it only records what would be allocated. A file
whose storages declare more bytes than it holds is refused outright: torch writes every
storage whole. So is a tensor that declares more elements than its storage holds (the shape
and strides its ``_rebuild_tensor_v2`` call is given: a zero stride, as ``expand`` saves, or
overlapping ones), named by where it lies in the file: its shape says nothing of its data.
"""

from __future__ import annotations

import io
import math
import pickle
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from idaudit.core.errors import IdauditError, first_line
from idaudit.core.limits import check_view

__all__ = ["OBJECT_BYTES_PER_PICKLE_BYTE", "compressed_members", "torch_file_bytes"]

#: the memory the objects unpickled from one byte of pickle can take, at most: an empty set
#: (216 bytes) and its APPEND cost two bytes of pickle; torch's pure-Python unpickler adds its
#: stack and memo entries (tests/test_untrusted_sizes.py measures the worst pickles known)
OBJECT_BYTES_PER_PICKLE_BYTE = 256

#: bytes per element of torch's storage classes (pickled by name); unknown ones count 16
ELEMENT_BYTES = {"DoubleStorage": 8, "FloatStorage": 4, "HalfStorage": 2, "BFloat16Storage": 2,
                 "LongStorage": 8, "IntStorage": 4, "ShortStorage": 2, "CharStorage": 1,
                 "ByteStorage": 1, "BoolStorage": 1, "ComplexDoubleStorage": 16,
                 "ComplexFloatStorage": 8, "QInt8Storage": 1, "QUInt8Storage": 1,
                 "QInt32Storage": 4, "QUInt4x2Storage": 1, "QUInt2x4Storage": 1,
                 "UntypedStorage": 1, "Float8_e4m3fnStorage": 1, "Float8_e5m2Storage": 1}
MAX_ELEMENT_BYTES = 16
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


@dataclass
class _Scan:
    """What the dry run saw: storages (key → declared bytes), arrays/buffers (bytes) and the
    tensors built on storages (their rebuild calls, :class:`_Stub`)."""

    storages: dict[str, int] = field(default_factory=dict)
    buffers: int = 0
    tensors: list[_Stub] = field(default_factory=list)


def _shape(value: Any) -> tuple[int, ...] | None:
    """A pickled shape or stride (a tuple of ints, or a stand-in torch.Size holding one), or
    None when it is not one."""
    if isinstance(value, _Stub) and value.args:
        value = value.args[0]
    if isinstance(value, (tuple, list)) and all(type(d) is int for d in value):
        return tuple(value)
    return None


def _count(shape: Any) -> int:
    """The number of elements of a pickled shape; 0 when it is not a shape."""
    dims = _shape(shape)
    return 0 if dims is None else math.prod(max(d, 0) for d in dims)


_SHAPED = {  # global → which of its arguments is a shape (counted at MAX_ELEMENT_BYTES each)
    "numpy.core.multiarray._reconstruct": 1, "numpy._core.multiarray._reconstruct": 1,
    "torch._utils._rebuild_qtensor": 2,
}
#: torch's tensor constructors: (storage, storage offset, size, stride, …) each
_REBUILDS = ("torch._utils._rebuild_tensor", "torch._utils._rebuild_tensor_v2",
             "torch._utils._rebuild_tensor_v3")


class _Stub:
    """A pickled global, or what calling one gives, in the dry run: inert, accepts every
    operation a pickle can apply (call, ``__new__``, ``__setstate__``, items, appends)."""

    name = ""
    scan: _Scan
    args: tuple[Any, ...] = ()  # what it was called with (none where NEWOBJ made it)
    items: list[tuple[Any, Any]] | tuple[()] = ()  # what SETITEM(S) put in it (OrderedDict)
    elements: int | None = None  # a storage's, as its persistent id declares them

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args
        where = _SHAPED.get(self.name)
        if where is not None and len(args) > where:
            self.scan.buffers += _count(args[where]) * MAX_ELEMENT_BYTES
        elif self.name == "builtins.bytearray" and args and type(args[0]) is int:
            self.scan.buffers += max(args[0], 0)
        elif self.name in _REBUILDS and len(args) >= 4:
            self.scan.tensors.append(self)

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        self.__dict__.setdefault("items", []).append((key, value))

    def append(self, value: Any) -> None:
        pass

    def extend(self, values: Any) -> None:
        pass


class _DryRun(pickle.Unpickler):
    """Reads a pickle without importing or calling anything it names."""

    def __init__(self, f: Any, scan: _Scan) -> None:
        super().__init__(f)
        self.scan = scan

    def find_class(self, module: str, name: str) -> type:
        return type(name, (_Stub,), {"name": f"{module}.{name}", "scan": self.scan})

    def persistent_load(self, pid: Any) -> Any:
        # ('storage', storage class, key, location, numel[, view metadata]): zip and legacy
        if isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage" \
                and type(pid[4]) is int:
            cls = pid[1]
            size = ELEMENT_BYTES.get(cls.__name__, MAX_ELEMENT_BYTES) \
                if isinstance(cls, type) else MAX_ELEMENT_BYTES
            key = str(pid[2])
            self.scan.storages[key] = max(self.scan.storages.get(key, 0), max(pid[4], 0) * size)
            storage = _Stub()
            storage.elements = max(pid[4], 0)
            return storage
        return _Stub()


def _names(root: Any) -> dict[int, str]:
    """Where each object of a dry run's result lies (id → ``key.key…``, the keys of dicts and
    OrderedDicts, the indices of lists and tuples; a wrapper's arguments, as a parameter's
    tensor, share its name), found breadth first, each object once."""
    names: dict[int, str] = {}
    queue = [(root, "")]
    for obj, name in queue:
        if id(obj) in names:
            continue
        names[id(obj)] = name
        if isinstance(obj, dict):
            children = [(str(k), v) for k, v in obj.items()]
        elif isinstance(obj, (list, tuple)):
            children = [(str(i), v) for i, v in enumerate(obj)]
        elif isinstance(obj, _Stub):
            queue += [(v, name) for v in obj.args]
            children = [(str(k), v) for k, v in obj.items]
        else:
            continue
        queue += [(v, f"{name}.{k}" if name else k) for k, v in children]
    return names


def _check_views(scan: _Scan, root: Any, path: Path) -> None:
    """Refuse a tensor that declares more elements than its storage holds
    (:func:`~idaudit.core.limits.check_view`), named by where it lies in the file."""
    for t in scan.tensors:
        storage, size = t.args[0], _shape(t.args[2])
        if not isinstance(storage, _Stub) or storage.elements is None or size is None or \
                _count(size) <= storage.elements:
            continue  # what is no tensor on a storage, torch.load refuses itself
        name = _names(root).get(id(t))
        check_view(size, _shape(t.args[3]), storage.elements,
                   f"{path}: tensor {name!r}" if name else f"{path}: a tensor")


def _dry_run(f: Any, scan: _Scan, source: str) -> Any:
    try:
        return _DryRun(f, scan).load()
    except Exception as exc:  # a damaged pickle: torch.load fails on it as well
        raise IdauditError(f"cannot read {source} as a torch.save file ({type(exc).__name__}: "
                           f"{first_line(exc)})") from None


def _zip_bytes(zf: zipfile.ZipFile, path: Path, budget: int) -> int:
    infos = zf.infolist()
    pkl = [i for i in infos if i.filename.endswith("data.pkl")]
    if len(pkl) != 1:
        raise IdauditError(f"cannot read {path} as a torch.save file (it holds "
                           f"{len(pkl)} data.pkl members, not one)")
    prefix = pkl[0].filename[:-len("data.pkl")]
    objects = pkl[0].file_size * OBJECT_BYTES_PER_PICKLE_BYTE
    members = sum(i.file_size for i in infos)
    if objects + members > budget:
        return objects + members  # too big already: never inflate data.pkl to look further
    scan = _Scan()
    with zf.open(pkl[0]) as f:
        root = _dry_run(io.BytesIO(f.read()), scan, str(path))
    _check_views(scan, root, path)
    records = {i.filename[len(prefix) + len("data/"):]: i.file_size for i in infos
               if i.filename.startswith(prefix + "data/")}
    for key, declared in scan.storages.items():
        held = records.get(key)
        if held is not None and declared > held:
            raise IdauditError(f"{path}: storage {key!r} declares {declared} bytes but its "
                               f"record holds {held}: not a file torch.save wrote")
    return objects + members + scan.buffers


def _legacy_bytes(path: Path, size: int, budget: int) -> int:
    objects = size * OBJECT_BYTES_PER_PICKLE_BYTE
    if objects > budget:
        return objects
    scan = _Scan()
    with open(path, "rb") as f:
        if _dry_run(f, scan, str(path)) != LEGACY_MAGIC:
            raise IdauditError(f"cannot read {path} as a torch.save file (no torch.save "
                               "magic number)")
        _dry_run(f, scan, str(path))  # the protocol version
        _dry_run(f, scan, str(path))  # system info
        root = _dry_run(f, scan, str(path))  # the object
        _dry_run(f, scan, str(path))  # the storage keys
    _check_views(scan, root, path)
    declared = sum(scan.storages.values())
    if declared > size:
        raise IdauditError(f"{path}: its storages declare {declared} bytes but the file holds "
                           f"only {size}: not a file torch.save wrote")
    return objects + declared + scan.buffers


def compressed_members(path: Path) -> list[zipfile.ZipInfo]:
    """The members of a torch.save zip that are compressed: torch.save stores every member as
    it is, so a compressed one (which may inflate to any size) was put there by another
    writer. Empty for the legacy format."""
    try:
        if not zipfile.is_zipfile(path):
            return []
        with zipfile.ZipFile(path) as zf:
            return [i for i in zf.infolist() if i.compress_type != zipfile.ZIP_STORED]
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as exc:
        raise IdauditError(f"cannot read {path} as a torch.save file ({first_line(exc)})") \
            from None


def torch_file_bytes(path: Path, budget: int | float = math.inf) -> int:
    """An upper bound of the bytes ``torch.load(path, weights_only=True)`` allocates, from the
    zip directory and a dry run of the pickle (see the module); once the members alone pass
    ``budget`` the pickle is not inflated, and that figure is returned."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                return _zip_bytes(zf, path, int(min(budget, 2**62)))
    except IdauditError:
        raise
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as exc:
        raise IdauditError(f"cannot read {path} as a torch.save file ({first_line(exc)})") \
            from None
    return _legacy_bytes(path, size, int(min(budget, 2**62)))
