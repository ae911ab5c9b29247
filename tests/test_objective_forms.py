"""SIGReg pooled over views (the paper's code) vs per view (the lejepa library), checked in NumPy.

The reference below is written from the definitions, independently of idaudit: complex
exponentials for the empirical characteristic function φ̂(t) = mean_i exp(i t aᵀh_i), and the
integral ∫_{−T}^{T} |φ̂ − φ|² φ dt by the trapezoid rule on the full symmetric grid of 2K − 1
knots (negative t included), with φ(t) = exp(−t²/2), K = 17, T = 3.
"""

import numpy as np
import pytest
import torch

from idaudit.core.errors import IdauditError
from idaudit.maths.losses import (
    OBJECTIVES,
    alignment,
    lejepa_official,
    pooled_minus_per_view,
    random_directions,
    sigreg,
    sigreg_per_view,
    sigreg_reference,
)

KNOTS, T_MAX = 17, 3.0


def _np_t() -> np.ndarray:
    return np.linspace(-T_MAX, T_MAX, 2 * KNOTS - 1)


def _np_integral(f: np.ndarray) -> np.ndarray:
    """∫_{−T}^{T} f(t) φ(t) dt over the last axis (trapezoid on the symmetric grid)."""
    t = _np_t()
    return np.trapezoid(f * np.exp(-0.5 * t * t), t, axis=-1)


