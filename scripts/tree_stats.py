"""The shape of a source tree: modules per folder, the largest module, the longest function.

    python scripts/tree_stats.py [SRC]        # SRC defaults to this checkout's src/idaudit

Prints one line per folder (modules, lines), then the five largest modules and the five
longest functions (lines from ``def`` to the last line of its body). Run it on two checkouts
to compare a layout before and after a change.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path


def functions(tree: ast.AST) -> list[tuple[int, str]]:
    """(length in lines, qualified name) of every function and method in ``tree``."""
    out = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((child.end_lineno - child.lineno + 1, prefix + child.name))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(tree, "")
    return out


def main(argv: list[str]) -> int:
    src = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "src" / "idaudit"
    folders: dict[str, list[int]] = defaultdict(list)
    sizes, funcs = [], []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        text = path.read_text()
        lines = len(text.splitlines())
        folders[str(Path(rel).parent) if "/" in rel else "."].append(lines)
        sizes.append((lines, rel))
        funcs += [(n, f"{rel}:{name}") for n, name in functions(ast.parse(text))]
    print(f"{sum(len(v) for v in folders.values())} modules, {sum(map(sum, folders.values()))} "
          f"lines, {len(folders)} folders")
    for folder, counts in sorted(folders.items()):
        print(f"  {folder + '/':<22} {len(counts):>3} modules {sum(counts):>6} lines")
    print("largest modules:")
    for n, rel in sorted(sizes, reverse=True)[:5]:
        print(f"  {n:>5}  {rel}")
    print("longest functions:")
    for n, name in sorted(funcs, reverse=True)[:5]:
        print(f"  {n:>5}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
