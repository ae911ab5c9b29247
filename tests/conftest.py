import os

import pytest

# pytest-xdist's workers (pyproject's addopts) start with COLUMNS=80 and LINES=24 set, which a
# serial run has not: rich's consoles, made when the CLI is imported, would keep 80 columns
# where a test sets COLUMNS itself (and wrap the long paths of a worker's tmp_path)
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)

# idaudit's thread settings (waiting threads sleep) before torch loads its runtime, as the
# ``idaudit`` command applies them; a suite without them trained up to 10× slower beside busy
# processes (benchmarks/bench_numba_pool.py --torch-first)
from idaudit.core.threads import share_cpu

share_cpu()

# isort: split
import torch  # noqa: E402 - after share_cpu()

torch.set_num_threads(min(2, os.cpu_count() or 1))


def assert_contract(train_metrics, audit_metrics):
    """Every key train logs is one audit reports, with the same value (final_loss aside);
    returns the shared keys."""
    import pytest

    assert set(train_metrics) - set(audit_metrics) <= {"final_loss", "rho_0", "rho_1"}
    shared = [k for k, v in train_metrics.items() if k in audit_metrics and v is not None]
    for key in shared:
        a, b = train_metrics[key], audit_metrics[key]
        if isinstance(a, float):
            assert b == pytest.approx(a, rel=1e-12, abs=1e-14), key
        else:
            assert a == b, key
    return shared


def one_line(res, code, fragment):
    """A CLI result that exits ``code`` with ``fragment`` in its output, no traceback and no
    internal error; for exit 2 the output is exactly one line, ``error: …``."""
    assert res.exit_code == code, res.output
    assert "Traceback" not in res.output and "internal error" not in res.output, res.output
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert any(fragment in ln for ln in lines), res.output
    if code == 2:
        assert len(lines) == 1 and lines[0].startswith("error:"), res.output


def run(*args):
    """``idaudit ARGS`` through typer's CliRunner (paths and numbers as strings)."""
    from typer.testing import CliRunner

    from idaudit.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def identity_linear(dim=4):
    """A real ``nn.Linear`` that is the identity map."""
    lin = torch.nn.Linear(dim, dim)
    with torch.no_grad():
        lin.weight.copy_(torch.eye(dim))
        lin.bias.zero_()
    return lin


def three_runs(directory):
    """(z, the paths of three runs' arrays): two good seeds (noise 0.05, 0.1) and a poor one
    (0.6) of one recipe, 2000 rows of a 3-D latent."""
    import numpy as np

    rng = np.random.default_rng(11)
    z = rng.standard_normal((2000, 3))
    paths = []
    for i, noise in enumerate((0.05, 0.1, 0.6)):
        paths.append(directory / f"run{i}.npz")
        np.savez(paths[-1], z=z, h=z + noise * rng.standard_normal(z.shape))
    return z, paths


def why_not_importable(name: str) -> str | None:
    """Why ``import name`` fails here, in the words idaudit's one-line error uses ("it is not
    installed", or the error's type and first line); None where it imports."""
    import importlib

    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            return "it is not installed"
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    except Exception as exc:  # noqa: BLE001 - a broken install raises anything
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    return None


@pytest.fixture
def in_cage(monkeypatch):
    """Open programs from files in this process, as the cage's own process opens them (its
    code, run here unconfined): for tests that look inside the network a file builds."""
    import idaudit.loading.programs as programs

    monkeypatch.setattr(programs, "IN_CAGE", True)


class ForkedCLI:
    """``python -m idaudit.cli ARGS`` for each of several commands at once, each in a process
    of its own, forked from one process that imported the CLI (tests/cli_fork.py): the
    import (torch's ≈ 2–3 s) is paid once per ``ForkedCLI``, not once per process. For tests
    of what concurrent processes do to shared files; a test of the process's own start-up
    (its entry point, its environment, its limits) starts it itself."""

    def __init__(self) -> None:
        import subprocess
        import sys
        from pathlib import Path

        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("cli_fork.py"))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == '"ready"'

    def run_at_once(self, argvs, cwd="."):
        """[(exit code, stderr)] of the commands ``argvs``, started together."""
        import json
        import os

        request = {"cwd": os.path.abspath(cwd), "argvs": [[str(a) for a in v] for v in argvs]}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return [(r["code"], r["stderr"]) for r in json.loads(self.proc.stdout.readline())]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture
def forked_cli():
    cli = ForkedCLI()
    yield cli
    cli.close()
