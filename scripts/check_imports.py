"""Import hygiene of src/idaudit, counting every import (module level and inside functions).

Checks:

* every module is in exactly one layer of :data:`LAYERS` (bottom up; docs/architecture.md's
  "The folders: layers, bottom up" table lists the same, which tests/test_structure.py checks), and
  imports only from its own layer or those below, save the edges in :data:`EXCEPTIONS`
  (each with its reason, and only as an import inside a function);
* no import cycles between idaudit modules;
* evaluations/ and loading/ import nothing from idaudit.training;
* no module outside idaudit/worlds compares a world's name with a literal.

Prints a line per problem (exit 1), the size of the World interface (``World members: N``)
and a summary line ending in OK when all is well.
"""

from __future__ import annotations

import ast
import fnmatch
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src"
PKG = ROOT / "idaudit"

#: layer → the folders (and, for the entry layer, the package's own top-level files) it holds,
#: bottom up: each layer is a subpackage of src/idaudit. A module may import from its own layer
#: and the layers before it.
LAYERS: dict[str, tuple[str, ...]] = {
    "core": ("core/",),
    "maths": ("maths/",),
    "worlds": ("worlds/",),
    "models": ("models/",),
    "training": ("training/",),
    "loading": ("loading/",),
    "evaluations": ("evaluations/",),
    "experiments": ("experiments/",),
    "entry": ("cli/", "__init__.py", "__main__.py", "_entry.py", "doctor.py", "testing.py",
              "metrics.py", "lightning.py"),
}

#: upward imports allowed, (importer, imported) → why; each only inside a function
EXCEPTIONS: dict[tuple[str, str], str] = {}

#: folders whose modules must not import idaudit.training (they read checkpoints, never train)
NO_TRAINING = ("evaluations/", "loading/")


@dataclass(frozen=True)
class Edge:
    """One import statement from ``source`` of the idaudit module ``target``."""

    source: str
    target: str
    path: Path
    line: int
    lazy: bool  # inside a function (runs when called, not when the module is imported)


