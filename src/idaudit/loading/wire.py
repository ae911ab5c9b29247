"""Messages between idaudit and its cage: JSON and raw arrays, never a pickle.

A frame is ``len(header)`` (8 bytes, little-endian), the header — UTF-8 JSON
``{"message": …, "arrays": [{"dtype", "shape"}, …]}`` — then each array's bytes in order
(C order). In ``message`` an array stands as ``{"__array__": i}``. What the cage sends is
untrusted: :func:`read_frame` takes only the dtypes of :data:`DTYPES`, shapes of whole
non-negative numbers whose bytes match, a header of at most :data:`MAX_HEADER` bytes and
arrays of at most ``max_bytes`` together, and builds nothing but dicts, lists, numbers, text
and numpy arrays.
"""

from __future__ import annotations

import json
import math
from typing import Any, BinaryIO

import numpy as np

#: the array types a frame may carry
DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
          "bool")
MAX_HEADER = 1 << 20


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
    """Write ``message`` (JSON values and numpy arrays) as one frame and flush."""
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
    parts, left = [], n
    while left:
        got = stream.read(left)
        if not got:
            raise EOFError("the stream ended inside a frame" if parts or n != 8 else "closed")
        parts.append(got)
        left -= len(got)
    return b"".join(parts)


def _shape(meta: Any) -> tuple[str, tuple[int, ...], int]:
    if not isinstance(meta, dict) or meta.get("dtype") not in DTYPES:
        raise WireError(f"an array of a type the cage may not send ({meta!r:.80})")
    shape = meta.get("shape")
    if not isinstance(shape, list) or len(shape) > 32 or not all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**62 for d in shape):
        raise WireError(f"an array shape that is no list of sizes ({shape!r:.80})")
    return meta["dtype"], tuple(shape), math.prod(shape) * np.dtype(meta["dtype"]).itemsize


def _decode(value: Any, arrays: list[Any], depth: int = 0) -> Any:
    if depth > 64:
        raise WireError("a message nested too deeply")
    if isinstance(value, dict):
        if set(value) == {"__array__"}:
            i = value["__array__"]
            if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(arrays):
                raise WireError(f"a reference to no array ({i!r:.40})")
            return arrays[i]
        return {k: _decode(v, arrays, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, arrays, depth + 1) for v in value]
    return value


def read_frame(stream: BinaryIO, max_bytes: float) -> Any:
    """The next frame's message, its arrays as (writable) numpy arrays; :class:`WireError`
    for a frame that breaks the format or sends more
    than ``max_bytes``, EOFError where the stream ends."""
    n = int.from_bytes(_read_exactly(stream, 8), "little")
    if n > MAX_HEADER:
        raise WireError(f"a header of {n} bytes (at most {MAX_HEADER})")
    try:
        header = json.loads(_read_exactly(stream, n))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise WireError(f"a header that is no JSON ({exc})") from None
    if not isinstance(header, dict) or not isinstance(header.get("arrays"), list):
        raise WireError("a header without its list of arrays")
    metas = [_shape(m) for m in header["arrays"]]
    total = sum(nbytes for _, _, nbytes in metas)
    if total > max_bytes:
        raise WireError(f"arrays of {total} bytes, more than the {int(max_bytes)} allowed")
    arrays: list[Any] = []
    for dtype, shape, nbytes in metas:
        data = bytearray(_read_exactly(stream, nbytes)) if nbytes else bytearray()
        arrays.append(np.frombuffer(data, dtype=dtype).reshape(shape))
    return _decode(header.get("message"), arrays)
