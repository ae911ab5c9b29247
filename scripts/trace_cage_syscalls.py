"""The system calls programs make inside the cage, traced from real loads.

Runs pytest on the given test files under ``strace -f -ff`` (one trace file per thread), finds
the cage's processes — those that installed a seccomp filter — and the threads they started,
and prints every call they made after confining themselves, with counts, as JSON. This is how
the cage's allow list (``idaudit.loading.confine.ALLOWED``) was found: the union over the
loads of every route (TorchScript, ``.pt2``, Hugging Face, timm, LeWM, ``--trust-code``
pickles) on each torch CI runs. Calls the allow list refuses show as ``"refused"``.

    python scripts/trace_cage_syscalls.py tests/test_cage.py tests/test_integrations.py

Needs strace (Debian's package); run as root or where ptrace of one's own children works.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

CALL = re.compile(r"^(?:\d+\.\d+ )?([a-z_0-9]+)\(")
CLONE = re.compile(r"^(?:\d+\.\d+ )?clone3?\(.*\)\s+=\s+(\d+)")
CONFINED = "seccomp(SECCOMP_SET_MODE_FILTER"
#: calls whose argument (by position) the allow list looks at: counted per value
ARGUMENT = {"ioctl": 1, "prctl": 0, "kill": 0, "tgkill": 0, "clone": 0, "socket": 0,
            "fcntl": 1}


def traced_calls(directory: Path) -> tuple[collections.Counter, collections.Counter]:
    """(calls made by confined processes and their threads, those answered EPERM/ENOSYS by
    the filter), counted, from the ``strace -ff`` files in ``directory``."""
    files = {int(p.suffix[1:]): p for p in directory.glob("trace.*")}
    lines = {pid: p.read_text(errors="replace").splitlines() for pid, p in files.items()}
    calls: collections.Counter = collections.Counter()
    refused: collections.Counter = collections.Counter()
    todo = [(pid, next(i for i, ln in enumerate(text) if CONFINED in ln) + 1)
            for pid, text in lines.items() if any(CONFINED in ln for ln in text)]
    seen = set()
    while todo:
        pid, start = todo.pop()
        if pid in seen or pid not in lines:
            continue
        seen.add(pid)
        for line in lines[pid][start:]:
            m = CALL.match(line)
            if not m:
                continue
            name = m.group(1)
            if name in ARGUMENT:  # the request or option, as strace names it
                arg = line[m.end():].split(", ")[ARGUMENT[name]].split(")")[0].split("|")[0]
                name = f"{name}:{arg}"
            calls[name] += 1
            if re.search(r"= -1 (EPERM|ENOSYS) ", line):
                refused[name] += 1
            c = CLONE.match(line)
            if c:
                todo.append((int(c.group(1)), 0))
    return calls, refused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tests", nargs="+", help="test files (or node ids) to run")
    parser.add_argument("-k", default=None, help="pytest -k expression")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["strace", "-f", "-ff", "-qq", "-o", f"{tmp}/trace", sys.executable, "-m",
               "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *args.tests]
        if args.k:
            cmd += ["-k", args.k]
        res = subprocess.run(cmd, capture_output=True, text=True)
        print(res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr[-500:],
              file=sys.stderr)
        calls, refused = traced_calls(Path(tmp))
    print(json.dumps({"calls": dict(sorted(calls.items())),
                      "refused": dict(sorted(refused.items()))}, indent=1))


if __name__ == "__main__":
    main()
