"""Bring an encoder (or its embeddings) from wherever a project keeps it.

``load_target`` turns a path into :class:`Arrays` or a :class:`LoadedEncoder`; audit, plan
and consistency checks all start here:

* ``.npz`` or ``.safetensors`` arrays with ``z``, ``h`` (optionally ``h_prime``, ``rho``,
  ``circular``) — no world needed;
* an idaudit checkpoint (safetensors with idaudit metadata) — its world comes with it;
* plain safetensors weights + ``--arch module.path:factory`` (``--arch-kwargs`` JSON);
* TorchScript (``torch.jit.load``) or a ``torch.export`` program (``.pt2``);
* a pickled module only with ``trust_pickle`` (``torch.load`` runs arbitrary code).
"""

from __future__ import annotations

import importlib
import os
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import IdauditError, latent_indices
from .io import CHECKPOINT_FORMAT as CHECKPOINT
from .io import PAIRS_FORMAT, read_metadata
from .io import first_line as _first_line
from .jsontext import parse_json_object  # noqa: F401 - the CLI imports it from here

if TYPE_CHECKING:  # torch and the worlds load only when an encoder is involved
    from .worlds import World, WorldSpec

ARRAY_KEYS = ("z", "h", "h_prime", "rho", "circular", "x")


@dataclass
class Arrays:
    """Embeddings brought as arrays: z, h and optionally h′, ρ, x, circular latent indices."""

    z: np.ndarray | None  # None: no true latents (a label-free audit)
    h: np.ndarray
    h_prime: np.ndarray | None = None
    rho: float | None = None
    x: np.ndarray | None = None
    circular: tuple[int, ...] = ()
    source: str = "arrays"


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
    return Arrays(z=t("z"), h=t("h"), h_prime=t("h_prime"), rho=rho, x=t("x"),
                  circular=circular, source=source)


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
        if any("/code/" in n or n.startswith("code/") for n in names):
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


def numeric_array(a: Any, what: str) -> np.ndarray:
    """A real float or integer ndarray (integers become float64), or a one-line error."""
    from .metrics import to_numpy

    try:
        arr = to_numpy(a)
    except (TypeError, ValueError) as exc:
        raise IdauditError(f"{what} is not numeric ({exc})") from None
    if arr.dtype.kind == "f":
        return arr
    if arr.dtype.kind in "iu":
        return arr.astype(np.float64)
    raise IdauditError(f"{what} has dtype {arr.dtype}, not real numbers")


def _npy_header(f) -> tuple[tuple[int, ...], bool, np.dtype] | None:
    """(shape, fortran order, dtype) from the header of a ``.npy`` stream, or None."""
    try:
        version = np.lib.format.read_magic(f)
        read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                       (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        return None if read_header is None else read_header(f)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile):
        return None


def _stored_npy(path: Path, info: zipfile.ZipInfo) -> np.ndarray | None:
    """A read-only memory map of a large uncompressed ``.npy`` member of a zip (what
    ``numpy.savez`` writes), or None when the member is small or cannot be mapped so."""
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
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if dtype.hasobject or offset - start + nbytes != info.file_size:
        return None
    mapped = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape,
                       order="F" if fortran else "C")
    return mapped.view(np.ndarray)


