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

import os
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import numpy as np

from .errors import IdauditError

IMAGE_SIZE = 64
TARGET_POS = (0.1, 0.1)
TARGET_SIZE = 0.015
WRIST_LIMIT = 2.7925268
ARM_LENGTH = 0.12
SHADOW_SIZE = 256  # shadow map texels (the offscreen buffer is the image size)
OFF_SAMPLES = 0  # no multisampling
GL_BACKENDS = ("egl", "osmesa")
INSTALL_HINT = ('pip install "idaudit[reacher]" (mujoco==3.17.0, dm_control==1.0.50); headless '
                "rendering needs EGL (apt-get install libegl1 libopengl0 libgl1-mesa-dri) or "
                "OSMesa (apt-get install libosmesa6)")


def fingertip(angles: np.ndarray) -> np.ndarray:
    """Fingertip position 0.12·(cos a + cos(a+b), sin a + sin(a+b)) for angles (…, 2)."""
    a, b = angles[..., 0], angles[..., 1]
    return ARM_LENGTH * np.stack([np.cos(a) + np.cos(a + b), np.sin(a) + np.sin(a + b)], -1)


GL_TIMEOUT_S = 60.0

_PROBE = """\
import numpy as np
from idaudit.render_mujoco import ReacherRenderer
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


def _ensure_gl() -> str:
    """Pick a headless GL backend unless MUJOCO_GL is set: the first of EGL, OSMesa that
    renders a frame in a probe subprocess (dm_control fixes the backend at import time)."""
    chosen = os.environ.get("MUJOCO_GL")
    if chosen:
        return chosen
    for backend in GL_BACKENDS:
        if probe_backend(backend)[0]:
            os.environ["MUJOCO_GL"] = backend
            return backend
    raise IdauditError(f"no headless GL backend works here (tried {', '.join(GL_BACKENDS)}); "
                       f"{INSTALL_HINT}")


def load_physics(size: int = IMAGE_SIZE):
    """The Reacher physics with the fixed target and a ``size`` × ``size`` offscreen buffer, or
    a one-line error saying what to install."""
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


_WORKER: ReacherRenderer | None = None


def _worker_init(gl: str, size: int = IMAGE_SIZE) -> None:
    global _WORKER
    os.environ["MUJOCO_GL"] = gl
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _WORKER = ReacherRenderer(size)


def _worker_render(angles: np.ndarray) -> np.ndarray:
    assert _WORKER is not None
    return _WORKER.render(angles)


class RenderPool:
    """Render in ``workers`` spawned processes (1: in this process), chunk by chunk, in order."""

    def __init__(self, workers: int | None = None, chunk: int = 256,
                 size: int = IMAGE_SIZE) -> None:
        self.workers = max(1, workers or (os.cpu_count() or 1))
        self.chunk = chunk
        self.size = size
        self.gl = _ensure_gl()
        self._pool = None
        self._local: ReacherRenderer | None = None

    def __enter__(self) -> RenderPool:
        if self.workers == 1:
            self._local = ReacherRenderer(self.size)
        else:
            import multiprocessing as mp

            load_physics()  # fail fast here, with the one-line message, not inside a worker
            ctx = mp.get_context("spawn")
            self._pool = ctx.Pool(self.workers, initializer=_worker_init,
                                  initargs=(self.gl, self.size))
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def imap(self, angles: np.ndarray) -> Iterator[np.ndarray]:
        parts = [angles[i:i + self.chunk] for i in range(0, len(angles), self.chunk)]
        if self._local is not None:
            for p in parts:
                yield self._local.render(p)
        else:
            assert self._pool is not None
            yield from self._pool.imap(_worker_render, parts)

    def imap_batches(self, batches: list[np.ndarray]) -> Iterator[np.ndarray]:
        """Render each array of angles, yielding in order; workers run ahead of the consumer
        (so writing one batch overlaps with rendering the next)."""
        parts: list[tuple[int, np.ndarray]] = []
        for b, angles in enumerate(batches):
            parts += [(b, angles[i:i + self.chunk]) for i in range(0, len(angles), self.chunk)]
        counts = [sum(1 for p in parts if p[0] == b) for b in range(len(batches))]
        done: list[np.ndarray] = []
        current = 0
        results = (self._local.render(p) for _, p in parts) if self._local is not None \
            else self._pool.imap(_worker_render, [p for _, p in parts])
        for img in results:
            done.append(img)
            while current < len(batches) and len(done) == counts[current]:
                yield np.concatenate(done) if done else np.empty((0, self.size, self.size, 3),
                                                                  dtype=np.uint8)
                done = []
                current += 1

    def render(self, angles: np.ndarray) -> np.ndarray:
        if len(angles) == 0:
            return np.empty((0, self.size, self.size, 3), dtype=np.uint8)
        return np.concatenate(list(self.imap(np.asarray(angles))))
