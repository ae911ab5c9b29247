"""Files that would run code: a torch.export archive (.pt2) is loaded untrusted only once its
members and its program are what torch.export.save writes for a plain program, and --arch
imports the factory's module without leaving the working directory importable.

Every hostile archive here is built from a real torch.export.save archive, rewritten so that
loading it with torch.export.load alone creates a marker file (test_the_hostile_archives_are_live
shows that each one does); idaudit must refuse each with exit 2, one line naming the problem
and --trust-code, and the marker must not exist afterwards.
"""

import io
import json
import pickle
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import identity_linear, run
from safetensors.torch import save_file
from standins import from_file_module

from idaudit.core.errors import IdauditError
from idaudit.loading import export_archive, torchscript
from idaudit.loading.architectures import import_factory
from idaudit.loading.program_refusals import Unvetted

WORLD = ("--world", "coupling", "--dim", "4")
AUDIT = (*WORLD, "--n-eval", "2000", "--gauss-sims", "0")
REVIEWED_TORCH = export_archive._torch_minor() in export_archive._PT2_TORCH


def assert_refused(res, *fragments):
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), res.output
    for fragment in fragments:
        assert fragment in res.output, res.output


# ---- a real archive, and rewrites of it -----------------------------------------------------


@pytest.fixture(scope="module")
def legit(tmp_path_factory):
    path = tmp_path_factory.mktemp("pt2") / "enc.pt2"
    batch = torch.export.Dim("batch", min=1, max=1_000_000)
    program = torch.export.export(identity_linear(), (torch.randn(8, 4),),
                                  dynamic_shapes={"input": {0: batch}})
    torch.export.save(program, str(path))
    return path


class _CreatesFile:
    """Unpickling this creates a file (the stand-in for any code a pickle can run), then gives
    the value of the expression `value` (so that a load can go on as if nothing happened)."""

    def __init__(self, path, value):
        self.code = f"(open({str(path)!r}, 'w').close(), {value})[1]"

    def __reduce__(self):
        return (eval, (self.code,))


def payload(marker, value="None", raw=False):
    """A torch.save file (raw: a bare pickle, for pickle.loads) holding a _CreatesFile."""
    if raw:
        return pickle.dumps(_CreatesFile(marker, value), protocol=2)
    buf = io.BytesIO()
    torch.save(_CreatesFile(marker, value), buf)
    return buf.getvalue()


def rewrite(src, dst, edit):
    """dst: the archive src with its members (named without the archive's root folder;
    a name edit gives with a leading / is written outside it) changed by edit(members, root)."""
    with zipfile.ZipFile(src) as z:
        root = z.namelist()[0].split("/")[0]
        members = {n[len(root) + 1:]: z.read(n) for n in z.namelist()}
    edit(members, root)
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as z:
        for name, data in members.items():
            z.writestr(name[1:] if name.startswith("/") else f"{root}/{name}", data)
    return dst


def edit_json(members, name, change):
    doc = json.loads(members[name])
    change(doc)
    members[name] = json.dumps(doc).encode()


WEIGHTS = "data/weights/model_weights_config.json"
CONSTANTS = "data/constants/model_constants_config.json"
PROGRAM = "models/model.json"


def pickled_weight(marker):
    def edit(m, _):
        edit_json(m, WEIGHTS, lambda d: d["config"]["weight"].update(use_pickle=True))
        m["data/weights/weight_0"] = payload(  # the weight itself: the load goes on unaware
            marker, "__import__('torch').nn.Parameter(__import__('torch').eye(4))")
    return edit


def pickled_constant(marker):
    def edit(m, _):
        edit_json(m, CONSTANTS, lambda d: d["config"].update(c={
            "path_name": "tensor_0", "is_param": False, "use_pickle": True, "tensor_meta": None}))
        m["data/constants/tensor_0"] = payload(marker)
    return edit


def opaque_constant(marker):  # torch pickle.loads opaque_obj_* constants
    def edit(m, _):
        edit_json(m, CONSTANTS, lambda d: d["config"].update(c={
            "path_name": "opaque_obj_0", "is_param": False, "use_pickle": True,
            "tensor_meta": None}))
        m["data/constants/opaque_obj_0"] = payload(marker, raw=True)
    return edit


def pickled_sample_inputs(marker):  # weights_only=True refuses it, torch retries in full
    def edit(m, _):
        m["data/sample_inputs/model.pt"] = payload(marker)
    return edit


def legacy_weights_file(marker):
    def edit(m, _):
        m["data/weights/model.pt"] = payload(marker)
    return edit


