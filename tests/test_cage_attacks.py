"""The cage against a program that tries what a privileged process, a process with secrets in
its environment or a process that wants to outlive idaudit could do (issue 54), as root and
as an unprivileged user: every one refused by the kernel, no trace outside the cage.

Each probe is a ``--trust-code`` pickle (Python code runs; no scan stands in the way) whose
forward makes one call through ctypes or os and raises the OSError it got — or returns, and
the audit goes on, which fails the test. ``.ci/run`` runs this file (and tests/test_cage.py)
a second time as uid 65534 (stage 2e); run as a user, the privileged calls were refused by
the kernel before the cage too, so the test checks that the cage changes nothing there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from test_cage import SECRET, _attack, _tree, scene  # noqa: F401 - scene is a fixture

from idaudit.loading import confine

pytestmark = pytest.mark.skipif(confine.why_no_cage() is not None,
                                reason=f"no cage here: {confine.why_no_cage()}")

PROBES = textwrap.dedent('''
    import ctypes, fcntl, os, struct, time, torch

    libc = ctypes.CDLL(None, use_errno=True)

    def check(ret, what):
        if ret == -1:
            e = ctypes.get_errno()
            raise OSError(e, f"{what}: {os.strerror(e)}")

    class Base(torch.nn.Module):
        def __init__(self, victim, secret, extra=None):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.victim, self.secret, self.extra = victim, secret, extra

        def forward(self, x):
            self.act(x)
            return self.lin(x)

    class Reboot(Base):  # a bad command: EINVAL where the call is let through
        def act(self, x):
            check(libc.reboot(0x12345678), "reboot")

    class Hostname(Base):  # the same name again: harmless where it is let through
        def act(self, x):
            name = os.uname().nodename.encode()
            check(libc.sethostname(name, len(name)), "sethostname")

    class Clock(Base):  # no time and no zone: a no-op where it is let through (the raw
        def act(self, x):  # call: glibc's wrapper does not take two NULLs)
            nr = {"x86_64": 164, "aarch64": 170}[os.uname().machine]
            check(libc.syscall(nr, None, None), "settimeofday")

    class KernelLog(Base):
        def act(self, x):
            buf = ctypes.create_string_buffer(4096)
            check(libc.klogctl(3, buf, 4096), "syslog")

    class Realtime(Base):
        def act(self, x):
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))

    class Immutable(Base):  # chattr +i on a file of its own: idaudit could not remove it
        def act(self, x):
            fd = os.open(os.path.join(os.environ["TMPDIR"], "stay"), os.O_CREAT | os.O_WRONLY)
            fcntl.ioctl(fd, 0x40086602, struct.pack("l", 0x10))  # FS_IOC_SETFLAGS, +i

    class Chmod(Base):  # Landlock does not rule on modes: seccomp does
        def act(self, x):
            os.chmod(self.victim, 0)

    class Setuid(Base):
        def act(self, x):
            os.setuid(os.getuid())

    class SignalParent(Base):
        def act(self, x):
            os.kill(os.getppid(), 0)

    class SignalGroup(Base):
        def act(self, x):
            os.kill(0, 0)

    class StayAlive(Base):  # clear the parent-death signal, to outlive idaudit
        def act(self, x):
            check(libc.prctl(1, 0, 0, 0, 0), "prctl(PR_SET_PDEATHSIG, 0)")

    class BigFile(Base):
        def act(self, x):
            with open(os.path.join(os.environ["TMPDIR"], "big"), "wb") as f:
                for _ in range(128):
                    f.write(b"\\0" * (1 << 20))

    class Environment(Base):  # what of idaudit's environment reached it: names only
        def act(self, x):
            leaked = sorted(k for k in self.extra if k in os.environ)
            raise RuntimeError(f"leaked {leaked} of {len(os.environ)} variables")

    class ReadBeside(Base):  # a file beside an import-path entry (a project on PYTHONPATH)
        def act(self, x):
            with open(self.extra) as f:
                raise RuntimeError(f"read {f.read()!r}")

    class Locked(Base):  # a directory it can write in but nobody can list: then it waits
        def act(self, x):
            d = os.path.join(os.environ["TMPDIR"], "locked")
            os.mkdir(d, 0o300)
            open(os.path.join(d, "inside"), "w").close()
            if self.extra:
                time.sleep(600)
            raise RuntimeError("made a locked directory")

    class Forever(Base):
        def act(self, x):
            try:
                libc.prctl(1, 0, 0, 0, 0)
            finally:
                while True:
                    time.sleep(0.05)
''')

REFUSED = ["Reboot", "Hostname", "Clock", "KernelLog", "Realtime", "Immutable", "Chmod",
           "Setuid", "SignalParent", "SignalGroup", "StayAlive"]


def _probe(root: Path, name: str, victim: Path, secret: Path, extra=None) -> Path:
    import importlib

    if not (root / "probes.py").exists():
        (root / "probes.py").write_text(PROBES)
    probes = importlib.import_module("probes")
    path = root / f"{name}.pt"
    torch.save(getattr(probes, name)(str(victim), str(secret), extra), str(path))
    return path


@pytest.fixture
def probes_scene(request):
    """tests/test_cage.py's scene (its fixture, imported above): (root, victim, secret)."""
    yield request.getfixturevalue("scene")
    sys.modules.pop("probes", None)


