"""Training objectives as pure functions of the embeddings h with shape (views, batch, dim).

* alignment  A(h) = mean over views, samples, dims of (h − mean_views h)²
* SIGReg     sliced Epps–Pulley statistic: for M random unit directions a and knots
             t_k = k·Δt on [0, T], with φ̂_a(t) = mean_i exp(i t aᵀh_i),
             SIG(h) = n · mean_a Σ_k w_k |φ̂_a(t_k) − exp(−t_k²/2)|²,
             w_k = trapezoid weights of the symmetric integral over [−T, T] × exp(−t_k²/2)
             (all V·B rows pooled, the paper's code); the lejepa library's form takes it per view,
             S_per-view = mean_v SIG(h_v), and S_pooled = S_per-view + (B/V) Σ_{u≠v} ⟨Re e_u ē_v⟩
             (:func:`pooled_minus_per_view`), e_v = φ̂_v − φ
* lejepa     λ·S_pooled + (1 − λ)·A (the paper's form), or A + λ·S_per-view (the library's,
             ``--form official``): :data:`LEJEPA_FORMS`
* whitening  W(h) = mean of squares of (Cov(h) − I); ``whiten`` = λ·W + (1 − λ)·A (the paper's
             VICReg-style objective, not VICReg itself)
* VICReg     Bardes, Ponce & LeCun (2022) on the two views Z = h⁰, Z′ = h¹ (:func:`vicreg`):
             25·s(Z, Z′) + 25·[v(Z) + v(Z′)]/2 + 1·[c(Z) + c(Z′)]
* InfoNCE    symmetric cross-entropy with logits −‖h¹_i − h²_j‖² / (2σ²)
"""

from __future__ import annotations

import math

import torch

from idaudit.core.defaults import VICREG
from idaudit.core.errors import IdauditError
from idaudit.core.registered import OBJECTIVES, Objective
from idaudit.maths.epps_pulley import KNOTS, T_MAX
from idaudit.maths.epps_pulley import grid as ep_grid

__all__ = ["INFONCE", "LEJEPA", "LEJEPA_FORMS", "OBJECTIVES", "SIGMA_RULES", "VICREG", "WHITEN",
           "WHITEN_LAMB", "alignment", "infonce", "lejepa_official", "objective_for",
           "objective_needs_directions",
           "pooled_minus_per_view", "random_directions", "sigma_for", "sigreg", "sigreg_per_view",
           "sigreg_reference", "vicreg", "vicreg_covariance", "vicreg_invariance", "vicreg_variance",
           "whitening"]

N_KNOTS = KNOTS


_GRIDS: dict[tuple, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}


def epps_pulley_grid(knots: int = N_KNOTS, t_max: float = T_MAX, device=None, dtype=None):
    """:func:`idaudit.maths.epps_pulley.grid` (t, φ(t), w·φ(t)) as tensors, cached per device/dtype."""
    key = (knots, t_max, str(device), dtype)
    if key not in _GRIDS:
        _GRIDS[key] = tuple(torch.as_tensor(a, device=device, dtype=dtype)
                            for a in ep_grid(knots, t_max))
    return _GRIDS[key]


def random_directions(dim: int, n_slices: int, gen: torch.Generator | None,
                      device=None, dtype=torch.float32) -> torch.Tensor:
    """``n_slices`` random unit vectors in R^dim, as the columns of a (dim, n_slices) matrix."""
    a = torch.randn(dim, n_slices, generator=gen, dtype=dtype)
    a = a / a.norm(dim=0, keepdim=True)
    return a.to(device) if device is not None else a


def sigreg_reference(h: torch.Tensor, directions: torch.Tensor, knots: int = N_KNOTS,
                     t_max: float = T_MAX) -> torch.Tensor:
    """Straightforward SIGReg: materialise every cos/sin of t·aᵀh (the formula, slowly)."""
    flat = h.reshape(-1, h.shape[-1])
    t, phi, w = epps_pulley_grid(knots, t_max, flat.device, flat.dtype)
    xt = (flat @ directions).unsqueeze(-1) * t
    err = (xt.cos().mean(0) - phi).square() + xt.sin().mean(0).square()
    return ((err @ w) * flat.shape[0]).mean()


