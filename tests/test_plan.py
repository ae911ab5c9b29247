"""Planning: known answers for the cost, identity encoders, and LQR value equivalence."""

import numpy as np
import pytest
import torch
from scipy.stats import ortho_group

from idaudit.evaluations.plan import control_cost, lqr_value_equivalence, plan_gallery


def test_control_cost_known_answer():
    path = np.array([[[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]]])
    # tracking: 4 + 1 + 0, effort: 1 + 1
    assert control_cost(path)[0] == pytest.approx(7.0)


def test_orthogonal_encoder_plans_like_the_oracle():
    rng = np.random.default_rng(0)
    q = ortho_group.rvs(2, random_state=0)
    gallery = rng.standard_normal((20_000, 2))
    res = plan_gallery(gallery, gallery @ q.T, pairs=30, waypoints=10)
    assert res.cost_ratio_median == pytest.approx(1.0, abs=0.02)
    assert res.metrics["lqr_value_rel_error_max"] < 1e-2  # the fitted map is ≈ q
    warped = plan_gallery(gallery, np.stack([gallery[:, 0], gallery[:, 1] + gallery[:, 0] ** 2], 1),
                          pairs=30, waypoints=10)
    assert warped.metrics["cost_ratio_mean"] > res.metrics["cost_ratio_mean"] + 0.02


def test_lqr_values_agree_exactly_for_orthogonal_maps():
    q = ortho_group.rvs(4, random_state=3)
    res = lqr_value_equivalence(q, seed=1)
    assert res["lqr_value_rel_error_max"] < 1e-8
    assert res["lqr_action_rel_error"] < 1e-8
    skew = q @ np.diag([1.0, 1.5, 0.7, 1.0])
    bad = lqr_value_equivalence(skew, seed=1)
    assert bad["lqr_value_rel_error_median"] > 1e-2
    assert lqr_value_equivalence(np.ones((3, 2)))["lqr_applicable"] is False


class SpiralInverse(torch.nn.Module):
    """The exact inverse of the spiral mixing: z = R(−π‖x‖) x (the radius is preserved)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        angle = -3.141592653589793 * torch.sqrt((x * x).sum(dim=-1))
        c, s = torch.cos(angle), torch.sin(angle)
        return torch.stack([c * x[:, 0] - s * x[:, 1], s * x[:, 0] + c * x[:, 1]], dim=-1)


class Identity(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def _plan_cli(*args):
    from typer.testing import CliRunner

    from idaudit.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def test_plan_torchscript_encoder_on_a_world(tmp_path):
    import json

    inverse, raw = tmp_path / "inverse.pt", tmp_path / "raw.pt"
    torch.jit.script(SpiralInverse()).save(str(inverse))
    torch.jit.script(Identity()).save(str(raw))
    ratios = {}
    for name, path in (("inverse", inverse), ("raw", raw)):
        out = tmp_path / f"{name}.json"
        res = _plan_cli("plan", path, "--world", "spiral", "--pairs", "40", "--gallery", "20000",
                        "--json", out)
        assert res.exit_code == 0, res.output
        ratios[name] = json.loads(out.read_text())["cost_ratio_median"]
    assert ratios["inverse"] == pytest.approx(1.0, abs=0.02)
    assert ratios["raw"] > 1.3  # the raw observation (spiral) plans badly


def test_plan_npz_gallery(tmp_path):
    import json

    from idaudit.worlds import build_world, make_spec

    world = build_world(make_spec("spiral"))
    z = world.sample_latents(20_000, torch.Generator().manual_seed(0))
    q = torch.tensor(ortho_group.rvs(2, random_state=1), dtype=torch.float32)
    ratios = {}
    for name, h in (("rotation", z @ q.T), ("raw", world.observe(z))):
        path = tmp_path / f"{name}.npz"
        np.savez(path, z=z.numpy(), h=h.numpy())
        out = tmp_path / f"{name}.json"
        res = _plan_cli("plan", path, "--pairs", "40", "--json", out)
        assert res.exit_code == 0, res.output
        ratios[name] = json.loads(out.read_text())
    assert ratios["rotation"]["cost_ratio_median"] == pytest.approx(1.0, abs=0.02)
    assert ratios["rotation"]["lqr_value_rel_error_max"] < 1e-2
    assert ratios["raw"]["cost_ratio_median"] > 1.3
    res = _plan_cli("plan", tmp_path / "raw.npz", "--world", "spiral")
    assert res.exit_code == 2 and "do not apply" in res.output


def test_plan_python_api_matches_the_cli_forms():
    import idaudit

    a = idaudit.plan(SpiralInverse(), world="spiral", pairs=20, gallery=5000)
    assert isinstance(a, idaudit.PlanReport)
    assert a.cost_ratio_median == pytest.approx(1.0, abs=0.03)
    assert a.labels == ("z₁", "z₂") and a.paths.shape == (20, 21, 2)
    with pytest.raises(idaudit.IdauditError, match="no world"):
        idaudit.plan(SpiralInverse())
