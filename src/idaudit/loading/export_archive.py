"""torch.export archives (.pt2), vetted before ``torch.export.load`` runs anything they hold.

Without ``trust_pickle`` an archive is loaded only if it is what ``torch.export.save`` writes
for a plain program (raw tensor weights and constants, aten operators, plain names, sympy
expressions of literals and symbols), checked on the very bytes then handed to torch, with
every ``torch.load`` inside forced to ``weights_only``. Anything else is refused with one line
naming what was found and ``--trust-code``. The checks follow torch's own loader, reviewed
for torch 2.13 and 2.14; on any other torch every archive needs ``--trust-code``.
"""

from __future__ import annotations

import json
import math
import os
import re
import zipfile
from pathlib import Path
from typing import Any

from idaudit.core.errors import IdauditError
from idaudit.core.errors import first_line as _first_line
from idaudit.loading.program_refusals import SIDE_EFFECT_OPS, TRUST_HINT, Unreadable, Unvetted, short

__all__ = ["load_export_program", "vet_export_file"]

# ---- torch.export archives: vetted before torch.export.load runs anything they hold --------
#
# torch's torch.export.load (torch/export/__init__.py, load_pt2 in
# torch/export/pt2_archive/_package.py) runs code an archive carries in several ways: full
# pickle (torch.load(weights_only=False)) for weights and constants whose payload config says
# use_pickle, pickle.loads for constants named opaque_obj_*, the TorchScript unpickler for
# custom_obj_*, a fallback to full pickle whenever torch.load(weights_only=True) refuses the
# sample inputs or legacy data/weights/<model>.pt files, full pickle again for every member of
# the legacy zip layout it falls back to when the archive fails to load, and AOTInductor shared
# libraries. The program itself is code too: sympy.sympify (eval) parses its shape
# expressions, its guards_code is exec'd by ExportedProgram.module(), its names are pasted
# into the Python FX generates, and a node may call anything reachable from torch. Without
# trust_pickle an archive is therefore loaded only if it is what torch.export.save writes for a
# plain program, checked on the very bytes then handed to torch: raw tensor weights and
# constants, one program calling aten operators, plain names, sympy expressions made of
# literals and symbols. Anything else is refused.
#
# Reviewed against the loaders of torch 2.13.0 and 2.14.1 (the sources above, the serde
# deserializer and schema, ExportedProgram.module() and _unlift, FX codegen, the sympy
# functions the deserializer names, torch.load and the weights-only unpickler); a torch of any
# other minor version is refused before the archive is looked at. 2.14 changed nothing they rely
# on: the same member files and payload prefixes (constants.py is unchanged), the same archive
# and schema versions (schema.yaml is unchanged, so the same argument kinds), the same
# _SYM_OPS and sympy_functions table (no new names for sympify; torch.utils._sympy.functions
# only gained type hints), the same weights_only-then-full-pickle fallbacks, guards_code still
# exec'd, names pasted as before. What did change lies outside what a vetted archive reaches:
# the AOTInductor loader is now built before its device check (AOTInductor is refused), FX
# writes boxed-argument locals (from an operator attribute or node meta the deserializer never
# sets) and complex constants as complex(real, imag) (numbers only), the weights-only
# unpickler lets allow-listed list subclasses be appended to and maps protocol-2 exception
# names to builtins (allow-listed globals only), and weights_only loads always validate sparse
# tensors. A new torch must be reviewed the same way before its version is added here.

_PT2_TORCH = frozenset({(2, 13), (2, 14)})  # torch minor versions whose loader was reviewed
_PT2_MEMBERS = frozenset({"archive_format", "archive_version", "byteorder", ".data/version",
                          ".data/serialization_id", "models/model.json",
                          "data/sample_inputs/model.pt", "data/weights/model_weights_config.json",
                          "data/constants/model_constants_config.json"})
_PT2_PAYLOAD = re.compile(r"data/weights/weight_[0-9]+|data/constants/tensor_[0-9]+")
_PT2_EXTRA = re.compile(r"extra/[A-Za-z0-9_.\-/]+")
_PLAIN = re.compile(r"[A-Za-z0-9_.+\-]*")  # no quote, bracket, space or line break
_OP_TARGET = re.compile(r"torch\.ops\.aten\.[A-Za-z0-9_]+\.[A-Za-z0-9_]+|_operator\.[a-z_]+"
                        r"|math\.trunc|torch\._?sym_[a-z]+")
