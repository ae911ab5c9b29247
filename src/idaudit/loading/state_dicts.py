"""torch.save files read without running code, and the state dict chosen in them.

:func:`read_torch_file` reads ``.pt``/``.pth``/``.pth.tar``/``.ckpt`` files with
``torch.load(weights_only=True)``, numpy arrays allowed through numpy's own array
reconstruction functions only; a pickled object of any other class is refused in one line
naming it, and read in full only with ``trust_pickle``. :func:`choose_state_dict` finds the
weights in what was read (``--key``, or the one dict of tensors there is) and
:func:`prepare_state` strips the ``module.`` (DDP) and ``_orig_mod.`` (torch.compile)
wrappers, keeps the keys under ``--prefix`` and makes half-precision weights float32.
:func:`load_weights` loads them strictly, naming the missing and unexpected keys.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from idaudit.core.errors import IdauditError
from idaudit.core.errors import first_line as _first_line
from idaudit.loading.architectures import timm_fit_hint

__all__ = ["choose_state_dict", "find_entry", "holds_arrays", "is_state_dict", "load_weights",
           "prepare_state", "read_torch_file", "state_dict_candidates"]

WRAPPERS = ("module", "_orig_mod")  # DDP / DataParallel, torch.compile
_SHOWN = 5  # keys listed in a message


def _numpy_array_globals() -> list[tuple[Any, str]]:
    """The globals numpy pickles arrays, dtypes and scalars with, under the names numpy 1 and
    numpy 2 write: constructors of data, never of code."""
    import numpy as np

    try:
        from numpy._core import multiarray
    except ImportError:  # numpy 1
        from numpy.core import multiarray
    out: list[tuple[Any, str]] = [(np.ndarray, "numpy.ndarray"), (np.dtype, "numpy.dtype")]
    for mod in ("numpy.core.multiarray", "numpy._core.multiarray"):
        out += [(multiarray._reconstruct, f"{mod}._reconstruct"),
                (multiarray.scalar, f"{mod}.scalar")]
    dtypes = getattr(np, "dtypes", None)  # numpy ≥ 1.25 may pickle a dtype by its class
    for name in ("BoolDType", "Int8DType", "Int16DType", "Int32DType", "Int64DType", "UInt8DType",
                 "UInt16DType", "UInt32DType", "UInt64DType", "Float16DType", "Float32DType",
                 "Float64DType", "LongLongDType", "ULongLongDType", "LongDType", "ULongDType",
                 "ByteDType", "UByteDType", "ShortDType", "UShortDType", "IntDType", "UIntDType"):
        cls = getattr(dtypes, name, None)
        if cls is not None:
            out.append((cls, f"numpy.dtypes.{name}"))
    return out


@contextmanager
def _numpy_arrays_allowed() -> Iterator[None]:
    """numpy's array globals allowed in ``weights_only`` loads inside the block only (those a
    caller had allowed before stay allowed)."""
    import torch

    before = set(map(repr, torch.serialization.get_safe_globals()))
    added = [g for g in _numpy_array_globals() if repr(g) not in before]
    with torch.serialization.safe_globals(added):
        yield


_NAME = r"([A-Za-z_][A-Za-z0-9_.]*)"
_REFUSED_CLASS = (re.compile(rf"GLOBAL {_NAME} was not an allowed global"),
                  re.compile(rf"unsupported GLOBAL {_NAME} whose module"),
                  re.compile(rf"but got <class '{_NAME}'>"))


def _refusal(exc: BaseException) -> str | None:
    """What ``weights_only`` refused, from torch's message: ``an object of class NAME`` or
    torch's reason; None if ``exc`` is not a weights-only refusal."""
    text = str(exc)
    if not isinstance(exc, pickle.UnpicklingError) or "Weights only load failed" not in text:
        return None
    for pattern in _REFUSED_CLASS:
        found = pattern.search(text)
        if found:
            return f"an object of class {found[1]}"
    reason = text.partition("Check the documentation")[0]
    for marker in ("WeightsUnpickler error:", "trusted source."):
        reason = reason.rpartition(marker)[2] if marker in reason else reason
    return f"pickled data ({' '.join(reason.split()) or 'no reason given'})"