def _np_error(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    """e(t) = φ̂(t) − φ(t) of rows x (n, dim) along directions a (dim, M): shape (M, 2K − 1)."""
    t = _np_t()
    ecf = np.exp(1j * (x @ a)[:, :, None] * t).mean(0)
    return ecf - np.exp(-0.5 * t * t)


def np_pooled(h: np.ndarray, a: np.ndarray) -> float:
    """n · mean_a ∫|φ̂ − φ|² φ dt on all V·B rows."""
    flat = h.reshape(-1, h.shape[-1])
    return float(flat.shape[0] * _np_integral(np.abs(_np_error(flat, a)) ** 2).mean())


def np_per_view(h: np.ndarray, a: np.ndarray) -> float:
    """mean_v B · mean_a ∫|φ̂_v − φ|² φ dt, each view on its own B rows."""
    return float(np.mean([h.shape[1] * _np_integral(np.abs(_np_error(x, a)) ** 2).mean() for x in h]))


def np_cross(h: np.ndarray, a: np.ndarray) -> float:
    """(B/V) Σ_{u≠v} mean_a ∫ Re(e_u ē_v) φ dt."""
    views, batch = h.shape[:2]
    errors = [_np_error(x, a) for x in h]
    total = sum(_np_integral((errors[u] * errors[v].conj()).real).mean()
                for u in range(views) for v in range(views) if u != v)
    return float(batch / views * total)


def _random_views(views: int, batch: int, dim: int, slices: int, seed: int, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    h = 0.8 * torch.randn(views, batch, dim, generator=g, dtype=torch.float64) + 0.1
    h[1:] = 0.6 * h[:1] + 0.8 * h[1:]  # correlated views, so the cross term is not ≈ 0
    return h.to(dtype), random_directions(dim, slices, g, dtype=dtype)


CASES = [(2, 16, 3, 5, 0), (2, 64, 8, 16, 1), (3, 32, 4, 7, 2), (4, 24, 2, 9, 3), (2, 7, 1, 1, 4)]


@pytest.mark.parametrize("views,batch,dim,slices,seed", CASES)
def test_pooled_and_per_view_sigreg_equal_the_numpy_formulas(views, batch, dim, slices, seed):
    h, a = _random_views(views, batch, dim, slices, seed)
    hn, an = h.numpy(), a.numpy()
    assert sigreg(h, a).item() == pytest.approx(np_pooled(hn, an), rel=1e-10, abs=1e-10)
    assert sigreg_per_view(h, a).item() == pytest.approx(np_per_view(hn, an), rel=1e-10, abs=1e-10)
    # per view really is each view's own statistic: not the pooled one
    assert abs(np_pooled(hn, an) - np_per_view(hn, an)) > 1e-3


@pytest.mark.parametrize("views,batch,dim,slices,seed", CASES)
def test_pooled_equals_per_view_plus_cross_term(views, batch, dim, slices, seed):
    """S_pooled = S_per-view + (B/V) Σ_{u≠v} ⟨Re(e_u ē_v)⟩ exactly (V = 2: + B⟨Re(e₁ē₂)⟩)."""
    h, a = _random_views(views, batch, dim, slices, seed)
    cross = pooled_minus_per_view(h, a).item()
    assert cross == pytest.approx(np_cross(h.numpy(), a.numpy()), rel=1e-10, abs=1e-10)
    gap = (sigreg(h, a) - sigreg_per_view(h, a)).item()
    assert gap == pytest.approx(cross, rel=1e-10, abs=1e-10)
    if views == 2:  # the form: B · ∫ Re(e₁ ē₂) w dt
        e1, e2 = (_np_error(x, a.numpy()) for x in h.numpy())
        assert cross == pytest.approx(batch * _np_integral((e1 * e2.conj()).real).mean(), rel=1e-10)


def _expected_ratio(r: float) -> float:
    """E S_pooled / E S_per-view for standard Gaussian views with correlation r (V = 2):
    E B|e_v|² = 1 − φ², E B Re(e₁ē₂) = E e^{it(x−y)} − φ² = e^{−t²(1−r)} − e^{−t²}."""
    t = _np_t()
    return 1.0 + _np_integral(np.exp(-t * t * (1 - r)) - np.exp(-t * t)) / _np_integral(1 - np.exp(-t * t))


def test_pooled_over_per_view_ratio_grows_from_one_to_two_with_view_correlation():
    dim, batch, seeds = 128, 256, 8
    eye = torch.eye(dim, dtype=torch.float64)  # orthonormal directions: independent slices
    ratios = []
    for r in (0.0, 0.5, 0.9, 1.0):
        pooled = per_view = 0.0
        for seed in range(seeds):
            g = torch.Generator().manual_seed(seed)
            x = torch.randn(batch, dim, generator=g, dtype=torch.float64)
            noise = torch.randn(batch, dim, generator=g, dtype=torch.float64)
            h = torch.stack([x, r * x + (1 - r * r) ** 0.5 * noise])
            p, v = sigreg(h, eye).item(), sigreg_per_view(h, eye).item()
            if r == 1.0:  # identical views: e₁ = e₂, so exactly twice, seed by seed
                assert p / v == pytest.approx(2.0, rel=1e-12)
            pooled, per_view = pooled + p, per_view + v
        ratios.append(pooled / per_view)
    assert ratios[0] == pytest.approx(1.0, abs=0.1)
    assert ratios[1] == pytest.approx(_expected_ratio(0.5), abs=0.1)  # 1.309
    assert ratios[2] == pytest.approx(_expected_ratio(0.9), abs=0.05)  # 1.797
    assert ratios[3] == pytest.approx(2.0, rel=1e-12)
    assert _expected_ratio(0.0) == pytest.approx(1.0, abs=1e-15)
    assert _expected_ratio(1.0) == pytest.approx(2.0, rel=1e-14)
    assert all(a < b for a, b in zip(ratios, ratios[1:], strict=False))


def test_per_view_sigreg_and_official_objective_backpropagate():
    h, a = _random_views(2, 6, 3, 4, seed=5)
    h.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: sigreg_per_view(x, a), (h,), eps=1e-6, atol=1e-7)
    assert torch.autograd.gradcheck(lambda x: lejepa_official(x, 0.02, a), (h,), eps=1e-6, atol=1e-7)
    assert torch.autograd.gradcheck(lambda x: pooled_minus_per_view(x, a), (h,), eps=1e-6, atol=1e-7)


def test_official_objective_is_alignment_plus_lambda_per_view_sigreg():
    h, a = _random_views(3, 40, 4, 6, seed=6)
    hn, an = h.numpy(), a.numpy()
    align = float(((hn - hn.mean(0, keepdims=True)) ** 2).mean())
    lamb = 0.02
    value = lejepa_official(h, lamb, a).item()
    assert value == pytest.approx(align + lamb * np_per_view(hn, an), rel=1e-10)
    # the paper's convex form with λ′ = λ/(1 + λ), scaled by (1 + λ), on the per-view S
    lp = lamb / (1 + lamb)
    assert value == pytest.approx((1 + lamb) * (lp * np_per_view(hn, an) + (1 - lp) * align), rel=1e-10)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float64, 1e-12)])
def test_existing_pooled_sigreg_and_lejepa_objective_unchanged(dtype, tol):
    h, a = _random_views(2, 128, 6, 32, seed=7, dtype=dtype)
    ref = sigreg_reference(h, a)
    assert sigreg(h, a).item() == pytest.approx(ref.item(), rel=tol, abs=tol)
    loss, parts = OBJECTIVES.get("lejepa")(h, 0.3, 1.0, a)
    assert loss.item() == pytest.approx((0.3 * ref + 0.7 * alignment(h)).item(), rel=tol, abs=tol)
    assert parts["sigreg"].item() == pytest.approx(ref.item(), rel=tol, abs=tol)


def test_wrong_shapes_are_one_line_usage_errors():
    a = random_directions(3, 4, torch.Generator().manual_seed(0))
    for bad, fn in ((torch.zeros(8, 3), sigreg_per_view), (torch.zeros(8, 3), pooled_minus_per_view),
                    (torch.zeros(1, 8, 3), lejepa_official)):
        with pytest.raises(IdauditError) as err:
            fn(bad, a) if fn is not lejepa_official else fn(bad, 0.02, a)
        assert err.value.exit_code == 2 and "\n" not in str(err.value)
