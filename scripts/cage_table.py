"""The cage's attack table: each attack of tests/test_cage.py and tests/test_cage_attacks.py
run as a user would run it, as root and, run as root, again as an unprivileged user.

    python scripts/cage_table.py                  # a Markdown table on stdout
    python scripts/cage_table.py --as-user 65534  # (as root) each row as root and as uid 65534

Each attack file is built in a fresh working directory holding the user's file (the victim)
and a secret beside it, then ``idaudit audit FILE --world coupling --dim 4`` runs in a new
process (untrusted, and with ``--trust-code`` so that no scan stands in the way); a row gives
the exit code, the one line it printed and whether anything outside the cage changed or
appeared (sha256 of every file under the directory, before and after).
"""

from __future__ import annotations

import hashlib
import importlib
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))

import test_cage as tc  # noqa: E402
import test_cage_attacks as ta  # noqa: E402
import torch  # noqa: E402

#: variables a runner may hold that must not reach the program (tests/test_cage_attacks.py)
SECRETS = ta.SECRETS
#: the start every failure of the encoder's own call shares, shortened in the table
FAILED = "error: the encoder failed on inputs of shape (2, 4): "


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def _row(route: str, effect: str, build, flags: list[str], uid: int | None = None,
         env: dict[str, str] | None = None) -> str:
    import os

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "user"
        root.mkdir()
        victim, secret = root / "victim.txt", Path(tmp) / "secret.txt"
        victim.write_text("original\n")
        secret.write_text(tc.SECRET)
        (root / "attacks.py").write_text(tc.ATTACKS)
        (root / "probes.py").write_text(ta.PROBES)
        sys.path.insert(0, str(root))
        for name in ("attacks", "probes"):
            sys.modules.pop(name, None)
        path = build(root, victim, secret)
        sys.path.remove(str(root))
        who = "root" if os.getuid() == 0 else f"uid {os.getuid()}"
        command = [sys.executable, "-m", "idaudit", "audit", str(path), "--world", "coupling",
                   "--dim", "4", "--n-eval", "200", *flags]
        private = Path(tmp) / "private"
        private.mkdir()
        if uid is not None:  # the scene the user's own; setpriv runs idaudit as that user
            os.chmod(tmp, 0o755)
            for p in [Path(tmp), *Path(tmp).rglob("*")]:
                os.chown(p, uid, uid)
            command = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                       "--inh-caps=-all", "--", *command]
            who = f"uid {uid}"
        before = _tree(Path(tmp))
        res = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "TMPDIR": str(private), "HOME": str(private),
                                  **(env or {})})
        after = _tree(Path(tmp))
        lines = (res.stderr.strip() or res.stdout.strip()).splitlines()
        said = lines[-1] if res.returncode else "(the audit's table)"
        said = said.replace(str(Path(tmp)), "…").replace(FAILED, "failed: ")
        if len(said) > 150:
            said = said[:147] + "…"
        changed = sorted(set(after) ^ set(before)) + [k for k in before if
                                                        k in after and after[k] != before[k]]
        left = list(private.iterdir())
        trace = "none" if not changed and victim.read_text() == "original\n" and not left else \
            "CHANGED: " + ", ".join(changed + [str(p.name) for p in left] or ["victim"])
        if any(v in res.stdout + res.stderr for v in [*SECRETS.values(), tc.SECRET]):
            trace += "; A SECRET WAS PRINTED"
        return (f"| {route} | {effect} | {who} | {' '.join(flags) or 'untrusted'} | "
                f"{res.returncode} | {trace} | {said.replace('|', '/')} |")


