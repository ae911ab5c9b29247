"""House rules checked on the source: the layers of docs/architecture.md and no upward
imports, no import cycles, audit/plan/loaders free of train/, no world-name branches outside
worlds/ (scripts/check_imports.py), a World that is only the data process, and a lint-clean
tree."""

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: what the World interface may hold: the data process, and the spec to store beside its data
DATA_PROCESS = {"spec", "name", "latent_dim", "rho", "rho_per_dim", "circular", "latent_labels",
                "eval_set", "plan_set", "observe", "pair_source", "view_correlation", "spec_for",
                "pairs"}
#: what only the CLI and orchestration ask: a world's kind answers it, never the world
KIND_ONLY = {"options", "refuses", "writes_directory", "make_spec", "check_spec", "from_spec",
             "write", "prepare", "train_defaults", "data_exists", "recipes", "default_encoder"}


def check_imports():
    """scripts/check_imports.py as a module."""
    spec = importlib.util.spec_from_file_location("check_imports",
                                                  ROOT / "scripts" / "check_imports.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["check_imports"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_import_hygiene():
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_imports.py")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip().endswith("OK")
    members = check_imports().world_members()
    assert f"World members: {len(members)} (" in res.stdout


def test_class_members_counts_what_a_class_itself_defines():
    import abc

    class Base(abc.ABC):
        inherited = 1

        @abc.abstractmethod
        def answer(self): ...

    class C(Base):
        flag: bool = True
        spec: object

        def method(self): ...

        @property
        def prop(self): ...

        def __repr__(self): ...

    assert check_imports().class_members(C) == ["flag", "method", "prop", "spec"]


def test_world_is_only_the_data_process():
    """The World base class holds at most the data process (it had 25 members, 12 of them the
    CLI's and orchestration's); a kind answers those, and no registered world defines them."""
    from idaudit.worlds import KINDS, World, WorldKind

    members = set(check_imports().world_members())
    assert members <= DATA_PROCESS, f"not the data process: {sorted(members - DATA_PROCESS)}"
    assert len(members) == 14
    for name in KINDS.names():
        kind = KINDS.get(name)
        assert isinstance(kind, WorldKind) and issubclass(kind.world, World), name
        assert KIND_ONLY <= set(dir(kind)), name
        for cls in kind.world.__mro__[:kind.world.__mro__.index(World)]:
            assert not KIND_ONLY & set(vars(cls)), (name, cls.__name__,
                                                    sorted(KIND_ONLY & set(vars(cls))))


def docs_layers():
    """layer → the file entries in docs/architecture.md's "The folders: layers, bottom up" table (a file
    listed in parentheses after ``pkg/`` lies in that package)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## The folders: layers, bottom up", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]  # no header
    out = {}
    for row in rows:
        layer, cell = [c.strip() for c in row.strip().strip("|").split(" | ")][:2]
        entries, within, last = [], [""], ""
        for m in re.finditer(r"`([^`]+)`|[()]", cell):
            token = m.group(1)
            if token is None:
                if m.group(0) == "(":
                    within.append(last if last.endswith("/") else within[-1])
                else:
                    within.pop()
            elif token.endswith((".py", "/")):
                last = within[-1] + token
                entries.append(last)
        out[layer] = entries
    return out


def test_docs_layers_table_lists_the_scripts_layers():
    ci = check_imports()
    mods = ci.modules()
    docs = docs_layers()
    assert list(docs) == list(ci.LAYERS)  # the same layers, in the same order
    assert docs["worlds"][:3] == ["worlds/", "worlds/base.py", "worlds/kind.py"]
    for layer, entries in docs.items():
        found = {e: ci.modules_in(e, mods) for e in entries}
        assert all(found.values()), f"{layer}: no such file: {[e for e, m in found.items() if not m]}"
        listed = set().union(*(ci.modules_in(e, mods) for e in ci.LAYERS[layer]))
        assert set().union(*found.values()) == listed, layer


def test_layer_rules_report_upward_imports_unplaced_modules_and_stale_entries(tmp_path):
    ci = check_imports()
    pkg = tmp_path / "idaudit"
    mods = {m: pkg / f for m, f in [
        ("idaudit.errors", "errors.py"), ("idaudit.worlds.base", "worlds/base.py"),
        ("idaudit.report", "report.py"), ("idaudit.cli", "cli.py"),
        ("idaudit.state_dicts", "state_dicts.py")]}
    layers = {"low": ("errors.py", "worlds/"), "mid": ("report.py", "gone.py"), "top": ("cli.py",)}
    layer, problems = ci.layer_map(mods, layers, pkg)
    assert layer == {"idaudit.errors": "low", "idaudit.worlds.base": "low",
                     "idaudit.report": "mid", "idaudit.cli": "top"}
    assert len(problems) == 2
    assert problems[0].startswith("layer 'mid' lists gone.py, which is no file")
    assert problems[1].startswith("idaudit.state_dicts (src/idaudit/state_dicts.py) is in no "
                                  "layer: add it to LAYERS")

    def edge(source, target, lazy=False):
        return ci.Edge(source, target, mods[source], 7, lazy)

    down = [edge("idaudit.cli", "idaudit.report"), edge("idaudit.report", "idaudit.worlds.base"),
            edge("idaudit.worlds.base", "idaudit.errors")]
    assert ci.layer_problems(down, layer, layers, {}) == []
    up = ci.layer_problems([*down, edge("idaudit.worlds.base", "idaudit.cli", lazy=True)], layer,
                           layers, {})
    assert up == [f"layer rule: idaudit.worlds.base (low) imports idaudit.cli (top), a higher "
                  f"layer, at {pkg / 'worlds/base.py'}:7"]
    allowed = {("idaudit.errors", "idaudit.report"): "a reason"}
    assert ci.layer_problems([edge("idaudit.errors", "idaudit.report", lazy=True)], layer, layers,
                             allowed) == []
    eager = ci.layer_problems([edge("idaudit.errors", "idaudit.report")], layer, layers, allowed)
    assert len(eager) == 2 and "only inside a function" in eager[0]
    assert eager[1] == ("exception idaudit.errors → idaudit.report matches no upward import any "
                        "more: remove it from EXCEPTIONS")


def test_the_layers_hold_without_exceptions():
    """Since audit's renderers moved beside audit (evaluations/report.py), no module imports a
    higher layer, not even inside a function (the mechanism stays, tested above)."""
    assert check_imports().EXCEPTIONS == {}


def test_api_surface():
    import idaudit
    from idaudit.core.errors import IdauditError

    assert issubclass(IdauditError, ValueError)
    import importlib

    # one public name per action (each takes its keyword options or its request); the
    # request-taking run_* functions stay in their modules, for the CLI
    home = {"audit": "evaluations.audit", "consistency": "evaluations.consistency",
            "plan": "evaluations.plan", "embed": "evaluations.pipeline",
            "train": "training.runs:train_encoder", "write_world": "worlds.write",
            "world_pairs": "worlds.user_pairs", "WorldPairs": "worlds.user_pairs",
            "AuditRequest": "core.requests", "ConsistencyRequest": "core.requests",
            "PlanRequest": "core.requests", "EmbedRequest": "core.requests",
            "TrainRequest": "core.requests", "WorldRequest": "core.requests",
            "SweepRequest": "core.requests", "AuditReport": "evaluations.audit",
            "PlanReport": "evaluations.plan", "RunRecord": "training.runs",
            "IdauditError": "core.errors", "UsageError": "core.errors",
            "GateFailed": "core.errors", "Inconclusive": "core.errors",
            "RunsFailed": "core.errors", "__version__": "core.version",
            "World": "worlds.base", "WorldSpec": "worlds.spec", "build_world": "worlds",
            "make_spec": "worlds", "ArrayWorld": "worlds.recorded", "Pairs": "worlds.base",
            "sigreg": "maths.losses",
            "alignment": "maths.losses", "random_directions": "maths.losses",
            "share_cpu": "core.threads"}
    assert sorted(idaudit.__all__) == sorted(home)
    for name, where in home.items():  # each public name is the real object where it is defined
        module, _, attr = where.partition(":")
        real = getattr(importlib.import_module(f"idaudit.{module}"), attr or name)
        assert getattr(idaudit, name) is real, name
    import typing

    from idaudit.evaluations.audit import AuditReport

    hints = typing.get_type_hints(AuditReport)
    assert typing.get_args(hints["verdict"]) == ("pass", "fail", "inconclusive", "ungated")


def test_public_names_are_one_table_and_the_stub_is_current():
    """``__all__`` and the lazy loading derive from ``_PUBLIC``; the stub for type checkers
    (src/idaudit/__init__.pyi, written by scripts/public_stub.py) is that table's."""
    import idaudit

    assert idaudit.__all__ == sorted(idaudit._PUBLIC)
    assert not {"run", "run_audit", "run_consistency", "run_plan", "run_train", "world",
                "run_embed"} & set(dir(idaudit))
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "public_stub.py"), "--check"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.skipif(shutil.which("ruff") is None and not (ROOT / ".venv/bin/ruff").exists(),
                    reason="ruff not installed")
