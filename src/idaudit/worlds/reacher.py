"""The Reacher renderer, as part of the worlds package (it lives in ``idaudit.render_mujoco``,
which imports no torch, so that render workers start quickly)."""

from ..render_mujoco import (  # noqa: F401
    ARM_LENGTH,
    GL_BACKENDS,
    IMAGE_SIZE,
    INSTALL_HINT,
    TARGET_POS,
    TARGET_SIZE,
    WRIST_LIMIT,
    ReacherRenderer,
    RenderPool,
    _ensure_gl,
    fingertip,
    load_physics,
    simulate_controller,
)
