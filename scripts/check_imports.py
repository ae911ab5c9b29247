"""Import hygiene of src/idaudit, counting every import (module level and inside functions).

Checks: no import cycles between idaudit modules; audit, plan and loaders import nothing from
idaudit.train; no module outside idaudit/worlds compares a world's name with a literal.
Exit 1 and a line per problem when a check fails.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src"
PKG = ROOT / "idaudit"


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


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


def graph() -> dict[str, set[str]]:
    mods = {module_name(p): p for p in PKG.rglob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                targets = resolve(mod, path.name == "__init__.py", node)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for t in targets:
                if t in mods and t != mod:
                    edges[mod].add(t)
    return edges


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

    sys.path.insert(0, str(ROOT))
    names = set(importlib.import_module("idaudit.worlds").world_names())
    out = []
    for path in PKG.rglob("*.py"):
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


def main() -> int:
    edges = graph()
    problems = [" → ".join(c) for c in cycles(edges)]
    problems = [f"import cycle: {c}" for c in problems]
    for mod in ("idaudit.auditing", "idaudit.planning", "idaudit.loaders"):
        bad = sorted(t for t in edges[mod] if t == "idaudit.train" or t.startswith("idaudit.train."))
        problems += [f"{mod} imports {t}" for t in bad]
    problems += name_branches()
    for p in problems:
        print(p)
    print(f"{len(edges)} modules, {sum(map(len, edges.values()))} import edges: "
          f"{'OK' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