def legacy_layout(marker):
    """A first member outside any folder makes torch's PT2 reader fail; torch.export.load then
    reads the legacy layout and unpickles its constants."""
    def edit(m, root):
        program = m[PROGRAM]
        m.clear()
        m["/version"] = b"8.20"
        m["archive_format"] = b"pt2"  # how idaudit (and a user) tells a .pt2 from its bytes
        m["/serialized_exported_program.json"] = program
        m["/serialized_state_dict.pt"] = payload(marker)
        m["/serialized_constants.pt"] = payload(marker)
        m["/serialized_example_inputs.pt"] = payload(marker)
    return edit


def sympy_shape(marker):  # the deserializer hands shape expressions to sympy.sympify (eval)
    def edit(m, _):
        text = m[PROGRAM].decode()
        start = text.index("Symbol('s")
        sym = text[start:text.index(")", start) + 1]  # Symbol('s…', positive=True, integer=True)
        evil = f"Add({sym}, Mul(Integer(0), Integer(len(repr(open({str(marker)!r}, 'w'))))))"
        m[PROGRAM] = text.replace(json.dumps(sym)[1:-1], json.dumps(evil)[1:-1], 1).encode()
    return edit


def guards_code(marker):  # ExportedProgram.module() exec's guards_code
    def edit(m, _):
        edit_json(m, PROGRAM, lambda d: d.update(guards_code=[f"open({str(marker)!r}, 'w')"]))
    return edit


def forward_arg_default(marker):  # FX pastes forward_arg_names into `def forward(...)`
    def set_names(d):
        sig = d["graph_module"]["module_call_graph"][0]["signature"]
        sig["forward_arg_names"] = ["input", f"_=open({str(marker)!r}, 'w')"]
    return lambda m, _: edit_json(m, PROGRAM, set_names)


def os_system_node(marker):  # a node may name anything reachable from torch
    def add_node(d):
        d["graph_module"]["graph"]["nodes"].insert(0, {
            "target": "torch.os.system", "name": "sys", "outputs": [], "metadata": {},
            "inputs": [{"name": "x", "arg": {"as_string": f"touch {marker}"}, "kind": 1}]})
    return lambda m, _: edit_json(m, PROGRAM, add_node)


def aoti_library(marker):
    def edit(m, _):
        m["data/aotinductor/model/model.so"] = b"\x7fELF" + bytes(60)
    return edit


HOSTILE = {  # name: (rewrite, what the error names, whether torch.export.load alone runs it)
    "pickled_weight": (pickled_weight, "weight 'weight' is stored as a pickle", True),
    "pickled_constant": (pickled_constant, "constant 'c' is stored as a pickle", True),
    "opaque_constant": (opaque_constant, "opaque_obj_0", True),
    "pickled_sample_inputs": (pickled_sample_inputs, "sample inputs are a pickle", True),
    "legacy_weights_file": (legacy_weights_file, "data/weights/model.pt", True),
    "legacy_layout": (legacy_layout, "legacy torch.export layout", True),
    "sympy_shape": (sympy_shape, "symbolic shape", True),
    "guards_code": (guards_code, "guards_code", True),
    "forward_arg_default": (forward_arg_default, "not a plain name", True),
    "os_system_node": (os_system_node, "'torch.os.system', which is not an aten operator", False),
    "aoti_library": (aoti_library, "AOTInductor", False),
}


def hostile(legit, tmp_path, name):
    marker = tmp_path / f"{name}.ran"
    build = HOSTILE[name][0]
    return rewrite(legit, tmp_path / f"{name}.pt2", build(marker)), marker


@pytest.mark.skipif(not REVIEWED_TORCH, reason="torch.export.load reviewed for 2.13 and 2.14 only")
@pytest.mark.parametrize("name", [n for n, (_, _, live) in HOSTILE.items() if live])
def test_the_hostile_archives_are_live(legit, tmp_path, name):
    """Without idaudit's checks, torch.export.load (and .module(), and one call) runs them."""
    path, marker = hostile(legit, tmp_path, name)
    try:
        torch.export.load(str(path)).module()(torch.randn(3, 4))
    except Exception:
        pass  # most fail once their payload has run
    assert marker.exists()


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_pt2_that_would_run_code_is_refused(legit, tmp_path, name):
    path, marker = hostile(legit, tmp_path, name)
    res = run("audit", path, *AUDIT)
    assert_refused(res, HOSTILE[name][1], "--trust-code")
    assert not marker.exists()


