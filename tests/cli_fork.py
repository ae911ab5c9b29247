"""A process that imports idaudit's CLI once and then runs commands in processes forked from
it, all of a batch at once (tests/conftest.py's :class:`~conftest.ForkedCLI` drives it).

Each command is a real process of its own, as ``python -m idaudit.cli ARGS`` is: its own pid,
its own exit code, its own stderr; it runs :func:`idaudit.cli.main`, the function that
``python -m idaudit.cli`` runs, after the imports that command would make (torch, the CLI,
the audit) — those alone are shared, paid once instead of once per process. The processes of
a batch are held at a barrier until all are forked, then released together, so they race at
least as closely as processes started one after another.

Protocol: one JSON line on stdin per batch, ``{"cwd": DIR, "argvs": [[ARG, …], …]}``; one
JSON line back on stdout, ``[{"code": N, "stderr": TEXT}, …]`` in the same order. EOF ends.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback


def _child(argv: list[str], gate: int, err_path: str) -> None:
    """In the forked process: wait at the barrier, run the command, exit with its code."""
    code = 1
    try:
        os.read(gate, 1)  # returns at EOF: when the parent closes the barrier's write end
        os.close(gate)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)
        sys.argv = ["idaudit", *argv]
        from idaudit.cli import main

        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported as a command's traceback would be
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def run_batch(cwd: str, argvs: list[list[str]]) -> list[dict]:
    os.chdir(cwd)
    with tempfile.TemporaryDirectory() as tmp:
        read_end, write_end = os.pipe()
        pids = []
        for i, argv in enumerate(argvs):
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                os.close(write_end)
                _child(argv, read_end, os.path.join(tmp, f"{i}.err"))
            pids.append(pid)
        os.close(read_end)
        os.close(write_end)  # the barrier opens: every command starts now
        codes = []
        for pid in pids:
            _, status = os.waitpid(pid, 0)
            codes.append(os.waitstatus_to_exitcode(status))
        out = []
        for i, code in enumerate(codes):
            with open(os.path.join(tmp, f"{i}.err"), errors="replace") as f:
                out.append({"code": code, "stderr": f.read()})
        return out


def main() -> None:
    # what a command imports as it works (torch, through the checkpoint reader), so that a
    # fork finds it imported; nothing runs here (no thread pool exists before a fork)
    import importlib

    for name in ("idaudit.cli", "torch", "idaudit.models.checkpoint", "idaudit.loading.loaders",
                 "idaudit.maths.metrics", "idaudit.worlds", "idaudit.evaluations.audit",
                 "idaudit.evaluations.pipeline", "idaudit.evaluations.report",
                 "idaudit.evaluations.gate"):
        importlib.import_module(name)

    print(json.dumps("ready"), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        print(json.dumps(run_batch(request["cwd"], request["argvs"])), flush=True)


if __name__ == "__main__":
    main()
    os._exit(0)  # at EOF: no interpreter teardown (torch's takes seconds)
