"""The DeepMind Control Suite Reacher, rendered headless: joint angles → RGB images (64×64 as
in the paper, or another size rendered natively).

One renderer per process: the physics is loaded once, the target is fixed at (0.1, 0.1) with the
hard task's size 0.015, the offscreen buffer is the image size with a 256 shadow map and no
multisampling, and one ``Camera`` is reused (``physics.render`` builds a new one per call).
Angles are set directly (shoulder, wrist) with zero velocities; the wrist limit (±2.79 rad) is
only enforced when the simulation steps. Rendering in several processes uses ``spawn`` (forking
after a GL context exists deadlocks). This module imports neither torch nor the rest of
idaudit, so spawned render workers and the GL probe start quickly.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import cache
from multiprocessing.context import SpawnContext, SpawnProcess
from pathlib import Path

import numpy as np

from idaudit.core.errors import EXIT_INTERNAL, IdauditError, one_line
from idaudit.core.workers import exit_with_parent

__all__ = ["DM_CONTROL_VERSION", "GL_BACKENDS", "GL_TIMEOUT_S", "IMAGE_SIZE", "INSTALL_HINT",
           "MUJOCO_VERSION", "REACHER_EXTRA", "REACHER_PACKAGES", "RENDER_WORKER_LP_THREADS",
           "ReacherRenderer", "RenderPool",
           "TARGET_POS", "TARGET_SIZE", "WRIST_LIMIT", "fingertip", "last_line", "load_physics",
           "missing_packages", "probe_backend", "render_settings", "require_packages",
           "require_renderer", "simulate_controller"]

IMAGE_SIZE = 64
TARGET_POS = (0.1, 0.1)
TARGET_SIZE = 0.015
WRIST_LIMIT = 2.7925268
ARM_LENGTH = 0.12
SHADOW_SIZE = 256  # shadow map texels (the offscreen buffer is the image size)
OFF_SAMPLES = 0  # no multisampling
GL_BACKENDS = ("egl", "osmesa")
#: the versions of the ``reacher`` extra's packages (pyproject.toml pins the same)
MUJOCO_VERSION = "3.17.0"
DM_CONTROL_VERSION = "1.0.50"
REACHER_EXTRA = (f'pip install "idaudit[reacher]" (mujoco=={MUJOCO_VERSION}, '
                 f"dm_control=={DM_CONTROL_VERSION})")
INSTALL_HINT = (f"{REACHER_EXTRA}; headless rendering needs EGL (apt-get install libegl1 "
                "libopengl0 libgl1-mesa-dri) or OSMesa (apt-get install libosmesa6)")


def fingertip(angles: np.ndarray) -> np.ndarray:
    """Fingertip position 0.12·(cos a + cos(a+b), sin a + sin(a+b)) for angles (…, 2)."""
    a, b = angles[..., 0], angles[..., 1]
    return ARM_LENGTH * np.stack([np.cos(a) + np.cos(a + b), np.sin(a) + np.sin(a + b)], -1)


GL_TIMEOUT_S = 60.0
IN_RENDER_WORKER = False  # True in the spawned processes of a RenderPool

_PROBE = """\
import numpy as np
from idaudit.worlds.reacher.render import ReacherRenderer
img = ReacherRenderer().render([[0.3, -0.5]])
assert img.shape == (1, 64, 64, 3) and img.dtype == np.uint8, (img.shape, img.dtype)
print(f"IDAUDIT_MEAN {float(img.mean()):.4f}")
"""

def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "no output"


@cache
def probe_backend(backend: str, timeout: float = GL_TIMEOUT_S) -> tuple[bool, str]:
    """Render one Reacher frame in a subprocess with ``MUJOCO_GL=backend``: (works, detail).

    The result is cached per process. ``PYOPENGL_PLATFORM`` is removed from the child's
    environment so that the backend itself is tested (dm_control sets it to match).
    """
    env = dict(os.environ)
    env["MUJOCO_GL"] = backend
    env.pop("PYOPENGL_PLATFORM", None)
    src = str(Path(__file__).resolve().parents[1])  # make the child import this very idaudit
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout:.0f} s"
    except OSError as exc:
        return False, f"could not start {sys.executable}: {exc}"
    for line in proc.stdout.splitlines():
        if line.startswith("IDAUDIT_MEAN "):
            mean = float(line.split()[1])
            if mean <= 0.0:
                return False, "rendered an all-black image"
            return True, f"image mean {mean:.1f}"
    return False, f"exit code {proc.returncode}: {last_line(proc.stderr or proc.stdout)}"


#: the packages the Reacher world renders with, all of the ``reacher`` extra
REACHER_PACKAGES = ("mujoco", "dm_control")


def missing_packages(names: tuple[str, ...] = REACHER_PACKAGES) -> list[str]:
    """Those of ``names`` that are not installed here (nothing is imported: ``import
    mujoco`` would load the GL library ``MUJOCO_GL`` names)."""
    import importlib.util

    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # an import hook that refuses it, a broken entry
            found = False
        if not found:
            missing.append(name)
    return missing


def require_packages() -> None:
    """A one-line error naming the Reacher's packages that are not installed, and the extra
    that installs them; nothing when both are."""
    missing = missing_packages()
    if missing:
        raise IdauditError(f"the Reacher world needs {' and '.join(missing)}, not installed "
                           f"here: {REACHER_EXTRA}")


def _ensure_gl() -> str:
    """Pick a headless GL backend unless MUJOCO_GL is set: the first of EGL, OSMesa that
    renders a frame in a probe subprocess (dm_control fixes the backend at import time). The
    packages are checked first; where no backend works, each probe's reason is said."""
    require_packages()
    chosen = os.environ.get("MUJOCO_GL")
    if chosen:
        return chosen
    reasons = []
    for backend in GL_BACKENDS:
        ok, info = probe_backend(backend)
        if ok:
            os.environ["MUJOCO_GL"] = backend
            return backend
        reasons.append(f"{backend}: {info}")
    raise IdauditError(f"no headless GL backend works here ({'; '.join(reasons)}); "
                       f"{INSTALL_HINT}")