_SYM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SYM_FLOAT = re.compile(r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?|[-+]?inf|nan")
_SYM_CALLS = frozenset({
    "Symbol", "Integer", "Float", "Rational", "Add", "Mul", "Pow", "Max", "Min", "Abs", "Mod",
    "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "StrictLessThan", "StrictGreaterThan", "LessThan",
    "GreaterThan", "Equality", "Unequality", "And", "Or", "Not", "floor", "ceiling",
    # torch.utils._sympy.functions, as the deserializer names them
    "FloorDiv", "ModularIndexing", "Where", "PythonMod", "CleanDiv", "CeilToInt", "FloorToInt",
    "CeilDiv", "LShift", "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv", "IntTrueDiv",
    "IsNonOverlappingAndDenseIndicator", "TruncToFloat", "TruncToInt", "RoundToInt",
    "RoundDecimal", "ToFloat", "Identity"})
_SYM_CONSTANTS = frozenset({"true", "false", "oo", "zoo", "nan", "int_oo"})


class _UnreviewedTorch(Exception):
    """This torch's loader is not one the checks were reviewed against."""


def _torch_minor() -> tuple[int, int] | None:
    """(major, minor) of the torch this process runs, None if its version does not say."""
    import torch

    found = re.match(r"(\d+)\.(\d+)", str(torch.__version__))
    return None if found is None else (int(found[1]), int(found[2]))


def _check_torch_reviewed() -> None:
    import torch

    if _torch_minor() in _PT2_TORCH:
        return
    known = [".".join(map(str, v)) for v in sorted(_PT2_TORCH)]
    names = known[0] if len(known) == 1 else ", ".join(known[:-1]) + " and " + known[-1]
    raise _UnreviewedTorch(
        f"idaudit vets .pt2 archives for torch {names} only, and this is torch "
        f"{torch.__version__}; pass --trust-code if you trust the file, or use one of those "
        "torch versions")


def _sym_callables() -> tuple[Any, ...]:
    """The Python functions an exported graph may call besides aten operators: the symbolic
    shape arithmetic torch.export emits for dynamic shapes."""
    import operator

    import torch

    return (operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
            operator.mod, operator.pow, operator.neg, operator.pos, operator.eq, operator.ne,
            operator.lt, operator.le, operator.gt, operator.ge, operator.and_, operator.or_,
            operator.lshift, operator.rshift, math.trunc, torch.sym_int, torch.sym_float,
            torch.sym_ite, torch.sym_max, torch.sym_min, torch.sym_not, torch.sym_sqrt)


def _vet_target(target: Any) -> None:
    """A node's target must resolve (as torch's deserialize_operator resolves it) to an aten
    operator that touches no file, or to symbolic shape arithmetic."""
    import operator

    import torch

    if not isinstance(target, str) or not _OP_TARGET.fullmatch(target):
        raise Unvetted(f"calls {short(str(target))}, which is not an aten operator")
    if target.startswith("torch.ops.aten.") and target.split(".")[3] in SIDE_EFFECT_OPS:
        raise Unvetted(f"calls {target}, which reaches files")
    root, *names = target.split(".")
    obj: Any = {"torch": torch, "_operator": operator, "math": math}[root]
    for name in names:
        obj = getattr(obj, name, None)
        if obj is None:
            raise Unvetted(f"calls {short(target)}, which this torch does not have")
    if isinstance(obj, torch._ops.OpOverload) and obj.namespace == "aten":
        return
    if not any(obj is fn for fn in _sym_callables()):
        raise Unvetted(f"calls {short(target)}, which is not an aten operator")


def _vet_sym_expr(expr: Any) -> None:
    """A shape expression (sympy.srepr text, which the deserializer hands to sympy.sympify, an
    eval) must be calls of sympy and torch shape functions on numbers and named symbols."""
    import ast

    if not isinstance(expr, str) or len(expr) > 10_000:
        raise Unvetted("has a symbolic shape that is not a sympy expression")
    bad = Unvetted(f"has a symbolic shape {short(expr)} that is not a plain sympy expression")
    try:
        tree = ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise bad from None

    def number(node: ast.AST) -> bool:
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            node = node.operand
        return isinstance(node, ast.Constant) and type(node.value) in (int, float)

    def check(node: ast.AST, depth: int = 0) -> None:
        if depth > 200:
            raise bad
        if number(node):
            return
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return check(node.operand, depth + 1)
        if isinstance(node, ast.Name) and node.id in _SYM_CONSTANTS:
            return
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in _SYM_CALLS):
            raise bad
        for kw in node.keywords:  # Symbol's assumptions, Float's precision
            if kw.arg is None or not re.fullmatch(r"[a-z]+(_[a-z]+)*", kw.arg) or not (
                    isinstance(kw.value, ast.Constant) and type(kw.value.value) in (bool, int)):
                raise bad
        args = list(node.args)
        if node.func.id in ("Symbol", "Float") and args and isinstance(args[0], ast.Constant) \
                and isinstance(args[0].value, str):
            pattern = _SYM_NAME if node.func.id == "Symbol" else _SYM_FLOAT
            if len(args) != 1 or not pattern.fullmatch(args[0].value):
                raise bad
            return
        if node.func.id == "Symbol":
            raise bad
        for arg in args:  # no strings here: sympy functions sympify (eval) string arguments
            check(arg, depth + 1)

    check(tree.body)


