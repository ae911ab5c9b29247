"""Planning evaluations: latent straight lines against the oracle, and LQR value equivalence.

Straight-line plans: for a start/goal pair, walk the straight line from h(start) to h(goal)
in embedding space, decode each waypoint to z with a k-NN regressor fitted on a gallery
(k = 5, distance weights), and compare the quadratic control cost
C(path) = Σ_t ‖z_t − z_goal‖² + Σ_t ‖z_{t+1} − z_t‖² with the oracle straight line in z.

LQR: push z_{t+1} = A z_t + B u_t through the fitted linear map M (h ≈ M z): Â = M A M⁻¹,
B̂ = M B; with the rotation-invariant cost ‖·‖² + ‖u‖² in both spaces, scipy's discrete ARE
gives P and P̂, and V(z₀) = z₀ᵀ P z₀ should equal V̂(M z₀) exactly when M is orthogonal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch


def control_cost(path: np.ndarray) -> np.ndarray:
    """C = Σ_t ‖z_t − z_T‖² + Σ_t ‖z_{t+1} − z_t‖² for paths of shape (K, T+1, n)."""
    goal = path[:, -1:, :]
    tracking = np.square(path - goal).sum(axis=(1, 2))
    effort = np.square(np.diff(path, axis=1)).sum(axis=(1, 2))
    return tracking + effort


def plan_from_embeddings(gallery_h: np.ndarray, gallery_z: np.ndarray, start_h: np.ndarray,
                         goal_h: np.ndarray, starts: np.ndarray, goals: np.ndarray,
                         waypoints: int = 20, k: int = 5) -> dict[str, Any]:
    """Straight lines h(start) → h(goal), decoded by k-NN on the gallery, against the oracle."""
    from sklearn.neighbors import KNeighborsRegressor

    gallery_h = np.asarray(gallery_h, dtype=np.float64)
    knn = KNeighborsRegressor(n_neighbors=min(k, len(gallery_h)), weights="distance").fit(
        gallery_h, np.asarray(gallery_z, dtype=np.float64))
    hs, he = np.asarray(start_h, dtype=np.float64), np.asarray(goal_h, dtype=np.float64)
    s = np.linspace(0.0, 1.0, waypoints + 1)[None, :, None]
    line_h = (1 - s) * hs[:, None, :] + s * he[:, None, :]
    kk, tt, m = line_h.shape
    decoded = knn.predict(line_h.reshape(-1, m)).reshape(kk, tt, -1)
    zs, ze = np.asarray(starts, dtype=np.float64), np.asarray(goals, dtype=np.float64)
    decoded[:, 0], decoded[:, -1] = zs, ze
    oracle = (1 - s) * zs[:, None, :] + s * ze[:, None, :]
    ratio = control_cost(decoded) / np.maximum(control_cost(oracle), 1e-12)
    return {
        "pairs": int(kk),
        "waypoints": int(waypoints),
        "cost_ratio_median": float(np.median(ratio)),
        "cost_ratio_q25": float(np.quantile(ratio, 0.25)),
        "cost_ratio_q75": float(np.quantile(ratio, 0.75)),
        "cost_ratio_mean": float(ratio.mean()),
        "cost_ratio_max": float(ratio.max()),
        "cost_ratios": ratio.tolist(),
        "paths": decoded,
        "oracle_paths": oracle,
    }


def straight_line_plans(embed_fn: Callable[[torch.Tensor], torch.Tensor],
                        gallery_z: torch.Tensor, starts: torch.Tensor, goals: torch.Tensor,
                        waypoints: int = 20, k: int = 5) -> dict[str, Any]:
    """Plan in embedding space and score against the oracle line in latent space.

    ``embed_fn`` maps latents to embeddings (observe, then encode).
    """
    return plan_from_embeddings(embed_fn(gallery_z).numpy(), gallery_z.numpy(),
                                embed_fn(starts).numpy(), embed_fn(goals).numpy(),
                                starts.numpy(), goals.numpy(), waypoints, k)


def plot_plans(result: dict[str, Any], path, max_pairs: int = 12,
               labels: tuple[str, str] = ("shoulder (rad)", "wrist (rad)")) -> None:
    """Planned paths (decoded latent straight lines) next to the oracle's, in latent space."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from .errors import IdauditError

        raise IdauditError('--plot needs matplotlib: pip install "idaudit[plot]"') from None
    from .io import atomic_write

    paths, oracle = np.asarray(result["paths"]), np.asarray(result["oracle_paths"])
    fig, ax = plt.subplots(figsize=(5.5, 5))
    colors = plt.cm.tab10(np.arange(min(max_pairs, len(paths))) % 10)
    for i, c in enumerate(colors):
        ax.plot(oracle[i, :, 0], oracle[i, :, 1], "--", color=c, lw=1, alpha=0.7)
        ax.plot(paths[i, :, 0], paths[i, :, 1], "-o", color=c, ms=2, lw=1.2)
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    ax.set_title(fontsize=9, label=f"latent plans (solid), oracle (dashed): median cost ratio "
                 f"{result['cost_ratio_median']:.3f}")
    ax.set_aspect("equal", adjustable="datalim")
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    plt.close(fig)


