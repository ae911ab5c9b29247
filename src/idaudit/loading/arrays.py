"""Array files: embeddings brought as arrays (:class:`Arrays`, the names :data:`ARRAY_KEYS`),
read from ``.npz``, ``.npy`` and safetensors files once the sizes their headers declare pass
(:func:`check_declared`: elements, and the memory reading them and the audit's copies take)."""

from __future__ import annotations

import math
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from idaudit.core.errors import IdauditError, check_seed, latent_indices
from idaudit.core.errors import first_line as _first_line
from idaudit.core.jsontext import parse_json_object
from idaudit.core.limits import check_elements, check_view
from idaudit.loading.filekinds import sniff

__all__ = ["ARRAY_KEYS", "Arrays", "arrays_from_mapping", "check_declared", "load_array_file",
           "numeric_array"]

ARRAY_KEYS = ("z", "h", "h_prime", "rho", "circular", "x", "test_rows", "seed", "angle_sigma")


@dataclass
class Arrays:
    """Embeddings brought as arrays: z, h and optionally h′, ρ, x, circular latent indices
    (and their law's σ, ``angle_sigma``)."""

    z: np.ndarray | None  # None: no true latents (a label-free audit)
    h: np.ndarray
    h_prime: np.ndarray | None = None
    rho: float | None = None
    x: np.ndarray | None = None
    circular: tuple[int, ...] = ()
    angle_sigma: float | None = None  # the circular latents' law N(0, σ²), where it is known
    source: str = "arrays"
    test_rows: np.ndarray | None = None  # a fixed held-out split (as `idaudit embed` writes)
    seed: int | None = None  # the split's and the audit's seed, stored with the arrays


def held_out_rows(rows: Any, n: int, source: str) -> np.ndarray:
    """``test_rows`` as distinct row indices in [0, n) (int64), or a one-line error."""
    a = numeric_array(rows, f"{source}: array 'test_rows'").reshape(-1)
    if a.size and (not np.all(np.isfinite(a)) or not np.all(a == np.round(a))):
        raise IdauditError(f"{source}: test_rows must be whole row indices")
    a = a.astype(np.int64)
    if a.size and (a.min() < 0 or a.max() >= n):
        raise IdauditError(f"{source}: test_rows must lie in [0, {n}), got {a.min()}…{a.max()}")
    if np.unique(a).size != a.size:
        raise IdauditError(f"{source}: test_rows holds a row more than once")
    return a


def arrays_from_mapping(d: dict[str, Any], source: str) -> Arrays:
    if "h" not in d:  # z may be missing: then the audit is label-free
        raise IdauditError(f"{source} lacks the array h (found: {', '.join(sorted(d)) or 'none'})")

    def t(key: str) -> np.ndarray | None:
        if key not in d:
            return None
        return numeric_array(d[key], f"{source}: array {key!r}")

    rho_t = t("rho")
    rho = None
    if rho_t is not None:
        if rho_t.size != 1:
            raise IdauditError(f"{source}: rho must be a single number, got shape "
                               f"{tuple(rho_t.shape)}")
        rho = float(rho_t.reshape(()))
    circ = t("circular")
    circular = latent_indices(circ.reshape(-1).tolist(), f"{source}: circular") \
        if circ is not None else ()
    h = t("h")
    rows = None if "test_rows" not in d else held_out_rows(d["test_rows"], len(h), source)
    seed_t = t("seed")
    seed = None
    if seed_t is not None:
        value = seed_t.reshape(-1)
        if value.size != 1 or not float(value[0]).is_integer():
            raise IdauditError(f"{source}: seed must be a single integer")
        seed = int(value[0])
        check_seed(seed, f"{source}: seed")
    sigma_t = t("angle_sigma")
    angle_sigma = None
    if sigma_t is not None:
        if sigma_t.size != 1 or not float(sigma_t.reshape(-1)[0]) > 0 or not circular:
            raise IdauditError(f"{source}: angle_sigma must be one number > 0, with circular")
        angle_sigma = float(sigma_t.reshape(-1)[0])
    return Arrays(z=t("z"), h=h, h_prime=t("h_prime"), rho=rho, x=t("x"),
                  circular=circular, angle_sigma=angle_sigma, source=source, test_rows=rows,
                  seed=seed)


