"""Which names each idaudit module gives the rest of the tree, and whether its ``__all__`` says so.

Read with :mod:`ast` only (nothing of idaudit is imported), over src/, tests/, scripts/,
benchmarks/ and the Python blocks and dotted ``idaudit.…`` references of docs/ and README.md:

* ``from idaudit.x.y import a, b`` (relative imports inside src/ too): ``a`` and ``b`` of
  ``idaudit.x.y``, unless one is a submodule;
* ``import idaudit.x.y as m`` (or ``from idaudit.x import y``, ``y`` a submodule), then ``m.a``:
  ``a`` of ``idaudit.x.y``; ``idaudit.x.y.a`` spelt out (``monkeypatch.setattr(m, "a", …)`` is
  a test replacing a global, not a use of the module's API, and does not count);
* ``"idaudit.x.y:a"`` strings (the registries' lazy targets, entry points), ``_PUBLIC`` of
  idaudit/__init__.py, and the registries' ``f"idaudit.x.y:{_name.upper()}"`` loops.

Usage::

    python scripts/module_exports.py            # each module: the names used from it elsewhere
    python scripts/module_exports.py --all      # the __all__ line those names make, per module
    python scripts/module_exports.py --check    # exit 1 on each finding, else a line ending OK

``--check`` reports each module (every .py under src/idaudit but ``__main__.py``, and the
``__init__.py`` files that bind names) without ``__all__``; each name imported or reached from an
idaudit module that is not in its ``__all__`` (a ``_`` name too, save those in
:data:`PRIVATE_ALLOWED`, each with its reason); and each ``__all__`` name the module does not bind.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PKG = SRC / "idaudit"
CODE_DIRS = ("src", "tests", "scripts", "benchmarks")
DOC_FILES = ("docs", "README.md")

#: private names a module of src/ imports from another on purpose: (module, name) → why. Tests
#: and benchmarks (:data:`WHITE_BOX`) may reach any private name: they test or time the helper.
PRIVATE_ALLOWED: dict[tuple[str, str], str] = {
    ("idaudit.core.atomic", "_temp_prefix"):
        "core/outputs.py names its temporary files as atomic's writes do, to clean up after them",
    ("idaudit.core.request_parts", "_part"):
        "request_parts.py is requests.py's parts split out; requests builds its fields with it",
    ("idaudit.experiments.execute", "_EXIT_GRACE"):
        "the Ray executor waits for a run's exit as the process pool does",
    ("idaudit.experiments.execute", "_init_worker"):
        "sweep.py starts its pool's workers with execute's initialiser",
    ("idaudit.loading.arrays", "_Entry"): "programs.py reads archive entries as arrays.py does",
    ("idaudit.loading.arrays", "_declared_of"): "opened.py's formats wrap arrays.py's readers",
    ("idaudit.loading.arrays", "_npz_arrays"): "opened.py's formats wrap arrays.py's readers",
    ("idaudit.loading.arrays", "_read_safetensors_arrays"):
        "opened.py's formats wrap arrays.py's readers",

    ("idaudit.loading.arrays", "_safetensors_keys"): "opened.py's formats wrap arrays.py's readers",
    ("idaudit.loading.filekinds", "_file_kind"): "loaders.py is the one caller of the sniffing",
    ("idaudit.loading.opened", "_WEIGHTS_ONLY"): "programs.py loads pickles as opened.py does",
    ("idaudit.loading.opened", "_program_options"): "programs.py is opened.py's programs split out",
    ("idaudit.loading.opened", "_embedding"): "loaders.py turns an opened target into an encoder",
    ("idaudit.loading.opened", "_encoder"): "loaders.py turns an opened target into an encoder",
    ("idaudit.loading.programs", "_open_program"): "loaders.py opens programs through programs.py",
    ("idaudit.loading.programs", "_program"): "loaders.py opens programs through programs.py",
    ("idaudit.loading.zygote", "_Zygote"): "cage.py drives the zygote process zygote.py defines",
}
#: where reaching a private name needs no reason (white-box tests, timings of a helper)
WHITE_BOX = ("tests/", "benchmarks/")

#: what every module has (``m.__file__`` reaches none of its names)
MODULE_ATTRIBUTES = {"__all__", "__dict__", "__doc__", "__file__", "__loader__", "__name__",
                     "__package__", "__path__", "__spec__"}
DOTTED = re.compile(r"\bidaudit(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?::[A-Za-z_][A-Za-z0-9_]*)?")
FENCE = re.compile(r"```(?:python|py|pycon)?\n(.*?)```", re.S)


def private(name: str) -> bool:
    """``_name``, not ``__version__``."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(PKG.rglob("*.py"))
                            if p.name != "__main__.py"}