@pytest.mark.parametrize("name", REFUSED)
def test_a_privileged_call_is_refused_as_root_and_as_a_user(probes_scene, name):
    """reboot, sethostname, settimeofday, the kernel log, real-time scheduling, chattr +i,
    chmod, setuid, a signal to the zygote or the process group, clearing the parent-death
    signal: each refused (EPERM), one line, exit 2, nothing changed outside the cage."""
    root, victim, secret = probes_scene
    path = _probe(root, name, victim, secret)
    before = os.stat(victim)
    out = _attack([str(path), "--trust-code"], root, victim, secret)
    assert "Operation not permitted" in out, out
    assert os.stat(victim).st_mode == before.st_mode


def test_a_file_past_the_size_limit_is_refused(probes_scene):
    root, victim, secret = probes_scene
    path = _probe(root, "BigFile", victim, secret)
    out = _attack([str(path), "--trust-code"], root, victim, secret,
                  want="past the cage's file-size limit")
    assert f"{confine.MAX_FILE_BYTES >> 20} MiB" in out


def test_a_locked_directory_left_in_the_cage_is_removed(probes_scene, tmp_path_factory,
                                                       monkeypatch):
    """A directory the program made that nobody may list (mode 300, a file in it): removed
    with the rest of its private directory once the cage is done with."""
    import gc
    import tempfile

    root, victim, secret = probes_scene
    private_root = tmp_path_factory.mktemp("private")
    monkeypatch.setenv("TMPDIR", str(private_root))
    monkeypatch.setattr(tempfile, "tempdir", None)
    path = _probe(root, "Locked", victim, secret)
    _attack([str(path), "--trust-code"], root, victim, secret, want="made a locked directory")
    gc.collect()  # the cage's finalizer (at exit in a command; here, when it is collected)
    assert list(private_root.iterdir()) == []


# ---- in a fresh idaudit process: its environment, its import path, its death ---------------

SECRETS = {"DATABASE_URL": "postgres://app:hunter2@db/prod",
           "PIP_INDEX_URL": "https://user:hunter2@pypi.example/simple",
           "SLACK_WEBHOOK_URL": "https://hooks.slack.example/T000/hunter2",
           "CI_JOB_JWT": "eyJhunter2", "MYSQL_PWD": "hunter2",
           "AZURE_STORAGE_CONNECTION_STRING": "AccountKey=hunter2",
           "SENTRY_DSN": "https://hunter2@sentry.example/1", "HTTPS_PROXY": "http://u:hunter2@p:3128",
           "AWS_SECRET_ACCESS_KEY": "hunter2", "GITHUB_TOKEN": "ghp_hunter2"}


def _idaudit(args: list[str], cwd: Path, env: dict[str, str] | None = None,
             **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "idaudit", "audit", *args, "--world",
                             "coupling", "--dim", "4", "--n-eval", "200"], cwd=cwd,
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def test_no_secret_of_the_environment_reaches_the_program(probes_scene):
    root, victim, secret = probes_scene
    path = _probe(root, "Environment", victim, secret, extra=sorted(SECRETS))
    proc = _idaudit([str(path), "--trust-code"], root, SECRETS)
    out, err = proc.communicate(timeout=300)
    text = out + err
    assert proc.returncode == 2, text
    assert "leaked [] of" in text, text
    assert "hunter2" not in text