def require_renderer() -> str:
    """The GL backend the Reacher renders with, or the one-line error saying what to install:
    checked before anything is written."""
    return _ensure_gl()


def import_triton_first() -> None:
    """Import triton (torch's compiler back end), where it is installed, before dm_control.

    dm_control opens its GL display when it is imported (EGL: Mesa and its LLVM), and a later
    ``import triton`` — which ``torch.optim`` and ``torch.compile`` reach through
    ``torch._dynamo`` — then segfaults; the other order works. idaudit renders only in spawned
    workers (:class:`RenderPool`), which never import torch; this guard is for a process that
    uses :func:`load_physics` or :class:`ReacherRenderer` itself (a test, a user's script).
    """
    if IN_RENDER_WORKER or "triton" in sys.modules:
        return
    import importlib.util

    try:
        if importlib.util.find_spec("triton") is None:
            return
        import triton  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken triton is torch's problem, not the renderer's
        pass


def load_physics(size: int = IMAGE_SIZE):
    """The Reacher physics with the fixed target and a ``size`` × ``size`` offscreen buffer, or
    a one-line error saying what to install."""
    import_triton_first()
    try:
        import dm_control  # noqa: F401  (is it installed at all?)
    except ImportError as exc:
        raise IdauditError(f"the Reacher world needs MuJoCo and dm_control ({exc}); "
                           f"{INSTALL_HINT}") from None
    gl = _ensure_gl()
    try:
        from dm_control import suite

        env = suite.load("reacher", "hard", task_kwargs={"random": 0})
    except ImportError as exc:
        raise IdauditError(f"the Reacher world needs MuJoCo and dm_control ({exc}); "
                           f"{INSTALL_HINT}") from None
    except (AttributeError, RuntimeError, OSError) as exc:  # a GL library that will not load
        raise IdauditError(f"MuJoCo rendering with MUJOCO_GL={gl} failed "
                           f"({str(exc).strip()[:120]}); {INSTALL_HINT}") from None
    physics = env.physics
    physics.named.model.geom_size["target", 0] = TARGET_SIZE
    physics.named.model.geom_pos["target", "x"] = TARGET_POS[0]
    physics.named.model.geom_pos["target", "y"] = TARGET_POS[1]
    vis = physics.model.vis
    vis.global_.offwidth = size
    vis.global_.offheight = size
    vis.quality.shadowsize = SHADOW_SIZE
    vis.quality.offsamples = OFF_SAMPLES
    return physics


