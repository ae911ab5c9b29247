"""Losses: fast SIGReg equals the straightforward one; known answers for the others."""

import math

import pytest
import torch

from idaudit.maths.losses import alignment, infonce, random_directions, sigreg, sigreg_reference, whitening


@pytest.mark.parametrize("use_numba", [True, False])
@pytest.mark.parametrize("dim,scale,dtype", [(2, 1.0, torch.float32), (8, 0.3, torch.float32),
                                             (2, 4.0, torch.float64), (64, 1.0, torch.float64)])
def test_fast_sigreg_equals_reference(dim, scale, dtype, use_numba, monkeypatch):
    """Both CPU paths (numba kernels, torch Chebyshev sweeps) match the formula."""
    from idaudit.maths import losses

    if use_numba and losses._numba is None:
        pytest.skip("numba not installed")
    monkeypatch.setattr(losses, "USE_NUMBA", use_numba)
    g = torch.Generator().manual_seed(dim)
    h = (scale * torch.randn(2, 256, dim, generator=g)).to(dtype)
    d = random_directions(dim, 256, g, dtype=dtype)
    h1 = h.clone().requires_grad_(True)
    h2 = h.clone().requires_grad_(True)
    ref = sigreg_reference(h1, d)
    fast = sigreg(h2, d)
    ref.backward()
    fast.backward()
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    assert fast.item() == pytest.approx(ref.item(), rel=tol, abs=tol)
    scale_g = h1.grad.abs().max().item()
    rel = 1e-3 if dtype == torch.float32 else 1e-9
    torch.testing.assert_close(h2.grad, h1.grad, rtol=0, atol=rel * scale_g)


def test_sigreg_small_for_gaussian_large_for_uniform():
    g = torch.Generator().manual_seed(0)
    d = random_directions(2, 256, g)
    gauss = torch.randn(8192, 2, generator=g)
    unif = (torch.rand(8192, 2, generator=g) - 0.5) * math.sqrt(12.0)  # unit variance
    s_gauss = sigreg(gauss, d).item()
    s_unif = sigreg(unif, d).item()
    # n·|φ̂ − φ|² stays O(1) for Gaussian samples and grows like n otherwise
    assert s_gauss < 3.0
    assert s_unif > 25.0
    assert sigreg(2.0 * gauss, d).item() > 50.0  # wrong scale is not Gaussian(0, I) either


def test_alignment_known_answers():
    h = torch.randn(2, 100, 3)
    assert alignment(torch.stack([h[0], h[0]])).item() == pytest.approx(0.0, abs=1e-12)
    shifted = torch.stack([h[0], h[0] + 2.0])
    assert alignment(shifted).item() == pytest.approx(1.0, rel=1e-6)


def test_whitening_known_answers():
    g = torch.Generator().manual_seed(1)
    white = torch.randn(2, 20000, 3, generator=g, dtype=torch.float64)
    assert whitening(white).item() < 1e-3
    # Cov = 4 I → (4 − 1)² on the diagonal: mean over 9 entries = 3·9/9 = 9·3/9
    assert whitening(2.0 * white).item() == pytest.approx(9.0 * 3 / 9, rel=0.05)


def test_infonce_matches_manual():
    g = torch.Generator().manual_seed(2)
    h = torch.randn(2, 16, 4, generator=g, dtype=torch.float64)
    sigma = 0.7
    logits = -((h[0][:, None] - h[1][None]) ** 2).sum(-1) / (2 * sigma**2)
    la = -(logits.diag() - torch.logsumexp(logits, 1)).mean()
    lb = -(logits.diag() - torch.logsumexp(logits, 0)).mean()
    assert infonce(h, sigma).item() == pytest.approx(0.5 * (la + lb).item(), rel=1e-10)
    far = torch.stack([10 * torch.eye(8), 10 * torch.eye(8)]).double()
    assert infonce(far, 1.0).item() < 1e-6