def test_a_file_beside_an_import_path_entry_stays_unread(probes_scene, tmp_path):
    """A project root on PYTHONPATH (or in a .pth line): its modules can be found, its .env
    and keys cannot be read."""
    root, victim, secret = probes_scene
    project = tmp_path / "project"
    project.mkdir()
    (project / ".env").write_text(f"DATABASE_URL={SECRET}\n")
    path = _probe(root, "ReadBeside", victim, secret, extra=str(project / ".env"))
    proc = _idaudit([str(path), "--trust-code"], root,
                    {"PYTHONPATH": os.pathsep.join([str(project), str(root)])})
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, out + err
    assert "Permission denied" in err and SECRET not in out + err, out + err


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for_the_cage(proc: subprocess.Popen, private_root: Path, seconds: float = 120):
    """(the cage's pid, its private directory) once the program runs (its locked directory
    made)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        dirs = [p for p in private_root.glob("idaudit-cage-*") if (p / "locked").exists()]
        cages = [c for z in _children(proc.pid) for c in _children(z) if _alive(c)]
        if dirs and cages:  # idaudit → its zygote → the cage it forked
            return cages[0], dirs[0]
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError("the cage did not start")


def _a_running_program(probes_scene, tmp_path: Path, seconds: int):
    """(idaudit, its cage's pid, the cage's private directory): a program that made a locked
    directory and sleeps, run with ``--time-limit seconds``."""
    root, victim, secret = probes_scene
    private_root = tmp_path / "tmp"
    private_root.mkdir()
    path = _probe(root, "Locked", victim, secret, extra=True)
    proc = _idaudit([str(path), "--trust-code", "--time-limit", str(seconds)], root,
                    {"TMPDIR": str(private_root)})
    return (proc, *_wait_for_the_cage(proc, private_root))


def test_a_program_does_not_outlive_idaudit(probes_scene, tmp_path):
    """SIGTERM to idaudit while the program runs (having tried to clear its parent-death
    signal): the cage is dead within 2 s and its private directory — with a directory in it
    nobody may list — removed."""
    proc, cage, private = _a_running_program(probes_scene, tmp_path, 120)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    end = time.monotonic() + 2
    while _alive(cage) and time.monotonic() < end:
        time.sleep(0.05)
    assert not _alive(cage)
    end = time.monotonic() + 5
    while private.exists() and time.monotonic() < end:
        time.sleep(0.05)
    assert not private.exists()


def test_the_zygote_enforces_the_time_limit_while_idaudit_is_stopped(probes_scene, tmp_path):
    """idaudit stopped (SIGSTOP: its own timer cannot fire): the zygote kills the program
    at its time limit (4 s) plus its grace."""
    from idaudit.loading.cage_child import ZYGOTE_GRACE

    proc, cage, _ = _a_running_program(probes_scene, tmp_path, 4)
    proc.send_signal(signal.SIGSTOP)
    try:
        end = time.monotonic() + 4 + ZYGOTE_GRACE + 5
        while _alive(cage) and time.monotonic() < end:
            time.sleep(0.1)
        assert not _alive(cage)
    finally:
        proc.send_signal(signal.SIGCONT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, out + err


def test_a_module_a_load_names_is_read_from_the_import_path(probes_scene, tmp_path):
    """--embed module:function where the module lives in a PYTHONPATH entry, not the working
    directory: the cage reads that module (found without importing it here), and only it."""
    root, _, _ = probes_scene
    project = tmp_path / "project"
    project.mkdir()
    (project / "myembed.py").write_text("def embed(model, x):\n    return model(x) * 2\n")
    (project / ".env").write_text(f"KEY={SECRET}\n")
    torch.jit.script(torch.nn.Linear(4, 4)).save(str(root / "lin.pt"))
    proc = _idaudit([str(root / "lin.pt"), "--embed", "myembed:embed", "--json", "a.json"],
                    root, {"PYTHONPATH": str(project)})
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    import json

    assert json.loads((root / "a.json").read_text())["metrics"]["embed_dim"] == 4


# ---- the filter itself, run by a BPF interpreter on seccomp_data ---------------------------

def _run_bpf(program: bytes, arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """What a classic-BPF seccomp program returns for one call (the kernel's semantics for
    the instructions it uses: LD|W|ABS, JEQ/JGE/JSET with K, RET K)."""
    import struct

    data = struct.pack("<iI", nr, arch) + struct.pack("<Q", 0) + b"".join(
        struct.pack("<Q", a) for a in (*args, *[0] * (6 - len(args))))
    insns = [struct.unpack("HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == 0x06:
            return k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if taken else jf
        pc += 1


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_filter_allows_its_list_and_refuses_the_rest(machine):
    from idaudit.loading import syscalls

    nr = syscalls.NUMBERS[machine]
    arch = confine._ARCHES[machine][0]
    prog = confine.seccomp_program(machine, pid=4242)
    allow, eperm, enosys, kill = 0x7FFF0000, 0x50001, 0x50026, 0x80000000

    def verdict(name_or_nr, *args, arch=arch):
        return _run_bpf(prog, arch, nr.get(name_or_nr, name_or_nr), args)

    for name in ("read", "openat", "mmap", "futex", "exit_group", "rt_sigreturn", "getrandom"):
        assert verdict(name) == allow, name
    # calls off the list, by number (x86_64 / aarch64): socket, reboot, sethostname,
    # settimeofday, syslog, sched_setscheduler, fchmodat, setuid, ptrace, unshare, bpf
    off = {"x86_64": (41, 169, 170, 164, 103, 144, 268, 105, 101, 272, 321),
           "aarch64": (198, 142, 161, 170, 116, 119, 53, 146, 117, 97, 280)}[machine]
    assert {verdict(n) for n in off} == {eperm}
    assert all(n not in nr.values() for n in off)
    assert verdict("clone", 0x00010000 | 0x00000100) == allow  # CLONE_THREAD | CLONE_VM
    assert verdict("clone", 0x11) == eperm                      # a process (SIGCHLD)
    assert verdict("clone3") == enosys
    assert verdict("prctl", 15) == allow and verdict("prctl", 1) == eperm  # NAME; PDEATHSIG
    assert verdict("ioctl", 3, 0x5401) == allow and verdict("ioctl", 3, 0x40086602) == eperm
    assert verdict("kill", 4242, 0) == allow
    assert {verdict("kill", p, 0) for p in (1, 0, 4243, 2**32 - 1)} == {eperm}
    assert verdict("tgkill", 4242, 4243, 6) == allow and verdict("tgkill", 1, 1, 9) == eperm
    assert verdict("prlimit64", 0) == allow and verdict("prlimit64", 1) == eperm
    assert verdict("read", arch=0x40000003) == kill             # another architecture (i386)
    if machine == "x86_64":
        assert verdict(0x40000000 | 0) == kill                  # x32


# ---- clean-up of what a program left ------------------------------------------------------

def test_remove_tree_unlocks_directories_and_names_what_resists(tmp_path):
    """A tree with directories nobody may list or enter is removed (their modes given back
    first); an immutable file (root can make one outside the cage) is named in one line."""
    import fcntl
    import struct

    from idaudit.core.atomic import remove_tree

    tree = tmp_path / "private"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "f").write_text("x")
    os.chmod(tree / "a" / "b", 0)
    os.chmod(tree / "a", 0o300)
    assert remove_tree(tree) is None and not tree.exists()
    if os.getuid() != 0:
        return  # making an immutable file needs CAP_LINUX_IMMUTABLE
    stuck = tmp_path / "stuck"
    stuck.mkdir()
    (stuck / "pinned").write_text("x")
    fd = os.open(stuck / "pinned", os.O_RDONLY)
    try:
        try:
            fcntl.ioctl(fd, 0x40086602, struct.pack("l", 0x10))  # FS_IOC_SETFLAGS, +i
        except OSError as exc:
            pytest.skip(f"this file system has no immutable flag ({exc})")
        line = remove_tree(stuck)
        assert line == f"could not remove {stuck} (1 entries left, e.g. {stuck}/pinned)"
    finally:
        fcntl.ioctl(fd, 0x40086602, struct.pack("l", 0))
        os.close(fd)
    assert remove_tree(stuck) is None


def test_the_cage_s_pid_is_asked_once_whichever_thread_asks(probes_scene, monkeypatch):
    """The time limit's thread and the main thread both ask for a cage's pid (a time-out
    while idaudit reads its answer): one asks the zygote, the other waits for that answer.
    Both asking took one answer and left the other reading the socket for ever, holding the
    zygote's lock (idaudit hung after SIGCONT)."""
    import threading

    from idaudit.loading.cage import Cage

    root, victim, secret = probes_scene
    path = _probe(root, "Reboot", victim, secret)
    cage = Cage(path, {}, False, read=[str(path)], listing=[], seconds=60)
    try:
        zygote, asked = cage.process.zygote, []
        answer = zygote.answer

        def slow_answer(number):  # widen the window in which both threads ask
            asked.append(number)
            time.sleep(0.3)
            return answer(number)

        monkeypatch.setattr(zygote, "answer", slow_answer)
        got = []
        threads = [threading.Thread(target=lambda: got.append(cage.process.pid))
                   for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert len(got) == 2 and got[0] == got[1] > 0 and asked == [cage.process.spawned]
    finally:
        monkeypatch.undo()
        cage.close()
