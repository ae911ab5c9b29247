"""Bad input and faults: one line, the right exit code (2 bad input, 3 inconclusive), nothing
lost, no stale report, no hidden temporaries, the user's file mode."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import one_line, run
from safetensors import safe_open
from safetensors.torch import load_file, save_file


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("robust")
    rng = np.random.default_rng(3)
    z = rng.standard_normal((1000, 4))
    np.savez(d / "good.npz", z=z, h=z)
    ck = d / "c.safetensors"
    res = run("train", "--world", "coupling", "--dim", "4", "--steps", "20", "--eval-every",
              "20", "--n-eval", "500", "--out", ck, "--quiet")
    assert res.exit_code == 0, res.output
    (d / "a_file").write_text("x")
    (d / "a_dir").mkdir()
    return d


def edited(files, tmp_path, section, change):
    """A copy of the checkpoint with one metadata section edited."""
    src = files / "c.safetensors"
    with safe_open(str(src), framework="pt") as f:
        meta = dict(f.metadata())
    value = json.loads(meta[section])
    change(value)
    meta[section] = json.dumps(value)
    out = tmp_path / f"edited-{section}.safetensors"
    save_file(load_file(str(src)), str(out), metadata=meta)
    return out


def set_key(key, value):
    def change(d):
        d[key] = value
    return change


# ---- outputs that cannot be written: refused before any work --------------------------


@pytest.mark.parametrize("flag", ["--json", "--junit", "--markdown"])
def test_audit_report_paths(files, flag):
    one_line(run("audit", files / "good.npz", flag, files / "a_dir"), 2, "is a directory")
    one_line(run("audit", files / "good.npz", flag, files / "a_file" / "r.json"), 2,
             "is a file, not a directory")
    one_line(run("audit", files / "good.npz", flag, ""), 2, "the path is empty")
    one_line(run("audit", files / "good.npz", flag, files / "a_dir" / "sub" / "r.json",
                 "--gate", files / "missing.toml"), 2, "not found")  # parents may be made


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_directory(files, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    one_line(run("audit", files / "good.npz", "--json", ro / "a.json"), 2, "not writable")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_places_that_refuse_files_even_to_root(files):
    # os.access says yes to root in /proc; the check creates a probe file instead
    one_line(run("audit", files / "good.npz", "--json", "/proc/report.json"), 2, "not writable")
    one_line(run("train", "--steps", "100000", "--out", "/proc/c.safetensors"), 2,
             "not writable")


def test_train_out_is_checked_before_training(files):
    one_line(run("train", "--steps", "100000", "--out", files / "a_dir"), 2, "is a directory")
    one_line(run("train", "--steps", "100000", "--out", files / "a_file" / "c.safetensors"), 2,
             "is a file, not a directory")


def test_other_commands_check_their_outputs(files):
    one_line(run("plan", files / "c.safetensors", "--plot", files / "a_dir"), 2, "is a directory")
    one_line(run("plan", files / "c.safetensors", "--json", ""), 2, "empty")
    one_line(run("world", "spiral", "--out", files / "a_dir"), 2, "is a directory")
    one_line(run("demo", "--out", files / "a_file"), 2, "not a directory")
    one_line(run("sweep", "2d", "--out", files / "a_file"), 2, "not a directory")


def test_no_stale_report_survives_a_bad_input(files, tmp_path):
    report = tmp_path / "a.json"
    report.write_text('{"verdict": "pass"}')
    one_line(run("audit", files / "good.npz", "--json", report, "--gate", tmp_path / "none.toml"),
             2, "not found")
    assert not report.exists()


# ---- inputs that are not what they claim ------------------------------------------------


def test_gate_that_is_not_a_regular_file(files):
    one_line(run("audit", files / "good.npz", "--gate", files / "a_dir"), 2, "not a regular file")
    one_line(run("audit", files / "good.npz", "--gate", "/dev/zero"), 2, "not a regular file")


@pytest.mark.parametrize("section,change,fragment", [
    ("encoder", set_key("name", ["mlp"]), "encoder.name must be a string"),
    ("encoder", set_key("kwargs", {"dim": -4, "layers": 4}), "dim must be an integer ≥ 1"),
    ("train", set_key("n_eval", "abc"), "train.n_eval"),
    ("train", set_key("seed", -1), "train.seed"),
    ("world", set_key("rho", 1.5), "rho must lie strictly between 0 and 1"),
    ("world", set_key("dim", 0), "dim must be a positive integer"),
    ("world", set_key("dim", 5), "even number"),
    ("world", set_key("layers", "four"), "layers must be an integer"),
    ("world", set_key("name", "moon"), "unknown world"),
    ("world", lambda d: d.update(name="reacher", extra={}), "dataset"),
])
def test_edited_checkpoint_metadata(files, tmp_path, section, change, fragment):
    path = edited(files, tmp_path, section, change)
    one_line(run("audit", path, "--gauss-sims", "0"), 2, fragment)


def test_array_files_by_content_not_name(files, tmp_path):
    z = np.random.default_rng(0).standard_normal((300, 2))
    np.savez(tmp_path / "zero.npz", z=np.zeros((300, 0)), h=z)
    one_line(run("audit", tmp_path / "zero.npz"), 2, "at least one column")
    np.save(tmp_path / "one.npy", z)
    shutil.copy(tmp_path / "one.npy", tmp_path / "renamed.npz")
    one_line(run("audit", tmp_path / "renamed.npz"), 2, "single .npy array")
    for name in ("UPPER.NPZ", "noextension"):
        shutil.copy(files / "good.npz", tmp_path / name)
        res = run("audit", tmp_path / name, "--min-r2", "0.99", "--gauss-sims", "0")
        assert res.exit_code == 0, res.output
    save_file({"z": torch.from_numpy(z), "h": torch.from_numpy(z.copy())},
              str(tmp_path / "arrays"))
    res = run("audit", tmp_path / "arrays", "--gauss-sims", "0")
    assert res.exit_code == 0 and "--trust-code" not in res.output, res.output
    (tmp_path / "text.pt").write_text("hello")
    res = run("audit", tmp_path / "text.pt", "--world", "spiral")
    one_line(res, 2, "is not a file idaudit reads")
    assert "--trust-code" not in res.output


class EmptyList(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return []


class Complex(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.complex(x, x)


@pytest.mark.parametrize("module,fragment", [(EmptyList, "returned list"),
                                             (Complex, "complex")])
def test_torchscript_encoders_with_odd_outputs(tmp_path, module, fragment):
    path = tmp_path / "m.pt"
    torch.jit.script(module()).save(str(path))
    one_line(run("audit", path, "--world", "spiral", "--n-eval", "500", "--min-r2", "0.1"), 2,
             fragment)


def test_extreme_test_fraction_is_inconclusive(files):
    res = run("audit", files / "good.npz", "--test-fraction", "0.999", "--min-r2", "0.9")
    one_line(res, 3, "--test-fraction 0.999 leaves 1 rows to fit")


@pytest.mark.parametrize("args,fragment", [
    (["train", "--seed", str(2**70)], "--seed must be an integer in"),
    (["audit", "GOOD", "--seed", str(2**64)], "--seed must be an integer in"),
    (["world", "spiral", "--seed", "-1", "--out", "x.safetensors"], "--seed must be an integer"),
    (["train", "--world", "coupling", "--dim", "2000000"], "GiB"),
    (["train", "--encoder", "cnn", "--steps", "5"], "encoder 'cnn' does not fit world 'spiral'"),
    (["train", "--encoder", "mlp", "--encoder-kwargs", '{"width": -3}'], "width must be"),
    (["train", "--encoder", "mlp", "--encoder-kwargs", '{"width": 0}'], "width must be"),
    (["train", "--world", "coupling", "--encoder", "coupling", "--encoder-kwargs",
      '{"dim": 2, "layers": 0}'], "layers must be"),
    (["sweep", "2d", "--steps", "0"], "--steps must be ≥ 1"),
    (["sweep", "2d", "--seeds", "0"], "--seeds must be ≥ 1"),
])
def test_out_of_range_values(files, tmp_path, args, fragment):
    args = [str(files / "good.npz") if a == "GOOD" else a for a in args]
    one_line(run(*args, *(["--out", tmp_path / "o"] if args[0] in ("train", "sweep") else [])),
             2, fragment)


def test_divergence_is_exit_3(tmp_path):
    res = run("train", "--lr", "1000", "--steps", "200", "--eval-every", "10",
              "--out", tmp_path / "d.safetensors", "--quiet")
    one_line(res, 3, "training diverged at step")
    assert not (tmp_path / "d.safetensors").exists()


# ---- user code loaded by --arch ----------------------------------------------------------

ARCH = """
import torch
{prelude}
def make():
    {body}
    return torch.nn.Linear(4, 4)