def read_torch_file(path: Path, trust_pickle: bool = False) -> Any:
    """What a ``torch.save`` file holds, read on the CPU with ``weights_only=True`` (tensors,
    numbers, strings, containers, numpy arrays). Anything else — an object of a user's
    class, a whole pickled module — is refused naming its class, or with ``trust_pickle``
    unpickled in full, the user's classes found in the working directory as ``--arch`` finds
    them (searched after the installed packages, ``sys.path`` restored after). Untrusted,
    what it would allocate is checked first (:func:`idaudit.loading.trust.check_torch_file`)."""
    import torch

    from idaudit.loading.trust import check_torch_file, untrusted

    check_torch_file(Path(path), trust_pickle)
    try:
        with _numpy_arrays_allowed():
            return torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for damaged files
        refused = _refusal(exc)
        if refused is None:
            raise IdauditError(f"cannot read {path} as a torch.save file ({_first_line(exc)})") \
                from None
    if not trust_pickle:
        raise IdauditError(untrusted(f"{path} holds {refused}, which torch.load(weights_only="
                                     "True) refuses; unpickling it runs code from the file"))
    from idaudit.loading.architectures import cwd_importable

    with cwd_importable():
        try:
            return torch.load(str(path), map_location="cpu", weights_only=False)
        except Exception as exc:
            raise IdauditError(f"cannot unpickle {path} ({_first_line(exc)})") from None


def _listing(names: list[str], limit: int = 10) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", … ({len(names)} in all)" if len(names) > limit else "") if names \
        else "none"


def find_entry(obj: Any, key: str, source: str) -> Any:
    """``obj[a][b]…`` for ``key`` = ``a.b…``; a name holding dots itself (Lightning's
    ``epoch_loop.state_dict``) is matched whole first, integers index lists."""
    parts = key.split(".")
    here, i, walked = obj, 0, []
    while i < len(parts):
        where = f" under {'.'.join(walked)!r}" if walked else ""
        if isinstance(here, Mapping):
            for j in range(len(parts), i, -1):
                name: Any = ".".join(parts[i:j])
                if name not in here and name.isdigit() and int(name) in here:
                    name = int(name)
                if name in here:
                    here, i = here[name], j
                    walked.append(str(name))
                    break
            else:
                raise IdauditError(f"--key {key}: {source} has no entry {parts[i]!r}{where} (its "
                                   f"entries: {_listing([str(k) for k in here])})")
        elif isinstance(here, (list, tuple)) and parts[i].isdigit() and int(parts[i]) < len(here):
            here = here[int(parts[i])]
            walked.append(parts[i])
            i += 1
        else:
            raise IdauditError(f"--key {key}: {source}{where or ''} holds "
                               f"{type(here).__name__}, not a dict with entry {parts[i]!r}")
    return here


def is_state_dict(obj: Any) -> bool:
    """A non-empty dict of tensors under string keys (what ``module.state_dict()`` gives)."""
    import torch

    return isinstance(obj, Mapping) and len(obj) > 0 and \
        all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items())


def state_dict_candidates(obj: Any) -> list[str]:
    """The entries of ``obj`` that are state dicts (I-JEPA: encoder, predictor,
    target_encoder; Lightning: state_dict; the paper's run.pt: model_state_dict)."""
    if not isinstance(obj, Mapping):
        return []
    return [str(k) for k, v in obj.items() if is_state_dict(v)]


def choose_state_dict(obj: Any, source: str) -> dict[str, Any]:
    """The state dict in ``obj``: ``obj`` itself when it is one, else its one entry that is
    one; several, or none, is a one-line error saying to choose with ``--key``."""
    if is_state_dict(obj):
        return dict(obj)
    found = state_dict_candidates(obj)
    if len(found) == 1:
        return dict(obj[found[0]] if found[0] in obj else
                    next(v for k, v in obj.items() if str(k) == found[0]))
    if found:
        raise IdauditError(f"{source} holds several state dicts: {', '.join(found)}; choose one "
                           "with --key")
    what = f"a dict with entries {_listing([str(k) for k in obj])}" \
        if isinstance(obj, Mapping) else type(obj).__name__
    raise IdauditError(f"{source} holds no state dict (a dict of tensors): it holds {what}; "
                       "choose the entry with --key")


def unwrapped_key(key: str) -> str:
    """``key`` without the wrappers' names: leading ``module.``/``_orig_mod.`` (any number,
    any order) and ``_orig_mod`` anywhere (a torch.compile'd submodule)."""
    parts = key.split(".")
    i = 0
    while i < len(parts) - 1 and parts[i] in WRAPPERS:
        i += 1
    return ".".join([p for p in parts[i:-1] if p != "_orig_mod"] + parts[-1:])


