"""The ``_target_``s of a Hydra config (a stable-worldmodel / LeWM directory's config.json),
vetted before ``hydra.utils.instantiate`` runs what they name.

Untrusted, every ``_target_`` must name an ``nn.Module`` class or a network factory
:data:`idaudit.loading.trust.CONFIG_FACTORIES` lists, its result checked (a ``_target_`` may
name any callable, ``os.system`` as well), and no key or value may hold an interpolation
(``${…}``: Hydra resolves it first, into nodes never vetted).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

from idaudit.core.errors import IdauditError, error_line

__all__ = ["call_network_factory", "vet_targets"]


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
_FACTORY_CALL = "idaudit.loading.hydra_targets.call_network_factory"


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