def binds_names(tree: ast.Module) -> bool:
    """Whether a module does more than hold a docstring."""
    body = tree.body[1:] if tree.body and isinstance(tree.body[0], ast.Expr) else tree.body
    return bool(body)


def top_level_names(tree: ast.Module) -> set[str] | None:
    """The names a module binds at its top level (None where a ``__getattr__`` makes more)."""
    names: set[str] = set()

    def visit(stmts: list[ast.stmt]) -> None:
        for node in stmts:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    names.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                visit(node.orelse)
                visit(node.finalbody)
                for handler in node.handlers:
                    visit(handler.body)
            elif isinstance(node, ast.With):
                visit(node.body)
    visit(tree.body)
    return None if "__getattr__" in names else names


def bound_names(module: str) -> set[str] | None:
    """The top-level names of an idaudit module (a prose reference names only those)."""
    if module not in _BOUND:
        _BOUND[module] = top_level_names(ast.parse(MODULES[module].read_text(encoding="utf-8")))
    return _BOUND[module]


_BOUND: dict[str, set[str] | None] = {}


def declared_all(tree: ast.Module) -> list[str] | None:
    """The literal ``__all__`` of a module; None when it has none."""
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) and node.value else [])
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            try:
                return list(ast.literal_eval(node.value))
            except ValueError:  # computed (idaudit/__init__.py: sorted(_PUBLIC))
                return ["<computed>"]
    return None


class Uses:
    """Every (module, name) the tree reaches, with where."""

    def __init__(self) -> None:
        self.where: dict[tuple[str, str], list[str]] = defaultdict(list)
        self.star: list[str] = []

    def add(self, module: str, name: str, where: str) -> None:
        if f"{module}.{name}" in MODULES or name in MODULE_ATTRIBUTES:
            return  # a submodule, or what every module has
        self.where[(module, name)].append(where)

    def dotted(self, text: str, where: str, bound_only: bool = False) -> None:
        """``idaudit.x.y.a`` or ``idaudit.x.y:a``: ``a`` of the longest module named."""
        if ":" in text:
            module, name = text.split(":")
            if module in MODULES and (not bound_only or name in (bound_names(module) or ())):
                self.add(module, name, where)
            return
        parts = text.split(".")
        for i in range(len(parts) - 1, 0, -1):
            module = ".".join(parts[:i])
            if module in MODULES:
                if not bound_only or parts[i] in (bound_names(module) or ()):
                    self.add(module, parts[i], where)
                return


def resolve_from(node: ast.ImportFrom, path: Path | None) -> str | None:
    if not node.level:
        return node.module
    if path is None or SRC not in path.parents:
        return None
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package.pop()
    package = package[:len(package) - node.level + 1]
    return ".".join(package + ([node.module] if node.module else []))