def simulate_controller(n_episodes: int, steps: int, seed: int) -> np.ndarray:
    """Joint angles (episodes, steps, 2) of a goal-reaching PD controller driven by the physics.

    Each episode starts at random angles and chases a new random joint-space goal every 50
    control steps (torques clipped to the actuator range); the simulation enforces the wrist
    limit. This stands in for the paper's SAC trajectories, which are not available offline.
    """
    physics = load_physics()
    rng = np.random.default_rng(seed)
    n_sub = 2  # the suite's control step is 0.02 s with a 0.01 s simulation step
    out = np.empty((n_episodes, steps, 2))
    lo, hi = physics.model.actuator_ctrlrange[:, 0], physics.model.actuator_ctrlrange[:, 1]
    for e in range(n_episodes):
        with physics.reset_context():
            physics.data.qpos[:] = (rng.uniform(-math.pi, math.pi),
                                    rng.uniform(-WRIST_LIMIT, WRIST_LIMIT))
            physics.data.qvel[:] = 0.0
        goal = np.zeros(2)
        for t in range(steps):
            if t % 50 == 0:
                goal = np.array([rng.uniform(-math.pi, math.pi),
                                 rng.uniform(-0.9 * WRIST_LIMIT, 0.9 * WRIST_LIMIT)])
            q, dq = physics.data.qpos[:2].copy(), physics.data.qvel[:2].copy()
            err = np.arctan2(np.sin(goal - q), np.cos(goal - q))
            physics.data.ctrl[:] = np.clip(2.0 * err - 0.3 * dq, lo, hi)
            for _ in range(n_sub):
                physics.step()
            out[e, t] = physics.data.qpos[:2]
    return out


def render_settings() -> dict[str, object]:
    """Everything besides the angles and the image size that fixes the rendered pixels: the
    MuJoCo and dm_control versions, the GL backend (chosen as the renderer would), the target
    and the quality settings. A cache of rendered images is keyed by it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        versions = {"mujoco": version("mujoco"), "dm_control": version("dm_control")}
    except PackageNotFoundError as exc:
        raise IdauditError(f"the Reacher world needs MuJoCo and dm_control ({exc.name} is not "
                           f"installed); {INSTALL_HINT}") from None
    return {**versions, "gl": _ensure_gl(), "target_pos": list(TARGET_POS),
            "target_size": TARGET_SIZE, "shadow_size": SHADOW_SIZE, "off_samples": OFF_SAMPLES}


class ReacherRenderer:
    """Render joint angles to uint8 ``size`` × ``size`` images (rendered at that size, not
    downsampled) with one reused camera."""

    def __init__(self, size: int = IMAGE_SIZE) -> None:
        self.size = size
        self.physics = load_physics(size)  # chooses the GL backend before dm_control's engine
        try:
            from dm_control.mujoco.engine import Camera

            self.camera = Camera(self.physics, height=size, width=size, camera_id=0)
        except Exception as exc:  # GL context creation failures come in many types
            raise IdauditError(f"cannot create a headless GL context with MUJOCO_GL="
                               f"{os.environ.get('MUJOCO_GL')} ({str(exc).strip()[:120]}); "
                               f"{INSTALL_HINT}") from None

    def render(self, angles: np.ndarray) -> np.ndarray:
        angles = np.asarray(angles, dtype=np.float64).reshape(-1, 2)
        out = np.empty((len(angles), self.size, self.size, 3), dtype=np.uint8)
        data = self.physics.data
        for i, (a, b) in enumerate(angles):
            data.qpos[0] = a
            data.qpos[1] = b
            data.qvel[:] = 0.0
            self.physics.forward()
            out[i] = self.camera.render()
        return out


#: llvmpipe's rasteriser threads in a render worker (``LP_NUM_THREADS``; 0: none besides the
#: worker's own), unless the environment sets it
RENDER_WORKER_LP_THREADS = "0"
_WORKER: ReacherRenderer | None = None
_WORKER_ERROR = ""  # why this render worker has no renderer ("" in a working worker)


def _worker_init(gl: str, size: int = IMAGE_SIZE) -> None:
    """Start a render worker: its renderer, or the one-line reason there is none (a failing
    initializer would only show as a broken pool, without the reason)."""
    global _WORKER, _WORKER_ERROR, IN_RENDER_WORKER
    exit_with_parent()
    IN_RENDER_WORKER = True
    os.environ["MUJOCO_GL"] = gl
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # llvmpipe (Mesa's CPU rasteriser) rasterises in this process's own thread, not in a
    # thread per core: the pool already has a process per core, and the handing over costs
    # 4-14 % of the CPU per frame; the pixels are the same (tests/test_reacher_render.py).
    # Read when the GL context is made; a value the user set is kept.
    os.environ.setdefault("LP_NUM_THREADS", RENDER_WORKER_LP_THREADS)
    try:
        _WORKER = ReacherRenderer(size)
    except Exception as exc:  # any: the parent shows it in one line (a crash shows nothing)
        _WORKER_ERROR = str(exc) if isinstance(exc, IdauditError) else one_line(
            f"a Reacher render worker could not start: {type(exc).__name__}: {exc}", 500)


def _worker_render(angles: np.ndarray) -> np.ndarray | str:
    """Images of ``angles``, or the worker's one-line start-up error."""
    if _WORKER is None:
        return _WORKER_ERROR or "the render worker has no renderer"
    return _WORKER.render(angles)