def _vet_plain(s: str) -> None:
    if not _PLAIN.fullmatch(s):
        raise Unvetted(f"names {short(s)}, which is not a plain name")


def _vet_tree_spec(spec: Any) -> None:
    """in_spec / out_spec: pytree specs (JSON in a string, contexts JSON again) whose names FX
    pastes into the forward it generates."""
    stack = [spec]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            try:
                stack.append(json.loads(value))
            except (ValueError, RecursionError):
                raise Unvetted(f"has a pytree spec {short(value)} that is not JSON") from None
            continue
        if isinstance(value, dict):
            for k, v in value.items():
                _vet_plain(k)
                if k == "context" and isinstance(v, str):
                    stack.append(v)
                elif isinstance(v, str):
                    _vet_plain(v)
                else:
                    stack.append(v)
        elif isinstance(value, list):
            for v in value:
                (_vet_plain(v) if isinstance(v, str) else stack.append(v))


def _vet_program(program: Any, where: str) -> None:
    """Every string in a serialized program is a plain name, except what torch only stores
    (node metadata, string arguments of operators, which FX writes by repr) and what is checked
    for what it is: node targets, shape expressions, pytree specs; guards_code (exec'd by
    ExportedProgram.module()) must be empty."""
    stack: list[tuple[str | None, Any]] = [(None, program)]
    try:
        while stack:
            key, value = stack.pop()
            if key in ("metadata", "as_string", "as_strings"):
                continue
            if key in ("target", "as_operator"):
                _vet_target(value)
            elif key == "expr_str":
                _vet_sym_expr(value)
            elif key in ("in_spec", "out_spec"):
                _vet_tree_spec(value)
            elif key == "guards_code":
                if value not in (None, []):
                    raise Unvetted("carries guards_code, Python that torch runs on loading")
            elif isinstance(value, dict):
                for k, v in value.items():
                    _vet_plain(k)
                    stack.append((k, v))
            elif isinstance(value, list):
                stack.extend((None, v) for v in value)
            elif isinstance(value, str):
                _vet_plain(value)
    except Unvetted as exc:
        raise Unvetted(f"{where} {exc}", exc.pickled) from None


def _vet_payload_config(raw: bytes, member: str, what: str, prefix: str) -> None:
    """A weights or constants config: every payload raw tensor bytes (use_pickle false) in a
    file named prefix + number."""
    try:
        config = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        raise Unvetted(f"its {member} is not JSON") from None
    entries = config.get("config") if isinstance(config, dict) else None
    if not isinstance(entries, dict):
        raise Unvetted(f"its {member} has no config table")
    for fqn, meta in entries.items():
        if not isinstance(meta, dict):
            raise Unvetted(f"its {member} entry {short(fqn)} is not a table")
        if meta.get("use_pickle") is True:
            raise Unvetted(f"its {what} {short(fqn)} is stored as a pickle (use_pickle: true in "
                            f"{member})", pickled=True)
        name = meta.get("path_name")
        if isinstance(name, str) and name.startswith(("opaque_obj_", "custom_obj_")):
            raise Unvetted(f"its {what} {short(fqn)} is a pickled object ({name})", pickled=True)
        if meta.get("use_pickle") is not False or not isinstance(name, str) \
                or not re.fullmatch(prefix + "[0-9]+", name):
            raise Unvetted(f"its {what} {short(fqn)} is not stored as raw tensor bytes ({member})")
    _vet_program(config, f"its {member}")


def _describe_member(name: str) -> Unvetted:
    if name.startswith("data/aotinductor/"):
        return Unvetted(f"it holds AOTInductor compiled code ({short(name)})")
    if name.startswith("models/"):
        return Unvetted(f"it holds a second program ({short(name)})")
    if name.endswith((".pt", ".pkl")) or "obj_" in name:
        return Unvetted(f"it holds {short(name)}, which torch unpickles", pickled=True)
    return Unvetted(f"it holds {short(name)}, which torch.export.save does not write for a "
                     "plain program")