def test_sigma_auto_is_the_ou_channels_density_ratio_width():
    """For unit-variance views with correlation ρ_v, log p(v′|v)/p(v′) = c·v·v′ + f(v) + g(v′);
    the Gaussian-kernel critic −‖h − h′‖²/(2σ²) has cross term v·v′/σ², so c must be 1/σ²."""
    import numpy as np

    from idaudit.maths.losses import sigma_for
    from idaudit.worlds import build_world, make_spec

    rho_v, n = 0.9025, 4
    rng = np.random.default_rng(0)
    v = rng.standard_normal((5000, n))
    vp = rho_v * v + np.sqrt(1 - rho_v**2) * rng.standard_normal((5000, n))
    log_ratio = (-((vp - rho_v * v) ** 2).sum(1) / (2 * (1 - rho_v**2))
                 + (vp**2).sum(1) / 2 - n / 2 * np.log(1 - rho_v**2))
    feats = np.column_stack([(v * vp).sum(1), (v**2).sum(1), (vp**2).sum(1), np.ones(len(v))])
    coef = np.linalg.lstsq(feats, log_ratio, rcond=None)[0]
    sigma = sigma_for("auto", n, rho_v)
    assert coef[0] == pytest.approx(1 / sigma**2, rel=1e-9)
    assert sigma == pytest.approx(0.4533, abs=1e-4)
    assert sigma_for("auto", 1024, rho_v) == sigma  # independent of N
    assert sigma_for("sqrtn", 128) == 8.0 and sigma_for(0.5, 128) == 0.5
    world = build_world(make_spec("spiral", rho=0.95))
    assert world.view_correlation("anchor") == pytest.approx(0.9025)
    assert world.view_correlation("pair") == 0.95
    with pytest.raises(ValueError, match="ρ_v"):
        sigma_for("auto", 8, None)


def test_threaded_numba_kernel_agrees_and_leaves_no_thread():
    """A large problem splits its slices across threads; the statistic and gradient equal the
    one-thread kernel's and the closed forms, and no thread outlives the call. One torch thread
    (a sweep worker) means one thread here too."""
    import threading

    _numba = pytest.importorskip("idaudit.maths._ep_numba")
    import numpy as np

    rng = np.random.default_rng(0)
    proj = rng.standard_normal((129, 8192))  # ≥ PARALLEL_MIN samples × slices
    kk, dt = 16, 0.2
    k = np.arange(1, kk + 1)[:, None, None]
    phi, w = np.exp(-0.5 * (k[:, 0, 0] * dt) ** 2), rng.uniform(0.5, 1.5, kk)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert _numba._parallel_ok(proj)
        before = threading.active_count()
        loss_p, g_p = _numba.loss_grad(proj, phi, w, dt)
        assert threading.active_count() == before
        torch.set_num_threads(1)
        assert _numba._threads() == 1 and not _numba._parallel_ok(proj)
        loss_s, g_s = _numba.loss_grad(proj, phi, w, dt)
        assert loss_p == loss_s  # the same kernel on each slice, the parts summed alike
        np.testing.assert_array_equal(g_p, g_s)
        sub = proj[:7, :300]  # the closed forms on a corner: M = 7, n = 300
        loss, g = _numba.loss_grad(sub, phi, w, dt)
        _, g_none = _numba.loss_grad(sub, phi, w, dt, need_grad=False)
        assert g_none is None
        th = k * dt * sub[None]  # (K, M, n)
        ec, sm = np.cos(th).mean(-1) - phi[:, None], np.sin(th).mean(-1)  # (K, M)
        m, n = sub.shape
        assert loss == pytest.approx((w[:, None] * (ec ** 2 + sm ** 2)).sum() * n / m, rel=1e-12)
        coef = (2.0 / m) * w[:, None, None] * k * dt  # the derivative of the formula in p_ji
        want = (coef * (sm[..., None] * np.cos(th) - ec[..., None] * np.sin(th))).sum(0)
        np.testing.assert_allclose(g, want, rtol=1e-9, atol=1e-12)
    finally:
        torch.set_num_threads(threads)