@pytest.mark.parametrize("command", ["audit", "plan", "consistency"])
def test_pickled_weight_in_pt2_is_refused_by_every_command(legit, tmp_path, command):
    path, marker = hostile(legit, tmp_path, "pickled_weight")
    args = {"audit": ("audit", path, *AUDIT),
            "plan": ("plan", path, *WORLD, "--pairs", "5"),
            "consistency": ("consistency", legit, path, *WORLD, "--n-eval", "500")}[command]
    res = run(*args)
    assert_refused(res, "stored as a pickle (use_pickle: true", "--trust-code")
    assert not marker.exists()


def test_plain_pt2_still_audits_plans_and_agrees_with_itself(legit, tmp_path):
    out = tmp_path / "a.json"
    res = run("audit", legit, *AUDIT, "--min-r2", "0.5", "--json", out)
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["metrics"]["r2_h_to_z_heldout"] > 0.5
    res = run("plan", legit, *WORLD, "--pairs", "5", "--json", tmp_path / "p.json")
    assert res.exit_code == 0, res.output
    copy = shutil.copy(legit, tmp_path / "copy.pt2")
    res = run("consistency", legit, copy, *WORLD, "--n-eval", "500", "--min-r2", "0.99")
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("version", ["2.12.1", "2.15.0", "3.0.0a0+git1234", "unknown"])
def test_pt2_on_an_unreviewed_torch_is_refused_in_one_line(legit, monkeypatch, version):
    """On a torch whose loader was not reviewed, even a plain archive is refused, in one line
    naming the versions idaudit knows and --trust-code."""
    monkeypatch.setattr(torch, "__version__", version)
    res = run("audit", legit, *AUDIT)
    assert_refused(res, "idaudit vets .pt2 archives for torch 2.13 and 2.14 only",
                   f"this is torch {version};", "--trust-code")


def test_trust_pickle_loads_an_archive_with_pickled_weights(legit, tmp_path):
    """use_pickle weights are legal torch.export output (tensor subclasses): refused untrusted,
    loaded with --trust-code."""
    def edit(m, _):
        edit_json(m, WEIGHTS, lambda d: d["config"]["weight"].update(use_pickle=True))
        buf = io.BytesIO()
        torch.save(torch.nn.Parameter(torch.eye(4)), buf)
        m["data/weights/weight_0"] = buf.getvalue()
    path = rewrite(legit, tmp_path / "pickled.pt2", edit)
    assert_refused(run("audit", path, *AUDIT), "use_pickle", "--trust-code")
    res = run("audit", path, *AUDIT, "--trust-code", "--min-r2", "0.5")
    assert res.exit_code == 0, res.output


def test_stack_traces_with_odd_characters_are_only_data(legit, tmp_path):
    """Node metadata is kept as data (FX writes it into code only when printing it)."""
    marker = tmp_path / "trace.ran"

    def set_trace(d):
        node = d["graph_module"]["graph"]["nodes"][0]
        node["metadata"]["stack_trace"] = (f'File "x\ropen({str(marker)!r}, "w")\r#", line 1, '
                                           'in forward\n    return F.linear(input)')
    path = rewrite(legit, tmp_path / "trace.pt2", lambda m, _: edit_json(m, PROGRAM, set_trace))
    res = run("audit", path, *AUDIT, "--min-r2", "0.5")
    assert res.exit_code == 0, res.output
    assert not marker.exists()


# ---- --arch: the working directory is importable only while the factory's module loads ------


ARCH = textwrap.dedent("""
    import torch

    def make(dim=2):
        return torch.nn.Linear(dim, dim)
""")


@pytest.fixture
def arch_dir(tmp_path):
    (tmp_path / "mymodel.py").write_text(ARCH)
    for stray in ("pandas", "yaml"):
        (tmp_path / f"{stray}.py").write_text(
            f"open({str(tmp_path / (stray + '.ran'))!r}, 'w').write('ran')\n")
    save_file(torch.nn.Linear(2, 2).state_dict(), str(tmp_path / "w.safetensors"))
    return tmp_path


def _idaudit_exe():
    exe = Path(sys.executable).with_name("idaudit")
    return str(exe) if exe.exists() else shutil.which("idaudit")


