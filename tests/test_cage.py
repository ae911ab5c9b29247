"""The cage: programs from files are confined by the kernel, not by a scan.

Each attack class — write a file, read a secret outside the inputs, open a socket, fork or
spawn, allocate past the memory limit, loop forever — is tried through several routes (the
forward itself, a function run by ``torch.jit.fork``, a submodule's method, ``__setstate__``
while it loads, a custom op namespace, a thread of its own), as TorchScript and as a pickle
trusted with ``--trust-code`` (so no scan stands in the way: the kernel alone does). Every
one must end in one line with exit 2 (3 for a time-out), and leave no trace outside the cage:
the files beside it unchanged, none made.
"""

from __future__ import annotations

import hashlib
import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run

from idaudit.core.errors import IdauditError
from idaudit.core.request_parts import LoadOptions
from idaudit.loading import confine, wire
from idaudit.loading.loaders import load_target

pytestmark = pytest.mark.skipif(confine.why_no_cage() is not None,
                                reason=f"no cage here: {confine.why_no_cage()}")

SECRET = "the user's secret 0123456789"

# a program as a user's own class would hold it, unpickled whole with --trust-code: Python
# code runs, and only the kernel stands between it and the machine
ATTACKS = textwrap.dedent('''
    import os, socket, subprocess, threading, torch

    @torch.library.custom_op("evilns::scribble", mutates_args=())
    def scribble(x: torch.Tensor, path: str) -> torch.Tensor:
        with open(path, "w") as f:
            f.write("pwned")
        return x.clone()

    class Base(torch.nn.Module):
        def __init__(self, victim, secret, big=0):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.victim, self.secret, self.big = victim, secret, big

        def forward(self, x):
            self.act(x)
            return self.lin(x)

    class Write(Base):
        def act(self, x):
            with open(self.victim, "w") as f:
                f.write("pwned")

    class Save(Base):
        def act(self, x):
            torch.save(x, self.victim + ".saved")

    class Read(Base):
        def act(self, x):
            with open(self.secret) as f:
                self.leak = f.read()

    class Socket(Base):
        def act(self, x):
            socket.socket(socket.AF_INET, socket.SOCK_STREAM).connect(("127.0.0.1", 9))

    class UnixSocket(Base):
        def act(self, x):
            socket.socket(socket.AF_UNIX).connect("/run/some.sock")

    class Fork(Base):
        def act(self, x):
            if os.fork() == 0:
                with open(self.victim, "w") as f:
                    f.write("pwned")
                os._exit(0)

    class Spawn(Base):
        def act(self, x):
            subprocess.run(["touch", self.victim + ".spawned"], check=True)

    class Alloc(Base):
        def act(self, x):
            self.held = torch.empty(self.big, dtype=torch.uint8)

    class Loop(Base):
        def act(self, x):
            while True:
                pass

    class Thread(Base):
        def act(self, x):
            failed = []

            def write():
                try:
                    with open(self.victim, "w") as f:
                        f.write("pwned")
                except OSError as exc:
                    failed.append(exc)
            t = threading.Thread(target=write)
            t.start()
            t.join()
            if failed:
                raise failed[0]

    class CustomOp(Base):
        def act(self, x):
            torch.ops.evilns.scribble(x, self.victim)

    class SetState(Base):
        def act(self, x):
            pass

        def __setstate__(self, state):
            super().__setstate__(state)
            with open(state["victim"], "w") as f:
                f.write("pwned")
''')


class _TsWrite(torch.nn.Module):
    """TorchScript that overwrites ``victim`` through a shared mapping (torch.from_file)."""

    def __init__(self, victim: str, n: int) -> None:
        super().__init__()
        self.victim, self.n = victim, n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = torch.from_file(self.victim, shared=True, size=self.n, dtype=torch.uint8)
        m.copy_(torch.full([self.n], 65, dtype=torch.uint8))
        return x + m[:1].float() * 0


@torch.jit.script
def _forked_write(victim: str, n: int) -> torch.Tensor:
    m = torch.from_file(victim, shared=True, size=n, dtype=torch.uint8)
    m.copy_(torch.full([n], 65, dtype=torch.uint8))
    return m


class _TsFork(torch.nn.Module):
    """The write inside a function run by torch.jit.fork (the graph check's blind spot)."""

    def __init__(self, victim: str, n: int) -> None:
        super().__init__()
        self.victim, self.n = victim, n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fut = torch.jit.fork(_forked_write, self.victim, self.n)
        return x + torch.jit.wait(fut)[:1].float() * 0


