"""Programs from files — code that runs when a file is loaded or called — vetted here without
running any of it, then loaded and called in their cage (:mod:`idaudit.loading.cage`); the
cage's own process sets :data:`IN_CAGE` and opens them as they are."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from idaudit.core.errors import IdauditError
from idaudit.core.metadata import CHECKPOINT_FORMAT as CHECKPOINT
from idaudit.core.metadata import PAIRS_FORMAT, read_metadata
from idaudit.core.request_parts import LoadOptions
from idaudit.loading.arrays import (
    ARRAY_KEYS,
    Arrays,
    _Entry,
    arrays_from_mapping,
    check_declared,
    numeric_array,
)
from idaudit.loading.filekinds import FileKind, file_format
from idaudit.loading.opened import _WEIGHTS_ONLY, LoadedEncoder, _program_options, opener

if TYPE_CHECKING:
    from idaudit.loading.wire import Declared as Sent

__all__ = ["IN_CAGE"]


#: set in a cage's own process: there programs are opened as they are
IN_CAGE = False


def _program(path: Path, kind: FileKind, opts: LoadOptions) -> str | None:
    """What makes ``path`` a program — code that runs when it is loaded or called: TorchScript,
    torch.export, a network built from a config (Hugging Face, LeWM, ``--arch timm:``), a
    pickle unpickled whole (``--trust-code``) — or None for data."""
    if IN_CAGE:
        return None
    fmt = file_format(kind)
    if fmt is not None and fmt.program is not None:  # a program whatever the options
        return fmt.program
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
    from idaudit.loading.architectures import cwd_importable, optional_module
    from idaudit.loading.hydra_targets import vet_targets
    from idaudit.loading.model_dirs import hf_weight_files, lewm_weights, read_config
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
    from idaudit.loading.export_archive import vet_export_file
    from idaudit.loading.torchscript import vet_torchscript_file

    if kind is FileKind.TORCHSCRIPT:
        vet_torchscript_file(path)
    elif kind is FileKind.EXPORT:
        vet_export_file(path)


def _project_paths(path: Path, kind: FileKind, opts: LoadOptions) -> list[str]:
    """The user's own modules in the working directory a program's load imports (``--embed``,
    a LeWM config's ``_target_``s; trusted, every module there, as a pickle may name any):
    the files a cage may read there, its data files never."""
    from idaudit.loading.model_dirs import read_config

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
        return opener(kind)(path, opts, embedding)
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