"""


def _idaudit_exe():
    exe = Path(sys.executable).with_name("idaudit")
    return str(exe) if exe.exists() else shutil.which("idaudit")


@pytest.mark.parametrize("prelude,body,fragment", [
    ("import sys\nsys.exit(0)", "pass", "exited"),
    ("", "import sys; sys.exit(0)", "the encoder factory exited"),
])
def test_arch_that_exits_is_not_a_pass(tmp_path, prelude, body, fragment):
    (tmp_path / "exiting.py").write_text(ARCH.format(prelude=prelude, body=body))
    save_file(torch.nn.Linear(4, 4).state_dict(), str(tmp_path / "w.safetensors"))
    res = subprocess.run([_idaudit_exe(), "audit", "w.safetensors", "--arch", "exiting:make",
                          "--world", "coupling", "--dim", "4", "--n-eval", "500"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 2, res.stdout + res.stderr
    assert fragment in res.stderr and "Traceback" not in res.stderr


def test_arch_does_not_let_the_working_directory_shadow_packages(tmp_path):
    marker = tmp_path / "shadowed"
    (tmp_path / "scipy.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                       "raise ImportError('stray scipy')\n")
    (tmp_path / "mine.py").write_text(ARCH.format(prelude="import scipy", body="pass"))
    save_file(torch.nn.Linear(4, 4).state_dict(), str(tmp_path / "w.safetensors"))
    res = subprocess.run([_idaudit_exe(), "audit", "w.safetensors", "--arch", "mine:make",
                          "--world", "coupling", "--dim", "4", "--n-eval", "500",
                          "--gauss-sims", "0"], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not marker.exists()


# ---- files: no hidden temporaries, the user's mode ----------------------------------------


def test_stale_temporaries_are_cleaned_and_modes_follow_the_umask(tmp_path):
    out = tmp_path / "w.safetensors"
    dead = tmp_path / ".w.safetensors.999999999.abcd.tmp"  # a killed writer's leftover
    dead.write_bytes(b"x" * 1000)
    alive = tmp_path / f".w.safetensors.{os.getpid()}.live.tmp"  # a writer still running
    alive.write_bytes(b"x")
    old = os.umask(0o022)
    try:
        res = run("world", "spiral", "--pairs", "50", "--out", out)
    finally:
        os.umask(old)
    assert res.exit_code == 0, res.output
    assert not dead.exists() and alive.exists()
    assert out.stat().st_mode & 0o777 == 0o644


def test_killed_world_leaves_nothing_after_the_next_run(tmp_path):
    code = textwrap.dedent(f"""
        import os, signal
        import idaudit.core.atomic as atomic
        real = atomic.atomic_write
        def killed(path, write):
            def write_then_die(tmp):
                write(tmp)
                os.kill(os.getpid(), signal.SIGKILL)
            return real(path, write_then_die)
        atomic.atomic_write = killed
        import idaudit.worlds.synthetic as s
        s.atomic_write = killed
        from idaudit.cli import main
        import sys
        sys.argv = ["idaudit", "world", "spiral", "--pairs", "2000", "--out",
                    {str(tmp_path / "p.safetensors")!r}]
        main()
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    assert list(tmp_path.glob(".p.safetensors.*.tmp"))  # the kill left a temporary
    assert run("world", "spiral", "--pairs", "50", "--out", tmp_path / "p.safetensors"
               ).exit_code == 0
    assert not list(tmp_path.glob(".*.tmp"))