def lqr_value_equivalence(m_map: np.ndarray, seed: int = 0, n_states: int = 256,
                          ) -> dict[str, Any]:
    """Relative error between true and pushed-forward LQR values and actions."""
    from scipy.linalg import solve_discrete_are

    m_map = np.asarray(m_map, dtype=np.float64)
    m, n = m_map.shape
    rng = np.random.default_rng(seed)
    a = np.eye(n) + 0.1 * rng.standard_normal((n, n)) / np.sqrt(n)
    b = np.eye(n)
    p = solve_discrete_are(a, b, np.eye(n), np.eye(n))
    gain = np.linalg.solve(np.eye(n) + b.T @ p @ b, b.T @ p @ a)
    if m != n or np.linalg.cond(m_map) > 1e8:
        return {"lqr_applicable": False,
                "lqr_note": "the fitted map is not square and invertible"}
    m_inv = np.linalg.inv(m_map)
    a_h, b_h = m_map @ a @ m_inv, m_map @ b
    p_h = solve_discrete_are(a_h, b_h, np.eye(n), np.eye(n))
    gain_h = np.linalg.solve(np.eye(n) + b_h.T @ p_h @ b_h, b_h.T @ p_h @ a_h)
    z0 = rng.standard_normal((n_states, n))
    v = np.einsum("ki,ij,kj->k", z0, p, z0)
    h0 = z0 @ m_map.T
    v_h = np.einsum("ki,ij,kj->k", h0, p_h, h0)
    rel = np.abs(v_h - v) / np.maximum(np.abs(v), 1e-12)
    action_err = np.linalg.norm(gain_h @ m_map - gain) / np.linalg.norm(gain)
    return {
        "lqr_applicable": True,
        "lqr_value_rel_error_median": float(np.median(rel)),
        "lqr_value_rel_error_max": float(rel.max()),
        "lqr_action_rel_error": float(action_err),
    }


def plan_checkpoint(path, pairs: int = 100, waypoints: int = 20, gallery: int = 10_000,
                    seed: int = 0, k: int = 5) -> dict[str, Any]:
    """Straight-line plans and LQR value equivalence for an idaudit checkpoint."""
    from .checkpoint import load_checkpoint
    from .metrics import fit_linear_map
    from .train.loop import embed
    from .worlds import build_world

    ck = load_checkpoint(path)
    if ck.world.name == "reacher":
        from .pixel import plan_reacher

        return plan_reacher(ck, pairs=pairs, waypoints=waypoints, seed=seed, k=k)
    world = build_world(ck.world)
    gen = torch.Generator().manual_seed(seed)
    gallery_z = world.sample_latents(gallery, gen)
    starts = world.sample_latents(pairs, gen)
    goals = world.sample_latents(pairs, gen)

    def embed_fn(z: torch.Tensor) -> torch.Tensor:
        return embed(ck.encoder, world.observe(z), torch.device("cpu"))

    result = straight_line_plans(embed_fn, gallery_z, starts, goals, waypoints, k)
    q_hat, _ = fit_linear_map(gallery_z, embed_fn(gallery_z))
    result.update(lqr_value_equivalence(q_hat.numpy(), seed=seed))
    result["checkpoint"] = str(path)
    result["world"] = ck.world.to_dict()
    return result
