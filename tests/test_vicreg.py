"""``--objective vicreg``: VICReg as Bardes, Ponce & LeCun (2022) define it — its value against
an independent numpy formula and lightly's ``VICRegLoss``, its gradient, a short training run,
and the options it refuses."""

import math

import numpy as np
import pytest
import torch
from conftest import one_line, run

from idaudit.core.defaults import VICREG
from idaudit.core.errors import IdauditError
from idaudit.maths.losses import (
    OBJECTIVES,
    vicreg,
    vicreg_covariance,
    vicreg_invariance,
    vicreg_variance,
)
from idaudit.training import TrainConfig
from idaudit.training.runs import resolve


def numpy_vicreg(z: np.ndarray, zp: np.ndarray) -> float:
    """The paper's formula written again in numpy, the two variance terms averaged (the
    authors' code): 25·MSE + 25·(v + v′)/2 + (c + c′), γ = 1, ε = 1e-4."""
    def v(a):
        return np.mean(np.maximum(0.0, 1.0 - np.sqrt(np.var(a, axis=0, ddof=1) + 1e-4)))

    def c(a):
        cov = np.cov(a, rowvar=False)
        return (np.sum(cov**2) - np.sum(np.diag(cov) ** 2)) / a.shape[1]

    return 25.0 * np.mean((z - zp) ** 2) + 25.0 * 0.5 * (v(z) + v(zp)) + c(z) + c(zp)


def batch(seed: int, n: int = 64, d: int = 6) -> torch.Tensor:
    """Two correlated views in float64 whose dimensions have standard deviations on both sides
    of γ = 1, so the hinge is active on some and not on others."""
    rng = np.random.default_rng(seed)
    scale = np.linspace(0.3, 1.8, d)
    mix = np.eye(d) + 0.4 * rng.standard_normal((d, d))
    z = rng.standard_normal((n, d)) @ mix * scale
    zp = 0.8 * z + 0.3 * rng.standard_normal((n, d))
    return torch.from_numpy(np.stack([z, zp]))


def test_the_defaults_are_the_authors():
    assert VICREG == {"invariance": 25.0, "variance": 25.0, "covariance": 1.0, "gamma": 1.0,
                      "eps": 1e-4}


def test_a_hand_computed_value():
    # Z: two orthogonal ±1 columns (Var 4/3, std > 1: no hinge; Cov = 0); Z′ = Z/2 (Var 1/3)
    z = torch.tensor([[1.0, 1.0], [-1.0, 1.0], [1.0, -1.0], [-1.0, -1.0]], dtype=torch.float64)
    h = torch.stack([z, z / 2])
    loss, parts = vicreg(h)
    assert parts["invariance"].item() == pytest.approx(0.25, abs=1e-15)
    assert parts["variance"].item() == pytest.approx(0.5 * (1 - math.sqrt(1 / 3 + 1e-4)),
                                                     abs=1e-15)
    assert parts["covariance"].item() == pytest.approx(0.0, abs=1e-15)
    assert loss.item() == pytest.approx(25 * 0.25 + 12.5 * (1 - math.sqrt(1 / 3 + 1e-4)),
                                        abs=1e-13)
    # c(Z) = (1/d) Σ_{i≠j} C_ij²: columns (1, 2, 3, 4) and (1, 2, 3, 5) deviate from their
    # means by (−1.5, −0.5, 0.5, 1.5) and (−1.75, −0.75, 0.25, 2.25), so C_01 = 6.5/3 = 13/6
    # and c = 2·(13/6)²/2
    w = torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 5.0]], dtype=torch.float64)
    assert vicreg_covariance(w).item() == pytest.approx((13 / 6) ** 2, abs=1e-14)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_an_independent_numpy_formula(seed):
    h = batch(seed)
    z, zp = h[0].numpy(), h[1].numpy()
    loss, parts = vicreg(h)
    assert loss.item() == pytest.approx(numpy_vicreg(z, zp), abs=1e-10)
    assert parts["invariance"].item() == pytest.approx(np.mean((z - zp) ** 2), abs=1e-12)
    assert vicreg_invariance(h[0], h[1]).item() == parts["invariance"].item()
    # the hinge is active on some dimensions and not on others
    std = np.std(z, axis=0, ddof=1)
    assert (std < 1).any() and (std > 1).any()
    assert 0 < vicreg_variance(h[0]).item() < 1
    # the registered objective is the same function, λ and σ ignored
    reg, _ = OBJECTIVES.get("vicreg")(h, None, 1.0, None)
    assert reg.item() == loss.item()