def _layout(a: Any) -> tuple[tuple[int, ...], tuple[int, ...], int] | None:
    """(shape, strides in elements, the elements its storage holds) of a torch tensor or a
    numpy array — for numpy, the elements its strides reach —, or None for anything else."""
    try:
        if hasattr(a, "untyped_storage") and hasattr(a, "stride"):
            size = a.element_size()
            return tuple(a.shape), tuple(a.stride()), a.untyped_storage().nbytes() // size
        if isinstance(a, np.ndarray) and a.itemsize:
            steps = tuple(s // a.itemsize for s in a.strides)
            reach = 1 + sum((d - 1) * abs(t) for d, t in zip(a.shape, steps)) if a.size else 0
            return a.shape, steps, reach
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        return None  # a sparse or meta tensor: to_numpy refuses it
    return None


def numeric_array(a: Any, what: str) -> np.ndarray:
    """A real float or integer ndarray (integers become float64), or a one-line error; first
    its declared size (:func:`~idaudit.core.limits.check_view`, ``check_elements``)."""
    from idaudit.maths.linear import to_numpy

    layout = _layout(a)
    if layout is not None:
        check_view(layout[0], layout[1], layout[2], what)
        check_elements(layout[0], what)
    if str(getattr(a, "dtype", "")) in ("torch.bfloat16", "torch.float16"):
        a = a.float()  # numpy has no bfloat16: half precision is read as float32
    try:
        arr = to_numpy(a)
    except (TypeError, ValueError) as exc:
        raise IdauditError(f"{what} is not numeric ({exc})") from None
    if layout is None:
        check_elements(arr.shape, what)
    if arr.dtype == np.float16:
        return arr.astype(np.float32)
    if arr.dtype.kind == "f":
        return arr
    if arr.dtype.kind in "iu":
        return arr.astype(np.float64)
    raise IdauditError(f"{what} has dtype {arr.dtype}, not real numbers")


_Entry = tuple[tuple[int, ...], np.dtype | None]  # a shape and a dtype (None: none numpy has)
#: a file's arrays as their headers declare them (or as they were read): name → shape, dtype
Declared = Mapping[str, _Entry]


def _as_read(dtype: np.dtype | None) -> np.dtype | None:
    """The dtype :func:`numeric_array` makes of ``dtype`` (None: one it refuses)."""
    if dtype is None or dtype.kind not in "fiu":
        return None
    if dtype.kind in "iu":
        return np.dtype(np.float64)
    return np.dtype(np.float32) if dtype.itemsize == 2 else dtype


def audit_bytes(declared: Declared) -> int:
    """The bytes an audit of these arrays allocates beyond reading them, from their declared
    shapes and dtypes: :func:`numeric_array`'s copies (integers to float64, half precision to
    float32) and the copies of z, h and x its pass of moments makes in its own dtype
    (:func:`~idaudit.maths.fit.fit_dtype`)."""
    from idaudit.maths.fit import fit_dtype

    read = {k: (math.prod(shape), dtype, _as_read(dtype)) for k, (shape, dtype) in
            declared.items() if k in ARRAY_KEYS}
    total = sum(n * after.itemsize for n, dtype, after in read.values()
                if after is not None and after != dtype)
    if "z" in read and "h" in read and read["z"][2] is not None and read["h"][2] is not None:
        work = fit_dtype(read["z"][2], read["h"][2])
        total += sum(read[k][0] * work.itemsize for k in ("z", "h", "x")
                     if k in read and read[k][2] is not None and read[k][2] != work)
    return total


def check_declared(declared: Declared, source: str, read: int = 0) -> None:
    """Before a file's arrays are read: each declared shape within
    :data:`~idaudit.core.limits.ARRAY_ELEMENTS`, and ``read`` (the bytes reading them takes)
    with :func:`audit_bytes` within the memory left — one line (exit 2) otherwise."""
    from idaudit.core.memory import check_memory

    for name, (shape, _) in declared.items():
        check_elements(shape, f"{source}: array {name!r}")
    check_memory(read + audit_bytes(declared), f"{source}: reading its arrays and the audit's "
                 "float copies of them", bound="up to ")


def _declared_of(arrays: Mapping[str, Any]) -> dict[str, _Entry]:
    """:data:`Declared` of arrays already read (numpy arrays and torch tensors)."""
    out: dict[str, _Entry] = {}
    for name, a in arrays.items():
        if hasattr(a, "shape") and hasattr(a, "dtype"):
            text = str(a.dtype).removeprefix("torch.").replace("bfloat16", "float16")
            try:
                out[str(name)] = tuple(a.shape), np.dtype(text)
            except TypeError:
                out[str(name)] = tuple(a.shape), None
    return out


def _npy_header(f) -> tuple[tuple[int, ...], bool, np.dtype] | None:
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
        if len(local) < 30 or local[:4] != b"PK\x03\x04":
            return None
        start = info.header_offset + 30 + int.from_bytes(local[26:28], "little") + \
            int.from_bytes(local[28:30], "little")
        f.seek(start)
        header = _npy_header(f)
        if header is None:
            return None
        shape, fortran, dtype = header
        offset = f.tell()
    if not _mapped(info, offset - start, header):
        return None
    mapped = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape,
                       order="F" if fortran else "C")
    return mapped.view(np.ndarray)