def _worker_call(fn, args: tuple):
    """Run ``fn(*args)`` in a worker (simulation without rendering, e.g. controller episodes)."""
    try:
        return fn(*args)
    except IdauditError as exc:
        return str(exc)


def _worker_crash_line(processes: list, stderr: bytes = b"") -> str:
    """Why the pool broke, in one line: a worker killed by a signal crashed natively (inside
    MuJoCo or the GL library); one that exited is a Python error, its last line on the
    workers' standard error (``stderr``: before any idaudit code runs, e.g. a directory it
    could not enter)."""
    import re
    import time

    deadline = time.monotonic() + 2.0  # a dead worker's exit code is known once it is reaped,
    while (time.monotonic() < deadline  # here or by the executor's thread (a race of waitpid)
           and not any(p.exitcode not in (None, 0) for p in processes)):
        time.sleep(0.02)
    codes = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
    how = ", ".join(f"signal {-c}" if c < 0 else f"exit code {c}" for c in codes) or "it died"
    errors = re.findall(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b.*$",
                        stderr.decode("utf-8", "replace"), re.MULTILINE)
    if errors and not any(c < 0 for c in codes):
        return one_line(f"a Reacher render worker failed ({how}): {errors[-1]}", 500)
    return (f"a Reacher render worker crashed ({how}) inside MuJoCo or the GL library "
            f"MUJOCO_GL={os.environ.get('MUJOCO_GL')} loads; idaudit doctor checks the GL "
            "install (rerun with IDAUDIT_TRACEBACK=1 and please report it)")


_STDERR_SWAP = threading.Lock()  # one pool at a time lends this process's stderr to a worker


class _WorkerProcess(SpawnProcess):
    """A render worker whose standard error is its pool's ``stderr_fd`` from its first
    instruction on, so that a Python error raised before any idaudit code runs in it reaches
    the parent (:func:`_worker_crash_line`)."""

    stderr_fd = -1

    def start(self) -> None:
        with _STDERR_SWAP:
            sys.stderr.flush()
            saved = os.dup(2)
            try:
                os.dup2(self.stderr_fd, 2)
                super().start()
            finally:
                os.dup2(saved, 2)
                os.close(saved)


class _WorkerContext(SpawnContext):
    """The spawn context of one pool: its processes are :class:`_WorkerProcess` writing to
    ``stderr_fd``."""

    def __init__(self, stderr_fd: int) -> None:
        super().__init__()
        self.stderr_fd = stderr_fd

    def Process(self, *args, **kwargs) -> _WorkerProcess:  # noqa: N802 (multiprocessing's name)
        process = _WorkerProcess(*args, **kwargs)
        process.stderr_fd = self.stderr_fd
        return process


