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

Here the dispatch; file kinds are sniffed in :mod:`idaudit.loading.filekinds`, array files
read in :mod:`idaudit.loading.arrays`, each kind opened by :mod:`idaudit.loading.opened`, and
programs from files vetted and caged by :mod:`idaudit.loading.programs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from idaudit.core.errors import IdauditError, UsageError, one_line
from idaudit.core.registered import FORMATS
from idaudit.core.request_parts import LoadOptions
from idaudit.loading.arrays import Arrays, arrays_from_mapping, numeric_array
from idaudit.loading.filekinds import FileKind, _file_kind
from idaudit.loading.opened import LoadedEncoder, _embedding, _encoder, opener
from idaudit.loading.programs import _open_program, _program

if TYPE_CHECKING:  # the worlds load only when an encoder is involved
    from idaudit.worlds import World, WorldSpec

__all__ = ["load_embedding_target", "load_target", "open_target", "plugin_format", "where_to_embed",
           "world_for_encoder"]


def _load_options(options: LoadOptions | None) -> LoadOptions:
    """``options`` (None: the defaults); any :class:`LoadOptions`, requests included."""
    if options is None:
        return LoadOptions()
    if not isinstance(options, LoadOptions):
        raise IdauditError(f"options must be a LoadOptions, got {type(options).__name__}")
    return options


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
    claims = [name for name in sorted(FORMATS.plugins())
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
        return opener(kind)(path, opts, embedding)
    return _open_program(path, kind, opts, embedding, program, arrays_refused)


def load_target(target: str | Path, options: LoadOptions | None = None
                ) -> Arrays | LoadedEncoder:
    """:func:`open_target` of a path: arrays (z, h, …) or an encoder."""
    return open_target(target, options)


def load_embedding_target(target: str | Path, options: LoadOptions | None = None
                          ) -> np.ndarray | LoadedEncoder:
    """:func:`open_target` for ``idaudit consistency``: an embedding array ``h`` (a ``.npy``,
    or ``h`` in an ``.npz``/``.safetensors``/torch.save dict) or an encoder."""
    return open_target(target, options, embedding=True)


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