def scan_code(tree: ast.AST, uses: Uses, where: str, path: Path | None, own: str | None) -> None:
    """The uses in one file's tree; ``own`` is its module's name (its uses of itself don't count)."""
    aliases: dict[str, str] = {}  # a local name → the idaudit module it is bound to

    def use(module: str, name: str, line: int) -> None:
        if module != own:
            uses.add(module, name, f"{where}:{line}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES and alias.asname:
                    aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            module = resolve_from(node, path)
            if module not in MODULES:
                continue
            for alias in node.names:
                if alias.name == "*":
                    uses.star.append(f"{where}:{node.lineno}: from {module} import *")
                elif f"{module}.{alias.name}" in MODULES:
                    aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
                else:
                    use(module, alias.name, node.lineno)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id in aliases:
                use(aliases[node.value.id], node.attr, node.lineno)
            else:
                chain = []
                value: ast.expr = node
                while isinstance(value, ast.Attribute):
                    chain.append(value.attr)
                    value = value.value
                if isinstance(value, ast.Name) and value.id == "idaudit":
                    text = ".".join(["idaudit", *reversed(chain)])
                    parts = text.split(".")
                    module = ".".join(parts[:-1])
                    if module in MODULES and module != own:
                        uses.add(module, parts[-1], f"{where}:{node.lineno}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if re.fullmatch(r"idaudit(\.\w+)+:\w+", node.value):
                module = node.value.split(":")[0]
                if module != own:
                    uses.dotted(node.value, f"{where}:{node.lineno}")
        elif isinstance(node, ast.For):
            registry_loop(node, uses, where)


def registry_loop(node: ast.For, uses: Uses, where: str) -> None:
    """``for _name, … in (("a", …), …): X.add_lazy(_name, f"idaudit.m:{_name.upper()}", …)``."""
    if not (isinstance(node.target, ast.Tuple) and isinstance(node.target.elts[0], ast.Name)
            and isinstance(node.iter, ast.Tuple)):
        return
    var = node.target.elts[0].id
    try:
        keys = [row[0] for row in ast.literal_eval(node.iter)]
    except ValueError:
        return
    for sub in ast.walk(ast.Module(body=node.body, type_ignores=[])):
        if (isinstance(sub, ast.JoinedStr) and len(sub.values) == 2
                and isinstance(sub.values[0], ast.Constant)
                and str(sub.values[0].value).startswith("idaudit.")
                and ast.unparse(sub.values[1].value) == f"{var}.upper()"):
            for key in keys:
                uses.dotted(f"{sub.values[0].value}{key.upper()}", f"{where}:{sub.lineno}")


def public_table(tree: ast.Module, uses: Uses) -> None:
    """idaudit/__init__.py's ``_PUBLIC``: name → "module" or "module:attribute" under idaudit."""
    for node in tree.body:
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and node.target.id == "_PUBLIC"):
            for name, target in ast.literal_eval(node.value).items():
                module, _, attr = target.partition(":")
                uses.add(f"idaudit.{module}", attr or name, f"src/idaudit/__init__.py:{node.lineno}")


def collect() -> Uses:
    uses = Uses()
    for folder in CODE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py*")):
            if path.suffix not in (".py", ".pyi") or ".venv" in path.parts:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            where = str(path.relative_to(ROOT))
            own = module_name(path) if PKG in path.parents or path.parent == PKG else None
            scan_code(tree, uses, where, path, own)
            if path == PKG / "__init__.py":
                public_table(tree, uses)
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for path in docs:
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        where = str(path.relative_to(ROOT))
        for block in FENCE.findall(text):
            try:
                tree = ast.parse(block)
            except SyntaxError:
                continue
            scan_code(tree, uses, where, None, None)
        for match in DOTTED.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            uses.dotted(match.group().rstrip("."), f"{where}:{line}", bound_only=True)
    return uses


def wanted() -> dict[str, list[str]]:
    """module → the names the rest of the tree uses from it, sorted."""
    names: dict[str, set[str]] = defaultdict(set)
    for module, name in collect().where:
        if not private(name):  # a private name stays out of __all__
            names[module].add(name)
    return {module: sorted(names[module]) for module in MODULES}


def all_line(names: list[str], width: int = 110) -> str:
    """``__all__ = [...]`` wrapped as the modules that already have one write it."""
    lines, line = [], "__all__ = ["
    indent = " " * len(line)
    for i, name in enumerate(names):
        item = f'"{name}"' + ("," if i < len(names) - 1 else "]")
        if len(line) + len(item) + 1 > width and line.strip() != "__all__ = [":
            lines.append(line.rstrip())
            line = indent
        line += item + (" " if i < len(names) - 1 else "")
    if not names:
        return "__all__: list[str] = []"
    return "\n".join([*lines, line])


def check() -> int:
    uses = collect()
    problems: list[str] = list(uses.star)
    trees = {m: ast.parse(p.read_text(encoding="utf-8")) for m, p in MODULES.items()}
    alls: dict[str, list[str] | None] = {}
    for module, path in MODULES.items():
        tree = trees[module]
        alls[module] = declared_all(tree)
        if alls[module] is None and (path.name != "__init__.py" or binds_names(tree)):
            problems.append(f"{path.relative_to(ROOT)}: no __all__")
        bound = top_level_names(tree)
        if alls[module] and bound is not None:
            for name in alls[module]:
                if name not in bound:
                    problems.append(f"{path.relative_to(ROOT)}: __all__ names {name}, which it "
                                    "does not define")
    for (module, name), where in sorted(uses.where.items()):
        declared = alls.get(module) or []
        if name in declared or "<computed>" in declared or (module, name) in PRIVATE_ALLOWED:
            continue
        if private(name):
            where = [w for w in where if not w.startswith(WHITE_BOX)]
            if not where:
                continue
        kind = "private name" if private(name) else "name"
        problems.append(f"{where[0]}: {kind} {name} of {module} is not in its __all__"
                        + (f" (and {len(where) - 1} more)" if len(where) > 1 else ""))
    for line in problems:
        print(line)
    print(f"{len(MODULES)} modules, {sum(1 for a in alls.values() if a is not None)} with __all__, "
          f"{len(uses.where)} names used across modules: "
          + (f"{len(problems)} problems" if problems else "OK"))
    return 1 if problems else 0


def main(argv: list[str]) -> int:
    if "--check" in argv:
        return check()
    for module, names in wanted().items():
        if "--all" in argv:
            print(f"{module}: {all_line(names)}")
        else:
            print(f"{module}: {', '.join(names) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
