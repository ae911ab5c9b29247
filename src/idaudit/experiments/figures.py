"""The paper's figures from a sweep's results (matplotlib, the ``plot`` extra).

Each figure is drawn only when the runs contain what it needs:

* ``embeddings.png`` — 2D embeddings h coloured by the true latent's angle atan2(z₂, z₁) and
  radius ‖z‖ (runs with a 2D latent keep a sample of (z, h) for this);
* ``r2_vs_n.png`` — R²(h → z) and 1 − R² against N per method, raw-mixing R² dashed;
* ``r2_vs_alpha.png`` — R²(h → z) against the generalised-normal shape α, one panel per mixing;
* ``grid_heatmaps.png`` — λ × ρ heat maps of R²(h → z) and orthogonality error;
* ``bound.png`` — Procrustes MSE against the bound D + (ε + D)², with the diagonal.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from idaudit.core.atomic import atomic_write
from idaudit.core.defaults import WORLD
from idaudit.evaluations.figures import embedding_panels, new_figure
from idaudit.experiments.aggregate import grid_cells, method_label

__all__ = ["FIGURES", "bound_counts", "bound_points", "draw_figures", "gaussian_source"]

Record = dict[str, Any]
Row = dict[str, Any]


def _figure(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float], **subplots: Any):
    """A figure on an Agg canvas and its axes (:func:`idaudit.evaluations.figures.new_figure`)."""
    return new_figure(nrows, ncols, figsize=figsize, hint=" (or pass --no-figures)", **subplots)


def _save(fig, path: Path) -> Path:
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight"))
    return path


def _fmt(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _varying(runs: list[dict[str, Any]]) -> list[str]:
    keys = sorted({k for r in runs for k in r})
    return [k for k in keys if k != "seed" and len({json.dumps(r.get(k)) for r in runs}) > 1]


def _spread(items: list[Any], k: int) -> list[Any]:
    """At most ``k`` items, evenly spaced over the list (first and last included)."""
    if len(items) <= k:
        return items
    idx = np.unique(np.round(np.linspace(0, len(items) - 1, k)).astype(int))
    return [items[i] for i in idx]


def plot_embeddings(records: list[Record], path: Path, max_runs: int = 8) -> Path | None:
    """Panels of h coloured by the latent's angle and radius, one pair per configuration."""
    with_sample = [r for r in records if r.get("embedding_sample")]
    if not with_sample:
        return None
    first: dict[str, Record] = {}
    for r in sorted(with_sample, key=lambda r: json.dumps(r["run"], sort_keys=True)):
        first.setdefault(json.dumps({k: v for k, v in r["run"].items() if k != "seed"},
                                    sort_keys=True), r)
    chosen = _spread(list(first.values()), max_runs)
    varying = _varying([r["run"] for r in chosen]) or ["world"]
    ncols = 4 if len(chosen) > 1 else 2
    nrows = math.ceil(2 * len(chosen) / ncols)
    fig, axes = _figure(nrows, ncols, figsize=(3.2 * ncols, 3.3 * nrows), squeeze=False)
    for ax in axes.flat:
        ax.set_axis_off()
    for i, rec in enumerate(chosen):
        name = ", ".join(f"{k}={_fmt(rec['run'][k])}" for k in varying if k in rec["run"])
        r2 = rec["metrics"].get("r2_h_to_z")
        pair = axes.flat[2 * i:2 * i + 2]
        for ax in pair:
            ax.set_axis_on()
        embedding_panels(fig, pair, np.asarray(rec["embedding_sample"]["z"], dtype=float),
                         np.asarray(rec["embedding_sample"]["h"], dtype=float),
                         f"{name}\nR²={r2:.3f}" if r2 is not None else name)
    fig.suptitle("embeddings h, coloured by the true latent", fontsize=10)
    return _save(fig, path)