def _npz_bytes_to_read(path: Path, zf: zipfile.ZipFile) -> int:
    """Bytes the members of an .npz take once read into memory (compressed members, and small
    stored ones; large stored members are memory-mapped), from each member's .npy header, so
    that a small file that inflates to many GiB is refused before it is read."""
    total = 0
    for info in zf.infolist():
        if info.compress_type == zipfile.ZIP_STORED and info.file_size >= (1 << 20):
            continue  # memory-mapped (or, if not mappable, read below by numpy: counted there)
        with zf.open(info) as member:
            header = _npy_header(member)
        if header is not None:
            shape, _, dtype = header
            n = 1
            for d in shape:
                n *= int(d)
            total += n * dtype.itemsize
    return total


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an .npz; uncompressed members are memory-mapped (no copy into fresh
    memory), the others read by numpy once their headers say they fit in memory."""
    from .io import check_memory

    out: dict[str, np.ndarray] = {}
    with np.load(path, allow_pickle=False) as f, zipfile.ZipFile(path) as zf:
        check_memory(_npz_bytes_to_read(path, zf), str(path), bound="", purpose=" to read")
        for name in f.files:
            arr = None
            try:
                arr = _stored_npy(path, zf.getinfo(name + ".npy"))
            except (KeyError, ValueError, OSError):
                arr = None
            out[name] = f[name] if arr is None else arr
    return out


def load_array_file(path: Path, kind: str | None = None) -> Arrays:
    if (kind or sniff(path)) == "npz":
        try:
            d = _read_npz(path)
        except IdauditError:
            raise
        except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
            raise IdauditError(f"cannot read {path} as .npz ({_first_line(exc)})") from None
        return arrays_from_mapping(d, str(path))
    from safetensors.numpy import load_file

    try:
        d = load_file(str(path))
    except Exception as exc:
        raise IdauditError(f"cannot read the tensors in {path} ({_first_line(exc)})") from None
    return arrays_from_mapping(d, str(path))


def import_factory(spec: str):
    """``package.module:callable`` → the callable. The module (and what it imports as it
    loads) may come from the current directory, searched after the installed packages (a
    stray scipy.py never shadows scipy) and only during that import: ``sys.path`` is restored
    exactly afterwards, so no later import finds files there (a stray pandas.py stays unrun)."""
    mod_name, sep, attr = spec.partition(":")
    if not sep or not mod_name or not attr:
        raise IdauditError(f"--arch must look like module.path:factory, got {spec!r}")
    path_list = sys.path
    saved = list(path_list)
    cwd = os.getcwd()
    if not any(p in ("", ".", cwd) for p in path_list):
        path_list.append(cwd)
    try:
        module = importlib.import_module(mod_name)
    except SystemExit as exc:
        raise IdauditError(f"--arch: importing {mod_name!r} exited (SystemExit {exc.code}); "
                           "the encoder factory exited instead of building a model") from None
    except Exception as exc:
        raise IdauditError(f"--arch: cannot import {mod_name!r} ({_first_line(exc)})") from None
    finally:  # the same list object, with the same entries, even if the module rebound it
        path_list[:] = saved
        sys.path = path_list
    try:
        fn = getattr(module, attr)
    except AttributeError:
        raise IdauditError(f"--arch: module {mod_name!r} has no attribute {attr!r}") from None
    if not callable(fn):
        raise IdauditError(f"--arch: {spec} is not callable")
    return fn


def build_arch(spec: str, kwargs: dict[str, Any] | None) -> Any:
    import torch

    fn = import_factory(spec)
    try:
        model = fn(**(kwargs or {}))
    except SystemExit as exc:
        raise IdauditError(f"--arch: the encoder factory exited (SystemExit {exc.code}) "
                           "instead of returning a model") from None
    except Exception as exc:
        raise IdauditError(f"--arch: {spec}(**kwargs) raised {_first_line(exc)}") from None
    if not isinstance(model, torch.nn.Module):
        raise IdauditError(f"--arch: {spec} returned {type(model).__name__}, not a torch nn.Module")
    return model


@dataclass
class LoadedEncoder:
    """An encoder from a file, with the world and training config an idaudit checkpoint
    carries (None / {} for other formats)."""

    module: Any
    world: WorldSpec | None
    train: dict[str, Any]
    path: Path


def load_encoder_file(path: Path, arch: str | None, arch_kwargs: dict[str, Any] | None,
                      trust_pickle: bool, kind: str | None = None) -> LoadedEncoder:
    """Every encoder format: idaudit checkpoint, plain weights + ``arch``, TorchScript,
    ``torch.export`` (.pt2), or — only with ``trust_pickle`` — a pickled module. The format
    is read from the file's bytes, whatever its name."""
    import torch

    kind = kind or sniff(path)
    if kind == "safetensors":
        meta = read_metadata(path)
        if meta.get("format") == CHECKPOINT:
            from .checkpoint import load_checkpoint

            ck = load_checkpoint(path)
            return LoadedEncoder(ck.encoder, ck.world, ck.train, path)
        if arch is None:
            raise IdauditError(f"{path} holds plain weights: pass --arch module.path:factory to "
                               "say which network they belong to")
        from safetensors.torch import load_file

        model = build_arch(arch, arch_kwargs)
        try:
            state = load_file(str(path))
        except Exception as exc:
            raise IdauditError(f"cannot read the weights in {path} ({_first_line(exc)})") \
                from None
        try:
            model.load_state_dict(state)
        except RuntimeError as exc:
            raise IdauditError(f"{path}: the weights do not fit {arch} ({_first_line(exc)})") \
                from None
        return LoadedEncoder(model, None, {}, path)
    if arch is not None:
        raise IdauditError("--arch goes with plain .safetensors weights")
    if kind == "export":
        from .export_archive import load_export_program

        return LoadedEncoder(load_export_program(path, trust_pickle), None, {}, path)
    if kind == "torchscript":
        try:
            return LoadedEncoder(torch.jit.load(str(path), map_location="cpu"), None, {}, path)
        except Exception as exc:
            raise IdauditError(f"cannot load {path} as TorchScript ({_first_line(exc)})") \
                from None
    if kind != "pickle":
        raise IdauditError(f"{path} is not a file idaudit reads (an idaudit checkpoint, "
                           "safetensors weights or arrays, .npz arrays, TorchScript, torch.export)")
    if not trust_pickle:
        raise IdauditError(f"{path} is a pickled file (torch.save); if it holds a module you "
                           "trust, pass --trust-pickle (unpickling runs arbitrary code)")
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=False)
    except Exception as exc:
        raise IdauditError(f"cannot unpickle {path} ({_first_line(exc)})") from None
    if not isinstance(obj, torch.nn.Module):
        raise IdauditError(f"{path} unpickles to {type(obj).__name__}, not an nn.Module "
                           "(a state_dict needs --arch and a .safetensors file)")
    return LoadedEncoder(obj, None, {}, path)


