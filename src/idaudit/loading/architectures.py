"""The networks weights are loaded into, and model directories that bring their own.

* ``module.path:factory`` (``--arch``, with ``--arch-kwargs``): the module may come from the
  working directory, searched after the installed packages and only while it is imported
  (:func:`cwd_importable`);
* ``timm:NAME``: ``timm.create_model(NAME, pretrained=False, **kwargs)`` (never a download);
* a Hugging Face model directory (``config.json`` + ``model.safetensors`` or
  ``pytorch_model.bin``): ``transformers.AutoModel.from_pretrained`` on the local files only,
  ``weights_only``, no remote code, float32;
* a stable-worldmodel / LeWM directory (``weights.pt`` + ``config.json`` with ``_target_``):
  ``hydra.utils.instantiate``; untrusted, every ``_target_`` must name an ``nn.Module`` class
  (a ``_target_`` may name any callable, ``os.system`` as well) and no key or value may hold
  an interpolation (``${…}``: Hydra resolves it first, into nodes never vetted).

timm and transformers come with the ``vision`` extra, hydra with ``hydra``; each is imported
only here, when asked for, and a missing one is a one-line error naming the extra.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from idaudit.core.errors import IdauditError, printable
from idaudit.core.io import first_line as _first_line

HF_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
              "pytorch_model.bin.index.json")
_TIMM_REFUSED = ("pretrained", "pretrained_cfg", "pretrained_cfg_overlay", "checkpoint_path")
#: a timm model name, optionally with a pretrained tag (vit_small_patch16_224.augreg_in21k):
#: no source prefix (hf-hub:ORG/NAME downloads a config, local-dir:PATH reads one from anywhere)
_TIMM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]*(\.[A-Za-z0-9_\-]+)?")


@contextmanager
def cwd_importable() -> Iterator[None]:
    """The working directory importable inside the block, searched after the installed
    packages (a stray scipy.py never shadows scipy); ``sys.path`` is restored exactly after
    (the same list object, the same entries, even if an import rebound it)."""
    path_list = sys.path
    saved = list(path_list)
    cwd = os.getcwd()
    if not any(p in ("", ".", cwd) for p in path_list):
        path_list.append(cwd)
    try:
        yield
    finally:
        path_list[:] = saved
        sys.path = path_list


def import_factory(spec: str, flag: str = "--arch", what: str = "factory"):
    """``package.module:callable`` → the callable, its module imported with the working
    directory searched after the installed packages, only during that import (so no later
    import finds files there: a stray pandas.py stays unrun)."""
    mod_name, sep, attr = spec.partition(":")
    if not sep or not mod_name or not attr:
        raise IdauditError(f"{flag} must look like module.path:{what}, got {spec!r}")
    with cwd_importable():
        try:
            module = importlib.import_module(mod_name)
        except SystemExit as exc:
            raise IdauditError(f"{flag}: importing {mod_name!r} exited (SystemExit {exc.code}); "
                               f"the encoder {what} exited instead of building a model") from None
        except Exception as exc:
            raise IdauditError(f"{flag}: cannot import {mod_name!r} ({_first_line(exc)})") \
                from None
    try:
        fn = getattr(module, attr)
    except AttributeError:
        raise IdauditError(f"{flag}: module {mod_name!r} has no attribute {attr!r}") from None
    if not callable(fn):
        raise IdauditError(f"{flag}: {spec} is not callable")
    return fn


def optional_module(name: str, extra: str, what: str) -> Any:
    """``import name`` for a feature of an extra, or a one-line error saying why it cannot be
    imported (not installed, or its own import failing) and which extra to install."""
    try:
        return importlib.import_module(name)
    except SystemExit as exc:
        reason = f"its import exited (SystemExit {exc.code})"
    except Exception as exc:  # a broken install raises anything: ImportError, RuntimeError …
        top = name.partition(".")[0]
        missing = isinstance(exc, ModuleNotFoundError) and exc.name in (name, top)
        reason = "it is not installed" if missing else f"{type(exc).__name__}: {_first_line(exc)}"
    raise IdauditError(f"{what} needs {name.partition('.')[0]}, which cannot be imported "
                       f"({reason}); pip install 'idaudit[{extra}]'")


def build_timm(name: str, kwargs: dict[str, Any] | None) -> Any:
    """``timm.create_model(name, pretrained=False, **kwargs)``; a name with a source
    (``hf-hub:``, ``local-dir:``: a config fetched or read from elsewhere, its ``model_args``
    unchecked) and kwargs that would fetch or read weights (pretrained, pretrained_cfg,
    checkpoint_path …) are refused: the weights come from the file being audited."""
    if not isinstance(name, str) or not _TIMM_NAME.fullmatch(name):
        raise IdauditError(f"--arch timm:{name}: give a timm model name (letters, digits, _ and "
                           "-, optionally .TAG), e.g. timm:vit_small_patch16_224; sources such "
                           "as hf-hub: or local-dir: are not taken (idaudit never downloads, and "
                           "reads a config only from the file audited)")
    kwargs = dict(kwargs or {})
    refused = sorted(k for k in kwargs if k in _TIMM_REFUSED)
    if refused:
        raise IdauditError(f"--arch-kwargs {', '.join(refused)} not taken for timm:{name}: idaudit "
                           "never downloads or reads other weights (they come from the file)")
    timm = optional_module("timm", "vision", f"--arch timm:{name}")
    try:
        return timm.create_model(name, pretrained=False, **kwargs)
    except Exception as exc:
        raise IdauditError(f"--arch timm:{name}: timm.create_model raised {type(exc).__name__}: "
                           f"{_first_line(exc)}") from None


def build_arch(spec: str, kwargs: dict[str, Any] | None) -> Any:
    """The network ``spec`` names: ``timm:NAME`` or ``module.path:factory`` called with
    ``kwargs``; a one-line error unless it is a torch ``nn.Module``."""
    import torch

    if spec.startswith("timm:"):
        model = build_timm(spec[len("timm:"):], kwargs)
    else:
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


# ---- model directories ---------------------------------------------------------------------


def read_config(path: Path) -> dict[str, Any]:
    """A directory's config.json as a JSON object (bounded nesting), or a one-line error."""
    from idaudit.core.jsontext import parse_json_object

    cfg = path / "config.json"
    try:
        text = cfg.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise IdauditError(f"cannot read {cfg} ({_first_line(exc)})") from None
    return parse_json_object(text, str(cfg)) or {}


