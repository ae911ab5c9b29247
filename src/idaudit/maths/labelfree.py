"""What positive pairs (h, h′) alone say about identifiability — no true latents.

For an encoder that recovered the latents up to a rotation, h = Qz + c with Cov(h) = I, and
the OU channel z′ = ρz + √(1 − ρ²)ξ gives Cov(h, h′) = ρ·Cov(h): **every canonical correlation
between h and h′ equals ρ**. An encoder that warps the latents (or mixes in nuisance) spreads
them: directions that carry z keep correlation ρ, warped or noisy ones fall below it. Hence:

* ``rho_estimated`` ρ̂ — the largest canonical correlation of (h, h′), from the symmetrised
  covariances C̄ = (Cov h + Cov h′)/2, X̄ = (Cov(h, h′) + Cov(h′, h))/2 as the top eigenvalue
  of C̄^{-1/2} X̄ C̄^{-1/2} (the two views are exchangeable). It estimates ρ when it is not
  given: the best-kept direction of an encoder keeps the channel's correlation.
* ``canonical_spread`` = ρ̂ − mean canonical correlation (0 when identified) and
  ``canonical_min``; with ρ given, ``canonical_shortfall`` = ρ − mean canonical correlation.
* ``alignment_gap_rho_estimated`` δ(ρ̂) = max(E‖h′ − h‖² − 2(1 − ρ̂) tr Cov h, 0) and
  ``D_rho_estimated`` = δ(ρ̂)/(2ρ̂(1 − ρ̂)): the alignment gap at the estimated ρ. (With ρ̂ the
  *mean* canonical correlation of whitened h, δ would be 0 by construction; the top one
  leaves the shortfall of the others.)

With ε (whitening), its floor and upper bound, the Gaussianity test and the effective rank
(:func:`idaudit.maths.metrics.audit_metrics` computes those from h alone), these are the label-free
signals; docs/label-free.md measures how well each predicts the true R²(h → z).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from idaudit.maths.bounds import alignment_gap_from_rows, pair_rows
from idaudit.maths.linear import to_numpy
from idaudit.maths.moments import Moments

__all__ = ["canonical_correlations", "label_free_metrics"]


def canonical_correlations(h: np.ndarray, hp: np.ndarray, rtol: float = 1e-10) -> np.ndarray:
    """Canonical correlations of the exchangeable pair (h, h′), descending (symmetrised)."""
    h = to_numpy(h).reshape(h.shape[0], -1)
    hp = to_numpy(hp).reshape(hp.shape[0], -1)
    m = h.shape[1]
    mom = Moments([h, hp], np.arange(h.shape[0]))
    s = mom.scatter / max(mom.n - 1, 1)
    c = 0.5 * (s[:m, :m] + s[m:, m:])
    x = 0.5 * (s[:m, m:] + s[m:, :m])
    evals, evecs = np.linalg.eigh(c)
    keep = evals > rtol * max(float(evals.max()), 1e-300)
    if not keep.any():
        return np.zeros(0)
    w = evecs[:, keep] / np.sqrt(evals[keep])  # C̄^{-1/2} on its support
    return np.sort(np.linalg.eigvalsh(w.T @ x @ w))[::-1]


def pair_metrics(h: Any, hp: Any) -> dict[str, float]:
    """ρ̂, the spread of the canonical correlations and δ, D at ρ̂ (module docstring)."""
    h = to_numpy(h).reshape(to_numpy(h).shape[0], -1)
    hp = to_numpy(hp).reshape(h.shape[0], -1)
    cc = canonical_correlations(h, hp)
    if cc.size == 0:
        return {}
    rho = float(np.clip(cc[0], 1e-6, 1 - 1e-6))
    delta = alignment_gap_from_rows(pair_rows(h, hp, h.mean(0, dtype=np.float64)), rho)
    return {"rho_estimated": rho, "canonical_min": float(cc[-1]),
            "canonical_mean": float(cc.mean()), "canonical_spread": float(cc[0] - cc.mean()),
            "alignment_gap_rho_estimated": delta,
            "D_rho_estimated": delta / (2.0 * rho * (1.0 - rho)) if math.isfinite(delta) else
            math.inf}


def label_free_metrics(h: Any, hp: Any = None, rho: float | None = None, *, seed: int = 0,
                       gauss_sims: int = 0, gauss_slices: int = 64,
                       confidence: float = 0.95) -> dict[str, Any]:
    """Every label-free signal of h (and its positive pairs h′): ε, its floor and upper bound,
    δ and D (at the given ρ, and at ρ̂), the canonical correlations, effective rank and the
    Gaussianity test."""
    from idaudit.maths.bounds import bound_terms, whitening_terms
    from idaudit.maths.gaussianity import sliced_gaussianity
    from idaudit.maths.linear import effective_rank_from_eigs

    h = to_numpy(h)
    h = h.reshape(h.shape[0], -1)
    rows, m = h.shape
    mom = Moments([h], np.arange(rows))
    cov = mom.scatter / max(rows - 1, 1)
    white = whitening_terms(cov, rows)
    out: dict[str, Any] = {
        **white, "effective_rank": effective_rank_from_eigs(np.linalg.eigvalsh(cov)),
        "n_samples": rows, "embed_dim": m,
    }
    if gauss_slices > 0:
        out.update(sliced_gaussianity(h, n_slices=gauss_slices, sims=gauss_sims, seed=seed))
    if hp is None:
        return out
    hp = to_numpy(hp).reshape(rows, -1)
    out.update(pair_metrics(h, hp))
    if rho is not None:
        out.update(bound_terms(white, m, pair_rows(h, hp, mom.mean), float(rho), confidence))
        out["canonical_shortfall"] = float(rho) - out.get("canonical_mean", float("nan"))
    return out
