"""Model directories that bring their own network, built before their weights are loaded.

* a Hugging Face model directory (``config.json`` + ``model.safetensors`` or
  ``pytorch_model.bin``): ``transformers.AutoModel.from_pretrained`` on the local files only,
  ``weights_only``, no remote code, float32;
* a stable-worldmodel / LeWM directory (``config.json`` with ``_target_`` + ``weights.pt``,
  or the ``weights_epoch_N.pt`` its training leaves, one chosen by ``--weights``):
  ``hydra.utils.instantiate``; untrusted, on the config
  :func:`idaudit.loading.hydra_targets.vet_targets` returns.

Untrusted, what each network would take is sized on torch's meta device and checked against
free memory first. transformers comes with the ``vision`` extra, hydra with ``hydra``; each
is imported only here, when asked for, and a missing one is a one-line error naming the extra.
"""

from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path
from typing import Any

from idaudit.core.errors import IdauditError, error_line, printable, root_cause
from idaudit.core.errors import first_line as _first_line
from idaudit.loading.architectures import cwd_importable, optional_module
from idaudit.loading.hydra_targets import vet_targets

__all__ = ["build_lewm_dir", "hf_weight_files", "lewm_weights", "load_hf_dir", "model_dir_kind",
           "read_config"]

HF_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
              "pytorch_model.bin.index.json")


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