@pytest.mark.parametrize("command", [
    ("plan", "w.safetensors", "--arch", "mymodel:make", "--world", "spiral"),
    ("audit", "w.safetensors", "--arch", "mymodel:make", "--world", "spiral", "--n-eval", "500",
     "--gauss-sims", "0"),
])
def test_arch_leaves_no_working_directory_module_importable(arch_dir, command):
    res = subprocess.run([_idaudit_exe(), *command], cwd=arch_dir, capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not (arch_dir / "pandas.ran").exists()
    assert not (arch_dir / "yaml.ran").exists()


@pytest.fixture
def fresh_modules():
    yield
    for name in [n for n in sys.modules if n.startswith("sec") and "_" in n]:
        del sys.modules[name]


def test_import_factory_restores_sys_path(tmp_path, monkeypatch, fresh_modules):
    (tmp_path / "secmodel_a.py").write_text(ARCH)
    pkg = tmp_path / "secpkg_b"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "nets.py").write_text(ARCH)
    (tmp_path / "secbroken_c.py").write_text("raise ImportError('half written')\n")
    monkeypatch.chdir(tmp_path)  # and as under the idaudit executable: the directory is not
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    path_list = sys.path  # on sys.path (python -m pytest puts "" there)
    before = list(path_list)
    assert isinstance(import_factory("secmodel_a:make")(), torch.nn.Linear)
    assert sys.path is path_list and sys.path == before
    assert isinstance(import_factory("secpkg_b.nets:make")(dim=3), torch.nn.Linear)
    assert sys.path is path_list and sys.path == before
    with pytest.raises(IdauditError, match="cannot import 'secbroken_c'"):
        import_factory("secbroken_c:make")
    assert sys.path is path_list and sys.path == before


# ---- TorchScript: no file reached, nothing run while loading (issue 27, item 2) ---------------


class _SetState(torch.nn.Module):
    """__setstate__ runs inside torch.jit.load, before anything is vetted after it."""

    def __init__(self, victim: str):
        super().__init__()
        self.victim = victim

    def forward(self, x):
        return x

    @torch.jit.export
    def __getstate__(self):
        return (self.victim, self.training)

    @torch.jit.export
    def __setstate__(self, state: tuple[str, bool]):
        self.victim = state[0]
        self.training = state[1]
        torch.save(torch.ones(2), self.victim)


class _Saves(torch.nn.Module):
    """forward writes a file with torch.save (aten::save)."""

    def __init__(self, victim: str):
        super().__init__()
        self.victim = victim

    def forward(self, x):
        torch.save(x, self.victim)
        return x


@pytest.mark.parametrize("cls,fragment", [
    (from_file_module, "calls torch.from_file, which reaches files"),
    (_SetState, "defines __setstate__, which runs while it loads"),
    (_Saves, "calls torch.save, which reaches files"),
], ids=["from_file", "setstate", "save"])
def test_torchscript_that_reaches_files_is_refused(tmp_path, monkeypatch, cls, fragment):
    victim = tmp_path / "victim.txt"
    victim.write_text("original\n")
    path = tmp_path / "enc.pt"
    torch.jit.script(cls(str(victim))).save(str(path))
    assert victim.read_text() == "original\n"  # saving ran nothing
    res = run("audit", path, "--world", "coupling", "--dim", "4", "--n-eval", "200")
    assert res.exit_code == 2, res.output
    assert fragment in res.output and "--trust-code" in res.output, res.output
    assert victim.read_text() == "original\n"
    # the hazard is real: trusted, the program does what it says — in its cage, refused by
    # the kernel; with no cage (turned off) and --trust-code, done in this process
    if cls is from_file_module:
        res = run("audit", path, "--world", "coupling", "--dim", "4", "--n-eval", "200",
                  "--trust-code")
        assert res.exit_code == 2 and "the cage refused it" in res.output, res.output
        assert victim.read_text() == "original\n"
        monkeypatch.setenv("IDAUDIT_CAGE", "off")
        res = run("audit", path, "--world", "coupling", "--dim", "4", "--n-eval", "200",
                  "--trust-code")
        assert res.exit_code == 0, res.output
        assert victim.read_text().startswith("AAAA")


def test_torchscript_graphs_are_vetted_after_loading(tmp_path):
    """The compiled graphs (inlined, blocks included) are the authority: an operator outside
    aten/prim or a file-reaching aten one is refused even where the source scan would miss it."""
    module = torch.jit.script(from_file_module(str(tmp_path / "v")))
    with pytest.raises(Unvetted, match="aten::from_file"):
        torchscript._vet_torchscript_graphs(module)
    torchscript._vet_torchscript_graphs(torch.jit.script(identity_linear()))  # plain: fine


def test_pt2_nodes_that_reach_files_are_refused():
    """The same list for torch.export programs: an aten operator is not enough."""
    export_archive._vet_target("torch.ops.aten.add.Tensor")
    for op in ("torch.ops.aten.from_file.default", "torch.ops.aten.save.default"):
        with pytest.raises(Unvetted, match="reaches files"):
            export_archive._vet_target(op)