def _series(rows: list[Row], x: str, group: Callable[[Row], str]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = {}
    for r in sorted(rows, key=lambda r: r.get(x) if r.get(x) is not None else 0):
        if r.get(x) is not None and "r2_h_to_z_mean" in r:
            out.setdefault(group(r), []).append(r)
    return out


def plot_r2_vs_n(rows: list[Row], path: Path) -> Path | None:
    """R²(h → z) against N per method (mean ± std over seeds); raw mixing R² dashed."""
    if len({r.get("dim", 2) for r in rows}) < 2:
        return None
    rows = [{**r, "dim": r.get("dim", 2)} for r in rows]
    series = _series(rows, "dim", lambda r: r["method"])
    fig, (a1, a2) = _figure(1, 2, figsize=(11, 4))
    for name, rs in sorted(series.items()):
        n = [r["dim"] for r in rs]
        m = np.array([r["r2_h_to_z_mean"] for r in rs])
        s = np.array([r.get("r2_h_to_z_std", 0.0) for r in rs])
        a1.errorbar(n, m, yerr=s, marker="o", capsize=3, label=name)
        a2.plot(n, np.clip(1 - m, 1e-9, None), marker="o", label=name)
    mix: dict[int, float] = {}
    for r in rows:
        if "mixing_r2_x_to_z_mean" in r:
            mix.setdefault(r["dim"], r["mixing_r2_x_to_z_mean"])
    if mix:
        dims = sorted(mix)
        a1.plot(dims, [mix[d] for d in dims], "k--", label="raw mixing R²(x→z)")
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("latent dimension N")
        ax.grid(alpha=0.3)
    a1.set_ylabel("R²(h → z)")
    a2.set_yscale("log")
    a2.set_ylabel("1 − R²(h → z)")
    a1.legend(fontsize=8)
    fig.suptitle("linear identifiability against dimension")
    return _save(fig, path)


def plot_r2_vs_alpha(rows: list[Row], path: Path) -> Path | None:
    """R²(h → z) against α, one panel per mixing, one line per method; α = 2 marked."""
    if len({r.get("alpha") for r in rows if r.get("alpha") is not None}) < 2:
        return None
    worlds = sorted({r.get("world", WORLD) for r in rows if r.get("alpha") is not None})
    fig, axes = _figure(1, len(worlds), figsize=(4.2 * len(worlds), 3.8), squeeze=False,
                        sharey=True)
    for ax, world in zip(axes.flat, worlds):
        at = [r for r in rows if r.get("world", WORLD) == world]
        for name, rs in sorted(_series(at, "alpha", lambda r: r["method"]).items()):
            a = [r["alpha"] for r in rs]
            ax.errorbar(a, [r["r2_h_to_z_mean"] for r in rs],
                        yerr=[r.get("r2_h_to_z_std", 0.0) for r in rs], marker="o", capsize=3,
                        label=name)
        ax.axvline(2.0, color="grey", ls=":", label="α = 2 (Gaussian)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("source shape α")
        ax.set_title(world)
        ax.grid(alpha=0.3)
    axes.flat[0].set_ylabel("R²(h → z)")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("generalised-normal sources: recovery peaks at the Gaussian")
    return _save(fig, path)


def plot_grid_heatmaps(rows: list[Row], path: Path) -> Path | None:
    """λ × ρ heat maps of mean R²(h → z) and orthogonality error (see ``grid_cells``)."""
    cells = grid_cells(rows)
    if cells is None:
        return None
    world, method, lambs, rhos, mats = cells
    fig, axes = _figure(1, 2, figsize=(12, 0.45 * len(lambs) + 2.2))
    for ax, (metric, title, cmap) in zip(axes, (
            ("r2_h_to_z", "R²(h → z)", "viridis"),
            ("orthogonality_error", "orthogonality error", "magma_r"))):
        grid = mats[metric]
        vmax = 1.0 if metric == "r2_h_to_z" else max(float(np.nanmax(grid)), 1e-12)
        im = ax.imshow(grid, cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto")
        for i, j in zip(*np.nonzero(np.isfinite(grid))):
            frac = grid[i, j] / vmax
            dark = frac < 0.5 if cmap == "viridis" else frac > 0.5
            ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if dark else "black")
        ax.set_xticks(range(len(rhos)), [f"{r:g}" for r in rhos])
        ax.set_yticks(range(len(lambs)), [f"{lam:g}" for lam in lambs])
        ax.set_xlabel("ρ")
        ax.set_ylabel("λ")
        ax.set_title(title)
        fig.colorbar(im, ax=ax, shrink=0.9)
    fig.suptitle(f"{world} · {method}: regulariser weight λ × pair correlation ρ")
    return _save(fig, path)


def gaussian_source(run: dict[str, Any]) -> bool:
    """Whether a run's latents are Gaussian (Theorem 3's assumption)."""
    source = run.get("source", "gaussian")
    return source == "gaussian" or (source == "gennorm" and float(run.get("alpha", 2.0)) == 2.0)


def bound_points(records: list[Record]) -> tuple[dict[str, list[tuple[float, float]]],
                                                 dict[str, list[tuple[float, float]]]]:
    """({label: [(bound, Procrustes MSE)] of the runs compared with Theorem 3's bound},
    {label: the same of the collapsed runs, counted apart}); labels name the method, and
    ", non-Gaussian z" where the latents are outside the theorem's assumptions."""
    from idaudit.training.collapse import record_collapsed

    pts: dict[str, list[tuple[float, float]]] = {}
    flat: dict[str, list[tuple[float, float]]] = {}
    for rec in records:
        m = rec.get("metrics", {})
        if m.get("bound") is not None and m.get("procrustes_mse") is not None:
            name = method_label(rec["run"]) + ("" if gaussian_source(rec["run"])
                                               else ", non-Gaussian z")
            point = (float(m["bound"]), float(m["procrustes_mse"]))
            (flat if record_collapsed(rec) else pts).setdefault(name, []).append(point)
            pts.setdefault(name, [])
    return pts, flat


def bound_counts(records: list[Record]) -> dict[str, tuple[int, int, int]]:
    """{label: (runs under the bound, runs compared, collapsed runs)}: what bound.png's
    legend says of each method (:func:`bound_points`)."""
    pts, flat = bound_points(records)
    return {name: (sum(mse <= b for b, mse in p), len(p), len(flat.get(name, [])))
            for name, p in pts.items()}


def plot_bound(records: list[Record], path: Path) -> Path | None:
    """Procrustes MSE against D + (ε + D)² per run; points under the diagonal obey Theorem 3.

    Runs with non-Gaussian sources (outside the theorem's assumptions) are drawn hollow and
    counted separately; collapsed runs (:func:`~idaudit.training.collapse.record_collapsed`:
    h near one point, bound ≈ MSE ≈ m by construction) are drawn as grey crosses and counted
    apart ("k collapsed"), neither under nor above the bound."""
    pts, flat = bound_points(records)
    if not pts:
        return None
    fig, ax = _figure(figsize=(5.2, 4.8))
    allv = np.array([v for p in (*pts.values(), *flat.values()) for v in p])
    lo = max(np.min(allv[allv > 0]) / 2, 1e-9) if (allv > 0).any() else 1e-6
    hi = np.max(allv) * 2
    counts = bound_counts(records)
    base = sorted({name.split(",")[0] for name in pts})
    colours = [f"C{i % 10}" for i in range(len(base))]
    for name, p in sorted(pts.items()):
        a = np.array(p).reshape(-1, 2)
        held, _, k = counts[name]
        counted = f"{held}/{len(a)} under" + (f", {k} collapsed" if k else "")
        label = f"{name} ({counted})" if len(a) else f"{name} ({k} collapsed)"
        style = ({"facecolors": "none", "edgecolors": colours[base.index(name.split(",")[0])]}
                 if name.endswith("non-Gaussian z")
                 else {"color": colours[base.index(name)]})
        if len(a):
            ax.scatter(np.clip(a[:, 0], lo, None), np.clip(a[:, 1], lo, None), s=16, alpha=0.8,
                       label=label, **style)
        if k:
            c = np.array(flat[name])
            ax.scatter(np.clip(c[:, 0], lo, None), np.clip(c[:, 1], lo, None), s=28,
                       marker="x", color="grey", label=None if len(a) else label)
    if flat:
        ax.scatter([], [], s=28, marker="x", color="grey",
                   label="× collapsed (h ≈ one point): not compared")
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="bound = MSE")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("bound D + (ε + D)²")
    ax.set_ylabel("Procrustes MSE  min_Q E‖h − Qz‖²")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    ax.set_title("approximate-identifiability bound (Theorem 3)")
    return _save(fig, path)


#: every figure :func:`draw_figures` may write in ``OUT/figures``, in its order
FIGURES = ("embeddings.png", "r2_vs_n.png", "r2_vs_alpha.png", "grid_heatmaps.png", "bound.png")


def draw_figures(records: list[Record], rows: list[Row], out_dir: str | Path) -> list[Path]:
    """Every figure the results support, as PNGs under ``OUT/figures``; return their paths."""
    fig_dir = Path(out_dir) / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    drawn = ((plot_embeddings, records), (plot_r2_vs_n, rows), (plot_r2_vs_alpha, rows),
             (plot_grid_heatmaps, rows), (plot_bound, records))
    made = [draw(data, fig_dir / name) for name, (draw, data) in zip(FIGURES, drawn)]
    return [p for p in made if p is not None]