# ---- hostile inputs, third round: each exit 2 (3 where no verdict can be given) ------------


def _npz(path, **arrays):
    np.savez(path, **arrays)
    return path


def _inflating_npz(path, shape):
    """An .npz whose compressed h member's header claims ``shape`` (float64): a few hundred
    bytes on disk that would inflate to many GiB (the data after the header is never read)."""
    import io as _io
    import zipfile

    header = _io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False,
                                                  "shape": shape})
    buf = _io.BytesIO()
    np.save(buf, np.zeros((10, 2)))
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("h.npy", header.getvalue() + bytes(1 << 16))
        zf.writestr("z.npy", buf.getvalue())
    return path


def _lying_safetensors(path, good, change):
    """A copy of safetensors file ``good`` whose JSON header is edited by ``change``."""
    raw = good.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    change(header)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + n:])
    return path


def _set_offsets(name, offsets):
    def change(h):
        h[name]["data_offsets"] = offsets
    return change


def _set_shape(name, shape):
    def change(h):
        h[name]["shape"] = shape
    return change


Z = np.random.default_rng(5).standard_normal((400, 3))
HOSTILE = [  # (name, how to build the input in a directory, exit code, fragment)
    ("circular NaN", lambda d: _npz(d / "a.npz", z=Z, h=Z, circular=np.array([np.nan])), 2,
     "latent indices must be integers, got nan"),
    ("circular inf", lambda d: _npz(d / "a.npz", z=Z, h=Z, circular=np.array([np.inf])), 2,
     "latent indices must be integers, got inf"),
    ("circular -inf", lambda d: _npz(d / "a.npz", z=Z, h=Z, circular=np.array([-np.inf])), 2,
     "latent indices must be integers, got -inf"),
    ("circular 0.5", lambda d: _npz(d / "a.npz", z=Z, h=Z, circular=np.array([0.5])), 2,
     "latent indices must be integers, got 0.5"),
    ("circular repeated", lambda d: _npz(d / "a.npz", z=Z, h=Z, circular=np.array([1, 1])), 2,
     "latent index 1 is given twice"),
    ("circular negative", lambda d: _npz(d / "a.npz", z=Z, h=Z, circular=np.array([-1])), 2,
     "latent indices must be ≥ 0"),
    ("npz inflating to 8 TiB", lambda d: _inflating_npz(d / "a.npz", (2**40, 1)), 2,
     "1099511627776 elements, more than the 4294967296 (2³²) an array brought to an audit"),
    ("object array", lambda d: _npz(d / "a.npz", z=Z, h=np.array([None] * 400, dtype=object)),
     2, "cannot read"),
    ("bool h", lambda d: _npz(d / "a.npz", z=Z, h=Z > 0), 2, "dtype bool, not real numbers"),
    ("complex h", lambda d: _npz(d / "a.npz", z=Z, h=Z + 1j * Z), 2, "dtype complex128"),
    ("string h", lambda d: _npz(d / "a.npz", z=Z, h=Z.astype(str)), 2, "not real numbers"),
    ("datetime h", lambda d: _npz(d / "a.npz", z=Z, h=np.zeros((400, 3), "datetime64[s]")),
     2, "datetime64"),
    ("NaN in h", lambda d: _npz(d / "a.npz", z=Z, h=np.where(Z > 2, np.nan, Z)), 3, "NaN"),
    ("Inf in h", lambda d: _npz(d / "a.npz", z=Z, h=np.where(Z > 2, np.inf, Z)), 3, "Inf"),
]


