"""Write src/idaudit/__init__.pyi, the public names of ``import idaudit`` for type checkers,
from the one table of them, ``_PUBLIC`` in src/idaudit/__init__.py.

The package loads its names on first use (a module ``__getattr__``), which type checkers
cannot follow; the stub re-exports each from where it is defined. A stub beside
``__init__.py`` replaces it for type checkers, so it lists everything the package exposes:
the table holds every public name (the exceptions and ``__version__`` included).

    python scripts/public_stub.py           # (re)write the stub
    python scripts/public_stub.py --check   # exit 1 if the stub differs from the table's

The table is read from the source (``ast``), not imported: the stub is the table's whatever
``idaudit`` an environment would import. tests/test_structure.py runs the check.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INIT = ROOT / "src" / "idaudit" / "__init__.py"
STUB = INIT.with_suffix(".pyi")

HEADER = '''"""The public names of ``import idaudit`` for type checkers (the package loads them on
first use). Generated from ``_PUBLIC`` in __init__.py by scripts/public_stub.py: do not edit;
rerun it after changing the table (tests/test_structure.py checks that it is current)."""
'''


def public_table(source: str) -> dict[str, str]:
    """``_PUBLIC`` of the package's ``__init__.py`` source: public name → "module" or
    "module:attribute" under idaudit."""
    for node in ast.parse(source).body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id == "_PUBLIC":
            return ast.literal_eval(node.value)
    raise SystemExit(f"{INIT}: no _PUBLIC table")


def _isort_key(attr_name: tuple[str, str]) -> tuple[int, str, str]:
    """ruff's (isort's) order of the names a module gives: constants, classes, the rest."""
    attr, name = attr_name
    kind = 0 if attr.isupper() else 1 if attr[:1].isupper() else 2
    return kind, attr, name


def stub(table: dict[str, str]) -> str:
    """The stub's text: one ``from idaudit.MODULE import ATTR as NAME`` (an explicit
    re-export) per public name, grouped by module, and ``__all__``."""
    by_module: dict[str, list[tuple[str, str]]] = {}
    for name, where in table.items():
        module, _, attr = where.partition(":")
        by_module.setdefault(module, []).append((attr or name, name))
    lines = [HEADER]
    for module in sorted(by_module):
        for attr, name in sorted(by_module[module], key=_isort_key):
            lines.append(f"from idaudit.{module} import {attr} as {name}")
    lines.append("")
    lines.append("__all__ = [")
    lines.extend(f'    "{name}",' for name in sorted(table))
    lines.append("]")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    want = stub(public_table(INIT.read_text()))
    have = STUB.read_text() if STUB.exists() else None
    if check:
        if have != want:
            print(f"{STUB.relative_to(ROOT)} differs from _PUBLIC in {INIT.relative_to(ROOT)}: "
                  f"run python scripts/public_stub.py")
            return 1
        print(f"{STUB.relative_to(ROOT)}: current ({len(public_table(INIT.read_text()))} names)")
        return 0
    if have != want:
        STUB.write_text(want)
        print(f"wrote {STUB.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