def test_ruff_is_clean():
    ruff = shutil.which("ruff") or str(ROOT / ".venv/bin/ruff")
    res = subprocess.run([ruff, "check", str(ROOT)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout


THREAD_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME",
                    "OPENBLAS_THREAD_TIMEOUT")


def _thread_variables(code: str, env: dict[str, str]) -> tuple[str | None, ...]:
    import os

    base = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    show = f"; print(*(os.environ.get(k) for k in {THREAD_VARIABLES!r}))"
    out = subprocess.run([sys.executable, "-c", "import os\n" + code + show],
                         env={**base, **env}, capture_output=True, text=True).stdout.split()
    return tuple(None if v == "None" else v for v in out)


@pytest.mark.parametrize("env,expected", [
    ({}, (None, "2000", "1", "4")),
    ({"OMP_WAIT_POLICY": "ACTIVE"}, ("ACTIVE", None, "1", "4")),
    ({"GOMP_SPINCOUNT": "7", "KMP_BLOCKTIME": "9"}, (None, "7", "9", "4")),
])
def test_share_cpu_makes_threads_sleep_unless_the_user_says_otherwise(env, expected):
    assert _thread_variables("import idaudit; idaudit.share_cpu()", env) == expected


def test_import_idaudit_leaves_a_library_user_s_threads_alone():
    assert _thread_variables("import idaudit, idaudit.testing", {}) == (None,) * 4


def test_the_idaudit_command_shares_the_cpu():
    code = ("import sys\nfrom idaudit._entry import main\nsys.argv = ['idaudit', '--version']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass")
    assert _thread_variables(code, {})[-3:] == ("2000", "1", "4")  # after --version's line


def test_each_exit_code_is_an_error_class_callers_catch_by_type():
    """IdauditError(message, code) is the class of its code (issue 55): callers catch a
    failed gate, bad input, an inconclusive audit and failed runs apart; pickled (a Ray
    task's error) it comes back as it was."""
    import pickle

    import idaudit
    from idaudit.core.errors import EXIT_INTERNAL, IdauditError

    kinds = {1: idaudit.GateFailed, 2: idaudit.UsageError, 3: idaudit.Inconclusive,
             4: idaudit.RunsFailed}
    for code, kind in kinds.items():
        err = IdauditError("--n-eval is wrong", code, library="n_eval is wrong here")
        assert type(err) is kind and err.exit_code == code and isinstance(err, ValueError)
        back = pickle.loads(pickle.dumps(err))
        assert (type(back), back.exit_code, back.library_text) == (kind, code,
                                                                    "n_eval is wrong here")
        assert kind("made directly").exit_code == code
    assert type(IdauditError("plain")) is idaudit.UsageError
    assert type(IdauditError("a bug", EXIT_INTERNAL)) is IdauditError


def test_modules_declare_what_they_export():
    """Every module of src/idaudit declares ``__all__``, and every name another module, a test,
    a script, a benchmark or the docs takes from one is in it (private names only as
    scripts/module_exports.py allows)."""
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "module_exports.py"), "--check"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip().endswith("OK")