def _sign(k: int) -> float:
    """σ_k = +1, +1, −1, −1, … makes the Chebyshev step a single in-place addcmul."""
    return 1.0 if k % 4 in (0, 1) else -1.0


_WORK: dict[tuple, list[torch.Tensor]] = {}


def _work_buffers(shape: tuple[int, ...], count: int, device, dtype) -> list[torch.Tensor]:
    """Per-shape scratch tensors reused across steps (fresh MB-sized buffers page-fault)."""
    key = (shape, count, str(device), dtype)
    if key not in _WORK:
        if len(_WORK) > 8:
            _WORK.clear()
        _WORK[key] = list(torch.empty((count, *shape), dtype=dtype, device=device).unbind(0))
    return _WORK[key]


def _chebyshev_sweep(first: torch.Tensor, u: torch.Tensor, v: torch.Tensor, knots: int,
                     visit) -> None:
    """Visit σ_k·(cos kθ, sin kθ) for k = 1 … knots−1, given first = (cos θ, sin θ).

    Both rows obey f_{k+1} = 2 cos θ · f_k − f_{k−1}; with the signs σ_k this is
    u ← u + α·cos θ·v with α = −2σ_{k−1}σ_k, in place, so one op serves cos and sin.
    ``u`` and ``v`` are scratch buffers shaped like ``first``.
    """
    c1 = first[0]
    u[0].fill_(1.0)
    u[1].zero_()
    v.copy_(first)
    for k in range(1, knots):
        visit(k, v)
        if k < knots - 1:
            u.addcmul_(c1, v, value=-2.0 * _sign(k - 1) * _sign(k))
            u, v = v, u