def main() -> None:
    import argparse
    import os

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--as-user", type=int, default=None,
                        help="(as root) run each row again as this uid, through setpriv")
    args = parser.parse_args()
    users = [None] + ([args.as_user] if args.as_user is not None else [])

    def pickle(name, big=0, module="attacks"):
        def build(root, victim, secret):
            attacks = importlib.import_module(module)
            p = root / f"{name}.pt"
            torch.save(getattr(attacks, name)(str(victim), str(secret), big), str(p))
            return p
        return build

    def script(cls):
        return lambda root, victim, secret: tc._script(root, cls, victim, secret)

    from idaudit.loading.trust import memory_budget

    rows = []

    def row(route, effect, build, flags, env=None):
        rows.extend(_row(route, effect, build, flags, uid, env) for uid in users)

    for cls, route, effect in ((tc._TsWrite, "TorchScript forward", "write (from_file, shared)"),
                               (tc._TsFork, "TorchScript torch.jit.fork", "write (from_file)"),
                               (tc._TsSub, "TorchScript submodule method", "write (from_file)"),
                               (tc._TsSetState, "TorchScript __setstate__ (load)", "write"),
                               (tc._TsSave, "TorchScript forward", "write (torch.save)"),
                               (tc._TsRead, "TorchScript forward", "read a secret"),
                               (tc._TsLoop, "TorchScript forward", "loop forever")):
        extra = ["--time-limit", "5"] if cls is tc._TsLoop else []
        if cls is not tc._TsLoop:
            row(route, effect, script(cls), [])
        row(route, effect, script(cls), ["--trust-code", *extra])
    for name, route, effect in (("Write", "pickle forward", "write (open)"),
                                ("Save", "pickle forward", "write (torch.save)"),
                                ("SetState", "pickle __setstate__ (unpickling)", "write"),
                                ("Thread", "pickle, a thread of its own", "write"),
                                ("CustomOp", "pickle, custom op evilns::scribble", "write"),
                                ("Read", "pickle forward", "read a secret"),
                                ("Socket", "pickle forward", "TCP socket to 127.0.0.1"),
                                ("UnixSocket", "pickle forward", "Unix socket"),
                                ("Fork", "pickle forward", "fork"),
                                ("Spawn", "pickle forward", "spawn (subprocess)"),
                                ("Alloc", "pickle forward", "allocate free memory + 1 GiB"),
                                ("Loop", "pickle forward", "loop forever")):
        extra = ["--time-limit", "5"] if name == "Loop" else []
        big = int(memory_budget()) + (1 << 30) if name == "Alloc" else 0
        row(route, effect, pickle(name, big), ["--trust-code", *extra])
    for name, effect in (("Reboot", "capabilities: reboot (a bad command)"),
                         ("Hostname", "capabilities: sethostname (the same name)"),
                         ("Clock", "capabilities: settimeofday (no time)"),
                         ("KernelLog", "capabilities: read the kernel log"),
                         ("Realtime", "capabilities: SCHED_FIFO"),
                         ("Immutable", "capabilities: chattr +i on its own file"),
                         ("Chmod", "chmod the user's file"),
                         ("Setuid", "setuid"),
                         ("SignalParent", "signal the zygote"),
                         ("SignalGroup", "signal its process group"),
                         ("StayAlive", "orphans: clear its parent-death signal"),
                         ("BigFile", "disk: write 128 MiB"),
                         ("Locked", "disk: leave a directory nobody may list")):
        row("pickle forward", effect, pickle(name, module="probes"), ["--trust-code"])
    row("pickle forward", "environment: print the secrets' names it sees",
        pickle("Environment", sorted(SECRETS), module="probes"), ["--trust-code"], SECRETS)
    project = Path(tempfile.mkdtemp(prefix="project-"))
    os.chmod(project, 0o755)
    (project / ".env").write_text(f"DATABASE_URL={tc.SECRET}\n")
    os.chmod(project / ".env", 0o644)
    row("pickle forward", "import path: read a .env beside a PYTHONPATH entry",
        pickle("ReadBeside", str(project / ".env"), module="probes"), ["--trust-code"],
        {"PYTHONPATH": str(project)})
    import shutil

    shutil.rmtree(project)
    print("| route | effect | as | flags | exit | trace outside the cage | what it printed |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
