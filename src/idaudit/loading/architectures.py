"""The networks weights are loaded into, and model directories that bring their own.

* ``module.path:factory`` (``--arch``, with ``--arch-kwargs``): the module may come from the
  working directory, searched after the installed packages and only while it is imported
  (:func:`cwd_importable`);
* ``timm:NAME``: ``timm.create_model(NAME, pretrained=False, **kwargs)`` (never a download);
* a Hugging Face model directory (``config.json`` + ``model.safetensors`` or
  ``pytorch_model.bin``): ``transformers.AutoModel.from_pretrained`` on the local files only,
  ``weights_only``, no remote code, float32;
* a stable-worldmodel / LeWM directory (``config.json`` with ``_target_`` + ``weights.pt``,
  or the ``weights_epoch_N.pt`` its training leaves, one chosen by ``--weights``):
  ``hydra.utils.instantiate``; untrusted, every ``_target_`` must name an ``nn.Module`` class
  or a network factory :data:`idaudit.loading.trust.CONFIG_FACTORIES` lists, its result
  checked (a ``_target_`` may name any callable, ``os.system`` as well), and no key or value
  may hold an interpolation (``${…}``: Hydra resolves it first, into nodes never vetted).

timm and transformers come with the ``vision`` extra, hydra with ``hydra``; each is imported
only here, when asked for, and a missing one is a one-line error naming the extra.
"""

from __future__ import annotations

import importlib
import itertools
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from idaudit.core.errors import IdauditError, error_line, printable, root_cause
from idaudit.core.errors import first_line as _first_line

__all__ = ["TIMM_MEAN_POOL", "build_arch", "build_lewm_dir", "cwd_importable", "hf_weight_files",
           "import_factory", "lewm_weights", "load_hf_dir", "model_dir_kind", "module_files",
           "optional_module", "read_config", "timm_fit_hint", "timm_pool_hint", "vet_targets"]

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
            raise IdauditError(f"{flag}: cannot import {mod_name!r} ({error_line(exc)})") \
                from None
    try:
        fn = getattr(module, attr)
    except AttributeError:
        raise IdauditError(f"{flag}: module {mod_name!r} has no attribute {attr!r}") from None
    if not callable(fn):
        raise IdauditError(f"{flag}: {spec} is not callable")
    return fn


def module_files(spec: str | None) -> list[Path]:
    """The file, or the package's directories, that :func:`import_factory` imports the module
    of ``spec`` (``module.path:callable``) from, found as it finds them (the working directory
    searched after the installed packages) without importing anything; none for ``timm:NAME``,
    a module not found or one that is no file."""
    if not spec or spec.startswith("timm:"):
        return []
    top = spec.partition(":")[0].partition(".")[0]
    if not top:
        return []
    import importlib.util

    with cwd_importable():
        try:
            found = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            return []
    if found is None:
        return []
    if found.submodule_search_locations:
        return [Path(p) for p in found.submodule_search_locations]
    return [Path(found.origin)] if found.has_location and found.origin else []


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
        reason = "it is not installed" if missing else error_line(exc)
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
        raise IdauditError(f"--arch timm:{name}: timm.create_model raised "
                           f"{error_line(exc)}") from None


#: the --arch-kwargs of a timm ViT whose output is the mean of its patch tokens, loading
#: weights saved with the default head: "avg" alone moves the final norm after the pooling
#: (fc_norm.* in place of norm.*); fc_norm false keeps it where the weights have it
TIMM_MEAN_POOL = '{"num_classes": 0, "global_pool": "avg", "fc_norm": false}'
_TIMM_DOCS = "docs/integrations.md, I-JEPA"


def timm_pool_hint(arch: str | None) -> str:
    """What ends the refusal of ``--pool`` for a ``timm:NAME`` model's pooled output."""
    if not (arch or "").startswith("timm:"):
        return ""
    return ("; a timm model pools its tokens itself (num_classes 0: its features, by its "
            "global_pool, the class token by default): drop --pool, and for the mean over the "
            f"patch tokens pass --arch-kwargs '{TIMM_MEAN_POOL}' ({_TIMM_DOCS})")


