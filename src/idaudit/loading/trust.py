"""The one rule every loader of other projects' files reads.

**Nothing in a file may choose code to run, files to write or memory to take, unless
``--trust-code`` (alias ``--trust-pickle``) says the file is trusted** — and a program from a
file (TorchScript, ``.pt2``, a network built from a config, a pickle unpickled whole) runs,
trusted or not, only in the cage (:mod:`idaudit.loading.cage`), where the kernel holds it to
its inputs; where no cage can be built it is refused unless trusted. What that means for
each kind of file is :data:`POLICY`, read from the file formats' ``trust`` texts
(:func:`policy`; docs/checkpoints.md prints the same table, tests/test_untrusted_sizes.py
checks that they agree). Every refusal ends with :func:`untrusted`'s hint, and every loader
asks :func:`check_file_memory` before it allocates what a file declares.

A module of the working directory counts as the user's own project (``--arch``, ``--embed``,
a LeWM ``_target_``): running idaudit inside a downloaded directory makes that directory's
``.py`` files "the project", so run it from your own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from idaudit.core.memory import memory_left

#: POLICY is made on first use by the module's __getattr__ (hence the noqa)
__all__ = ["ARCH_POLICY", "CONFIG_FACTORIES", "CONFIG_PACKAGES", "POLICY", "check_file_memory",  # noqa: F822
           "check_torch_file", "config_module_allowed", "config_target_refusal", "memory_budget",
           "size_text", "untrusted"]

FLAG = "--trust-code"

#: packages whose modules an untrusted LeWM config may name (importing them builds networks);
#: a module of the working directory (the user's project) may be named too
CONFIG_PACKAGES = ("torch", "timm", "transformers", "stable_worldmodel", "stable_pretraining",
                   "lejepa")

#: the functions an untrusted LeWM config may call — network factories, each returning an
#: ``nn.Module`` (checked) — with the only value each keyword that would download may take
#: (stable-worldmodel's own lewm.yaml builds its encoder with ``vit_hf``). Any other function
#: of those packages is refused: ``torch.save``, ``torch.hub.load`` or a factory that calls
#: ``from_pretrained`` would write files, download or run fetched code.
CONFIG_FACTORIES: dict[str, dict[str, Any]] = {
    "stable_pretraining.backbone.utils.vit_hf": {"pretrained": False},
}

#: rows of the trust table that are no file format: what ``--arch`` makes idaudit build
ARCH_POLICY: dict[str, tuple[str, str]] = {
    "timm:NAME (--arch)": (
        "a model name only: hf-hub:/local-dir: sources (a download, a config from anywhere) "
        "and weight-fetching kwargs refused; built and called in the cage",
        "the same: the weights always come from the file audited"),
}


def policy(plugins: bool = True) -> dict[str, tuple[str, str]]:
    """The trust table, row → (untrusted: what idaudit does, trusted: what ``--trust-code``
    adds): idaudit's own file formats' ``trust`` texts (:data:`~idaudit.core.registered.FORMATS`
    in their order, those that share a ``trust_row`` in one row), :data:`ARCH_POLICY`, then
    (``plugins``) each installed plugin format's row (its code, not idaudit's, reads the file).

    Args:
        plugins: add the plugin formats' rows (loading them).

    Returns:
        The table; :data:`POLICY` is it without plugins (docs/checkpoints.md prints it).
    """
    from idaudit.core.registered import FORMATS

    rows: dict[str, tuple[str, str]] = {}
    for name in FORMATS.builtin():
        fmt = FORMATS.get(name)
        row = fmt.trust_row or name
        if rows.setdefault(row, fmt.trust) != fmt.trust:
            raise AssertionError(f"file format {name!r}: trust row {row!r} says otherwise "
                                 "for another format")
    rows.update(ARCH_POLICY)
    for name in sorted(FORMATS.plugins()) if plugins else ():
        rows[f"{name} (plugin file format, {FORMATS.origin(name)})"] = FORMATS.get(name).trust
    return rows


def __getattr__(name: str) -> Any:
    """:data:`POLICY`, read from the registered formats when first asked for (they live in
    modules that import this one)."""
    if name == "POLICY":
        return policy(plugins=False)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def config_module_allowed(target: str, cwd: Path | None = None) -> bool:
    """Whether an untrusted config may make idaudit import ``target``'s module: one of
    :data:`CONFIG_PACKAGES`, or the user's own project in the working directory (importing
    any other installed module runs whatever its import does, chosen by the file)."""
    top = target.split(".")[0]
    cwd = Path.cwd() if cwd is None else cwd
    return top in CONFIG_PACKAGES or (cwd / f"{top}.py").is_file() or \
        (cwd / top / "__init__.py").is_file()


def config_target_refusal(target: str, obj: Any, node: dict[str, Any]) -> str | None:
    """Why an untrusted config's ``node`` may not name ``obj`` (what its ``_target_``
    ``target`` is), or None where it may: an ``nn.Module`` class (instantiating it builds a
    network), or a factory of :data:`CONFIG_FACTORIES` given keywords only, none that would
    download. Anything else — another function (``os.system``, ``torch.save``), an object, a
    class that is not a module — runs code the file names."""
    import inspect

    import torch

    if isinstance(obj, type):
        return None if issubclass(obj, torch.nn.Module) else \
            f"_target_ {target!r} is a class that is not an nn.Module"
    if target in CONFIG_FACTORIES and callable(obj):
        if "_args_" in node:
            return (f"_target_ {target!r} is given positional _args_; a network factory is "
                    "taken with keywords only, so that none that would download passes unseen")
        for key, only in CONFIG_FACTORIES[target].items():
            if key in node and node[key] != only:
                return (f"_target_ {target!r} is given {key}: {node[key]!r}; idaudit never "
                        f"downloads (only {key}: {only!r} is taken: the weights come from the "
                        "directory)")
        return None
    if inspect.isroutine(obj):
        return (f"_target_ {target!r} is a function; calling it runs code the file names (an "
                f"untrusted config may call only the network factories "
                f"{', '.join(CONFIG_FACTORIES)})")
    return f"_target_ {target!r} is a {type(obj).__name__}; calling it runs code the file names"


def untrusted(reason: str, thing: str = "file") -> str:
    """``reason`` with the rule's hint: what idaudit does only for a file the user trusts."""
    return f"{reason}; idaudit does that only with {FLAG} (for a {thing} you trust)"


