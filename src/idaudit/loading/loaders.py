"""Bring an encoder (or its embeddings) from wherever a project keeps it.

``load_target`` turns a path into :class:`Arrays` or a :class:`LoadedEncoder`, opened as a
:class:`LoadOptions` says; audit, plan and consistency checks all start here:

* ``.npz``, ``.safetensors`` or torch.save arrays with ``z``, ``h`` (optionally ``h_prime``,
  ``rho``, ``circular``, ``x``; the paper's ``run.pt``) — no world needed;
* an idaudit checkpoint (safetensors with idaudit metadata) — its world comes with it;
* weights — safetensors or a torch.save file (``.pt``, ``.pth``, ``.pth.tar``, ``.ckpt``: I-JEPA,
  V-JEPA 2, Lightning, torch.compile'd or DDP models; :mod:`idaudit.loading.state_dicts`) — with
  ``--arch module.path:factory`` or ``--arch timm:NAME`` (:mod:`idaudit.loading.architectures`);
* a Hugging Face model directory, or a stable-worldmodel / LeWM one (weights.pt + config.json);
* TorchScript (``torch.jit.load``) or a ``torch.export`` program (``.pt2``);
* a pickled module, or an object of the user's class, only with ``trust_pickle``.

torch.save files are read with ``torch.load(weights_only=True)``: no code runs without
``trust_pickle``. Which output of the encoder is the embedding (``pool``, ``output``,
``embed``): :mod:`idaudit.models.embedding_choice`.
"""

from __future__ import annotations

import dataclasses
import math
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from idaudit.core.errors import IdauditError, UsageError, check_seed, latent_indices, one_line
from idaudit.core.errors import first_line as _first_line
from idaudit.core.jsontext import parse_json_object  # the CLI imports it from here too
from idaudit.core.limits import check_elements, check_view
from idaudit.core.metadata import CHECKPOINT_FORMAT as CHECKPOINT
from idaudit.core.metadata import PAIRS_FORMAT, read_metadata
from idaudit.core.registered import FORMATS
from idaudit.core.requests import LoadOptions, encoder_forms
from idaudit.loading.architectures import build_arch, import_factory  # noqa: F401 - re-exported

