"""TorchScript programs, their source vetted before ``torch.jit.load`` and their graphs after.

``torch.jit.load`` compiles the archive's TorchScript source (code/**.py) and runs a module's
``__setstate__`` while it loads; ``forward`` then runs whatever operators the graphs call,
among them ``aten::from_file`` (a shared mapping writes the file) and ``aten::save``.
Untrusted, the source may define no ``__setstate__`` and name no such operator, and after
loading every graph (inlined, blocks included) may call only aten and prim operators outside
:data:`~idaudit.loading.program_refusals.SIDE_EFFECT_OPS`.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path

from idaudit.core.errors import IdauditError
from idaudit.core.errors import first_line as _first_line
from idaudit.loading.program_refusals import SIDE_EFFECT_OPS, TRUST_HINT, Unreadable, Unvetted

__all__ = ["TORCHSCRIPT_NAMESPACES", "load_torchscript", "vet_torchscript_file"]

#: operator namespaces a TorchScript program may call untrusted (c10d reaches the network,
#: debugprims reads files, custom namespaces run whatever their library does)
TORCHSCRIPT_NAMESPACES = frozenset({"aten", "prim"})


def _vet_torchscript_source(path: Path) -> None:
    import ast

    try:
        with zipfile.ZipFile(path) as zf:
            members = [(n, zf.read(n)) for n in zf.namelist()
                       if "/code/" in f"/{n}" and n.endswith(".py")]
    except (OSError, zipfile.BadZipFile, RuntimeError) as exc:
        raise Unreadable(_first_line(exc)) from None
    for name, raw in members:
        try:
            tree = ast.parse(raw.decode("utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError, RecursionError, MemoryError):
            raise Unvetted(f"its TorchScript source {name} does not parse") from None
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "__setstate__":
                raise Unvetted(f"{name} defines __setstate__, which runs while it loads")
            if isinstance(node, ast.Attribute):
                chain = [node.attr]
                value = node.value
                while isinstance(value, ast.Attribute):
                    chain.append(value.attr)
                    value = value.value
                if isinstance(value, ast.Name):
                    chain.append(value.id)
                chain.reverse()
                if chain[-1] in SIDE_EFFECT_OPS and chain[0] in ("torch", "ops"):
                    raise Unvetted(f"{name} calls {'.'.join(chain)}, which reaches files")
                if "ops" in chain[:-1]:
                    ns = chain[chain.index("ops") + 1]
                    if ns not in TORCHSCRIPT_NAMESPACES:
                        raise Unvetted(f"{name} calls an operator of {ns!r} (only aten and "
                                        "prim operators are loaded untrusted)")


def _graph_kinds(graph) -> Iterator[str]:
    stack = list(graph.nodes())
    while stack:
        node = stack.pop()
        yield node.kind()
        for block in node.blocks():
            stack.extend(block.nodes())


def _vet_torchscript_graphs(module) -> None:
    import torch

    for sub in module.modules():
        for name in sub._c._method_names():
            graph = sub._c._get_method(name).graph.copy()
            torch._C._jit_pass_inline(graph)
            for kind in _graph_kinds(graph):
                ns, _, op = kind.partition("::")
                if ns not in TORCHSCRIPT_NAMESPACES:
                    raise Unvetted(f"its {name} calls {kind} (only aten and prim operators "
                                    "are run untrusted)")
                if ns == "aten" and op in SIDE_EFFECT_OPS:
                    raise Unvetted(f"its {name} calls {kind}, which reaches files")


def vet_torchscript_file(path: Path) -> None:
    """The vetting of a TorchScript file's source that :func:`load_torchscript` does before
    ``torch.jit.load``, alone: a one-line error for what it refuses."""
    try:
        _vet_torchscript_source(path)
    except (Unvetted, Unreadable) as exc:
        raise _torchscript_refusal(path, exc) from None


def _torchscript_refusal(path: Path, exc: Exception) -> IdauditError:
    """The one line for a TorchScript file the vetting refuses or cannot read."""
    if isinstance(exc, Unvetted):
        return IdauditError(f"{path} is a TorchScript program idaudit will not run untrusted: "
                            f"{exc}; {TRUST_HINT}")
    return IdauditError(f"cannot load {path} as TorchScript ({exc})")


def load_torchscript(path: Path, trust_pickle: bool = False):
    """A TorchScript module; untrusted, its source is vetted before ``torch.jit.load`` and its
    graphs after, before anything calls it (as this module's docstring says)."""
    import torch

    if not trust_pickle:
        vet_torchscript_file(path)
    try:
        module = torch.jit.load(str(path), map_location="cpu")
        if not trust_pickle:
            _vet_torchscript_graphs(module)
    except (Unvetted, Unreadable) as exc:
        raise _torchscript_refusal(path, exc) from None
    except Exception as exc:
        raise IdauditError(f"cannot load {path} as TorchScript ({_first_line(exc)})") from None
    return module