def load_target(target: str | Path, *, arch: str | None = None,
                arch_kwargs: dict[str, Any] | None = None,
                trust_pickle: bool = False) -> Arrays | LoadedEncoder:
    """What a path on the command line holds: arrays (z, h, …) or an encoder."""
    path, kind = _file_kind(target)
    if kind == "npy":
        raise IdauditError(f"{path} is a single .npy array; audit needs z and h together: "
                           "numpy.savez(PATH.npz, z=z, h=h)")
    if kind == "npz":
        if arch is not None:
            raise IdauditError("--arch goes with plain .safetensors weights, not arrays")
        return load_array_file(path, kind)
    if kind == "safetensors":
        meta = read_metadata(path)
        if meta.get("format") == PAIRS_FORMAT:
            raise IdauditError(f"{path} is a world dataset; evaluate an encoder on it with "
                               f"--data {path}")
        if meta.get("format") != CHECKPOINT and arch is None:
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as f:
                keys = set(f.keys())
            if "h" not in keys:
                raise IdauditError(
                    f"{path} is neither an idaudit checkpoint nor an array file with h "
                    f"(found: {', '.join(sorted(keys)) or 'no tensors'}); plain weights need "
                    "--arch module.path:factory")
            return load_array_file(path, kind)
    return load_encoder_file(path, arch, arch_kwargs, trust_pickle, kind)


def _file_kind(target: str | Path) -> tuple[Path, str]:
    """The path of a regular file and what it holds (:func:`sniff`, falling back on the name
    when the content is unreadable, so the named format's reader says what is wrong)."""
    path = Path(target)
    if not path.exists():
        raise IdauditError(f"not found: {path}")
    if path.is_dir():
        raise IdauditError(f"{path} is a directory, not an encoder or array file")
    if not path.is_file():
        raise IdauditError(f"{path} is not a regular file")
    kind = sniff(path)
    if kind == "unknown":
        kind = {".safetensors": "safetensors", ".npz": "npz"}.get(path.suffix.lower(), kind)
    return path, kind


def load_embedding_target(target: str | Path, *, arch: str | None = None,
                          arch_kwargs: dict[str, Any] | None = None,
                          trust_pickle: bool = False) -> np.ndarray | LoadedEncoder:
    """For ``idaudit consistency``: an embedding array ``h`` (a ``.npy``, or ``h`` in an
    ``.npz``/``.safetensors``) or an encoder in any form :func:`load_target` takes."""
    path, kind = _file_kind(target)
    if kind in ("npy", "npz") and arch is not None:
        raise IdauditError("--arch goes with plain .safetensors weights, not arrays")
    if kind == "npy":
        try:
            arr = np.load(path, allow_pickle=False, mmap_mode="r")
        except (ValueError, OSError) as exc:
            raise IdauditError(f"cannot read {path} as .npy ({_first_line(exc)})") from None
        return numeric_array(arr, str(path))
    if kind == "npz":
        try:
            d = _read_npz(path)
        except IdauditError:
            raise
        except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
            raise IdauditError(f"cannot read {path} as .npz ({_first_line(exc)})") from None
        if "h" not in d:
            raise IdauditError(f"{path} has no array h (found: {', '.join(sorted(d)) or 'none'})")
        return numeric_array(d["h"], f"{path}: array 'h'")
    if kind == "safetensors":
        meta = read_metadata(path)
        if meta.get("format") == PAIRS_FORMAT:
            raise IdauditError(f"{path} is a world dataset, not an embedding or an encoder")
        if meta.get("format") != CHECKPOINT and arch is None:
            from safetensors.numpy import load_file

            try:
                d = load_file(str(path))
            except Exception as exc:
                raise IdauditError(f"cannot read the tensors in {path} ({_first_line(exc)})") \
                    from None
            if "h" not in d:
                raise IdauditError(
                    f"{path} is neither an idaudit checkpoint nor an array file with h (found: "
                    f"{', '.join(sorted(d)) or 'no tensors'}); plain weights need --arch")
            return numeric_array(d["h"], f"{path}: array 'h'")
    return load_encoder_file(path, arch, arch_kwargs, trust_pickle, kind)


def world_for_encoder(loaded: LoadedEncoder, world: Any = None, data: str | Path | None = None,
                      options: dict[str, Any] | None = None) -> World:
    """The world to evaluate an encoder on: ``data`` (a pairs file or a Reacher dataset),
    ``world`` (a World, a WorldSpec or a name, with ``options``), else the world an idaudit
    checkpoint was trained on (its dataset found relative to the checkpoint)."""
    from .worlds import World, WorldSpec, as_world, build_world, make_spec

    options = {k: v for k, v in (options or {}).items() if v is not None}
    if data is not None or (world is not None and not isinstance(world, (World, WorldSpec))):
        return build_world(make_spec(world, data=data, **options))
    if options:
        raise IdauditError(f"{', '.join('--' + k.replace('_', '-') for k in sorted(options))} "
                           "need --world")
    if world is not None:
        return as_world(world)
    if loaded.world is not None:
        return build_world(loaded.world, base_dir=loaded.path.parent)
    raise IdauditError("no world to evaluate the encoder on: pass --world … (as in train) "
                       "or --data DATASET (from idaudit world)")
