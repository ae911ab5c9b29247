"""Messages between idaudit and its cage: JSON and raw arrays, never a pickle.

A frame is ``len(header)`` (8 bytes, little-endian), the header — UTF-8 JSON
``{"message": …, "arrays": [{"dtype", "shape"}, …]}`` — then each array's bytes in order
(C order). In ``message`` an array stands as ``{"__array__": i}``. What the cage sends is
untrusted: :func:`read_frame` takes only the dtypes of :data:`DTYPES`, shapes of whole
non-negative numbers whose bytes match, a header of at most :data:`MAX_HEADER` bytes and
arrays of at most ``max_bytes`` together — what the request expects, checked (with the
reader's own ``check`` of the declared arrays) from the header alone, before a byte of array
data is read —, reads each array once, into a buffer of its own, and builds nothing but
dicts, lists, numbers, text and numpy arrays. A header that breaks the format (no JSON, an
integer of thousands of digits, a size that is no whole number) is a :class:`WireError`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, BinaryIO

import numpy as np

__all__ = ["Declared", "WireError", "read_frame", "write_frame"]

#: the array types a frame may carry
DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
          "bool")
MAX_HEADER = 1 << 20
#: the most axes an array may declare (numpy's own limit is 64)
MAX_AXES = 32

#: an array as a header declares it: its place in the message (the keys and list indices
#: that lead to it, joined by "/"), its dtype and its shape
Declared = tuple[str, str, tuple[int, ...]]


class WireError(Exception):
    """A frame that breaks the format (from the cage: refused, never trusted)."""


def _encode(value: Any, arrays: list[np.ndarray]) -> Any:
    if isinstance(value, np.ndarray):
        arrays.append(value)
        return {"__array__": len(arrays) - 1}
    if isinstance(value, dict):
        return {str(k): _encode(v, arrays) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v, arrays) for v in value]
    return value


def write_frame(stream: BinaryIO, message: Any) -> None:
    """Write ``message`` (JSON values and numpy arrays) as one frame and flush.

    Args:
        stream: a binary stream (a pipe's writing end).
        message: dicts, lists, numbers, text and numpy arrays of :data:`DTYPES`.
    """
    arrays: list[np.ndarray] = []
    body = _encode(message, arrays)
    arrays = [np.ascontiguousarray(a) for a in arrays]
    meta = [{"dtype": a.dtype.name, "shape": list(a.shape)} for a in arrays]
    header = json.dumps({"message": body, "arrays": meta}).encode()
    stream.write(len(header).to_bytes(8, "little") + header)
    for a in arrays:
        if a.nbytes:
            stream.write(memoryview(a).cast("B"))
    stream.flush()


def _read_exactly(stream: BinaryIO, n: int) -> bytes:
    """``n`` bytes of ``stream`` (a header: small), or EOFError."""
    parts, left = [], n
    while left:
        got = stream.read(left)
        if not got:
            raise EOFError("the stream ended inside a frame" if parts or n != 8 else "closed")
        parts.append(got)
        left -= len(got)
    return b"".join(parts)


def _read_into(stream: BinaryIO, buffer: memoryview) -> None:
    """Fill ``buffer`` from ``stream`` in place (no copy), or EOFError."""
    done = 0
    while done < len(buffer):
        got = stream.readinto(buffer[done:])  # type: ignore[attr-defined]
        if not got:
            raise EOFError("the stream ended inside a frame")
        done += got


def _is_size(d: Any) -> bool:
    return isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**62


def _shape(meta: Any) -> tuple[str, tuple[int, ...], int]:
    if not isinstance(meta, dict) or not isinstance(meta.get("dtype"), str) or \
            meta["dtype"] not in DTYPES:
        raise WireError(f"an array of a type the cage may not send ({_short(meta)})")
    shape = meta.get("shape")
    if not isinstance(shape, list) or len(shape) > MAX_AXES or not all(map(_is_size, shape)):
        raise WireError(f"an array shape that is no list of sizes ({_short(shape)})")
    return meta["dtype"], tuple(shape), math.prod(shape) * np.dtype(meta["dtype"]).itemsize


def _short(value: Any, limit: int = 80) -> str:
    """The start of ``value`` as JSON (text as it is), for a refusal's line (never its
    whole; a structure too deep to show, by its type)."""
    if isinstance(value, str):
        return value[:limit]
    try:
        text = json.dumps(value) if isinstance(value, (list, dict)) else repr(value)
    except (RecursionError, ValueError):
        text = f"a {type(value).__name__} nested too deeply"
    return text[:limit]


def _places(message: Any, count: int, depth: int = 0, at: str = "",
            out: dict[int, str] | None = None) -> dict[int, str]:
    """Where each array ``{"__array__": i}`` stands in ``message``: i → its place."""
    out = {} if out is None else out
    if depth > 64:
        raise WireError("a message nested too deeply")
    if isinstance(message, dict):
        if set(message) == {"__array__"}:
            i = message["__array__"]
            if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < count:
                raise WireError(f"a reference to no array ({_short(i, 40)})")
            out.setdefault(i, at)
            return out
        for k, v in message.items():
            _places(v, count, depth + 1, f"{at}/{k}" if at else str(k), out)
    elif isinstance(message, list):
        for j, v in enumerate(message):
            _places(v, count, depth + 1, f"{at}/{j}" if at else str(j), out)
    return out


def _decode(value: Any, arrays: list[Any]) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__array__"}:
            return arrays[value["__array__"]]  # checked by _places
        return {k: _decode(v, arrays) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    return value


def read_frame(stream: BinaryIO, max_bytes: float,
               check: Callable[[list[Declared]], None] | None = None) -> Any:
    """The next frame's message, its arrays as (writable) numpy arrays.

    Everything the header declares is checked before a byte of array data is read: its
    form, ``check``, then the arrays' bytes together against ``max_bytes``; each array is
    then read once, into a buffer of its own.

    Args:
        stream: a binary stream (a pipe's reading end) with ``read`` and ``readinto``.
        max_bytes: the most bytes the frame's arrays may hold together (what the request
            expects).
        check: called with the arrays the header declares (:data:`Declared`: place, dtype,
            shape) before any is read; it refuses them by raising (a :class:`WireError`, or
            the caller's own error, which goes through as it is).

    Returns:
        The message: dicts, lists, numbers, text and numpy arrays.

    Raises:
        WireError: a frame that breaks the format or sends more than ``max_bytes``.
        EOFError: the stream ended.
    """
    n = int.from_bytes(_read_exactly(stream, 8), "little")
    if n > MAX_HEADER:
        raise WireError(f"a header of {n} bytes (at most {MAX_HEADER})")
    try:
        header = json.loads(_read_exactly(stream, n))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # ValueError: JSON's
        # own errors, and an integer of more digits than int() converts
        raise WireError(f"a header that is no JSON ({_short(str(exc), 120)})") from None
    if not isinstance(header, dict) or not isinstance(header.get("arrays"), list):
        raise WireError("a header without its list of arrays")
    metas = [_shape(m) for m in header["arrays"]]
    message = header.get("message")
    places = _places(message, len(metas))
    if check is not None:
        check([(places.get(i, f"#{i}"), dtype, shape)
               for i, (dtype, shape, _) in enumerate(metas)])
    total = sum(nbytes for _, _, nbytes in metas)
    if total > max_bytes:
        raise WireError(f"arrays of {total} bytes, more than the {int(max_bytes)} expected")
    try:  # not touched yet: pages come as the bytes do
        arrays = [np.empty(shape, dtype=dtype) for dtype, shape, _ in metas]
    except ValueError:  # zero elements, and sizes beyond any address space
        raise WireError("an array shape numpy cannot hold") from None
    except MemoryError:
        raise WireError(f"arrays of {total} bytes, more than this process can "
                        "allocate") from None
    for a in arrays:
        if a.nbytes:
            _read_into(stream, memoryview(a).cast("B"))
    return _decode(message, arrays)