def lewm_weights(path: Path) -> Path | None:
    """The weights file of a stable-worldmodel directory: weights.pt, else its one ``.pt``."""
    if (path / "weights.pt").is_file():
        return path / "weights.pt"
    found = sorted(p for p in path.glob("*.pt") if p.is_file())
    if len(found) > 1:
        raise IdauditError(f"{path} holds several .pt files ({', '.join(p.name for p in found)}) "
                           "beside its config.json; which are the weights is ambiguous")
    return found[0] if found else None


def model_dir_kind(path: Path) -> str | None:
    """``lewm`` (config.json with ``_target_`` + a .pt), ``hf`` (config.json + Hugging Face
    weights) or None for a directory that is neither."""
    if not (path / "config.json").is_file():
        return None
    if any(path.glob("*.pt")) and "_target_" in read_config(path):
        return "lewm"
    if any((path / name).is_file() for name in HF_WEIGHTS):
        return "hf"
    return None


def hf_weight_files(path: Path) -> list[Path]:
    """The weight files a Hugging Face directory's loader reads: the single files there, and
    the shards each ``*.index.json`` names — plain file names of this directory (a name such as
    ``../x`` or ``/x`` would make transformers read weights from elsewhere: refused)."""
    from idaudit.core.jsontext import parse_json_object

    files = [path / n for n in HF_WEIGHTS if not n.endswith(".json") and (path / n).is_file()]
    for index in (path / n for n in HF_WEIGHTS if n.endswith(".json")):
        if not index.is_file():
            continue
        try:
            meta = parse_json_object(index.read_text(encoding="utf-8"), str(index)) or {}
        except (OSError, UnicodeDecodeError) as exc:
            raise IdauditError(f"cannot read {index} ({_first_line(exc)})") from None
        names = meta.get("weight_map")
        if not isinstance(names, dict) or not all(isinstance(v, str) for v in names.values()):
            raise IdauditError(f"{index}: weight_map must map names to file names")
        for name in dict.fromkeys(names.values()):
            if not name or name != Path(name).name or name in (".", "..") or "\\" in name:
                raise IdauditError(f"{index}: weight_map names {name[:80]!r}, not a file of "
                                   f"{path}; weights are read from the directory itself only")
            files.append(path / name)
    return files


