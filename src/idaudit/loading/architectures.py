"""The networks ``--arch`` names, which a state dict's weights are loaded into.

* ``module.path:factory`` (``--arch``, with ``--arch-kwargs``): the module may come from the
  working directory, searched after the installed packages and only while it is imported
  (:func:`cwd_importable`);
* ``timm:NAME``: ``timm.create_model(NAME, pretrained=False, **kwargs)`` (never a download).

Model directories that bring their own network (Hugging Face, stable-worldmodel / LeWM) are
:mod:`idaudit.loading.model_dirs`. timm comes with the ``vision`` extra, imported only here,
when asked for; a missing extra is a one-line error naming it (:func:`optional_module`).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from idaudit.core.errors import IdauditError, error_line

__all__ = ["TIMM_MEAN_POOL", "build_arch", "cwd_importable", "import_factory", "module_files",
           "optional_module", "timm_fit_hint", "timm_pool_hint"]

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