class _TsSub(torch.nn.Module):
    def __init__(self, victim: str, n: int) -> None:
        super().__init__()
        self.inner = _TsWrite(victim, n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


class _TsSave(torch.nn.Module):
    def __init__(self, victim: str, n: int) -> None:
        super().__init__()
        self.victim = victim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.save(x, self.victim + ".saved")
        return x


class _TsRead(torch.nn.Module):
    def __init__(self, secret: str, n: int) -> None:
        super().__init__()
        self.secret, self.n = secret, n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = torch.from_file(self.secret, shared=False, size=self.n, dtype=torch.uint8)
        return x + s[:1].float()


class _TsLoop(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        while bool(x.sum() > -1e30):
            x = x + 1.0
        return x


class _TsSetState(torch.nn.Module):
    """Writes while it loads: its __setstate__ runs inside torch.jit.load."""

    def __init__(self, victim: str, n: int) -> None:
        super().__init__()
        self.victim, self.n = victim, n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    @torch.jit.export
    def __getstate__(self) -> tuple[str, int]:
        return (self.victim, self.n)

    @torch.jit.export
    def __setstate__(self, state: tuple[str, int]) -> None:
        self.victim, self.n = state
        self.training = False
        m = torch.from_file(self.victim, shared=True, size=self.n, dtype=torch.uint8)
        m.copy_(torch.full([self.n], 65, dtype=torch.uint8))
        self.n = self.n + int(m[0]) * 0


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def scene(tmp_path, monkeypatch):
    """A working directory with the user's file (the victim), a secret beside it and the
    attacks' module; returns (root, victim, secret)."""
    root = tmp_path / "user"
    root.mkdir()
    victim = root / "victim.txt"
    victim.write_text("original\n")
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    (root / "attacks.py").write_text(ATTACKS)
    monkeypatch.chdir(root)
    monkeypatch.syspath_prepend(str(root))
    yield root, victim, secret
    sys.modules.pop("attacks", None)


def _pickle(root: Path, name: str, victim: Path, secret: Path, big: int = 0) -> Path:
    import importlib

    attacks = importlib.import_module("attacks")
    path = root / f"{name}.pt"
    torch.save(getattr(attacks, name)(str(victim), str(secret), big), str(path))
    return path


def _script(root: Path, cls: type, victim: Path, secret: Path) -> Path:
    path = root / f"{cls.__name__}.ts.pt"
    if cls is _TsLoop:
        module = cls()
    elif cls is _TsRead:
        module = cls(str(secret), len(SECRET))
    else:
        module = cls(str(victim), len("original\n"))
    torch.jit.script(module).save(str(path))
    return path


def _attack(args: list[str], root: Path, victim: Path, secret: Path, want_exit: int = 2,
            want: str | None = "the cage refused it") -> str:
    before = _tree(root.parent)
    res = run("audit", *args, "--world", "coupling", "--dim", "4", "--n-eval", "200")
    out = res.output.strip()
    assert res.exit_code == want_exit, out
    if want is not None:
        assert len(out.splitlines()) == 1 and want in out, out
    assert SECRET not in out
    assert victim.read_text() == "original\n"
    assert _tree(root.parent) == before  # nothing changed, nothing made beside the cage
    return out


PICKLE_ROUTES = ["Write", "Save", "Read", "Socket", "UnixSocket", "Fork", "Spawn", "Thread",
                 "CustomOp"]


@pytest.mark.parametrize("name", PICKLE_ROUTES)
def test_a_trusted_pickle_is_stopped_by_the_kernel(scene, name):
    root, victim, secret = scene
    path = _pickle(root, name, victim, secret)
    _attack([str(path), "--trust-code"], root, victim, secret)


def test_setstate_while_unpickling_is_stopped(scene):
    root, victim, secret = scene
    path = _pickle(root, "SetState", victim, secret)
    _attack([str(path), "--trust-code"], root, victim, secret)


@pytest.mark.parametrize("cls", [_TsWrite, _TsFork, _TsSub, _TsSave, _TsRead, _TsSetState],
                         ids=["from_file", "jit_fork", "submodule", "save", "read_secret",
                              "setstate"])
def test_torchscript_is_stopped_by_the_kernel_even_unvetted(scene, cls):
    """Untrusted, the scan refuses each (the first layer); trusted — no scan at all — the
    kernel refuses what it does."""
    root, victim, secret = scene
    path = _script(root, cls, victim, secret)
    _attack([str(path)], root, victim, secret, want="idaudit will not run untrusted")
    if cls is _TsSave:  # the kernel refuses the file, and TorchScript's save ignores that:
        _attack([str(path), "--trust-code"], root, victim, secret, want_exit=0, want=None)
        return          # the audit ends as the program's forward does, nothing written
    _attack([str(path), "--trust-code"], root, victim, secret)


def test_memory_past_the_limit_is_a_clear_error(scene):
    root, victim, secret = scene
    from idaudit.loading.trust import memory_budget

    path = _pickle(root, "Alloc", victim, secret, big=int(memory_budget()) + (1 << 30))
    _attack([str(path), "--trust-code"], root, victim, secret,
            want="past the cage's memory limit")


@pytest.mark.parametrize("route", ["pickle", "torchscript"])
def test_a_program_that_never_ends_is_cut_at_the_time_limit(scene, route):
    root, victim, secret = scene
    path = _pickle(root, "Loop", victim, secret) if route == "pickle" else \
        _script(root, _TsLoop, victim, secret)
    out = _attack([str(path), "--trust-code", "--time-limit", "3"], root, victim, secret,
                  want_exit=3, want="ran past the cage's time limit (3 s)")
    assert "--time-limit" in out


def test_without_a_cage_programs_are_refused_unless_trusted(scene, monkeypatch):
    root, victim, secret = scene
    path = _script(root, _TsLoop, victim, secret)
    monkeypatch.setenv("IDAUDIT_CAGE", "off")
    res = run("audit", str(path), "--world", "coupling", "--dim", "4", "--n-eval", "50")
    assert res.exit_code == 2
    assert "none can be built here (the cage is turned off (IDAUDIT_CAGE=off))" in res.output
    assert "--trust-code runs it in this process" in res.output
    res = run("audit", str(path), "--world", "coupling", "--dim", "4", "--time-limit", "3",
              "--trust-code")
    assert res.exit_code == 2 and "--time-limit does not apply" in res.output, res.output


def test_a_plain_program_gives_the_numbers_it_gives_in_process(scene, monkeypatch):
    """The cage changes nothing of the audit: the same metrics, digit for digit, as the same
    TorchScript run in this process."""
    import json

    root, _, _ = scene
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    torch.jit.script(net).save(str(root / "net.pt"))
    args = ["net.pt", "--world", "coupling", "--dim", "4", "--n-eval", "400"]
    assert run("audit", *args, "--json", "caged.json").exit_code == 0
    monkeypatch.setenv("IDAUDIT_CAGE", "off")
    assert run("audit", *args, "--trust-code", "--json", "here.json").exit_code == 0
    caged = json.loads((root / "caged.json").read_text())["metrics"]
    here = json.loads((root / "here.json").read_text())["metrics"]
    assert caged == here and caged["r2_h_to_z_heldout"] is not None


def test_time_limit_applies_only_to_programs(tmp_path):
    np.savez(tmp_path / "a.npz", z=np.zeros((10, 2)), h=np.zeros((10, 2)))
    res = run("audit", str(tmp_path / "a.npz"), "--time-limit", "5")
    assert res.exit_code == 2 and "--time-limit does not apply" in res.output
    with pytest.raises(IdauditError, match="time_limit must be a number of seconds > 0"):
        LoadOptions(time_limit=0)


def test_embeddings_come_back_as_arrays_not_pickles(tmp_path):
    """The wire: arrays and JSON only; a frame naming an unknown type, a bad shape or more
    bytes than allowed is refused."""
    import io

    buf = io.BytesIO()
    h = np.arange(12, dtype=np.float32).reshape(3, 4)
    wire.write_frame(buf, {"h": h, "note": "x"})
    buf.seek(0)
    got = wire.read_frame(buf, 1e6)
    np.testing.assert_array_equal(got["h"], h)
    for header in ({"message": {}, "arrays": [{"dtype": "object", "shape": [1]}]},
                   {"message": {}, "arrays": [{"dtype": "float32", "shape": [-1]}]},
                   {"message": {}, "arrays": [{"dtype": "float32", "shape": [10**9]}]}):
        import json

        raw = json.dumps(header).encode()
        with pytest.raises(wire.WireError):
            wire.read_frame(io.BytesIO(len(raw).to_bytes(8, "little") + raw), 1e6)


def test_the_cage_is_cheap_once_started(tmp_path):
    """A second program costs a fork, not a Python start: both embed, the same numbers."""
    net = torch.jit.script(torch.nn.Linear(4, 3))
    net.save(str(tmp_path / "n.pt"))
    x = torch.randn(50, 4)
    a = load_target(tmp_path / "n.pt")
    b = load_target(tmp_path / "n.pt")
    assert a.module.cage.process.zygote is b.module.cage.process.zygote
    np.testing.assert_allclose(a.module(x).numpy(), net(x).detach().numpy(), rtol=1e-6)
    np.testing.assert_array_equal(a.module(x).numpy(), b.module(x).numpy())
    private = a.module.cage.private
    assert os.path.isdir(private)
    a.module.cage.close()
    assert not os.path.exists(private)  # the private directory goes with the cage


def test_doctor_says_whether_the_cage_works(monkeypatch):
    from idaudit.doctor import _check_cage

    assert _check_cage()["detail"].startswith("Landlock ABI ")
    monkeypatch.setenv("IDAUDIT_CAGE", "off")
    got = _check_cage()
    assert got["ok"] and got["detail"].startswith("not available: the cage is turned off")


def test_trust_pickle_stays_an_alias_of_trust_code(scene):
    root, victim, secret = scene
    path = _pickle(root, "Write", victim, secret)
    out = _attack([str(path), "--trust-pickle"], root, victim, secret)
    assert "the encoder failed" in out


def test_a_secret_in_the_working_directory_stays_unread_under_python_m(scene):
    """``python -m idaudit`` puts the working directory on the import path; the cage still
    reads none of its files (only the modules a load names)."""
    import subprocess

    root, victim, secret = scene
    (root / "inside.txt").write_text(SECRET)
    path = _pickle(root, "Read", root / "victim.txt", root / "inside.txt")
    res = subprocess.run([sys.executable, "-m", "idaudit", "audit", str(path), "--world",
                          "coupling", "--dim", "4", "--n-eval", "100", "--trust-code"],
                         cwd=root, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "the cage refused it" in res.stderr, res.stderr
    assert SECRET not in res.stderr + res.stdout