def _meta_bytes(build: Any, source: str, thing: str) -> int:
    """The bytes of the parameters and buffers of the network ``build()`` makes, built on
    torch's meta device (shapes only, nothing allocated), each element at least float32."""
    import torch

    try:
        with torch.device("meta"):
            model = build()
    except IdauditError:
        raise
    except Exception as exc:
        from idaudit.loading.trust import untrusted

        raise IdauditError(untrusted(
            f"{source}: its network cannot be sized before it is built (on torch's meta device: "
            f"{type(exc).__name__}: {_first_line(exc)[:200]}); building a network of a size the "
            "file chose unchecked", thing)) from None
    if not isinstance(model, torch.nn.Module):
        return 0
    return sum(t.numel() * max(t.element_size(), 4)
               for t in itertools.chain(model.parameters(), model.buffers()))


def load_hf_dir(path: Path, trust_pickle: bool = False) -> Any:
    """The ``transformers.AutoModel`` of a local directory: local files only (never a
    download), ``weights_only`` for pytorch_model.bin, no code from the directory, float32.
    Untrusted, weight files must lie in the directory and what the network and the files take
    is checked against free memory first (the network sized on the meta device)."""
    import torch

    from idaudit.loading.trust import check_file_memory, check_torch_file, size_text

    transformers = optional_module("transformers", "vision",
                                   f"{path} (a Hugging Face model directory)")
    logs = transformers.utils.logging
    verbosity, bars = logs.get_verbosity(), logs.is_progress_bar_enabled()
    logs.set_verbosity_error()  # its load report and bars: idaudit says what matters, once
    logs.disable_progress_bar()
    files = hf_weight_files(path)
    try:
        if not trust_pickle:
            for f in files:
                if f.suffix == ".bin":
                    check_torch_file(f, trusted=False)
            config = transformers.AutoConfig.from_pretrained(  # its failure: the except below
                str(path), local_files_only=True, trust_remote_code=False)
            network = _meta_bytes(lambda: transformers.AutoModel.from_config(config),
                                  str(path / "config.json"), "directory")
            on_disk = sum(f.stat().st_size for f in files if f.is_file())
            check_file_memory(network + on_disk, path, f"a network of {size_text(network)} as "
                              "its config.json describes it, and its weight files", "directory")
        model, info = transformers.AutoModel.from_pretrained(
            str(path), local_files_only=True, trust_remote_code=False, weights_only=True,
            dtype=torch.float32, output_loading_info=True)
    except IdauditError:
        raise
    except Exception as exc:
        raise IdauditError(f"cannot load {path} as a Hugging Face model ({type(exc).__name__}: "
                           f"{_first_line(exc)})") from None
    finally:
        logs.set_verbosity(verbosity)
        if bars:
            logs.enable_progress_bar()
    missing = sorted(info.get("missing_keys") or [])
    if missing:  # e.g. a pooler the encoder was saved without: random, so never the embedding
        shown = ", ".join(missing[:4]) + (", …" if len(missing) > 4 else "")
        print(printable(f"note: {path} lacks {len(missing)} weights of its model ({shown}); "
                        "they are left at random initialisation: do not choose them as the "
                        "embedding"), file=sys.stderr)
    return model


