"""Bring an encoder (or its embeddings) from wherever a project keeps it.

``resolve`` turns a path plus options into :class:`~idaudit.audit.AuditInputs`:

* ``.npz`` or ``.safetensors`` arrays with ``z``, ``h`` (optionally ``h_prime``, ``rho``,
  ``circular``) — no world needed;
* an idaudit checkpoint (safetensors with idaudit metadata) — its world comes with it;
* plain safetensors weights + ``--arch module.path:factory`` (``--arch-kwargs`` JSON);
* TorchScript (``torch.jit.load``) or a ``torch.export`` program (``.pt2``);
* a pickled module only with ``trust_pickle`` (``torch.load`` runs arbitrary code).
"""

from __future__ import annotations

import importlib
import json
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .audit import AuditInputs, arrays_from_dataset, arrays_from_world, as_embed_fn
from .errors import IdauditError

ARRAY_KEYS = ("z", "h", "h_prime", "rho", "circular", "x")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def arrays_from_mapping(d: dict[str, Any], source: str) -> AuditInputs:
    missing = [k for k in ("z", "h") if k not in d]
    if missing:
        raise IdauditError(f"{source} lacks the array(s) {', '.join(missing)} "
                           f"(found: {', '.join(sorted(d)) or 'none'})")

    def t(key: str) -> torch.Tensor | None:
        if key not in d:
            return None
        a = d[key]
        try:
            arr = a.detach().cpu() if isinstance(a, torch.Tensor) else torch.as_tensor(np.asarray(a))
        except (TypeError, ValueError) as exc:
            raise IdauditError(f"{source}: array {key!r} is not numeric ({exc})") from None
        if not (arr.is_floating_point() or arr.dtype in (torch.int32, torch.int64)):
            raise IdauditError(f"{source}: array {key!r} has dtype {arr.dtype}, not numbers")
        return arr if arr.is_floating_point() else arr.double()

    rho_t = t("rho")
    rho = None
    if rho_t is not None:
        if rho_t.numel() != 1:
            raise IdauditError(f"{source}: rho must be a single number, got shape "
                               f"{tuple(rho_t.shape)}")
        rho = float(rho_t.reshape(()))
    circ = t("circular")
    circular = tuple(int(i) for i in circ.reshape(-1).tolist()) if circ is not None else ()
    return AuditInputs(z=t("z"), h=t("h"), h_prime=t("h_prime"), rho=rho, x=t("x"),
                       circular=circular, source=source)


def load_array_file(path: Path) -> AuditInputs:
    if path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as f:
                d = {k: f[k] for k in f.files}
        except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
            raise IdauditError(f"cannot read {path} as .npz ({_first_line(exc)})") from None
        return arrays_from_mapping(d, str(path))
    from safetensors.torch import load_file

    try:
        d = load_file(str(path))
    except Exception as exc:
        raise IdauditError(f"cannot read the tensors in {path} ({_first_line(exc)})") from None
    return arrays_from_mapping(d, str(path))


def import_factory(spec: str):
    """``package.module:callable`` → the callable (the current directory is importable)."""
    mod_name, sep, attr = spec.partition(":")
    if not sep or not mod_name or not attr:
        raise IdauditError(f"--arch must look like module.path:factory, got {spec!r}")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")
    try:
        module = importlib.import_module(mod_name)
    except Exception as exc:
        raise IdauditError(f"--arch: cannot import {mod_name!r} ({_first_line(exc)})") from None
    try:
        fn = getattr(module, attr)
    except AttributeError:
        raise IdauditError(f"--arch: module {mod_name!r} has no attribute {attr!r}") from None
    if not callable(fn):
        raise IdauditError(f"--arch: {spec} is not callable")
    return fn


def build_arch(spec: str, kwargs: dict[str, Any] | None) -> torch.nn.Module:
    fn = import_factory(spec)
    try:
        model = fn(**(kwargs or {}))
    except Exception as exc:
        raise IdauditError(f"--arch: {spec}(**kwargs) raised {_first_line(exc)}") from None
    if not isinstance(model, torch.nn.Module):
        raise IdauditError(f"--arch: {spec} returned {type(model).__name__}, not a torch nn.Module")
    return model