def _npz_declared(zf: zipfile.ZipFile) -> tuple[dict[str, _Entry], int]:
    """Each member's shape and dtype from its ``.npy`` header, and the bytes reading the
    members takes (all but the memory-mapped ones, :func:`_mapped`): so that a small file
    that declares or inflates to many GiB is refused before a member is read. A member
    whose header cannot be read is left out (numpy's reading it says what is wrong)."""
    declared: dict[str, _Entry] = {}
    read = 0
    for info in zf.infolist():
        with zf.open(info) as member:
            header = _npy_header(member)
            header_bytes = member.tell()
        if header is None:
            continue
        shape, _, dtype = header
        declared[info.filename.removesuffix(".npy")] = tuple(shape), dtype
        if not _mapped(info, header_bytes, header):
            read += math.prod(shape) * dtype.itemsize
    return declared, read


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an .npz, once their headers pass :func:`check_declared`; large
    uncompressed members are memory-mapped (no copy into fresh memory), the others read."""
    out: dict[str, np.ndarray] = {}
    with np.load(path, allow_pickle=False) as f, zipfile.ZipFile(path) as zf:
        declared, read = _npz_declared(zf)
        check_declared(declared, str(path), read)
        for name in f.files:
            arr = None
            try:
                arr = _stored_npy(path, zf.getinfo(name + ".npy"))
            except (KeyError, ValueError, OSError):
                arr = None
            out[name] = f[name] if arr is None else arr
    return out


def _npz_arrays(path: Path) -> dict[str, np.ndarray]:
    """:func:`_read_npz`, a damaged file a one-line error."""
    try:
        return _read_npz(path)
    except IdauditError:
        raise
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise IdauditError(f"cannot read {path} as .npz ({_first_line(exc)})") from None


def load_array_file(path: Path, kind: str | None = None) -> Arrays:
    if (kind or sniff(path)) == "npz":
        return arrays_from_mapping(_npz_arrays(path), str(path))
    return arrays_from_mapping(_read_safetensors_arrays(path), str(path))


#: safetensors' dtypes numpy has (bfloat16 as float16: both two-byte floats that
#: :func:`numeric_array` makes float32)
_SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "float16",
                       "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8",
                       "U64": "uint64", "U32": "uint32", "U16": "uint16", "U8": "uint8",
                       "BOOL": "bool"}


def _safetensors_declared(path: Path) -> tuple[dict[str, str], Declared, int] | None:
    """(metadata, each tensor's shape and dtype, the bytes reading its tensors takes: its data
    section, which safetensors checks they cover) from a safetensors header, read without
    mapping the file; None where the header is not one (safetensors' reading says why)."""
    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = parse_json_object(f.read(n).decode(), f"the header of {path}") \
                if 0 < n < 100_000_000 else None
        data = path.stat().st_size - 8 - n
    except (OSError, ValueError, IdauditError):  # UnicodeDecodeError is a ValueError
        return None
    meta = None if header is None else header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict):
        return None
    declared: dict[str, _Entry] = {}
    for name, entry in header.items():
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            return None
        kind = _SAFETENSORS_DTYPES.get(entry.get("dtype"))
        declared[name] = tuple(shape), None if kind is None else np.dtype(kind)
    return meta, declared, max(data, 0)


def _read_safetensors_arrays(path: Path) -> dict[str, Any]:
    """The tensors of a safetensors file, read with the torch backend (numpy's has no
    bfloat16); :func:`numeric_array` makes half precision float32."""
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except Exception as exc:
        raise IdauditError(f"cannot read the tensors in {path} ({_first_line(exc)})") from None


def _safetensors_keys(path: Path) -> set[str]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return set(f.keys())
    except Exception as exc:
        raise IdauditError(f"cannot read the tensors in {path} ({_first_line(exc)})") from None