def _locate(target: str, source: str) -> Any:
    """What a ``_target_`` names: the longest importable module prefix, then attributes."""
    parts = target.split(".")
    for i in range(len(parts), 0, -1):
        mod_name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(mod_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (mod_name == exc.name or mod_name.startswith(exc.name + ".")):
                continue  # this prefix is not a module: try a shorter one
            raise IdauditError(f"{source}: importing {mod_name!r} for _target_ {target!r} failed "
                               f"({_first_line(exc)})") from None
        except (Exception, SystemExit) as exc:
            raise IdauditError(f"{source}: importing {mod_name!r} for _target_ {target!r} failed "
                               f"({type(exc).__name__}: {_first_line(exc)})") from None
        for name in parts[i:]:
            if not hasattr(obj, name):
                raise IdauditError(f"{source}: _target_ {target!r} not found ({mod_name!r} has "
                                   f"no {name!r})")
            obj = getattr(obj, name)
        return obj
    raise IdauditError(f"{source}: _target_ {target!r} cannot be imported (no module "
                       f"{parts[0]!r})")


def _nodes(config: Any) -> Iterator[Any]:
    """Every node of a JSON config — objects, lists, keys and scalars — depth first."""
    stack = [config]
    while stack:
        item = stack.pop()
        yield item
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _targets(config: Any) -> Iterator[Any]:
    return (node["_target_"] for node in _nodes(config)
            if isinstance(node, dict) and "_target_" in node)


#: packages whose modules an untrusted config may name (importing them builds networks);
#: a module in the working directory (the user's project) may be named too
CONFIG_PACKAGES = frozenset({"torch", "timm", "transformers", "stable_worldmodel",
                             "stable_pretraining", "lejepa"})


def _importable_by_config(target: str) -> bool:
    """Whether an untrusted config may make idaudit import ``target``'s module: one of
    :data:`CONFIG_PACKAGES`, or the user's own project in the working directory (importing
    any other installed module runs whatever its import does, chosen by the file)."""
    top = target.split(".")[0]
    cwd = Path.cwd()
    return top in CONFIG_PACKAGES or (cwd / f"{top}.py").is_file() or \
        (cwd / top / "__init__.py").is_file()


def _interpolation(config: Any) -> str | None:
    """The first key or string of ``config`` that holds an OmegaConf interpolation (``${``),
    escaped or not; None when there is none."""
    return next((n for n in _nodes(config) if isinstance(n, str) and "${" in n), None)


def vet_targets(config: dict[str, Any], source: str) -> None:
    """Every ``_target_`` of an untrusted config names an ``nn.Module`` class of the
    :data:`CONFIG_PACKAGES` or of the user's project: instantiating one builds a network; any
    other callable (a function, ``os.system``) or module runs code the file chose, refused in
    one line naming it and ``--trust-pickle``."""
    import torch

    from idaudit.loading.trust import untrusted

    # Hydra resolves interpolations before it instantiates, and a resolver can make a node the
    # vetting below never saw (${oc.create:{_target_: …}}) or read the environment: the tree
    # instantiated must be the tree vetted, so an untrusted config holds none
    found = _interpolation(config)
    if found is not None:
        raise IdauditError(untrusted(f"{source}: holds an interpolation ({found[:80]!r}); "
                                     "Hydra resolves it into code the vetting cannot see",
                                     "directory"))
    for target in _targets(config):
        if not isinstance(target, str):
            raise IdauditError(f"{source}: _target_ must be a dotted name, got {target!r}")
        if not _importable_by_config(target):
            raise IdauditError(untrusted(
                f"{source}: _target_ {target!r} is not in torch, timm, transformers, "
                "stable_worldmodel, stable_pretraining, lejepa or a module of the working "
                "directory (your project: never run idaudit inside a downloaded directory, "
                "whose .py files would count as it); importing it runs code the file names",
                "directory"))
        obj = _locate(target, source)
        if not (isinstance(obj, type) and issubclass(obj, torch.nn.Module)):
            kind = "a class that is not an nn.Module" if isinstance(obj, type) else \
                "a function" if inspect.isroutine(obj) else f"a {type(obj).__name__}"
            raise IdauditError(untrusted(f"{source}: _target_ {target!r} is {kind}; "
                                         "instantiating it runs code the file names",
                                         "directory"))


def build_lewm_dir(path: Path, trust_pickle: bool = False) -> Any:
    """The network a stable-worldmodel directory's config.json describes, built by
    ``hydra.utils.instantiate`` (its modules found in the working directory too, as
    ``--arch`` finds them), before its weights are loaded."""
    import torch

    from idaudit.loading.trust import check_file_memory

    config = read_config(path)
    source = str(path / "config.json")
    optional_module("hydra", "hydra", f"{path} (a stable-worldmodel directory)")
    hydra_utils = optional_module("hydra.utils", "hydra", f"{path} (a stable-worldmodel directory)")
    with cwd_importable():
        if not trust_pickle:
            vet_targets(config, source)
            network = _meta_bytes(lambda: hydra_utils.instantiate(config), source, "directory")
            check_file_memory(network, source, "the network its config.json describes",
                              "directory")
        try:
            model = hydra_utils.instantiate(config)
        except Exception as exc:
            lines = " ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip())
            raise IdauditError(f"{source}: hydra could not instantiate {config['_target_']!r} "
                               f"({lines[:300] or type(exc).__name__})") from None
    if not isinstance(model, torch.nn.Module):
        raise IdauditError(f"{source}: {config['_target_']!r} built {type(model).__name__}, not a "
                           "torch nn.Module")
    return model