def memory_budget() -> float:
    """Bytes this process may still allocate (the machine's memory when that is unknown;
    unbounded when neither is known)."""
    have = memory_left()
    return float("inf") if have is None else float(have)


def check_file_memory(nbytes: float, source: str | Path, what: str,
                      thing: str = "file") -> None:
    """Refuse (exit 2) a file that would make idaudit allocate more than it can get: one
    line naming what (``what``, e.g. "its storages and pickle") needs how much."""
    from idaudit.core.errors import IdauditError

    have = memory_budget()
    if nbytes > have:
        raise IdauditError(untrusted(
            f"{source}: loading it would take up to {size_text(nbytes)} of memory ({what}), but "
            f"only {size_text(have)} is available; allocating what a file declares beyond that",
            thing))


def size_text(nbytes: float) -> str:
    """``nbytes`` in GiB (one decimal), or in MiB below one GiB."""
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.0f} MiB"


def check_torch_file(path: Path, trusted: bool) -> None:
    """Before ``torch.load``: refuse an untrusted file with compressed zip members (torch.save
    writes none), whose zip members, declared storages, arrays and pickle objects
    (:func:`idaudit.loading.torch_file_sizes.torch_file_bytes`) would not fit in memory, or
    with a tensor that declares more elements than its storage holds."""
    if trusted:
        return
    from idaudit.core.errors import IdauditError
    from idaudit.loading.torch_file_sizes import compressed_members, torch_file_bytes

    packed = compressed_members(path)
    if packed:
        m = packed[0]
        raise IdauditError(untrusted(
            f"{path}: its member {m.filename} is compressed ({m.compress_size} bytes that "
            f"inflate to {m.file_size}); torch.save stores every member as it is, and "
            "inflating what another writer packed takes memory the file chooses"))
    budget = memory_budget()
    check_file_memory(torch_file_bytes(path, budget), path,
                      "its inflated members, declared storages and pickled objects")
