"""GL and torch's compiler stack in one process: dm_control opens its EGL display when it is
imported, and ``import triton`` afterwards segfaults (torch builds that ship triton — every CUDA
wheel — reach it from ``torch.optim`` and ``torch.compile``). idaudit renders only in spawned
workers and imports triton before dm_control where it must load dm_control itself; a worker
that dies natively ends in one line and exit 5."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("dm_control")

import standins  # noqa: E402
from conftest import run  # noqa: E402

from idaudit.core.errors import EXIT_INTERNAL, IdauditError  # noqa: E402
from idaudit.worlds.reacher import render as render_mujoco  # noqa: E402

HAS_TRITON = importlib.util.find_spec("triton") is not None
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="this torch ships no triton")
SEGV = -11


def _egl_works() -> bool:
    return render_mujoco.probe_backend("egl")[0]


def _python(code: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, MUJOCO_GL="egl")
    env.pop("PYOPENGL_PLATFORM", None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout)


THEN_COMPILER = """
import torch
m = torch.nn.Linear(2, 2)
opt = torch.optim.AdamW(m.parameters(), fused=True)  # reaches torch._dynamo
m(torch.ones(1, 2)).sum().backward()
opt.step()
import triton
print("IDAUDIT_OK")
"""


@needs_triton
def test_the_hazard_is_real_here() -> None:
    """The issue's reproduction, without idaudit: dm_control (EGL) first, then triton. If this
    stopped crashing, the tests below would prove nothing on this machine."""
    if not _egl_works():
        pytest.skip("no EGL here")
    proc = _python("""
        from dm_control import suite
        env = suite.load("reacher", "hard"); env.physics.render(32, 32, camera_id=0)
        import triton
        print("IDAUDIT_OK")
    """)
    assert proc.returncode == SEGV and "IDAUDIT_OK" not in proc.stdout, proc.stderr[-500:]


@needs_triton
@pytest.mark.parametrize("first", [
    # a one-worker pool (today's main rendered these in this process)
    "from idaudit.worlds.reacher.render import RenderPool\n"
    "with RenderPool(1) as pool: assert pool.render([[0.3, -0.5]]).mean() > 0\n",
    # the evaluation set audit/embed/plan render for another project's encoder
    "from idaudit.worlds.reacher.eval_pairs import ReacherEvalSpec, eval_pairs\n"
    "d = eval_pairs(ReacherEvalSpec(n=20, rho=0.95, image_size=64), cache=False)\n"
    "assert d.x.shape == (20, 64, 64, 3)\n",
    # the renderer and the physics in this very process (tests, scripts)
    "from idaudit.worlds.reacher.render import ReacherRenderer\n"
    "assert ReacherRenderer(32).render([[0.3, -0.5]]).mean() > 0\n",
    "from idaudit.worlds.reacher.render import load_physics\nload_physics()\n",
], ids=["pool-of-one", "evaluation-set", "renderer", "physics"])
def test_rendering_then_the_compiler_stack_does_not_crash(first: str) -> None:
    if not _egl_works():
        pytest.skip("no EGL here")
    proc = _python(first + THEN_COMPILER)
    assert proc.returncode == 0 and "IDAUDIT_OK" in proc.stdout, \
        f"exit {proc.returncode}: {proc.stderr[-800:]}"


def test_the_main_process_never_loads_dm_control_to_render(tmp_path) -> None:
    """Rendering a dataset (and its controller trajectories) leaves dm_control unimported
    here: whatever this process imports later, it holds no GL display."""
    proc = _python(f"""
        import sys
        from idaudit.worlds.reacher import data as rd
        rd.build_dataset({str(tmp_path / 'd')!r},
                         rd.ReacherSpec(mode="trajectory", stride=4, pairs=20, n_eval=10, seed=0),
                         workers=1)
        assert rd.load_dataset({str(tmp_path / 'd')!r}).x.shape == (20, 64, 64, 3)
        loaded = sorted(m for m in sys.modules if m.startswith(("dm_control", "OpenGL")))
        print("IDAUDIT_LOADED", loaded)
    """)
    assert proc.returncode == 0, proc.stderr[-800:]
    assert "IDAUDIT_LOADED []" in proc.stdout, proc.stdout[-500:]


def test_a_worker_that_dies_natively_is_one_line_and_exit_5(monkeypatch) -> None:
    monkeypatch.setattr(render_mujoco, "_worker_render", standins.segfault)
    with pytest.raises(IdauditError) as info:
        with render_mujoco.RenderPool(1) as pool:
            pool.render(np.zeros((3, 2)))
    assert info.value.exit_code == EXIT_INTERNAL
    message = str(info.value)
    assert "\n" not in message and "render worker crashed (signal 11)" in message, message


def test_a_worker_that_cannot_enter_its_directory_gives_its_python_error(tmp_path,
                                                                          monkeypatch) -> None:
    """A spawned worker first enters the parent's working directory; one removed by then is
    the worker's own FileNotFoundError in the pool's one line (it used to read as a native
    crash inside MuJoCo or GL, the cause only on the worker's stderr: a Ray node's log)."""
    import multiprocessing
    import threading
    import time

    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    pool = render_mujoco.RenderPool(1)  # the GL backend chosen here, before the removal

    def remove_once_spawned() -> None:
        deadline = time.monotonic() + 60
        while not multiprocessing.active_children() and time.monotonic() < deadline:
            time.sleep(0.0005)
        gone.rmdir()

    remover = threading.Thread(target=remove_once_spawned, daemon=True)
    remover.start()
    with pytest.raises(IdauditError) as info:
        with pool:
            pass
    remover.join()
    assert info.value.exit_code == EXIT_INTERNAL
    assert str(info.value) == ("a Reacher render worker failed (exit code 1): FileNotFoundError: "
                               f"[Errno 2] No such file or directory: '{gone}'")


def test_the_cli_says_so_too(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(render_mujoco, "_worker_render", standins.segfault)
    res = run("world", "reacher", "--pairs", "20", "--n-eval", "10", "--out",
              str(tmp_path / "d"))
    assert res.exit_code == EXIT_INTERNAL, res.output
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "render worker crashed (signal 11)" in lines[0], res.output
    assert "Traceback" not in res.output


def test_a_worker_that_cannot_start_says_why(monkeypatch) -> None:
    """A GL that fails inside the worker gives the worker's own one-line reason, exit 2 (the
    pool used to respawn such a worker for ever)."""
    monkeypatch.setattr(render_mujoco, "_worker_init", standins.failing_render_init)
    with pytest.raises(IdauditError) as info:
        with render_mujoco.RenderPool(2):
            pass
    assert info.value.exit_code == 2 and str(info.value) == standins.RENDER_INIT_ERROR