def shown(path: Path) -> str:
    """``path`` relative to the repository where it lies in it."""
    try:
        return path.relative_to(ROOT.parent).as_posix()
    except ValueError:
        return str(path)


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every idaudit module → its file."""
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def resolve(mod: str, is_pkg: bool, node: ast.ImportFrom) -> list[str]:
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    if node.level:
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    out = [target] if node.module else []  # `from . import x` imports the module x only
    for alias in node.names:  # `from . import x` / `from .pkg import submodule`
        out.append(f"{target}.{alias.name}")
    return out


def _walk(node: ast.AST, lazy: bool = False):
    """(node, whether it lies inside a function) for every node under ``node``."""
    for child in ast.iter_child_nodes(node):
        yield child, lazy
        inside = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield from _walk(child, inside)


def import_edges(mods: dict[str, Path]) -> list[Edge]:
    """Every import of an idaudit module by another, with its place."""
    out = []
    for mod, path in mods.items():
        for node, lazy in _walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                targets = resolve(mod, path.name == "__init__.py", node)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            out += [Edge(mod, t, path, node.lineno, lazy) for t in targets if t in mods and t != mod]
    return out


def graph(edges: list[Edge] | None = None, mods: dict[str, Path] | None = None
          ) -> dict[str, set[str]]:
    mods = modules() if mods is None else mods
    edges = import_edges(mods) if edges is None else edges
    out: dict[str, set[str]] = {m: set() for m in mods}
    for e in edges:
        out[e.source].add(e.target)
    return out


def modules_in(entry: str, mods: dict[str, Path], pkg: Path = PKG) -> set[str]:
    """The modules a layer entry names: ``pkg/`` every module under it, else the files whose
    path under src/idaudit matches (``*`` allowed)."""
    rel = {m: p.relative_to(pkg).as_posix() for m, p in mods.items()}
    if entry.endswith("/"):
        return {m for m, r in rel.items() if r.startswith(entry)}
    return {m for m, r in rel.items() if fnmatch.fnmatchcase(r, entry)}


def layer_map(mods: dict[str, Path], layers: dict[str, tuple[str, ...]] = LAYERS,
              pkg: Path = PKG) -> tuple[dict[str, str], list[str]]:
    """module → its layer, and the problems: a module in no layer or in two, an entry that
    names no file."""
    where: dict[str, list[str]] = {m: [] for m in mods}
    problems = []
    for layer, entries in layers.items():
        for entry in entries:
            found = modules_in(entry, mods, pkg)
            if not found:
                problems.append(f"layer {layer!r} lists {entry}, which is no file under "
                                "src/idaudit: remove it from LAYERS in scripts/check_imports.py "
                                "and from the docs table")
            for m in found:
                where[m].append(layer)
    for m, found in sorted(where.items()):
        rel = f"src/idaudit/{mods[m].relative_to(pkg).as_posix()}"
        if not found:
            problems.append(f"{m} ({rel}) is in no layer: add it to LAYERS in "
                            "scripts/check_imports.py and to the 'The folders: layers, bottom up' table in "
                            f"docs/architecture.md (layers: {', '.join(layers)})")
        elif len(set(found)) > 1:
            problems.append(f"{m} ({rel}) is in several layers: {', '.join(sorted(set(found)))}")
    return {m: found[0] for m, found in where.items() if found}, problems


def layer_problems(edges: list[Edge], layer: dict[str, str],
                   layers: dict[str, tuple[str, ...]] = LAYERS,
                   exceptions: dict[tuple[str, str], str] = EXCEPTIONS) -> list[str]:
    """Imports from a higher layer (unless excepted, and then only inside a function), and
    exceptions that no longer match an import."""
    rank = {name: i for i, name in enumerate(layers)}
    problems, used = [], set()
    for e in edges:
        if e.source not in layer or e.target not in layer:
            continue  # reported by layer_map
        up = rank[layer[e.target]] > rank[layer[e.source]]
        if not up:
            continue
        key = (e.source, e.target)
        if key in exceptions and e.lazy:
            used.add(key)
            continue
        where = f"{shown(e.path)}:{e.line}"
        how = " at module level (an exception allows it only inside a function)" \
            if key in exceptions else ""
        problems.append(f"layer rule: {e.source} ({layer[e.source]}) imports {e.target} "
                        f"({layer[e.target]}), a higher layer{how}, at {where}")
    for key in sorted(set(exceptions) - used):
        problems.append(f"exception {key[0]} → {key[1]} matches no upward import any more: "
                        "remove it from EXCEPTIONS")
    return problems


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    found, state, stack = [], {}, []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(edges[m]):
            if state.get(n) == 1:
                found.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)
    return found


def name_branches() -> list[str]:
    """`... == "reacher"`-style comparisons with a world name outside idaudit/worlds."""
    import importlib

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    names = set(importlib.import_module("idaudit.worlds").world_names())
    out = []
    for path in sorted(PKG.rglob("*.py")):
        if "worlds" in path.relative_to(PKG).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                consts = [c.value for c in [node.left, *node.comparators]
                          if isinstance(c, ast.Constant)]
                consts += [e.value for c in node.comparators if isinstance(c, (ast.Tuple, ast.List,
                                                                              ast.Set))
                           for e in c.elts if isinstance(e, ast.Constant)]
                hit = [c for c in consts if c in names]
                if hit:
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno}: compares with {hit}")
    return out


def class_members(cls: type) -> list[str]:
    """The names a class itself defines: methods, properties, class attributes and annotated
    attributes (not inherited ones, not dunders, not ABC bookkeeping)."""
    names = set(vars(cls)) | set(vars(cls).get("__annotations__", {}))
    return sorted(n for n in names if not (n.startswith("__") and n.endswith("__"))
                  and not n.startswith("_abc_"))


def world_members() -> list[str]:
    """The members of the World interface (idaudit.worlds.base.World)."""
    import importlib

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return class_members(importlib.import_module("idaudit.worlds.base").World)


def main() -> int:
    mods = modules()
    edges = import_edges(mods)
    layer, problems = layer_map(mods)
    problems += layer_problems(edges, layer)
    problems += [f"import cycle: {' → '.join(c)}" for c in cycles(graph(edges, mods))]
    for e in edges:
        if any(e.source in modules_in(folder, mods) for folder in NO_TRAINING) and (
                e.target == "idaudit.training" or e.target.startswith("idaudit.training.")):
            problems.append(f"{e.source} imports {e.target} (at {shown(e.path)}:{e.line})")
    problems += name_branches()
    for p in problems:
        print(p)
    members = world_members()
    print(f"World members: {len(members)} ({', '.join(members)})")
    n_edges = len({(e.source, e.target) for e in edges})
    print(f"{len(mods)} modules in {len(LAYERS)} layers, {n_edges} import edges: "
          f"{'OK' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
