"""What each kind of file opens to: :class:`LoadedEncoder` (an encoder from a file, with the
embedding choice of its :class:`~idaudit.core.request_parts.LoadOptions`), the openers of encoders
(idaudit checkpoints, weights in ``--arch``, pickled modules, Hugging Face and LeWM
directories, TorchScript and torch.export programs) and of array files, and idaudit's own
file formats, one :class:`~idaudit.core.registered.FileFormat` each (:data:`NPZ` …), whose
``open`` :func:`opener` gives per :class:`~idaudit.loading.filekinds.FileKind`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from idaudit.core.arrayfiles import safetensors_declared
from idaudit.core.errors import IdauditError
from idaudit.core.errors import first_line as _first_line
from idaudit.core.metadata import CHECKPOINT_FORMAT as CHECKPOINT
from idaudit.core.metadata import PAIRS_FORMAT, read_metadata
from idaudit.core.registered import FORMATS, FileFormat
from idaudit.core.request_parts import LoadOptions, encoder_forms
from idaudit.loading import filekinds
from idaudit.loading.architectures import build_arch
from idaudit.loading.arrays import (
    Arrays,
    _declared_of,
    _npz_arrays,
    _read_safetensors_arrays,
    _safetensors_keys,
    arrays_from_mapping,
    check_declared,
    load_array_file,
    numeric_array,
)
from idaudit.loading.filekinds import FileKind, file_format

if TYPE_CHECKING:  # the worlds load only when an encoder is involved
    from idaudit.worlds import WorldSpec

__all__ = ["EXPORT", "HF_DIR", "LEWM_DIR", "LoadedEncoder", "NPY", "NPZ", "PICKLE", "SAFETENSORS",
           "TORCHSCRIPT", "opener"]


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
    """A Hugging Face model directory (:func:`idaudit.loading.model_dirs.load_hf_dir`)."""
    from idaudit.loading.model_dirs import load_hf_dir

    opts.refuse(_WEIGHTS_ONLY, f"a Hugging Face model directory ({path})")
    loaded = _encoder(load_hf_dir(path, opts.trust_pickle), opts, path)
    if (path / "preprocessor_config.json").is_file():
        loaded.preprocessor = path / "preprocessor_config.json"
    return loaded


def _open_lewm_dir(path: Path, opts: LoadOptions, embedding: bool) -> LoadedEncoder:
    """A stable-worldmodel (LeWM) directory: the network its config.json names, its weights."""
    from idaudit.loading.model_dirs import build_lewm_dir, lewm_weights
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
    header = safetensors_declared(path)
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
    from idaudit.loading.torchscript import load_torchscript

    _program_options(opts)
    return _encoder(load_torchscript(path, opts.trust_pickle), opts, path)


def _open_unknown(path: Path, opts: LoadOptions, embedding: bool) -> LoadedEncoder:
    _program_options(opts)
    raise IdauditError(f"{path} is not a file idaudit reads ({encoder_forms()})")


# ---- idaudit's own file formats: one object each ---------------------------------------
# Registered by name, with their help line, in idaudit.core.registered (FORMATS, in the
# order their sniffs are tried); dispatch (:func:`opener`), the trust table
# (:func:`idaudit.loading.trust.policy`), which are programs run in the cage
# (:mod:`idaudit.loading.programs`) and the list of encoder forms are read from them.

_TENSORS_ROW = "idaudit checkpoint, safetensors, .npz, .npy"
_TENSORS_TRUST = (
    "tensors and JSON only; sizes from the headers: an array of more than 2³² elements "
    "refused, the rest (with the audit's float copies of them) checked against free memory",
    "nothing: there is no code to trust")


def _example_pairs() -> tuple[np.ndarray, np.ndarray]:
    """z and h = a rotation of z plus a little noise: 300 rows an audit reads."""
    rng = np.random.default_rng(0)
    z = rng.standard_normal((300, 2))
    h = z @ np.array([[0.6, -0.8], [0.8, 0.6]]) + 0.05 * rng.standard_normal((300, 2))
    return z, h


def _example_npz(path: Path) -> None:
    z, h = _example_pairs()
    with open(path, "wb") as f:  # a file object: numpy adds no .npz to its name
        np.savez(f, z=z, h=h)


def _example_npy(path: Path) -> None:
    with open(path, "wb") as f:
        np.save(f, _example_pairs()[1])


def _example_safetensors(path: Path) -> None:
    from safetensors.numpy import save_file

    z, h = _example_pairs()
    save_file({"z": z, "h": h}, str(path))


def _example_torch_save(path: Path) -> None:
    import torch

    z, h = _example_pairs()
    torch.save({"z": torch.from_numpy(z), "h": torch.from_numpy(h)}, path)


def _builtin(name: str, sniff: Any, open: Any, trust: tuple[str, str], trust_row: str,
             example: Any = None, program: str | None = None) -> FileFormat:
    """An idaudit format: its description is the help line it is registered with."""
    return FileFormat(FORMATS.help(name), sniff, open, trust, example, takes_options=True,
                      program=program, trust_row=trust_row)


SAFETENSORS = _builtin("safetensors", filekinds.sniff_safetensors, _open_safetensors,
                       _TENSORS_TRUST, _TENSORS_ROW, _example_safetensors)
NPZ = _builtin("npz", filekinds.sniff_npz, _open_npz, _TENSORS_TRUST, _TENSORS_ROW,
               _example_npz)
NPY = _builtin("npy", filekinds.sniff_npy, _open_npy, _TENSORS_TRUST, _TENSORS_ROW,
               _example_npy)
TORCHSCRIPT = _builtin(
    "torchscript", filekinds.sniff_torchscript, _open_torchscript, (
        "its source vetted before torch.jit.load and its graphs after: aten and prim "
        "operators only, none that reaches files (from_file, save …), no __setstate__; then "
        "loaded and called in the cage",
        "loaded as it is, in the cage: what it tries beyond its inputs the kernel refuses"),
    "TorchScript", program="a TorchScript program")
EXPORT = _builtin(
    "export", filekinds.sniff_export, _open_export, (
        "loaded only if it is what torch.export.save writes for a plain program (no pickles, "
        "opaque objects, AOTInductor libraries or code strings), nodes held to TorchScript's "
        "operator list; on the torch versions reviewed only; in the cage",
        "torch.export.load as it is, in the cage"),
    "torch.export (.pt2)", program="a torch.export program")
#: a torch.save file is a program only when unpickled whole or built by timm
#: (:func:`idaudit.loading.programs._program` says which)
PICKLE = _builtin(
    "pickle", filekinds.sniff_torch_save, _open_torch_save, (
        "torch.load(weights_only=True), numpy arrays of numbers allowed; compressed zip "
        "members (torch.save writes none) refused; first the bytes it would allocate (zip "
        "members, declared storages, array shapes, pickle objects) from a dry run that "
        "imports nothing, refused beyond free memory; a tensor that declares more elements "
        "than its storage holds (zero or overlapping strides) refused",
        "full unpickling (runs the file's code) in the cage, without the memory check"),
    "torch.save (.pt, .pth, .pth.tar, .ckpt, pytorch_model.bin)", _example_torch_save)
HF_DIR = _builtin(
    "hf_dir", filekinds.sniff_hf_dir, _open_hf_dir, (
        "local files only, no remote code, weights_only; weight files named by an index must "
        "lie in the directory; the network sized on the meta device and refused beyond free "
        "memory; built and called in the cage",
        "no memory check (the cage's limit still holds)"),
    "Hugging Face directory",
    program="a Hugging Face model directory (its network is built from its config)")
LEWM_DIR = _builtin(
    "lewm_dir", filekinds.sniff_lewm_dir, _open_lewm_dir, (
        "every _target_ an nn.Module class of torch, timm, transformers, stable_worldmodel, "
        "stable_pretraining, lejepa or the working directory's project, or a network factory "
        "idaudit lists (stable_pretraining's vit_hf, pretrained false; its result checked to "
        "be an nn.Module), no interpolation (${…}); the network sized on the meta device "
        "before it is built; weights as torch.save; built and called in the cage",
        "any _target_ and interpolation (runs the code they name) in the cage, no memory "
        "check"),
    "stable-worldmodel / LeWM directory",
    program="a stable-worldmodel directory (its network is built from its config)")


def opener(kind: FileKind) -> Any:
    """``open(path, options, embedding)`` of ``kind``: its format's (``unknown``: the one
    that says what idaudit reads)."""
    fmt = file_format(kind)
    return _open_unknown if fmt is None else fmt.open