def strip_wrappers(state: Mapping[str, Any], source: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for k, v in state.items():
        new = unwrapped_key(k)
        if new in out:
            raise IdauditError(f"{source}: keys {origin[new]!r} and {k!r} are the same once the "
                               "module./_orig_mod. wrappers are removed")
        out[new], origin[new] = v, k
    return out


def key_prefixes(keys: list[str], depth: int) -> list[str]:
    """The keys' distinct first ``depth`` names, each with its dot (``encoder.``)."""
    seen: dict[str, None] = {}
    for k in keys:
        parts = k.split(".")
        if len(parts) > depth:
            seen[".".join(parts[:depth]) + "."] = None
    return list(seen)


def top_prefixes(keys: list[str]) -> list[str]:
    """The keys' first names (``encoder.``, ``projector.`` …); their first two when they all
    share one (``model.backbone.``, ``model.projector.``)."""
    first = key_prefixes(keys, 1)
    return first if len(first) != 1 else (key_prefixes(keys, 2) or first)


def keep_prefix(state: Mapping[str, Any], prefix: str, source: str) -> dict[str, Any]:
    """The entries whose keys start with ``prefix`` (a final dot implied), with it removed."""
    p = unwrapped_key(prefix.rstrip(".") + ".x")[:-1]
    kept = {k[len(p):]: v for k, v in state.items() if k.startswith(p) and len(k) > len(p)}
    if not kept:
        raise IdauditError(f"--prefix {prefix}: no key of {source} starts with {p!r} (its keys "
                           f"start with {_listing(top_prefixes(list(state)) or list(state))})")
    return kept


def float32(state: Mapping[str, Any]) -> dict[str, Any]:
    """bfloat16 and float16 tensors as float32 (other dtypes as they are)."""
    import torch

    half = (torch.bfloat16, torch.float16)
    return {k: v.float() if isinstance(v, torch.Tensor) and v.dtype in half else v
            for k, v in state.items()}


def prepare_state(state: Mapping[str, Any], prefix: str | None, source: str) -> dict[str, Any]:
    """A state dict ready to load: wrappers stripped, the keys under ``prefix`` kept and the
    prefix removed, half precision made float32."""
    state = strip_wrappers(state, source)
    if prefix:
        state = keep_prefix(state, prefix, source)
    return float32(state)


def _some(keys: list[str]) -> str:
    return ", ".join(keys[:_SHOWN]) + (", …" if len(keys) > _SHOWN else "")


def load_weights(model: Any, state: Mapping[str, Any], arch: str, source: str) -> None:
    """``model.load_state_dict(state)``, strict; a misfit names (the first few of) the missing
    keys, the unexpected keys and the keys of other shapes, with their counts, and the
    ``--prefix`` under which the file's keys would fit, if there is one."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shapes = [k for k in expected if k in state and hasattr(state[k], "shape")
              and tuple(state[k].shape) != tuple(expected[k].shape)]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing keys ({_some(missing)})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected keys ({_some(unexpected)})")
        if shapes:
            parts.append(f"{len(shapes)} keys of other shapes (" + ", ".join(
                f"{k}: {tuple(state[k].shape)} in the file, {tuple(expected[k].shape)} in the model"
                for k in shapes[:_SHOWN]) + (", …" if len(shapes) > _SHOWN else "") + ")")
        hint = next((f"; the keys under {p!r} fit: pass --prefix {p}"
                     for depth in (1, 2, 3) for p in key_prefixes(unexpected, depth)
                     if set(expected) <= {k[len(p):] for k in state if k.startswith(p)}), "")
        hint = hint or timm_fit_hint(arch, missing, unexpected)
        raise IdauditError(f"{source}: the weights do not fit {arch}: {'; '.join(parts)}{hint}")
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise IdauditError(f"{source}: the weights do not fit {arch} ({_first_line(exc)})") \
            from None


def holds_arrays(obj: Any) -> bool:
    """A dict with embeddings ``h`` as an array or tensor (the paper's run.pt, or a dict of
    z, h, … saved with torch.save): audited as arrays."""
    import numpy as np
    import torch

    return isinstance(obj, Mapping) and isinstance(obj.get("h"), (np.ndarray, torch.Tensor))