class RenderPool:
    """Render in ``workers`` spawned processes, chunk by chunk, in order.

    Never in this process: a GL context made here would outlive the rendering, and torch's
    compiler stack (``import triton``, which ``torch.optim`` and ``torch.compile`` reach)
    segfaults in a process that holds one. A worker that fails to start gives its one-line
    reason (exit 2); a worker that dies natively (a segfault in MuJoCo or the GL driver) ends
    the pool with one line and exit 5, never a silent signal, and so does one that exits on a
    Python error before any idaudit code runs in it (a directory it cannot enter), the line
    then giving that error. The workers' standard error is shown when the pool closes.
    """

    def __init__(self, workers: int | None = None, chunk: int = 256,
                 size: int = IMAGE_SIZE) -> None:
        self.workers = max(1, workers or (os.cpu_count() or 1))
        self.chunk = chunk
        self.size = size
        self.gl = _ensure_gl()
        self._pool = None
        self._processes: list = []
        self._stderr = None
        self._broken = False

    def __enter__(self) -> RenderPool:
        import tempfile
        from concurrent.futures import ProcessPoolExecutor

        self._stderr = tempfile.TemporaryFile()  # the workers' stderr, shown when they end
        self._pool = ProcessPoolExecutor(self.workers,
                                         mp_context=_WorkerContext(self._stderr.fileno()),
                                         initializer=_worker_init, initargs=(self.gl, self.size))
        # fail fast, with the worker's one-line message, before any output is written
        self._check(self._submit(_worker_render, np.zeros((0, 2))))
        return self

    def _submit(self, fn, *args):
        """Submit a task, keeping each worker process (the executor forgets a dead one, and
        its exit code says how it died)."""
        future = self._pool.submit(fn, *args)
        for p in list(getattr(self._pool, "_processes", {}).values()):
            if p not in self._processes:
                self._processes.append(p)
        return future

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            for p in self._processes:
                p.terminate()  # don't wait for chunks nobody will read
            pool.shutdown(wait=True, cancel_futures=True)
        if self._stderr is not None:
            if not self._broken:  # what the workers wrote (GL warnings), as they would have
                sys.stderr.write(self._written().decode("utf-8", "replace"))
            stderr, self._stderr = self._stderr, None
            stderr.close()

    def _written(self) -> bytes:
        """What the workers wrote to their standard error so far."""
        fd = self._stderr.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0)

    def _check(self, future):
        from concurrent.futures.process import BrokenProcessPool

        try:
            out = future.result()
        except BrokenProcessPool:
            self._broken = True
            raise IdauditError(_worker_crash_line(self._processes, self._written()),
                               EXIT_INTERNAL) from None
        if isinstance(out, str):
            raise IdauditError(out)
        return out

    def call(self, fn, *args):
        """``fn(*args)`` in a worker process: for MuJoCo work without rendering, which also
        keeps dm_control (and its GL display) out of this process."""
        assert self._pool is not None
        return self._check(self._submit(_worker_call, fn, args))

    def _ordered(self, parts: list[np.ndarray]) -> Iterator[np.ndarray]:
        """Images of each part in order, with at most a few parts per worker in flight (the
        rest wait, so memory stays bounded when the consumer is slower than the workers)."""
        from collections import deque
        from itertools import islice

        assert self._pool is not None
        todo = iter(parts)
        queue = deque(self._submit(_worker_render, p) for p in islice(todo, 2 * self.workers + 1))
        while queue:
            images = self._check(queue.popleft())
            queue.extend(self._submit(_worker_render, p) for p in islice(todo, 1))
            yield images

    def imap(self, angles: np.ndarray) -> Iterator[np.ndarray]:
        yield from self._ordered([angles[i:i + self.chunk]
                                  for i in range(0, len(angles), self.chunk)])

    def imap_batches(self, batches: list[np.ndarray]) -> Iterator[np.ndarray]:
        """Render each array of angles, yielding in order; workers run ahead of the consumer
        (so writing one batch overlaps with rendering the next)."""
        parts: list[tuple[int, np.ndarray]] = []
        for b, angles in enumerate(batches):
            parts += [(b, angles[i:i + self.chunk]) for i in range(0, len(angles), self.chunk)]
        counts = [sum(1 for p in parts if p[0] == b) for b in range(len(batches))]
        done: list[np.ndarray] = []
        current = 0
        for img in self._ordered([p for _, p in parts]):
            done.append(img)
            while current < len(batches) and len(done) == counts[current]:
                yield np.concatenate(done) if done else np.empty((0, self.size, self.size, 3),
                                                                  dtype=np.uint8)
                done = []
                current += 1
        while current < len(batches):  # trailing empty batches
            yield np.empty((0, self.size, self.size, 3), dtype=np.uint8)
            current += 1

    def render(self, angles: np.ndarray) -> np.ndarray:
        if len(angles) == 0:
            return np.empty((0, self.size, self.size, 3), dtype=np.uint8)
        return np.concatenate(list(self.imap(np.asarray(angles))))