def _ep_torch(proj_t: torch.Tensor, knots: int, t_max: float):
    """Sums and gradient coefficients with torch ops (any device): two Chebyshev sweeps."""
    proj = proj_t.T
    n, m = proj.shape
    dev, dt_ = proj.device, proj.dtype
    dt = t_max / (knots - 1)
    first, u, v, acc = _work_buffers((2, n, m), 4, dev, dt_)
    torch.mul(proj, dt, out=u[0])
    torch.cos(u[0], out=first[0])
    torch.sin(u[0], out=first[1])
    sums = torch.empty(knots - 1, 2, m, device=dev, dtype=dt_)
    _chebyshev_sweep(first, u, v, knots, lambda k, f: torch.sum(f, 1, out=sums[k - 1]))
    sig = _signs(knots, dev, dt_)
    cm, sm = sums[:, 0] * sig / n, sums[:, 1] * sig / n

    def gradient(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        coef = torch.stack([a * sig, b * sig], 1).unsqueeze(2)  # (knots−1, 2, 1, m)
        acc.zero_()
        _chebyshev_sweep(first, u, v, knots, lambda k, f: acc.addcmul_(f, coef[k - 1]))
        return (acc[0] + acc[1]).T

    return cm, sm, gradient


def _ep_numba_fused(ctx, proj_t: torch.Tensor, knots: int, t_max: float,
                    need: bool) -> torch.Tensor:
    """:class:`_EppsPulley`'s forward on CPU: the statistic and its gradient in one numba call
    (:func:`_ep_numba.loss_grad`, cos and sin of θ = PᵀΔt included); the gradient saved for
    the backward."""
    dt = t_max / (knots - 1)
    _, phi, w = epps_pulley_grid(knots, t_max, "cpu", proj_t.dtype)  # cached per dtype
    # (M, n): each slice's samples contiguous, as the matmul gives them
    loss, grad = _numba.loss_grad(proj_t.contiguous().numpy(), phi[1:].numpy(), w[1:].numpy(),
                                  dt, need)
    if need:
        ctx.save_for_backward(torch.from_numpy(grad))
    return torch.tensor(loss, dtype=proj_t.dtype)


try:  # numba is optional: the torch sweeps are the fallback and the CUDA path
    from idaudit.maths import _ep_numba as _numba
except ImportError:  # pragma: no cover - depends on the environment
    _numba = None


def _use_numba(proj: torch.Tensor) -> bool:
    return _numba is not None and proj.device.type == "cpu" and proj.dtype in (
        torch.float32, torch.float64) and USE_NUMBA


USE_NUMBA = True


class _EppsPulley(torch.autograd.Function):
    """SIGReg on the projections' transpose Pᵀ (M, n) without materialising the (n, M, knots)
    tables (each direction's n projections contiguous: the sweeps' order, no transposed copy).

    With θ = PΔt, cos(kθ) and sin(kθ) follow from one cos/sin by recurrence; one sweep gives
    the empirical characteristic function, a second sweep its gradient
    ∂SIG/∂Pᵀ_ji = (2/M) Σ_k w_k kΔt [sm_kj cos(kθ_ji) − (cm_kj − φ_k) sin(kθ_ji)].
    """

    @staticmethod
    def forward(ctx, proj_t: torch.Tensor, knots: int, t_max: float) -> torch.Tensor:
        m, n = proj_t.shape
        need = ctx.needs_input_grad[0]
        if _use_numba(proj_t):  # one kernel call: statistic and gradient (no torch glue)
            return _ep_numba_fused(ctx, proj_t.detach(), knots, t_max, need)
        _, phi, w = epps_pulley_grid(knots, t_max, proj_t.device, proj_t.dtype)
        sweep = _ep_torch
        cm, sm, gradient = sweep(proj_t.detach(), knots, t_max)
        ec = cm - phi[1:, None]
        loss = (w[1:] @ (ec.square() + sm.square())).sum() * (n / m)  # k = 0 adds 0
        if need:
            k = torch.arange(1, knots, device=proj_t.device, dtype=proj_t.dtype)
            scale = ((2.0 / m) * w[1:] * k * (t_max / (knots - 1)))[:, None]
            ctx.save_for_backward(gradient(scale * sm, -scale * ec))
        return loss

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        (grad,) = ctx.saved_tensors
        return g * grad, None, None


_SIGNS: dict[tuple, torch.Tensor] = {}


def _signs(knots: int, device, dtype) -> torch.Tensor:
    key = (knots, str(device), dtype)
    if key not in _SIGNS:
        _SIGNS[key] = torch.tensor([_sign(k) for k in range(1, knots)], device=device,
                                   dtype=dtype)[:, None]
    return _SIGNS[key]


def sigreg(h: torch.Tensor, directions: torch.Tensor, knots: int = N_KNOTS,
           t_max: float = T_MAX) -> torch.Tensor:
    """SIGReg of embeddings h (…, dim) along the given unit ``directions`` (dim, M).

    All views are pooled: n = number of rows of h flattened to (−1, dim).
    Equals :func:`sigreg_reference` in value and gradient, several times faster.
    """
    flat = h.reshape(-1, h.shape[-1])
    # flat.T made contiguous: the matmul's backward then gives its gradient in that layout,
    # directions @ grad (12x faster at 2 x 256 x 512 than the transposed product torch picks
    # for a transposed operand)
    return _EppsPulley.apply(directions.T @ flat.T.contiguous(), knots, t_max)


def alignment(h: torch.Tensor) -> torch.Tensor:
    """Mean over views, samples and dims of the squared deviation from the view mean."""
    return (h - h.mean(dim=0, keepdim=True)).square().mean()


def whitening(h: torch.Tensor) -> torch.Tensor:
    """mean((Cov(h) − I)²) over the pooled views."""
    flat = h.reshape(-1, h.shape[-1])
    centred = flat - flat.mean(dim=0, keepdim=True)
    cov = centred.T @ centred / (flat.shape[0] - 1)
    eye = torch.eye(cov.shape[0], device=h.device, dtype=h.dtype)
    return (cov - eye).square().mean()


def infonce(h: torch.Tensor, sigma: float = 1.0) -> torch.Tensor:
    """Symmetric InfoNCE between view 0 and view 1, Gaussian-kernel logits of width σ."""
    a, b = h[0], h[1]
    logits = -torch.cdist(a, b).square() / (2.0 * sigma * sigma)
    target = torch.arange(a.shape[0], device=h.device)
    ce = torch.nn.functional.cross_entropy
    return 0.5 * (ce(logits, target) + ce(logits.T, target))


# ---- VICReg (Bardes, Ponce & LeCun 2022), its three terms ---------------------------------


def vicreg_invariance(z: torch.Tensor, z_prime: torch.Tensor) -> torch.Tensor:
    """s(Z, Z′) = (1/(n d)) Σ_i ‖z_i − z′_i‖²: the mean squared error of the two branches."""
    return (z - z_prime).square().mean()


def vicreg_variance(z: torch.Tensor, gamma: float = VICREG["gamma"],
                    eps: float = VICREG["eps"]) -> torch.Tensor:
    """v(Z) = (1/d) Σ_j max(0, γ − √(Var(z_j) + ε)), Var the unbiased variance over the n rows
    of Z (n, d): a hinge that keeps every dimension's standard deviation at γ or above."""
    return torch.relu(gamma - torch.sqrt(z.var(dim=0) + eps)).mean()


def vicreg_covariance(z: torch.Tensor) -> torch.Tensor:
    """c(Z) = (1/d) Σ_{i≠j} C(Z)_ij², C(Z) = (Z − Z̄)ᵀ(Z − Z̄)/(n − 1) of Z (n, d): the squared
    off-diagonal covariances, summed and divided by the dimension."""
    centred = z - z.mean(dim=0, keepdim=True)
    cov = centred.T @ centred / (z.shape[0] - 1)
    return (cov.square().sum() - cov.diagonal().square().sum()) / z.shape[1]


def vicreg(h: torch.Tensor, invariance: float = VICREG["invariance"],
           variance: float = VICREG["variance"], covariance: float = VICREG["covariance"],
           gamma: float = VICREG["gamma"], eps: float = VICREG["eps"]
           ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """VICReg of the two views of h (2, n, d), Z = h[0] and Z′ = h[1], as its authors define it:

        L = λ·s(Z, Z′) + μ·[v(Z) + v(Z′)]/2 + ν·[c(Z) + c(Z′)]

    (:func:`vicreg_invariance`, :func:`vicreg_variance`, :func:`vicreg_covariance`), with
    λ = μ = 25, ν = 1, γ = 1 and ε = 1e-4 (:data:`idaudit.core.defaults.VICREG`). The paper
    writes μ·[v(Z) + v(Z′)]; its code, and lightly's ``VICRegLoss``, average the two variance
    terms and add the two covariance terms, as here. Returns the loss and its three terms
    (``variance`` and ``covariance`` as they enter L: the mean and the sum over the branches).
    """
    views, _ = _views(h, "vicreg")
    if views != 2:
        raise IdauditError(f"vicreg is defined for two views (branches), got {views}")
    if h.shape[1] < 2:
        raise IdauditError(f"vicreg needs at least 2 rows per view, got {h.shape[1]}")
    z, z_prime = h[0], h[1]
    inv = vicreg_invariance(z, z_prime)
    var = 0.5 * (vicreg_variance(z, gamma, eps) + vicreg_variance(z_prime, gamma, eps))
    cov = vicreg_covariance(z) + vicreg_covariance(z_prime)
    loss = invariance * inv + variance * var + covariance * cov
    return loss, {"invariance": inv, "variance": var, "covariance": cov}


# ---- objectives: (h, lamb, sigma, directions) -> (loss, parts) -------------------------

# Each is declared by name, with its help, in idaudit.core.registered (OBJECTIVES), which
# imports this module when one is first used; what each is (two views only, takes λ, needs
# SIGReg's directions) is its Objective here.


def _lejepa(h, lamb: float, sigma: float, directions: torch.Tensor | None):
    sig = sigreg(h, directions)
    align = alignment(h)
    return lamb * sig + (1.0 - lamb) * align, {"sigreg": sig, "alignment": align}


def _whiten(h, lamb: float, sigma: float, directions: torch.Tensor | None):
    white = whitening(h)
    align = alignment(h)
    return lamb * white + (1.0 - lamb) * align, {"whitening": white, "alignment": align}


def _infonce(h, lamb: float, sigma: float, directions: torch.Tensor | None):
    loss = infonce(h, sigma)
    return loss, {"infonce": loss}


def _vicreg(h, lamb: float | None, sigma: float, directions: torch.Tensor | None):
    """:func:`vicreg` with the authors' weights; ``lamb`` has no meaning for it (refused)."""
    return vicreg(h)


LEJEPA = Objective(_lejepa, directions=True)
#: the whitening form's own λ (every suite's). Measured on spiral, ρ 0.95, 1 000 steps, seeds 0
#: and 1: at LeJEPA's 1e-3 (the global default) both collapse (tr Cov(h) 3e-10, 5e-10; held-out
#: R² 0.02, 0.17); at 0.1 one collapses (3e-7) and one ends at tr Cov(h) 0.12, R² 0.02; at 0.5
#: tr Cov(h) 1.85, 1.87 and R² 0.51, 0.95 (docs/objective-forms.md's 1 000-step row)
WHITEN_LAMB = 0.5
WHITEN = Objective(_whiten, default_lamb=WHITEN_LAMB)
INFONCE = Objective(_infonce, two_views=True, takes_lamb=False)  # λ = 0 where one is asked
VICREG = Objective(_vicreg, two_views=True, takes_lamb=False)


def _lejepa_library(h, lamb: float, sigma: float, directions: torch.Tensor | None,
                    knots: int = N_KNOTS, t_max: float = T_MAX):
    """The lejepa library's form (``--form official``): A + λ·S_per-view."""
    sig = sigreg_per_view(h, directions, knots, t_max)
    align = alignment(h)
    return align + lamb * sig, {"sigreg": sig, "alignment": align}


#: the forms of the lejepa objective (``--form``): the paper's λ·S_pooled + (1 − λ)·A, and the
#: lejepa library's A + λ·S_per-view
LEJEPA_FORMS: dict[str, Objective] = {"paper": LEJEPA,
                                      "official": Objective(_lejepa_library, directions=True)}


def objective_for(name: str, form: str | None = None) -> Objective:
    """The objective ``name`` (the registry's), in ``form`` for lejepa (None: the paper's)."""
    if name != "lejepa" or form is None:
        return OBJECTIVES.get(name)
    if form not in LEJEPA_FORMS:
        raise IdauditError(f"unknown lejepa form {form!r}; valid: {', '.join(LEJEPA_FORMS)}")
    return LEJEPA_FORMS[form]


def objective_needs_directions(name: str) -> bool:
    """Whether objective ``name`` takes SIGReg's random directions each step."""
    return OBJECTIVES.get(name).directions


SIGMA_RULES = ("auto", "sqrtn")


def sigma_for(sigma: float | str, dim: int, pair_rho: float | None = None) -> float:
    """InfoNCE kernel width σ for latent dimension N and view correlation ρ_v.

    ``"auto"`` — the width that makes the Gaussian-kernel critic the OU channel's density
    ratio for unit-variance embeddings: log p(v′|v)/p(v′) has cross term ρ_v/(1−ρ_v²)·v·v′,
    the critic −‖h − h′‖²/(2σ²) has h·h′/σ², so σ² = (1 − ρ_v²)/ρ_v (independent of N).
    ``"sqrtn"`` — σ = √(N/2), which keeps the logits of independent embeddings near −2 at
    every N. A number is used as given.
    """
    if sigma == "auto":
        if pair_rho is None or not 0.0 < pair_rho < 1.0:
            raise ValueError("--sigma auto needs the views' correlation ρ_v in (0, 1)")
        return math.sqrt((1.0 - pair_rho**2) / pair_rho)
    if sigma == "sqrtn":
        return math.sqrt(max(dim, 2) / 2.0)
    return float(sigma)


# ---- the official LeJEPA form: SIGReg per view, additive objective -------------------------
#
# Per direction a and view v (B rows each), the empirical characteristic function's error is
# e_v(t) = φ̂_v(t) − φ(t), φ̂_v(t) = (1/B) Σ_{i∈v} exp(i t aᵀh_i), φ(t) = e^{−t²/2}; write
# ⟨f⟩ = Σ_k w_k f(t_k) for the grid's quadrature (trapezoid on [−T, T] folded onto [0, T],
# times φ). The pooled sample of n = VB rows has error ē = (1/V) Σ_v e_v, so
#   S_pooled    = VB ⟨|(1/V) Σ_v e_v|²⟩ = (B/V) Σ_v ⟨|e_v|²⟩ + (B/V) Σ_{u≠v} ⟨Re(e_u ē_v)⟩,
#   S_per-view  = (1/V) Σ_v B ⟨|e_v|²⟩,
# hence, exactly (and for the mean over directions alike),
#   S_pooled = S_per-view + (B/V) Σ_{u≠v} ⟨Re(e_u ē_v)⟩,   for V = 2:  + B ⟨Re(e₁ ē₂)⟩.
# The fold onto [0, T] is exact: Re(e_u ē_v) is even in t because e_v(−t) = conj(e_v(t)).


def _views(h: torch.Tensor, what: str) -> tuple[int, int]:
    """(V, B) of embeddings shaped (views, batch, dim); a one-line IdauditError otherwise."""
    if h.ndim != 3 or h.shape[0] < 1 or h.shape[1] < 1:
        raise IdauditError(f"{what} needs embeddings shaped (views, batch, dim), got {tuple(h.shape)}")
    return h.shape[0], h.shape[1]


def sigreg_per_view(h: torch.Tensor, directions: torch.Tensor, knots: int = N_KNOTS,
                    t_max: float = T_MAX) -> torch.Tensor:
    """SIGReg of each view on its own B rows, averaged over the V views (the lejepa library's form).

    S_per-view = (1/V) Σ_v B · mean_a ⟨|φ̂_v,a − φ|²⟩ with every view along the same
    ``directions``; each term is :func:`sigreg` of ``h[v]``. Compare :func:`sigreg` (all VB rows
    pooled): S_pooled = S_per-view + :func:`pooled_minus_per_view`.
    """
    views, _ = _views(h, "sigreg_per_view")
    return torch.stack([sigreg(h[v], directions, knots, t_max) for v in range(views)]).mean()


def pooled_minus_per_view(h: torch.Tensor, directions: torch.Tensor, knots: int = N_KNOTS,
                          t_max: float = T_MAX) -> torch.Tensor:
    """The cross term S_pooled − S_per-view = (B/V) Σ_{u≠v} mean_a ⟨Re(e_u ē_v)⟩ of the views.

    e_v = φ̂_v − φ is view v's characteristic-function error along each direction (B rows);
    for V = 2 it is B · mean_a Σ_k w_k Re(e₁ ē₂)(t_k). Zero in expectation for independent
    Gaussian views, equal to S_per-view·(V − 1) for identical views. Computed from the
    materialised per-view cos/sin tables (the formula, as :func:`sigreg_reference`).
    """
    views, batch = _views(h, "pooled_minus_per_view")
    t, phi, w = epps_pulley_grid(knots, t_max, h.device, h.dtype)
    xt = (h @ directions).unsqueeze(-1) * t  # (V, B, M, knots)
    ec, es = xt.cos().mean(1) - phi, xt.sin().mean(1)  # Re e_v, Im e_v: (V, M, knots)
    real = torch.einsum("umk,vmk->uvmk", ec, ec) + torch.einsum("umk,vmk->uvmk", es, es)
    off = ~torch.eye(views, dtype=torch.bool, device=h.device)
    return (real[off] @ w).sum(0).mean() * (batch / views)


def lejepa_official(h: torch.Tensor, lamb: float, directions: torch.Tensor, knots: int = N_KNOTS,
                    t_max: float = T_MAX) -> torch.Tensor:
    """The lejepa library's additive objective A(h) + λ·S_per-view(h) (stable-pretraining: λ = 0.02).

    Relation to the paper's convex form λ′·S + (1 − λ′)·A (:func:`_lejepa`, with the pooled S):
    A + λS = (1 + λ)·[λ′S + (1 − λ′)A] with λ′ = λ/(1 + λ) (λ = 0.02 ↔ λ′ ≈ 0.0196), so the
    two differ by a constant factor and by S_per-view instead of S_pooled
    (:func:`pooled_minus_per_view`). Needs V ≥ 2 views.
    """
    views, _ = _views(h, "lejepa_official")
    if views < 2:
        raise IdauditError(f"lejepa_official needs at least 2 views, got {views}")
    return _lejepa_library(h, lamb, 1.0, directions, knots, t_max)[0]
