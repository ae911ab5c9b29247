"""The straightforward Reacher renderer the render benchmarks compare against."""

from __future__ import annotations

import numpy as np

from idaudit.worlds.reacher.render import IMAGE_SIZE, TARGET_POS, TARGET_SIZE, _ensure_gl


def naive_physics():
    """dm_control's Reacher with the world's target, loaded the straightforward way."""
    _ensure_gl()
    from dm_control import suite

    physics = suite.load("reacher", "hard", task_kwargs={"random": 0}).physics
    physics.named.model.geom_size["target", 0] = TARGET_SIZE
    physics.named.model.geom_pos["target", "x"] = TARGET_POS[0]
    physics.named.model.geom_pos["target", "y"] = TARGET_POS[1]
    return physics


def naive_render(angles: np.ndarray, size: int = IMAGE_SIZE, physics=None) -> np.ndarray:
    """The straightforward loop: ``physics.render`` per frame at the default settings (the
    physics loaded here unless given)."""
    physics = naive_physics() if physics is None else physics
    out = []
    for a, b in np.asarray(angles).reshape(-1, 2):
        with physics.reset_context():
            physics.data.qpos[:] = (a, b)
            physics.data.qvel[:] = 0.0
        out.append(physics.render(size, size, camera_id=0))
    return np.stack(out)