def load_encoder_file(path: Path, arch: str | None, arch_kwargs: dict[str, Any] | None,
                      trust_pickle: bool) -> tuple[Any, dict[str, Any] | None, dict[str, Any]]:
    """(encoder, world spec dict or None, training config) for every encoder format."""
    if path.suffix == ".safetensors":
        from .checkpoint import FORMAT, load_checkpoint, read_metadata

        meta = read_metadata(path)
        if meta.get("format") == FORMAT:
            ck = load_checkpoint(path)
            return ck.encoder, ck.world.to_dict(), ck.train
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
        return model, None, {}
    if arch is not None:
        raise IdauditError("--arch goes with plain .safetensors weights")
    if path.suffix == ".pt2":
        try:
            program = torch.export.load(str(path))
        except Exception as exc:
            raise IdauditError(f"cannot load {path} as a torch.export program "
                               f"({_first_line(exc)})") from None
        return program.module(), None, {}
    try:
        return torch.jit.load(str(path), map_location="cpu"), None, {}
    except Exception as jit_exc:
        if not trust_pickle:
            raise IdauditError(
                f"{path} is not TorchScript ({_first_line(jit_exc)}); if it is a pickled "
                "module you trust, pass --trust-pickle (unpickling runs arbitrary code)") from None
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=False)
    except Exception as exc:
        raise IdauditError(f"cannot unpickle {path} ({_first_line(exc)})") from None
    if not isinstance(obj, torch.nn.Module):
        raise IdauditError(f"{path} unpickles to {type(obj).__name__}, not an nn.Module "
                           "(a state_dict needs --arch and a .safetensors file)")
    return obj, None, {}


def resolve(target: str | Path, *, arch: str | None = None,
            arch_kwargs: dict[str, Any] | None = None, world_spec: Any = None,
            data: str | Path | None = None, trust_pickle: bool = False,
            n_eval: int | None = None, seed: int | None = None) -> AuditInputs:
    """Reduce ``target`` (and the world options) to audit arrays.

    For an idaudit checkpoint on its own world the evaluation set defaults to the one its
    training used (same size and seed).
    """
    path = Path(target)
    if not path.exists():
        raise IdauditError(f"not found: {path}")
    if path.is_dir():
        raise IdauditError(f"{path} is a directory, not an encoder or array file")
    if path.suffix == ".npz":
        return load_array_file(path)
    if path.suffix == ".safetensors":
        from .checkpoint import FORMAT, read_metadata
        from .worlds.dataset import FORMAT as DATASET

        meta = read_metadata(path)
        if meta.get("format") == DATASET:
            raise IdauditError(f"{path} is a world dataset; audit an encoder on it with "
                               f"--data {path}")
        if meta.get("format") != FORMAT and arch is None:
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as f:
                keys = set(f.keys())
            if not {"z", "h"} <= keys:
                raise IdauditError(
                    f"{path} is neither an idaudit checkpoint nor an array file with z and h "
                    f"(found: {', '.join(sorted(keys)) or 'no tensors'}); plain weights need "
                    "--arch module.path:factory")
            return load_array_file(path)
    encoder, ck_world, train = load_encoder_file(path, arch, arch_kwargs, trust_pickle)
    embed_fn = as_embed_fn(encoder)
    source = str(path)
    if data is not None:
        return arrays_from_dataset(embed_fn, data, source)
    from .worlds import WorldSpec, build_world

    if world_spec is None and ck_world is not None and ck_world.get("name") == "reacher":
        from .audit import arrays_from_reacher

        return arrays_from_reacher(encoder, ck_world["extra"]["dataset"], source)
    if world_spec is None and ck_world is not None:
        world_spec = WorldSpec.from_dict(ck_world)
        n_eval = n_eval or int(train.get("n_eval", 10_000))
        seed = int(train.get("seed", 0)) if seed is None else seed
    if world_spec is None:
        raise IdauditError("no world to evaluate the encoder on: pass --world … (as in train) "
                           "or --data DATASET (from idaudit world)")
    return arrays_from_world(embed_fn, build_world(world_spec), n_eval or 10_000, seed or 0, source)


def parse_json_object(text: str | None, flag: str) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise IdauditError(f"{flag} is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise IdauditError(f"{flag} must be a JSON object")
    return value