def test_gradient_matches_finite_differences():
    h = batch(5, n=12, d=3).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: vicreg(x)[0], (h,), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_lightly(seed):
    lightly_loss = pytest.importorskip(
        "lightly.loss", reason="lightly (the users venv of .ci/run) holds the reference "
                               "VICRegLoss")
    h = batch(seed)
    ref = lightly_loss.VICRegLoss()  # λ = μ = 25, ν = 1, ε = 1e-4: the authors' values
    ours, _ = vicreg(h)
    theirs = ref(h[0], h[1])
    assert abs(ours.item() - theirs.item()) < 1e-12  # float64: measured 3.6e-15 at most
    # and the same gradient
    a, b = h.clone().requires_grad_(True), h.clone().requires_grad_(True)
    vicreg(a)[0].backward()
    ref(b[0], b[1]).backward()
    assert torch.allclose(a.grad, b.grad, atol=1e-12, rtol=0)


def test_needs_two_views_of_two_rows():
    with pytest.raises(IdauditError, match="two views"):
        vicreg(torch.zeros(3, 8, 2))
    with pytest.raises(IdauditError, match="at least 2 rows"):
        vicreg(torch.zeros(2, 1, 2))


def test_a_short_run_beats_the_raw_mixing(tmp_path):
    """On the banana world 400 steps take R²(h → z) well above the raw mixing's. (On the spiral
    VICReg stays at R² ≈ 0 at this budget and at 4 000 steps; docs/objective-forms.md.)"""
    from idaudit.models.checkpoint import load_checkpoint

    out = tmp_path / "v.safetensors"
    res = run("train", "--world", "banana", "--objective", "vicreg", "--steps", "400",
              "--seed", "0", "--eval-every", "400", "--n-eval", "2000", "--quiet",
              "--out", str(out))
    assert res.exit_code == 0, res.output
    ck = load_checkpoint(out)
    assert ck.train["objective"] == "vicreg" and ck.train["lamb"] is None
    m = ck.metrics
    assert m["mixing_r2_x_to_z"] < 0.9
    assert m["r2_h_to_z"] > 0.95
    assert m["r2_h_to_z"] > m["mixing_r2_x_to_z"] + 0.08


@pytest.mark.parametrize("args,fragment", [
    (["--lamb", "0.5"], "--lamb does not apply to --objective vicreg"),
    (["--lamb", "0"], "--lamb does not apply to --objective vicreg"),
    (["--n-views", "3"], "--n-views does not apply to --objective vicreg"),
    (["--form", "official"], "--form does not apply to --objective vicreg"),
    (["--sigma", "2"], "--sigma only applies to --objective infonce"),
])
def test_options_that_do_not_apply_exit_2(args, fragment):
    one_line(run("train", "--world", "spiral", "--objective", "vicreg", "--steps", "1", *args),
             2, fragment)


def test_a_worlds_own_lambda_is_not_a_given_one():
    # Reacher's kind has λ = 5e-3 of its own: no refusal, and λ resolves to none
    r = resolve({"world": "reacher", "objective": "vicreg"})
    assert r.train.lamb is None
    assert r.sources["lamb"] == (None, "objective vicreg")
    # a resolved config resolves again to itself (idaudit.train with a resolved config)
    again = TrainConfig.from_dict(r.train.to_dict()).resolved()
    assert again.lamb is None and again.objective == "vicreg"
    with pytest.raises(IdauditError, match="lamb does not apply"):
        resolve({"world": "reacher", "objective": "vicreg", "lamb": 5e-3})


def test_the_objective_help_names_every_objective():
    res = run("train", "--help")
    text = " ".join(res.output.replace("│", " ").split())
    for name in OBJECTIVES.names():
        assert name in text, name