def timm_fit_hint(arch: str, missing: list[str], unexpected: list[str]) -> str:
    """What ends a misfit of weights into a ``timm:NAME`` model whose final norm sits
    elsewhere than the weights': ``global_pool: "avg"`` makes ``fc_norm`` (after the pooling)
    of the ``norm`` the weights hold, unless ``fc_norm`` is false."""
    if not arch.startswith("timm:"):
        return ""
    def under(keys: list[str], prefix: str) -> bool:
        return any(k.startswith(prefix) for k in keys)
    if under(missing, "fc_norm.") and under(unexpected, "norm."):
        return ("; timm: global_pool \"avg\" normalises after the pooling (fc_norm) unless "
                f"\"fc_norm\": false: pass --arch-kwargs '{TIMM_MEAN_POOL}' for weights saved "
                f"with norm.* ({_TIMM_DOCS})")
    if under(missing, "norm.") and under(unexpected, "fc_norm."):
        return ("; timm: these weights normalise after the pooling (fc_norm.*): pass "
                "--arch-kwargs with \"global_pool\": \"avg\" (the pooling they were saved "
                f"with; {_TIMM_DOCS})")
    return ""


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
            raise IdauditError(f"--arch: {spec}(**kwargs) raised {error_line(exc)}") from None
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

        cause = _idaudit_cause(exc)  # a check inside the build (Hydra wraps what it raises)
        if cause is not None:
            raise IdauditError(f"{source}: {cause}") from None
        if isinstance(root_cause(exc), ImportError):  # a broken install, not a size
            raise IdauditError(f"{source}: its network cannot be built ({error_line(exc)[:400]})"
                               ) from None

        raise IdauditError(untrusted(
            f"{source}: its network cannot be sized before it is built (on torch's meta device: "
            f"{error_line(exc)[:300]}); building a network of a size the "
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
        raise IdauditError(f"cannot load {path} as a Hugging Face model ({error_line(exc)})") \
            from None
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
                               f"({error_line(exc)})") from None
        except (Exception, SystemExit) as exc:
            raise IdauditError(f"{source}: importing {mod_name!r} for _target_ {target!r} failed "
                               f"({error_line(exc)})") from None
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


def _interpolation(config: Any) -> str | None:
    """The first key or string of ``config`` that holds an OmegaConf interpolation (``${``),
    escaped or not; None when there is none."""
    return next((n for n in _nodes(config) if isinstance(n, str) and "${" in n), None)


#: what a network factory's node of an untrusted config is instantiated through
_FACTORY_CALL = "idaudit.loading.architectures.call_network_factory"


def call_network_factory(factory: str, *args: Any, **kwargs: Any) -> Any:
    """``factory(*args, **kwargs)`` for a factory of
    :data:`idaudit.loading.trust.CONFIG_FACTORIES`, its result checked to be an ``nn.Module``
    (an untrusted config's factory node is instantiated through this)."""
    import torch

    from idaudit.loading.trust import CONFIG_FACTORIES

    if factory not in CONFIG_FACTORIES:
        raise IdauditError(f"{factory!r} is not a network factory idaudit lists")
    # the listed values are passed even where the config leaves them out, so that a package
    # whose default changes (pretrained=True) still never downloads
    model = _locate(factory, "config.json")(*args, **{**kwargs, **CONFIG_FACTORIES[factory]})
    if not isinstance(model, torch.nn.Module):
        raise IdauditError(f"_target_ {factory!r} returned {type(model).__name__}, not a torch "
                           "nn.Module")
    return model


def _through_factory_call(config: Any, factories: set[int]) -> Any:
    """A copy of ``config`` whose nodes in ``factories`` (their ids) call their factory
    through :func:`call_network_factory`, so that each result is checked."""
    if isinstance(config, list):
        return [_through_factory_call(v, factories) for v in config]
    if not isinstance(config, dict):
        return config
    out = {k: _through_factory_call(v, factories) for k, v in config.items()}
    if id(config) in factories:
        out["_args_"] = [out.pop("_target_")]
        out["_target_"] = _FACTORY_CALL
    return out


def vet_targets(config: dict[str, Any], source: str) -> dict[str, Any]:
    """The config an untrusted directory may have instantiated: every ``_target_`` names an
    ``nn.Module`` class, or a listed network factory (its node then calls it through
    :func:`call_network_factory`, which checks its result), of a module
    :func:`idaudit.loading.trust.config_module_allowed` takes; anything else (``os.system``,
    another function, a module outside those, an interpolation) runs code the file chose,
    refused in one line naming it and ``--trust-code``. The rule itself:
    :func:`idaudit.loading.trust.config_target_refusal`."""
    from idaudit.loading.trust import (
        CONFIG_PACKAGES,
        config_module_allowed,
        config_target_refusal,
        untrusted,
    )

    # Hydra resolves interpolations before it instantiates, and a resolver can make a node the
    # vetting below never saw (${oc.create:{_target_: …}}) or read the environment: the tree
    # instantiated must be the tree vetted, so an untrusted config holds none
    found = _interpolation(config)
    if found is not None:
        raise IdauditError(untrusted(f"{source}: holds an interpolation ({found[:80]!r}); "
                                     "Hydra resolves it into code the vetting cannot see",
                                     "directory"))
    factories: set[int] = set()
    for node in _nodes(config):
        if not isinstance(node, dict) or "_target_" not in node:
            continue
        target = node["_target_"]
        if not isinstance(target, str):
            raise IdauditError(f"{source}: _target_ must be a dotted name, got {target!r}")
        if not config_module_allowed(target):
            raise IdauditError(untrusted(
                f"{source}: _target_ {target!r} is not in {', '.join(CONFIG_PACKAGES)} or a "
                "module of the working directory (your project: never run idaudit inside a "
                "downloaded directory, whose .py files would count as it); importing it runs "
                "code the file names", "directory"))
        obj = _locate(target, source)
        reason = config_target_refusal(target, obj, node)
        if reason is not None:
            raise IdauditError(untrusted(f"{source}: {reason}", "directory"))
        if not isinstance(obj, type):
            factories.add(id(node))
    return _through_factory_call(config, factories)


def lewm_weights(path: Path, name: str | None = None) -> Path:
    """The weights file of a stable-worldmodel directory: ``name`` (``--weights``, a file of
    the directory), else weights.pt, else its one ``.pt``; several (its SaveCkptCallback
    leaves a ``weights_epoch_N.pt`` per epoch) are refused, named in epoch order with the
    option that chooses one."""
    if name is not None:
        chosen = path / name
        if not chosen.is_file():
            there = ", ".join(p.name for p in _pt_files(path)) or "none"
            raise IdauditError(f"--weights {name}: no such file in {path} (its .pt files: "
                               f"{there})")
        return chosen
    if (path / "weights.pt").is_file():
        return path / "weights.pt"
    found = _pt_files(path)
    if len(found) > 1:
        names = [p.name for p in found]
        raise IdauditError(f"{path} holds several weights files beside its config.json "
                           f"({', '.join(names)}); choose one with --weights NAME (e.g. "
                           f"--weights {names[-1]})")
    if not found:
        raise IdauditError(f"{path} holds no .pt weights beside its config.json")
    return found[0]


def _pt_files(path: Path) -> list[Path]:
    """The ``.pt`` files of ``path`` in natural order (weights_epoch_2 before _10)."""
    def key(p: Path) -> list[Any]:
        return [(0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"([0-9]+)", p.name)]

    return sorted((p for p in path.glob("*.pt") if p.is_file()), key=key)


def _idaudit_cause(exc: BaseException) -> IdauditError | None:
    """The IdauditError that ``exc`` was raised from (Hydra wraps what a target raises)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, IdauditError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def build_lewm_dir(path: Path, trust_pickle: bool = False) -> Any:
    """The network a stable-worldmodel directory's config.json describes, built by
    ``hydra.utils.instantiate`` (its modules found in the working directory too, as
    ``--arch`` finds them), before its weights are loaded; untrusted, the config
    :func:`vet_targets` returns (sized first on the meta device)."""
    import torch

    from idaudit.loading.trust import check_file_memory

    config = read_config(path)
    source = str(path / "config.json")
    optional_module("hydra", "hydra", f"{path} (a stable-worldmodel directory)")
    hydra_utils = optional_module("hydra.utils", "hydra", f"{path} (a stable-worldmodel directory)")
    with cwd_importable():
        try:
            if not trust_pickle:
                vetted = vet_targets(config, source)
                network = _meta_bytes(lambda: hydra_utils.instantiate(vetted), source,
                                      "directory")
                check_file_memory(network, source, "the network its config.json describes",
                                  "directory")
                config = vetted
            model = hydra_utils.instantiate(config)
        except IdauditError:
            raise
        except Exception as exc:
            cause = _idaudit_cause(exc)
            if cause is not None:
                raise IdauditError(f"{source}: {cause}") from None
            lines = " ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip())
            cause = root_cause(exc)
            if cause is not exc and _first_line(cause) not in lines:
                lines += f"; caused by {type(cause).__name__}: {_first_line(cause)}"
            raise IdauditError(f"{source}: hydra could not instantiate "
                               f"{read_config(path)['_target_']!r} "
                               f"({lines[:400] or type(exc).__name__})") from None
    if not isinstance(model, torch.nn.Module):
        raise IdauditError(f"{source}: {read_config(path)['_target_']!r} built "
                           f"{type(model).__name__}, not a torch nn.Module")
    return model
