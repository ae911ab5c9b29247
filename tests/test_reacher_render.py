"""The headless Reacher renderer: determinism, geometry, the spawn pool, the install message."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("dm_control")

from idaudit import doctor  # noqa: E402
from idaudit.core.errors import IdauditError  # noqa: E402
from idaudit.worlds.reacher import render as reacher  # noqa: E402
from idaudit.worlds.reacher.render import (  # noqa: E402
    IMAGE_SIZE,
    TARGET_POS,
    TARGET_SIZE,
    ReacherRenderer,
    RenderPool,
    fingertip,
    load_physics,
)


@pytest.fixture(scope="module")
def renderer() -> ReacherRenderer:
    # ReacherRenderer() alone imports dm_control's GL layer before it picks a backend
    # (see test_renderer_picks_gl_itself), so pick one first, as load_physics/RenderPool do.
    reacher._ensure_gl()
    try:
        return ReacherRenderer()
    except IdauditError as exc:
        if not doctor._check_gl()["ok"]:  # dm_control is there but no headless GL works
            pytest.skip(f"no headless GL: {exc}")
        raise


@pytest.fixture(scope="module")
def angles() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((12, 2))


def _pixels_differing(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a != b).any(-1).sum(axis=(-2, -1))


def test_render_is_deterministic_uint8(renderer: ReacherRenderer, angles: np.ndarray) -> None:
    first = renderer.render(angles)
    assert first.dtype == np.uint8
    assert first.shape == (len(angles), IMAGE_SIZE, IMAGE_SIZE, 3)
    assert first.mean() > 0
    assert np.array_equal(renderer.render(angles), first)
    assert np.array_equal(ReacherRenderer().render(angles), first)
    # one frame at a time, in another order, gives the same frames: no state carries over
    one_by_one = np.concatenate([renderer.render(a) for a in angles[::-1]])[::-1]
    assert np.array_equal(one_by_one, first)


def test_arm_moves_with_the_angles(renderer: ReacherRenderer) -> None:
    base = np.array([[0.3, -0.5]])
    images = renderer.render(np.concatenate([base, base + [1.0, 0.0], base + [0.0, 1.0], base]))
    assert np.array_equal(images[0], images[3])
    assert _pixels_differing(images[0], images[1]) > 20  # shoulder moved
    assert _pixels_differing(images[0], images[2]) > 10  # wrist moved
    assert _pixels_differing(images[1], images[2]) > 10


def test_shoulder_is_periodic(renderer: ReacherRenderer, angles: np.ndarray) -> None:
    shifted = angles + [2 * np.pi, 0.0]
    assert np.array_equal(renderer.render(shifted), renderer.render(angles))


def test_fingertip_matches_the_physics(angles: np.ndarray) -> None:
    physics = load_physics()
    names = [physics.model.id2name(i, "geom") for i in range(physics.model.ngeom)]
    assert "finger" in names and "target" in names
    for a in np.concatenate([angles, [[0.0, 0.0], [np.pi / 2, 0.0], [0.0, 2.7]]]):
        physics.data.qpos[:] = a
        physics.data.qvel[:] = 0.0
        physics.forward()
        # the fingertip is the centre of the "finger" geom (= the "finger" body's origin)
        np.testing.assert_allclose(physics.named.data.geom_xpos["finger", :2], fingertip(a),
                                   atol=1e-6)
        np.testing.assert_allclose(physics.named.data.xpos["finger", :2], fingertip(a), atol=1e-6)


def test_fingertip_vectorised() -> None:
    a = np.array([[0.0, 0.0], [np.pi / 2, 0.0], [0.0, np.pi / 2]])
    np.testing.assert_allclose(fingertip(a), [[0.24, 0.0], [0.0, 0.24], [0.12, 0.12]], atol=1e-12)


def test_target_is_fixed() -> None:
    physics = load_physics()
    assert physics.named.model.geom_size["target", 0] == pytest.approx(TARGET_SIZE)
    assert TARGET_SIZE == 0.015 and TARGET_POS == (0.1, 0.1)
    np.testing.assert_allclose(physics.named.model.geom_pos["target", :2], (0.1, 0.1))
    physics.forward()
    np.testing.assert_allclose(physics.named.data.geom_xpos["target", :2], (0.1, 0.1))


def test_pool_matches_in_process_renderer(renderer: ReacherRenderer) -> None:
    angles = np.random.default_rng(1).standard_normal((20, 2))
    with RenderPool(workers=2, chunk=6) as pool:
        pooled = pool.render(angles)
        assert pool.render(angles[:0]).shape == (0, IMAGE_SIZE, IMAGE_SIZE, 3)
    assert pooled.shape == (20, IMAGE_SIZE, IMAGE_SIZE, 3)
    assert np.array_equal(pooled, renderer.render(angles))


def test_pool_workers_rasterise_in_one_thread_with_the_same_pixels(
        renderer: ReacherRenderer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A render worker runs llvmpipe without rasteriser threads (LP_NUM_THREADS=0) unless
    the environment says otherwise; the pixels are byte-identical to a renderer with
    llvmpipe's default threads (this process's) and to a worker told to use two."""
    assert "LP_NUM_THREADS" not in os.environ  # this process: llvmpipe's default, a thread per core
    angles = np.random.default_rng(2).standard_normal((16, 2))  # (a str is what an error gives:
    # the worker's environment is read as bytes)
    with RenderPool(workers=1) as pool:
        assert pool.call(os.getenvb, b"LP_NUM_THREADS") == b"0" == reacher.RENDER_WORKER_LP_THREADS.encode()
        single = pool.render(angles)
    monkeypatch.setenv("LP_NUM_THREADS", "2")
    with RenderPool(workers=1) as pool:
        assert pool.call(os.getenvb, b"LP_NUM_THREADS") == b"2"  # the user's value is kept
        threaded = pool.render(angles)
    assert single.dtype == np.uint8 and single.shape == (16, IMAGE_SIZE, IMAGE_SIZE, 3)
    assert single.tobytes() == threaded.tobytes() == renderer.render(angles).tobytes()


def test_missing_dm_control_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "dm_control", None)
    monkeypatch.setitem(sys.modules, "dm_control.suite", None)
    with pytest.raises(IdauditError, match="pip install") as info:
        load_physics()
    assert info.value.exit_code == 2
    assert "\n" not in str(info.value)


def test_renderer_picks_gl_itself() -> None:
    if not doctor._check_gl()["ok"]:
        pytest.skip("no headless GL")
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    env["DISPLAY"] = ""  # as on a headless server
    code = ("from idaudit.worlds.reacher.render import ReacherRenderer\n"
            "print(ReacherRenderer().render([[0.3, -0.5]]).shape)")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-300:]


def test_render_settings_name_what_fixes_the_pixels() -> None:
    from idaudit.worlds.reacher.render import render_settings

    settings = render_settings()
    assert settings["gl"] == os.environ["MUJOCO_GL"]  # the backend the renderer uses
    assert settings["target_size"] == TARGET_SIZE and settings["target_pos"] == list(TARGET_POS)
    assert (settings["shadow_size"], settings["off_samples"]) == (256, 0)
    from importlib.metadata import version

    assert settings["mujoco"] == version("mujoco") and settings["dm_control"] == version("dm_control")
