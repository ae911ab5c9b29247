"""The cage's attack table: each attack of tests/test_cage.py run as a user would run it.

    python scripts/cage_table.py            # a Markdown table on stdout

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
import torch  # noqa: E402


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def _row(route: str, effect: str, build, flags: list[str]) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "user"
        root.mkdir()
        victim, secret = root / "victim.txt", Path(tmp) / "secret.txt"
        victim.write_text("original\n")
        secret.write_text(tc.SECRET)
        (root / "attacks.py").write_text(tc.ATTACKS)
        sys.path.insert(0, str(root))
        sys.modules.pop("attacks", None)
        path = build(root, victim, secret)
        sys.path.remove(str(root))
        before = _tree(Path(tmp))
        res = subprocess.run([sys.executable, "-m", "idaudit", "audit", str(path), "--world",
                              "coupling", "--dim", "4", "--n-eval", "200", *flags], cwd=root,
                             capture_output=True, text=True, timeout=300)
        after = _tree(Path(tmp))
        lines = (res.stderr.strip() or res.stdout.strip()).splitlines()
        said = lines[-1] if res.returncode else "(the audit's table)"
        if len(said) > 150:
            said = said[:70] + " … " + said[-75:]
        trace = "none" if after == before and victim.read_text() == "original\n" else \
            "CHANGED: " + ", ".join(sorted(set(after) ^ set(before)) or ["victim"])
        return (f"| {route} | {effect} | {' '.join(flags) or 'untrusted'} | {res.returncode} | "
                f"{trace} | {said.replace('|', '/')} |")


def main() -> None:
    def pickle(name, big=0):
        def build(root, victim, secret):
            attacks = importlib.import_module("attacks")
            p = root / f"{name}.pt"
            torch.save(getattr(attacks, name)(str(victim), str(secret), big), str(p))
            return p
        return build

    def script(cls):
        return lambda root, victim, secret: tc._script(root, cls, victim, secret)

    from idaudit.loading.trust import memory_budget

    rows = []
    for cls, route, effect in ((tc._TsWrite, "TorchScript forward", "write (from_file, shared)"),
                               (tc._TsFork, "TorchScript torch.jit.fork", "write (from_file)"),
                               (tc._TsSub, "TorchScript submodule method", "write (from_file)"),
                               (tc._TsSetState, "TorchScript __setstate__ (load)", "write"),
                               (tc._TsSave, "TorchScript forward", "write (torch.save)"),
                               (tc._TsRead, "TorchScript forward", "read a secret"),
                               (tc._TsLoop, "TorchScript forward", "loop forever")):
        extra = ["--time-limit", "5"] if cls is tc._TsLoop else []
        if cls is not tc._TsLoop:
            rows.append(_row(route, effect, script(cls), []))
        rows.append(_row(route, effect, script(cls), ["--trust-code", *extra]))
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
        rows.append(_row(route, effect, pickle(name, big), ["--trust-code", *extra]))
    print("| route | effect | flags | exit | trace outside the cage | what it printed |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
