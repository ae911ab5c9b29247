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

from idaudit.core.arrayfiles import (
    NUMPY_SAFETENSORS_DTYPES,
    Declared,
    read_npz,
    safetensors_dtypes,
)
from idaudit.core.errors import IdauditError, check_seed, latent_indices
from idaudit.core.errors import first_line as _first_line
from idaudit.core.limits import check_elements, check_view
from idaudit.loading.filekinds import sniff

__all__ = ["ARRAY_KEYS", "Arrays", "arrays_from_mapping", "check_declared", "load_array_file",
           "numeric_array"]

ARRAY_KEYS = ("z", "h", "h_prime", "rho", "circular", "x", "test_rows", "seed", "angle_sigma",
              "z_white")


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
    z_white: bool = False  # z's law is white (a world drew it so; as `idaudit embed` stores)


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
    white_t = t("z_white")
    if white_t is not None and (white_t.size != 1 or float(white_t.reshape(-1)[0]) not in (0, 1)):
        raise IdauditError(f"{source}: z_white must be one number, 0 or 1")
    return Arrays(z=t("z"), h=h, h_prime=t("h_prime"), rho=rho, x=t("x"),
                  circular=circular, angle_sigma=angle_sigma, source=source, test_rows=rows,
                  seed=seed, z_white=white_t is not None and bool(white_t.reshape(-1)[0]))


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


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an .npz, once their headers pass :func:`check_declared`; large
    uncompressed members are memory-mapped (no copy into fresh memory), the others read."""
    return read_npz(path, lambda declared, read: check_declared(declared, str(path), read))


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


def _read_safetensors_arrays(path: Path) -> dict[str, Any]:
    """The tensors of a safetensors file: with numpy's backend where the header declares
    only dtypes numpy has (no torch imported), else torch's (numpy has no bfloat16);
    :func:`numeric_array` makes half precision float32."""
    dtypes = safetensors_dtypes(path)
    if dtypes is not None and dtypes <= NUMPY_SAFETENSORS_DTYPES:
        from safetensors.numpy import load_file
    else:
        from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except Exception as exc:
        raise IdauditError(f"cannot read the tensors in {path} ({_first_line(exc)})") from None


def _safetensors_keys(path: Path) -> set[str]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            return set(f.keys())
    except Exception as exc:
        raise IdauditError(f"cannot read the tensors in {path} ({_first_line(exc)})") from None