def _vet_pt2(path: Path, data: bytes) -> None:
    """Refuse, with a line naming the reason and --trust-code, a torch.export archive that
    torch.export.load could not read without running code it holds (see the note above)."""
    try:
        _vet_pt2_bytes(data)
    except Unvetted as exc:
        raise IdauditError(
            f"{path} is a torch.export archive idaudit will not load untrusted: {exc} "
            f"({'unpickling' if exc.pickled else 'loading'} it can run arbitrary code); "
            f"{TRUST_HINT}") from None
    except Unreadable as exc:
        raise IdauditError(f"cannot load {path} as a torch.export program ({exc})") from None
    except _UnreviewedTorch as exc:
        raise IdauditError(f"{path}: {exc}") from None


def _vet_pt2_bytes(data: bytes) -> None:
    import io

    import torch

    _check_torch_reviewed()
    try:  # torch.export.load falls back to the legacy layout, all pickles, if a zip has `version`
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            legacy = "version" in zf.namelist()
    except Exception:  # the fallback's zipfile.ZipFile fails on these bytes the same way
        legacy = False
    if legacy:
        raise Unvetted("it has the legacy torch.export layout (a top-level `version`), whose "
                        "members torch unpickles", pickled=True)
    try:  # the reader load_pt2 uses, on the bytes it will be given
        reader = torch._C.PyTorchFileReader(io.BytesIO(data))
        names = list(reader.get_all_records())
    except Exception as exc:
        raise Unreadable(_first_line(exc)) from None
    if len({n.lower() for n in names}) != len(names):  # the reader finds names case-blind
        raise Unvetted("it holds members whose names differ only in case")
    for name in names:
        if name not in _PT2_MEMBERS and not _PT2_PAYLOAD.fullmatch(name) \
                and not _PT2_EXTRA.fullmatch(name):
            raise _describe_member(name)
    if "models/model.json" not in names:
        raise Unreadable("no models/model.json in the archive")

    def record(name: str) -> bytes | None:
        if name not in names:
            return None
        try:
            return bytes(reader.get_record(name))
        except Exception as exc:  # a damaged member: torch.export.load fails on it as well
            raise Unreadable(f"{name}: {_first_line(exc)}") from None

    inputs = record("data/sample_inputs/model.pt")
    if inputs:  # torch tries weights_only=True first and on any failure unpickles in full
        try:
            torch.load(io.BytesIO(inputs), weights_only=True)
        except Exception:
            raise Unvetted("its sample inputs are a pickle that torch.load(weights_only=True) "
                            "refuses", pickled=True) from None
    for member, what, prefix in (("data/weights/model_weights_config.json", "weight", "weight_"),
                                 ("data/constants/model_constants_config.json", "constant",
                                  "tensor_")):
        raw = record(member)
        if raw is not None:
            _vet_payload_config(raw, member, what, prefix)
    try:
        program = json.loads(record("models/model.json").decode("utf-8"))
    except (ValueError, RecursionError):
        raise Unreadable("models/model.json is not JSON") from None
    _vet_program(program, "its program")


class _WeightsOnlyTorchLoad:
    """While loading a vetted archive, every torch.load is weights_only (torch reads
    TORCH_FORCE_WEIGHTS_ONLY_LOAD on each call): a second guard over the checks above."""

    _KEYS = ("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")

    def __enter__(self) -> None:
        self._saved = {k: os.environ.get(k) for k in self._KEYS}
        os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
        os.environ.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)

    def __exit__(self, *exc: object) -> None:
        for k, v in self._saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def load_export_program(path: Path, trust_pickle: bool = False) -> Any:
    """The module of a ``torch.export`` archive (.pt2). Untrusted, the archive is read once,
    vetted (:func:`_vet_pt2`) and loaded from those very bytes."""
    import io

    import torch

    source: Any = str(path) if trust_pickle else io.BytesIO(vet_export_file(path))
    try:
        if trust_pickle:
            program = torch.export.load(source)
        else:
            with _WeightsOnlyTorchLoad():
                program = torch.export.load(source)
        return program.module()
    except Exception as exc:
        raise IdauditError(f"cannot load {path} as a torch.export program "
                           f"({_first_line(exc)})") from None


def vet_export_file(path: Path) -> bytes:
    """The vetting of a torch.export archive before ``torch.export.load``: its bytes, read
    once and vetted (:func:`_vet_pt2`), what an untrusted load then loads."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise IdauditError(f"cannot read {path} ({exc.strerror})") from None
    _vet_pt2(path, data)
    return data
