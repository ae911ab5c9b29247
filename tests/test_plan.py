"""Planning: known answers for the cost, identity encoders, and LQR value equivalence."""

import numpy as np
import pytest
import torch
from scipy.stats import ortho_group

from idaudit.plan import control_cost, lqr_value_equivalence, straight_line_plans


def test_control_cost_known_answer():
    path = np.array([[[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]]])
    # tracking: 4 + 1 + 0, effort: 1 + 1
    assert control_cost(path)[0] == pytest.approx(7.0)


def test_orthogonal_encoder_plans_like_the_oracle():
    g = torch.Generator().manual_seed(0)
    q = torch.tensor(ortho_group.rvs(2, random_state=0), dtype=torch.float32)
    gallery = torch.randn(20_000, 2, generator=g)
    starts, goals = torch.randn(30, 2, generator=g), torch.randn(30, 2, generator=g)
    res = straight_line_plans(lambda z: z @ q.T, gallery, starts, goals, waypoints=10)
    assert res["cost_ratio_median"] == pytest.approx(1.0, abs=0.02)
    warped = straight_line_plans(lambda z: torch.stack([z[:, 0], z[:, 1] + z[:, 0] ** 2], 1),
                                 gallery, starts, goals, waypoints=10)
    assert warped["cost_ratio_mean"] > res["cost_ratio_mean"] + 0.02


def test_lqr_values_agree_exactly_for_orthogonal_maps():
    q = ortho_group.rvs(4, random_state=3)
    res = lqr_value_equivalence(q, seed=1)
    assert res["lqr_value_rel_error_max"] < 1e-8
    assert res["lqr_action_rel_error"] < 1e-8
    skew = q @ np.diag([1.0, 1.5, 0.7, 1.0])
    bad = lqr_value_equivalence(skew, seed=1)
    assert bad["lqr_value_rel_error_median"] > 1e-2
    assert lqr_value_equivalence(np.ones((3, 2)))["lqr_applicable"] is False