if TYPE_CHECKING:  # torch and the worlds load only when an encoder is involved
    from idaudit.loading.wire import Declared as Sent
    from idaudit.worlds import World, WorldSpec

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
        # TorchScript: ARCHIVE/code/… (the archive's own name may be "code": torch.save of
        # code.pt writes code/data.pkl, which is no TorchScript)
        if any(n.partition("/")[2].startswith("code/") for n in names):
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
    (:func:`~idaudit.maths.metrics.fit_dtype`)."""
    from idaudit.maths.metrics import fit_dtype

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


def _load_options(options: LoadOptions | None) -> LoadOptions:
    """``options`` (None: the defaults); any :class:`LoadOptions`, requests included."""
    if options is None:
        return LoadOptions()
    if not isinstance(options, LoadOptions):
        raise IdauditError(f"options must be a LoadOptions, got {type(options).__name__}")
    return options


@dataclass
class LoadedEncoder:
    """An encoder from a file, with the world and training config an idaudit checkpoint
    carries (None / {} for other formats). ``module`` carries its embedding choice (a
    :class:`~idaudit.models.embedding_choice.ChosenEmbedding` when pool/output/embed were given);
    ``preprocessor``: the file that says how its images are normalised (a Hugging Face
    directory's preprocessor_config.json), ``noted`` once that was said on the console."""

    module: Any
    world: WorldSpec | None
    train: dict[str, Any]
    path: Path
    preprocessor: Path | None = None
    noted: bool = False


def _encoder(module: Any, opts: LoadOptions, path: Path, world: Any = None,
             train: dict[str, Any] | None = None) -> LoadedEncoder:
    """The loaded module with the embedding choice of ``opts``."""
    if opts.chooses_embedding():
        from idaudit.loading.architectures import import_factory, timm_pool_hint
        from idaudit.models.embedding_choice import ChosenEmbedding

        if isinstance(opts.embed, dict):
            raise IdauditError("--embed as several functions (a dict, one target each) applies "
                               "to an audit; give one function here")
        fn = import_factory(opts.embed, "--embed", "function") if isinstance(opts.embed, str) \
            else opts.embed
        module = ChosenEmbedding(module, pool=opts.pool, output=opts.output, embed_fn=fn,
                                 hint=timm_pool_hint(opts.arch))
    return LoadedEncoder(module, world, train or {}, path)


def _checkpoint_encoder(ck: Any, opts: LoadOptions, path: Path) -> LoadedEncoder:
    """An idaudit checkpoint's encoder; ``--output backbone|projector`` chooses what a
    checkpoint trained with a projector gives (the backbone's h by default)."""
    from idaudit.models.encoders import Projected

    if opts.output is not None:
        if not isinstance(ck.encoder, Projected):
            raise IdauditError(f"--output does not apply to {path}: an idaudit checkpoint "
                               "without a projector has one output")
        ck.encoder.output = str(opts.output)
        opts = dataclasses.replace(opts, output=None)
    return _encoder(ck.encoder, opts, path, ck.world, ck.train)


_WEIGHTS_ONLY = ("arch", "arch_kwargs", "key", "prefix")


def _weights_into(model: Any, obj: Any, opts: LoadOptions, arch: str, source: str) -> None:
    from idaudit.loading.state_dicts import choose_state_dict, load_weights, prepare_state

    state = prepare_state(choose_state_dict(obj, source), opts.prefix, source)
    load_weights(model, state, arch, source)


def _torch_save_file(path: Path, opts: LoadOptions) -> dict[str, Any] | LoadedEncoder:
    """A torch.save file: its arrays (a dict with h), or its weights in ``opts.arch``, or —
    trusted — the module pickled in it."""
    import torch

    from idaudit.loading.state_dicts import (
        find_entry,
        holds_arrays,
        is_state_dict,
        read_torch_file,
        state_dict_candidates,
    )

    obj = read_torch_file(path, opts.trust_pickle)
    source = str(path)
    if opts.key is not None:
        obj = find_entry(obj, opts.key, source)
        source = f"{path} entry {opts.key!r}"
    if isinstance(obj, torch.nn.Module):
        opts.refuse(("arch", "arch_kwargs", "prefix"), f"a pickled module ({path})")
        return _encoder(obj, opts, path)
    if opts.arch is None:
        if holds_arrays(obj):
            opts.refuse_for_arrays(path)
            return dict(obj)
        found = ["the file itself"] if is_state_dict(obj) else state_dict_candidates(obj)
        if found:
            several = f" and choose one with --key ({', '.join(found)})" if len(found) > 1 else ""
            raise IdauditError(f"{source} holds weights (a state dict); pass --arch "
                               f"module.path:factory or timm:NAME for the network they belong "
                               f"to{several}")
        what = f"a dict with entries {', '.join(map(str, list(obj)[:10]))}" \
            if isinstance(obj, dict) else type(obj).__name__
        raise IdauditError(f"{source} holds {what}: no module, state dict or arrays h; choose "
                           "an entry with --key")
    model = build_arch(opts.arch, opts.arch_kwargs)
    _weights_into(model, obj, opts, opts.arch, source)
    return _encoder(model, opts, path)


def _safetensors_weights(path: Path, opts: LoadOptions) -> LoadedEncoder:
    from safetensors.torch import load_file

    opts.refuse(("key",), f"safetensors weights ({path} is one state dict)")
    model = build_arch(opts.arch, opts.arch_kwargs)
    try:
        state = load_file(str(path))
    except Exception as exc:
        raise IdauditError(f"cannot read the weights in {path} ({_first_line(exc)})") from None
    _weights_into(model, state, opts, opts.arch, str(path))
    return _encoder(model, opts, path)


def _open_hf_dir(path: Path, opts: LoadOptions, embedding: bool) -> LoadedEncoder:
    """A Hugging Face model directory (:func:`idaudit.loading.architectures.load_hf_dir`)."""
    from idaudit.loading.architectures import load_hf_dir

    opts.refuse(_WEIGHTS_ONLY, f"a Hugging Face model directory ({path})")
    loaded = _encoder(load_hf_dir(path, opts.trust_pickle), opts, path)
    if (path / "preprocessor_config.json").is_file():
        loaded.preprocessor = path / "preprocessor_config.json"
    return loaded


def _open_lewm_dir(path: Path, opts: LoadOptions, embedding: bool) -> LoadedEncoder:
    """A stable-worldmodel (LeWM) directory: the network its config.json names, its weights."""
    from idaudit.loading.architectures import build_lewm_dir, lewm_weights
    from idaudit.loading.state_dicts import find_entry, read_torch_file

    opts.refuse(("arch", "arch_kwargs"), f"a stable-worldmodel directory ({path}: its "
                "config.json names the network)")
    weights = lewm_weights(path, opts.weights)  # before the network is built: a refusal is cheap
    model = build_lewm_dir(path, opts.trust_pickle)
    obj = read_torch_file(weights, opts.trust_pickle)
    source = str(weights)
    if opts.key is not None:
        obj = find_entry(obj, opts.key, source)
        source = f"{weights} entry {opts.key!r}"
    _weights_into(model, obj, opts, f"the network of {path / 'config.json'}", source)
    return _encoder(model, opts, path)


class FileKind(StrEnum):
    """What a target is, from its bytes (never its name; :func:`sniff`), or a model
    directory: the one enumeration :func:`open_target` dispatches on."""

    NPY = "npy"
    NPZ = "npz"
    SAFETENSORS = "safetensors"
    TORCH_SAVE = "pickle"
    TORCHSCRIPT = "torchscript"
    EXPORT = "export"
    HF_DIR = "hf_dir"
    LEWM_DIR = "lewm_dir"
    UNKNOWN = "unknown"


def _file_kind(target: str | Path) -> tuple[Path, FileKind]:
    """The path and what it holds: :func:`sniff` for a regular file (falling back on the name
    when the content is unreadable, so the named format's reader says what is wrong), or
    ``hf_dir`` / ``lewm_dir`` for a model directory."""
    path = Path(target)
    if not path.exists():
        raise IdauditError(f"not found: {path}")
    if path.is_dir():
        from idaudit.loading.architectures import model_dir_kind

        kind = model_dir_kind(path)
        if kind is None:
            raise IdauditError(f"{path} is a directory, not an encoder or array file (nor a model "
                               "directory: config.json with model.safetensors or "
                               "pytorch_model.bin, or with weights.pt and a _target_)")
        return path, FileKind(f"{kind}_dir")
    if not path.is_file():
        raise IdauditError(f"{path} is not a regular file")
    kind = FileKind(sniff(path))
    if kind is FileKind.UNKNOWN:
        kind = {".safetensors": FileKind.SAFETENSORS, ".npz": FileKind.NPZ}.get(
            path.suffix.lower(), kind)
    return path, kind


def _embedding(arrays: dict[str, Any], path: Path) -> np.ndarray:
    if "h" not in arrays:
        raise IdauditError(f"{path} has no array h (found: {', '.join(sorted(arrays)) or 'none'})")
    return numeric_array(arrays["h"], f"{path}: array 'h'")


def _open_npy(path: Path, opts: LoadOptions, embedding: bool) -> np.ndarray:
    if not embedding:
        raise IdauditError(f"{path} is a single .npy array; audit needs z and h together: "
                           "numpy.savez(PATH.npz, z=z, h=h)")
    opts.refuse_for_arrays(path)
    try:
        arr = np.load(path, allow_pickle=False, mmap_mode="r")
    except (ValueError, OSError) as exc:
        raise IdauditError(f"cannot read {path} as .npy ({_first_line(exc)})") from None
    check_declared({"h": (arr.shape, arr.dtype)}, str(path))  # mapped: its copy only
    return numeric_array(arr, str(path))


def _open_npz(path: Path, opts: LoadOptions, embedding: bool) -> Arrays | np.ndarray:
    opts.refuse_for_arrays(path)
    if not embedding:
        return load_array_file(path, FileKind.NPZ)
    return _embedding(_npz_arrays(path), path)


def _open_safetensors(path: Path, opts: LoadOptions, embedding: bool
                      ) -> Arrays | np.ndarray | LoadedEncoder:
    """An idaudit checkpoint, arrays with h (their declared sizes checked from the header
    before the file is mapped, :func:`check_declared`), or — with ``--arch`` — plain
    weights."""
    header = _safetensors_declared(path)
    if header is not None and opts.arch is None and \
            header[0].get("format") not in (PAIRS_FORMAT, CHECKPOINT) and "h" in header[1]:
        check_declared(header[1], str(path), header[2])
    meta = read_metadata(path)
    if meta.get("format") == PAIRS_FORMAT:
        raise IdauditError(f"{path} is a world dataset, not an embedding or an encoder"
                           if embedding else f"{path} is a world dataset; evaluate an encoder "
                           f"on it with --data {path}")
    if meta.get("format") == CHECKPOINT:
        from idaudit.models.checkpoint import load_checkpoint

        opts.refuse(("key", "prefix"), f"an idaudit checkpoint ({path})")
        return _checkpoint_encoder(load_checkpoint(path), opts, path)
    if opts.arch is not None:
        return _safetensors_weights(path, opts)
    keys = _safetensors_keys(path)
    if "h" not in keys:
        raise IdauditError(f"{path} is neither an idaudit checkpoint nor an array file with h "
                           f"(found: {', '.join(sorted(keys)) or 'no tensors'}); plain weights "
                           "need --arch module.path:factory")
    opts.refuse_for_arrays(path)
    if embedding:
        return numeric_array(_read_safetensors_arrays(path)["h"], f"{path}: array 'h'")
    return load_array_file(path, FileKind.SAFETENSORS)


def _open_torch_save(path: Path, opts: LoadOptions, embedding: bool
                     ) -> Arrays | np.ndarray | LoadedEncoder:
    got = _torch_save_file(path, opts)  # its tensors' views checked before torch.load
    if isinstance(got, LoadedEncoder):
        return got
    check_declared(_declared_of(got), str(path))  # read already: the audit's copies
    return numeric_array(got["h"], f"{path}: array 'h'") if embedding else \
        arrays_from_mapping(got, str(path))


def _program_options(opts: LoadOptions) -> None:
    """TorchScript and torch.export files hold a whole program: no weight options apply."""
    if opts.arch is not None:
        raise IdauditError("--arch goes with plain weights (.safetensors or a torch.save state "
                           "dict)")
    opts.refuse(("key", "prefix"), "TorchScript or torch.export files (they hold no state dict "
                "to choose from)")


def _open_export(path: Path, opts: LoadOptions, embedding: bool) -> LoadedEncoder:
    from idaudit.loading.export_archive import load_export_program

    _program_options(opts)
    return _encoder(load_export_program(path, opts.trust_pickle), opts, path)


def _open_torchscript(path: Path, opts: LoadOptions, embedding: bool) -> LoadedEncoder:
    from idaudit.loading.export_archive import load_torchscript

    _program_options(opts)
    return _encoder(load_torchscript(path, opts.trust_pickle), opts, path)


def _open_unknown(path: Path, opts: LoadOptions, embedding: bool) -> LoadedEncoder:
    _program_options(opts)
    raise IdauditError(f"{path} is not a file idaudit reads ({encoder_forms()})")


def plugin_format(path: Path) -> str | None:
    """The plugin file format (``idaudit.formats`` entry points) whose ``sniff`` claims
    ``path``, tried only on files no built-in format recognises; None if none does.

    Args:
        path: a regular file.

    Returns:
        The format's registered name, or None.
    """
    if not FORMATS.plugins():
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as exc:
        raise IdauditError(f"cannot read {path} ({exc.strerror})") from None
    claims = [name for name in FORMATS.names()
              if _plugin_call(name, path, lambda fmt: fmt.sniff(path, head), "recognise")]
    if len(claims) > 1:
        raise UsageError(f"{path} is claimed by {len(claims)} plugin file formats: "
                         f"{', '.join(claims)}")
    return claims[0] if claims else None


def _plugin_call(name: str, path: Path, call: Any, doing: str) -> Any:
    """``call(format)`` for plugin format ``name``; what it raises other than an
    :class:`IdauditError` becomes one line naming the plugin."""
    fmt = FORMATS.get(name)
    try:
        return call(fmt)
    except IdauditError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's code may raise anything
        raise UsageError(f"plugin file format {name!r} ({FORMATS.origin(name)}) could not "
                         f"{doing} {path}: {type(exc).__name__}: {one_line(str(exc))}") from None


def _open_plugin(path: Path, name: str, opts: LoadOptions, embedding: bool
                 ) -> Arrays | np.ndarray:
    """A file of plugin format ``name``: its arrays (or, ``embedding``, its ``h``)."""
    opts.refuse_all(f"{path} (a {name!r} file, read by a plugin: its arrays are audited as "
                    "they are)")
    got = _plugin_call(name, path, lambda fmt: fmt.open(path, embedding), "read")
    if isinstance(got, Arrays):
        return got.h if embedding else got
    if embedding and not isinstance(got, Mapping):
        return numeric_array(got, f"{path} (plugin file format {name!r})")
    if not isinstance(got, Mapping):
        raise UsageError(f"plugin file format {name!r} ({FORMATS.origin(name)}) gave "
                         f"{type(got).__name__} for {path}, not a mapping of arrays")
    return _embedding(dict(got), path) if embedding else arrays_from_mapping(dict(got), str(path))



_OPENERS = {FileKind.NPY: _open_npy, FileKind.NPZ: _open_npz,
            FileKind.SAFETENSORS: _open_safetensors, FileKind.TORCH_SAVE: _open_torch_save,
            FileKind.TORCHSCRIPT: _open_torchscript, FileKind.EXPORT: _open_export,
            FileKind.UNKNOWN: _open_unknown, FileKind.HF_DIR: _open_hf_dir,
            FileKind.LEWM_DIR: _open_lewm_dir}


def _is_array(obj: Any) -> bool:
    return isinstance(obj, np.ndarray) or (hasattr(obj, "__array__") and not callable(obj))


def open_target(target: Any, options: LoadOptions | None = None, embedding: bool = False,
                *, arrays_refused: str | None = None) -> Arrays | LoadedEncoder | np.ndarray:
    """What a target holds, opened as ``options`` say (a :class:`LoadOptions`, or any request
    that is one): a path (by :class:`FileKind`, read from its bytes) gives :class:`Arrays` or
    a :class:`LoadedEncoder`; an ``nn.Module`` or callable gives a :class:`LoadedEncoder`.
    ``embedding`` (consistency): an array file or array gives its embedding ``h`` instead.

    Args:
        target: a path, an ``nn.Module`` or callable, or (``embedding``) an array.
        options: how it is opened.
        embedding: open an array file as its embedding ``h``.
        arrays_refused: where the caller cannot take arrays (``--world`` given to an
            audit), the line that refuses them: a program in its cage that answers with
            arrays is refused with it from its answer's header, before a byte of them is read
            (other files: the caller refuses what it gets, as before).

    Returns:
        Arrays, an encoder, or (``embedding``) an array.
    """
    opts = _load_options(options)
    if not isinstance(target, (str, Path)):
        if embedding and _is_array(target):
            return target
        opts.refuse(("arch", "arch_kwargs", "key", "prefix", "weights"),
                    f"an encoder given as a Python {type(target).__name__} (they open files)")
        return _encoder(target, opts, Path("encoder"))
    path, kind = _file_kind(target)
    if kind is not FileKind.LEWM_DIR:
        opts.refuse(("weights",), f"{path} (it chooses the weights file of a LeWM directory "
                    "that holds several)")
    if kind is FileKind.UNKNOWN and (plugged := plugin_format(path)) is not None:
        return _open_plugin(path, plugged, opts, embedding)
    program = _program(path, kind, opts)
    if program is None:
        opts.refuse(("time_limit",), f"{path} (it limits programs from files, which run in "
                    "the cage; this file holds no program)")
        return _OPENERS[kind](path, opts, embedding)
    return _open_program(path, kind, opts, embedding, program, arrays_refused)


#: set in a cage's own process: there programs are opened as they are
IN_CAGE = False

_PROGRAMS = {FileKind.TORCHSCRIPT: "a TorchScript program", FileKind.EXPORT:
             "a torch.export program", FileKind.HF_DIR: "a Hugging Face model directory (its "
             "network is built from its config)", FileKind.LEWM_DIR: "a stable-worldmodel "
             "directory (its network is built from its config)"}


def _program(path: Path, kind: FileKind, opts: LoadOptions) -> str | None:
    """What makes ``path`` a program — code that runs when it is loaded or called: TorchScript,
    torch.export, a network built from a config (Hugging Face, LeWM, ``--arch timm:``), a
    pickle unpickled whole (``--trust-code``) — or None for data."""
    if IN_CAGE:
        return None
    if kind in _PROGRAMS:
        return _PROGRAMS[kind]
    timm = (opts.arch or "").startswith("timm:")
    if kind is FileKind.TORCH_SAVE and (opts.trust_pickle or timm):
        return "a torch.save file unpickled whole (--trust-code)" if opts.trust_pickle else \
            f"weights for {opts.arch} (timm builds the network)"
    if kind is FileKind.SAFETENSORS and timm and \
            read_metadata(path).get("format") not in (CHECKPOINT, PAIRS_FORMAT):
        return f"weights for {opts.arch} (timm builds the network)"
    return None


def _vet_program(path: Path, kind: FileKind, opts: LoadOptions) -> None:
    """The first layer: what each reader checks of a program's file without running any of
    it, here, before a cage's process starts (the cage's process checks it all again)."""
    from idaudit.loading.architectures import (
        cwd_importable,
        hf_weight_files,
        lewm_weights,
        optional_module,
        read_config,
        vet_targets,
    )
    from idaudit.loading.trust import check_torch_file

    if kind in (FileKind.TORCHSCRIPT, FileKind.EXPORT):
        _program_options(opts)
    elif kind is FileKind.HF_DIR:
        opts.refuse(_WEIGHTS_ONLY, f"a Hugging Face model directory ({path})")
        for f in hf_weight_files(path):
            if f.suffix == ".bin":
                check_torch_file(f, opts.trust_pickle)
    elif kind is FileKind.LEWM_DIR:
        opts.refuse(("arch", "arch_kwargs"), f"a stable-worldmodel directory ({path}: its "
                    "config.json names the network)")
        check_torch_file(lewm_weights(path, opts.weights), opts.trust_pickle)
        optional_module("hydra", "hydra", f"{path} (a stable-worldmodel directory)")
        if not opts.trust_pickle:
            with cwd_importable():
                vet_targets(read_config(path), str(path / "config.json"))
    elif kind is FileKind.TORCH_SAVE:
        check_torch_file(path, opts.trust_pickle)
    if opts.trust_pickle:
        return
    from idaudit.loading.export_archive import vet_export_file, vet_torchscript_file

    if kind is FileKind.TORCHSCRIPT:
        vet_torchscript_file(path)
    elif kind is FileKind.EXPORT:
        vet_export_file(path)


def _project_paths(path: Path, kind: FileKind, opts: LoadOptions) -> list[str]:
    """The user's own modules in the working directory a program's load imports (``--embed``,
    a LeWM config's ``_target_``s; trusted, every module there, as a pickle may name any):
    the files a cage may read there, its data files never."""
    from idaudit.loading.architectures import read_config

    tops = {opts.embed.partition(":")[0].split(".")[0]} if isinstance(opts.embed, str) else set()
    if kind is FileKind.LEWM_DIR:
        def targets(node: Any) -> None:
            if isinstance(node, dict):
                if isinstance(node.get("_target_"), str):
                    tops.add(node["_target_"].split(".")[0])
                for v in node.values():
                    targets(v)
            elif isinstance(node, list):
                for v in node:
                    targets(v)
        targets(read_config(path))
    cwd = Path.cwd()
    if opts.trust_pickle:  # a whole pickle may name any class of the project: all its modules
        return [str(p) for p in sorted(cwd.iterdir()) if (p.suffix == ".py" and p.is_file())
                or (p / "__init__.py").is_file()]
    found = [str(p) for top in sorted(tops) for p in (cwd / f"{top}.py", cwd / top)
             if p.is_file() or (p / "__init__.py").is_file()]
    return found + [p for top in sorted(tops) if (p := _module_path(top)) is not None]


def _module_path(top: str) -> str | None:
    """Where a top-level module of the import path lives (its package directory or its file),
    found without importing it (no code of it runs here); None where it is not on the path."""
    import importlib.machinery

    try:
        spec = importlib.machinery.PathFinder.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not Path(spec.origin).is_absolute():
        return None
    return str(Path(spec.origin).parent if spec.submodule_search_locations else spec.origin)


def _answered_arrays(path: Path, embedding: bool, refused: str | None
                     ) -> Callable[[list[Sent]], None]:
    """The check of the arrays a caged load answers with, from its header (before a byte of
    them is read): refused with ``refused`` where the caller cannot take arrays; otherwise
    only the names a load sends (:data:`ARRAY_KEYS` under ``arrays``, or ``embedding``), and
    as a file declaring them is (:func:`check_declared`: their elements, and the memory
    reading them and the audit's copies take).

    Args:
        path: the target (named in refusals).
        embedding: the load was asked for an embedding (``{"embedding": h}``).
        refused: the caller's line refusing arrays, or None where they apply.

    Returns:
        The check, for :meth:`idaudit.loading.cage.Cage.result`.
    """
    from idaudit.loading.wire import WireError

    def check(declared: list[Sent]) -> None:
        if declared and refused is not None:
            raise IdauditError(refused)
        entries: dict[str, _Entry] = {}
        for place, dtype, shape in declared:
            top, _, name = place.partition("/")
            if not (place == "embedding" if embedding else
                    top == "arrays" and name in ARRAY_KEYS and name not in entries):
                raise WireError(f"an array at {place[:80]!r}, where a load answers with "
                                + ("its embedding" if embedding else "arrays named "
                                   + ", ".join(ARRAY_KEYS)))
            entries["h" if embedding else name] = (shape, np.dtype(dtype))
        check_declared(entries, str(path), sum(math.prod(s) * d.itemsize
                                               for s, d in entries.values()))
    return check


def _open_program(path: Path, kind: FileKind, opts: LoadOptions, embedding: bool,
                  what: str, arrays_refused: str | None = None
                  ) -> Arrays | LoadedEncoder | np.ndarray:
    """A program from a file, loaded and called in its cage (:mod:`idaudit.loading.cage`);
    where no cage can be built, refused unless trusted (then opened here). A torch.save file
    unpickled whole may answer with arrays: checked from the answer's header
    (:func:`_answered_arrays`, ``arrays_refused`` where the caller takes none); other
    programs answer with none."""
    from idaudit.loading.confine import why_no_cage

    why = why_no_cage()
    if why is not None:
        if not opts.trust_pickle:
            raise IdauditError(f"{path} is {what}: idaudit runs a program from a file only in "
                               f"its cage, and none can be built here ({why}); --trust-code "
                               "runs it in this process with your permissions (for a file you "
                               "trust)")
        opts.refuse(("time_limit",), f"{path} run without a cage (--trust-code where none "
                    "can be built)")
        return _OPENERS[kind](path, opts, embedding)
    if opts.embed is not None and not isinstance(opts.embed, str):
        raise IdauditError(f"{path} is {what}, run in its cage: name its --embed function as "
                           "module:function there (a function of this process cannot be sent "
                           "to it)", library=f"{path} is {what}, run in its cage: give embed= "
                           "as the name module:function there (a function of this process "
                           "cannot be sent to it)")
    from idaudit.loading.zygote import zygote

    zygote()  # started first: its torch import overlaps this process's, and the vetting
    from idaudit.core.defaults import CAGE_SECONDS
    from idaudit.loading.cage import Cage, CagedModule

    _vet_program(path, kind, opts)

    project = _project_paths(path, kind, opts)
    cwd = str(Path.cwd())
    inside = dataclasses.replace(opts, time_limit=None)  # the cage applies it
    cage = Cage(path.resolve(), dataclasses.asdict(inside), embedding,
                read=[str(path.resolve())] + project, listing=[cwd] if project else [],
                seconds=opts.time_limit or CAGE_SECONDS)
    if kind is FileKind.TORCH_SAVE:  # unpickled whole: arrays, or a module
        opened = cage.result(_answered_arrays(path, embedding, arrays_refused))
        if "arrays" in opened:
            cage.close()
            return arrays_from_mapping(opened["arrays"], str(path))
        if "embedding" in opened:
            cage.close()
            return numeric_array(opened["embedding"], f"{path}: array 'h'")
    loaded = LoadedEncoder(CagedModule(cage), None, {}, path)
    if kind is FileKind.HF_DIR and (path / "preprocessor_config.json").is_file():
        loaded.preprocessor = path / "preprocessor_config.json"
    return loaded


def load_target(target: str | Path, options: LoadOptions | None = None
                ) -> Arrays | LoadedEncoder:
    """:func:`open_target` of a path: arrays (z, h, …) or an encoder."""
    return open_target(target, options)


def load_embedding_target(target: str | Path, options: LoadOptions | None = None
                          ) -> np.ndarray | LoadedEncoder:
    """:func:`open_target` for ``idaudit consistency``: an embedding array ``h`` (a ``.npy``,
    or ``h`` in an ``.npz``/``.safetensors``/torch.save dict) or an encoder."""
    return open_target(target, options, embedding=True)


def _safetensors_keys(path: Path) -> set[str]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return set(f.keys())
    except Exception as exc:
        raise IdauditError(f"cannot read the tensors in {path} ({_first_line(exc)})") from None


def where_to_embed(loaded: LoadedEncoder, world: Any = None, data: str | Path | None = None,
                   options: dict[str, Any] | None = None) -> tuple[World | WorldSpec, Path | None]:
    """Where to evaluate an encoder, not yet built: (a World or a validated WorldSpec, the
    directory its relative dataset paths are found from). ``data`` (a pairs file or a Reacher
    dataset), ``world`` (a World, a WorldSpec or a name, with ``options``), else the world an
    idaudit checkpoint was trained on (its dataset found relative to the checkpoint)."""
    from idaudit.worlds import World, WorldSpec, make_spec

    options = {k: v for k, v in (options or {}).items() if v is not None}
    if data is not None or (world is not None and not isinstance(world, (World, WorldSpec))):
        return make_spec(world, data=data, **options), None
    if options:
        raise IdauditError(f"{', '.join('--' + k.replace('_', '-') for k in sorted(options))} "
                           "need --world")
    if world is not None:
        return world, None
    if loaded.world is not None:
        return loaded.world, loaded.path.parent
    raise IdauditError("no world to evaluate the encoder on: pass --world … (as in train) "
                       "or --data DATASET (from idaudit world)")


def world_for_encoder(loaded: LoadedEncoder, world: Any = None, data: str | Path | None = None,
                      options: dict[str, Any] | None = None) -> World:
    """The world :func:`where_to_embed` names, built."""
    from idaudit.worlds import as_world

    where, base_dir = where_to_embed(loaded, world, data, options)
    return as_world(where, base_dir)