@pytest.mark.parametrize("name,build,code,fragment", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_array_files(tmp_path, name, build, code, fragment):
    res = run("audit", build(tmp_path), "--min-r2", "0.5", "--gauss-sims", "0")
    one_line(res, code, fragment)


@pytest.mark.parametrize("change,fragment", [
    (_set_offsets("h", [0, 10**12]), "safetensors file"),
    (_set_offsets("h", [10**6, 0]), "safetensors file"),
    (_set_shape("h", [400, 3000]), "safetensors file"),
    (_set_shape("z", [-1, 3]), "safetensors file"),
])
def test_safetensors_headers_that_lie(tmp_path, change, fragment):
    good = tmp_path / "good.safetensors"
    save_file({"z": torch.from_numpy(Z), "h": torch.from_numpy(Z.copy())}, str(good))
    res = run("audit", _lying_safetensors(tmp_path / "lie.safetensors", good, change),
              "--min-r2", "0.5")
    one_line(res, 2, fragment)


@pytest.mark.parametrize("value", ['"0.9"', "true", "[0.9]", '{ a = 1 }'])
def test_gate_values_that_are_not_numbers(files, tmp_path, value):
    gate = tmp_path / "g.toml"
    gate.write_text(f"[min]\nr2_h_to_z_heldout = {value}\n")
    one_line(run("audit", files / "good.npz", "--gate", gate), 2,
             "gate value for r2_h_to_z_heldout must be a number")


def test_symlinked_output_replaces_the_link_not_its_target(files, tmp_path):
    target = tmp_path / "target.json"
    target.write_text("keep me")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    res = run("audit", files / "good.npz", "--json", link, "--min-r2", "0.9", "--gauss-sims", "0")
    assert res.exit_code == 0, res.output
    assert not link.is_symlink() and json.loads(link.read_text())["verdict"] == "pass"
    assert target.read_text() == "keep me"


def test_four_audits_writing_one_report_at_once(files, tmp_path, forked_cli):
    report = tmp_path / "r.json"
    cmd = ["audit", files / "good.npz", "--json", report, "--min-r2", "0.9"]
    results = forked_cli.run_at_once([cmd] * 4)  # four processes, forked from one
    assert [code for code, _ in results] == [0, 0, 0, 0], [err for _, err in results]
    assert json.loads(report.read_text())["verdict"] == "pass"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_sigterm_during_train_leaves_nothing_partial(tmp_path):
    import signal
    import time

    out = tmp_path / "c.safetensors"
    proc = subprocess.Popen([_idaudit_exe(), "train", "--steps", "1000000", "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(8)  # start-up takes ~2 s: by now it is training
    assert proc.poll() is None, proc.stderr.read()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) in (-signal.SIGTERM, 128 + signal.SIGTERM)
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, fragment", [
    (["audit", "--nope", "x.npz"], "No such option: --nope"),
    (["audit"], "Missing argument 'targets'"),
    (["audit", "x.npz", "--n-eval", "abc"], "'abc' is not a valid int"),
    (["nope"], "No such command 'nope'"),
])
def test_usage_errors_are_one_line_and_exit_2(args, fragment):
    """A flag or argument a command does not take reads as every other bad input: one line
    on stderr naming it and where the help is, exit 2 (not click's usage box)."""
    res = subprocess.run([sys.executable, "-m", "idaudit.cli", *args], capture_output=True,
                         text=True, timeout=120)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and res.stdout == "", (res.returncode, res.stdout, res.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], lines
    assert lines[0].endswith("--help)"), lines
