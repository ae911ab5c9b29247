"""Planning evaluations: latent straight lines against the oracle, and LQR value equivalence.

Straight-line plans: for a start/goal pair, walk the straight line from h(start) to h(goal)
in embedding space, decode each waypoint to z with a k-NN regressor fitted on a gallery
(k = 5, distance weights), and compare the quadratic control cost
C(path) = Σ_t ‖z_t − z_goal‖² + Σ_t ‖z_{t+1} − z_t‖² with the oracle straight line in z.

LQR: push z_{t+1} = A z_t + B u_t through the fitted linear map M (h ≈ M z): Â = M A M⁻¹,
B̂ = M B; with the rotation-invariant cost ‖·‖² + ‖u‖² in both spaces, scipy's discrete ARE
gives P and P̂, and V(z₀) = z₀ᵀ P z₀ should equal V̂(M z₀) exactly when M is orthogonal. As in
the audit, M is fitted on z standardised per latent over the gallery unless the world draws z
white (``lqr_latents_standardized`` says which), so no LQR error depends on the units the
latents were recorded in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from idaudit.core.errors import IdauditError, check_seed
from idaudit.core.requests import PlanRequest, unknown_options
from idaudit.loading.arrays import Arrays
from idaudit.loading.loaders import open_target, world_for_encoder
from idaudit.loading.opened import LoadedEncoder
from idaudit.maths.linear import fit_linear_map
from idaudit.models.encoders import embed

__all__ = ["PlanReport", "control_cost", "lqr_value_equivalence", "plan", "plan_gallery", "run_plan"]


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


def plot_plans(result: dict[str, Any], path, max_pairs: int = 12,
               labels: tuple[str, str] = ("shoulder (rad)", "wrist (rad)")) -> None:
    """Planned paths (decoded latent straight lines) next to the oracle's, in latent space.

    Drawn on a figure of its own with matplotlib's Agg canvas: pyplot and the caller's
    backend (a notebook's, say) are left as they were."""
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise IdauditError('--plot needs matplotlib: pip install "idaudit[plot]"') from None
    from idaudit.core.atomic import atomic_write

    paths, oracle = np.asarray(result["paths"]), np.asarray(result["oracle_paths"])
    fig = Figure(figsize=(5.5, 5))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    colors = matplotlib.colormaps["tab10"](np.arange(min(max_pairs, len(paths))) % 10)
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


@dataclass
class PlanReport:
    """Straight-line planning against the oracle, and LQR value equivalence.

    ``metrics`` holds the cost-ratio summary (``cost_ratio_median`` ≈ 1 means the embedding
    plans like the true latents) and the LQR errors; ``paths``/``oracle_paths`` the decoded
    and the oracle latent paths (pairs × (waypoints + 1) × d).
    """

    metrics: dict[str, Any]
    paths: np.ndarray
    oracle_paths: np.ndarray
    source: str = ""
    world: dict[str, Any] | None = None
    labels: tuple[str, ...] = ("z₁", "z₂")
    cost_ratios: list[float] = field(default_factory=list)

    @property
    def cost_ratio_median(self) -> float:
        return float(self.metrics["cost_ratio_median"])

    def to_dict(self) -> dict[str, Any]:
        return {**self.metrics, "cost_ratios": self.cost_ratios, "paths": self.paths,
                "oracle_paths": self.oracle_paths, "source": self.source, "world": self.world}

    def plot(self, path: str | Path, max_pairs: int = 12) -> None:
        plot_plans(self.to_dict(), path, max_pairs=max_pairs, labels=self.labels[:2])

    def _repr_markdown_(self) -> str:
        from idaudit.evaluations.report import markdown_text

        rows = "\n".join(f"| {k} | {v:.6g} |" for k, v in self.metrics.items()
                         if isinstance(v, float))
        return (f"**plan** · {markdown_text(self.source)}\n\n| quantity | value |\n|---|---:|\n"
                f"{rows}\n")


def _report(res: dict[str, Any], gallery_z: Any, gallery_h: Any, seed: int, source: str,
            world: dict[str, Any] | None, labels: tuple[str, ...], z_white: bool) -> PlanReport:
    from idaudit.maths.linear import standardize

    z = np.asarray(gallery_z, dtype=np.float64)
    q_hat, _ = fit_linear_map(z if z_white else standardize(z), gallery_h)
    res.update(lqr_value_equivalence(q_hat, seed=seed))
    res["lqr_latents_standardized"] = not z_white
    paths, oracle, ratios = res.pop("paths"), res.pop("oracle_paths"), res.pop("cost_ratios")
    return PlanReport(metrics=res, paths=paths, oracle_paths=oracle, source=source,
                      world=world, labels=labels, cost_ratios=ratios)


def run_plan(req: PlanRequest) -> PlanReport:
    """The plans of :class:`PlanRequest` ``req``. Bad input raises
    :class:`~idaudit.core.errors.IdauditError` (exit 2 in the CLI) before any work is done."""
    check_seed(req.seed)
    seed = req.seed or 0
    from idaudit.core.limits import check

    for name in ("pairs", "waypoints", "k"):
        check(name, getattr(req, name))
    if req.gallery is not None:
        check("gallery", req.gallery)
    from idaudit.evaluations.inputs import check_embedding_options

    check_embedding_options(None, req.encoder.normalize)  # before any encoder is loaded
    place = req.encoder
    options = place.world.world_options()
    encoder = req.target
    placed = place.world.world is not None or place.data is not None or options
    gallery = "a gallery of arrays is planned on as it is: --world, --data and world options " \
        "do not apply" if placed else None  # a caged program's arrays: from their header
    if encoder is not None:
        if not isinstance(encoder, (str, Path)) and (req.z is not None or req.h is not None):
            raise IdauditError("give either a gallery of arrays (z, h) or an encoder, not both")
        loaded: Arrays | LoadedEncoder = open_target(encoder, place.load, arrays_refused=gallery)
    elif req.z is not None and req.h is not None:
        place.load.refuse_all("a gallery of arrays z, h (planned on as it is)")
        loaded = Arrays(z=torch.as_tensor(np.asarray(req.z)), h=torch.as_tensor(np.asarray(req.h)))
    else:
        raise IdauditError("plan needs an encoder (with a world) or a gallery of z and h arrays")
    if isinstance(loaded, Arrays):
        if gallery is not None:
            raise IdauditError(gallery)
        if loaded.z is None:
            raise IdauditError(f"{loaded.source} has no z: planning against the oracle needs "
                               "the true latents of the gallery")
        return plan_gallery(loaded.z, loaded.h, req.pairs, req.waypoints, seed, req.k,
                            loaded.source, z_white=loaded.z_white)
    from idaudit.evaluations.pipeline import input_adapter, probe_input, try_first

    probe = probe_input(loaded, place)  # tried on a few inputs before the world's data are read
    if probe is not None:
        try_first(loaded, probe, place.normalize)
    w = world_for_encoder(loaded, place.world.world, place.data, options)
    check_plan_memory(req.pairs, req.waypoints, w.latent_dim, w.latent_dim)
    ps = w.plan_set(req.pairs, req.gallery, seed)
    if probe is None:
        try_first(loaded, ps.gallery_x, place.normalize, w.spec)
    module = input_adapter(loaded, ps.gallery_x, place.normalize)
    hg = embed(module, ps.gallery_x).numpy()
    res = plan_from_embeddings(hg, ps.gallery_z.numpy(), embed(module, ps.start_x).numpy(),
                               embed(module, ps.goal_x).numpy(), ps.start_z.numpy(),
                               ps.goal_z.numpy(), req.waypoints, req.k)
    return _report(res, ps.gallery_z, hg, seed, str(loaded.path), w.spec.to_dict(),
                   w.latent_labels, ps.z_white)


def plan(encoder: Any = None, *, z: Any = None, h: Any = None, **options: Any) -> PlanReport:
    """Plan straight lines in embedding space and score them against the oracle.

    Everything ``idaudit plan`` takes, under its option names (see :class:`PlanRequest`):
    an ``encoder`` — an ``nn.Module``/callable, or a path to anything ``audit`` reads (an
    idaudit checkpoint, TorchScript, ``torch.export``, plain weights with ``arch``) — with
    its ``world`` (a World, WorldSpec or name, and world options) or ``data``, or the
    checkpoint's own world; or a gallery of arrays ``z``, ``h`` (a path to an
    ``.npz``/``.safetensors`` with them works as ``encoder`` too), whose rows are then the
    starts and goals. ``plan(PlanRequest(...))`` plans a request as it is (:func:`run_plan`),
    with no other argument.
    """
    if isinstance(encoder, PlanRequest):
        if z is not None or h is not None or options:
            raise IdauditError("give a PlanRequest alone, or options, not both")
        return run_plan(encoder)
    if "n_eval" in options:
        raise IdauditError("--n-eval does not apply to plan (--gallery sizes its gallery)")
    unknown_options(PlanRequest, options, "plan", positional=("target", "z", "h"))
    return run_plan(PlanRequest.from_options(target=encoder, z=z, h=h, **options))


def check_plan_memory(pairs: int, waypoints: int, latent_dim: int, embed_dim: int) -> None:
    """Refuse (exit 2) plans whose paths would not fit in memory: the embedding-space lines,
    their decoded and oracle latent paths and the k-NN's work, all float64."""
    from idaudit.core.memory import check_memory

    per_point = 8 * (2 * embed_dim + 3 * latent_dim + 10)
    check_memory(pairs * (waypoints + 1) * per_point,
                 f"planning {pairs} pairs × {waypoints} waypoints (--pairs, --waypoints)")


def plan_gallery(z: Any, h: Any, pairs: int = 100, waypoints: int = 20, seed: int = 0,
                 k: int = 5, source: str = "arrays", z_white: bool = False) -> PlanReport:
    """Plans between rows of a gallery of latents z and their embeddings h (each samples ×
    dims; values whose squared distances overflow float64 are refused, as NaN and Inf are);
    ``z_white``: z's law is white (the LQR's map is then fitted on z as it is, else on z
    standardised per latent)."""
    from idaudit.evaluations.inputs import as_matrix, value_problem
    from idaudit.loading.arrays import numeric_array

    z = as_matrix(numeric_array(z, "z").astype(np.float64, copy=False), "z")
    h = as_matrix(numeric_array(h, "h").astype(np.float64, copy=False), "h")
    if len(z) != len(h):
        raise IdauditError(f"z has {len(z)} rows but h has {len(h)}")
    if len(z) < 2 * k:
        raise IdauditError(f"a gallery of {len(z)} rows is too small to plan on (need ≥ {2 * k})")
    for name, arr in (("z", z), ("h", h)):
        problem, _ = value_problem(arr, name)
        if problem:
            raise IdauditError(f"the gallery cannot be planned on: {problem}")
    check_plan_memory(pairs, waypoints, z.shape[1], h.shape[1])
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(z), size=(pairs, 2), replace=len(z) < 2 * pairs)
    res = plan_from_embeddings(h, z, h[idx[:, 0]], h[idx[:, 1]], z[idx[:, 0]], z[idx[:, 1]],
                               waypoints, k)
    labels = tuple(f"z{i + 1}" for i in range(z.shape[1]))
    return _report(res, z, h, seed, source, None, labels, z_white)
