"""An audit's figures (matplotlib, the ``plot`` extra), drawn on Agg canvases without pyplot.

From each target's arrays (:class:`Drawn`: its :class:`~idaudit.evaluations.inputs.AuditInputs`,
its report and the split it was scored on), in sections whose figures stand side by side, one
column per target:

* ``predictions`` — per latent, the held-out prediction ẑ = Ŵh + ĉ (fitted on the train rows,
  :func:`~idaudit.maths.linear.fit_linear_map`) against the true z on the test rows, and the
  held-out R² of every latent beside its ceiling and the uninformative floor's band;
* ``embeddings`` — for a 2-D latent, h (its top two principal axes where it is wider)
  coloured by the latent's angle atan2(z₂, z₁) and radius ‖z‖;
* ``bound`` — the Theorem 3 bound D + (ε + D)² beside its terms and the Procrustes MSE;
* ``frames`` — a strip of evaluation images with their true latents and those the train rows'
  linear fit decodes, each frame marked where it is one of those rows (worlds whose inputs are
  images);
* ``label_free`` — without z: the canonical correlations of (h, h′) against ρ, and the
  spectrum of Cov(h) against the identity's.

Every number a title shows is the report's own (the JSON's), but for the frames' latents.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from idaudit.core.defaults import TEST_FRACTION
from idaudit.core.errors import IdauditError
from idaudit.evaluations.inputs import AuditInputs
from idaudit.maths.linear import fit_linear_map
from idaudit.maths.moments import split_rows

__all__ = ["Drawn", "MATPLOTLIB_EXTRA", "MAX_DRAWN", "PER_ROW", "PLOT_MISSING", "ROW_INCHES",
           "audit_figure", "embedding_panels", "have_matplotlib", "new_figure", "png_bytes", "rgb_array",
           "section_figure", "sections"]

MATPLOTLIB_EXTRA = 'matplotlib: pip install "idaudit[plot]"'  # what a figure needs
PLOT_MISSING = f"needs {MATPLOTLIB_EXTRA}"
MAX_POINTS = 2000  # scatter points drawn per panel (a seeded sample of the rows)
MAX_LATENTS = 4  # latents drawn as scatter panels (every latent gets its bar)
PER_ROW = 4  # targets side by side in a section; more wrap onto further rows
#: the widest row of targets in inches: the page's column, 1400 px, at its 120 dpi; a wider
#: pair of targets wraps (one target keeps its own width)
ROW_INCHES = 1400 / 120
MAX_DRAWN = 16  # targets drawn (the first ones; the tables hold every target)


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def new_figure(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float],
               hint: str = "", **subplots: Any):
    """A figure on matplotlib's Agg canvas and its axes, made without pyplot: drawing here
    changes neither the caller's backend (a notebook's, say) nor pyplot's open figures."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise IdauditError(f"figures {PLOT_MISSING}{hint}") from None
    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    if nrows == 0:
        return fig, None
    return fig, fig.subplots(nrows, ncols, **subplots)


def png_bytes(fig: Any, dpi: int = 100) -> bytes:
    """The figure as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def rgb_array(fig: Any) -> np.ndarray:
    """The figure as an H × W × 3 uint8 array (what image loggers take)."""
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()


def plane(h: np.ndarray) -> tuple[np.ndarray, str]:
    """h's first two coordinates where it is 2-D, else its projection on the top two
    principal axes of its covariance; and what the axes are."""
    h = np.asarray(h, dtype=np.float64)
    if h.shape[1] <= 2:
        return (h if h.shape[1] == 2 else np.c_[h, np.zeros(len(h))]), "h₁, h₂"
    centred = h - h.mean(0)
    vecs = np.linalg.eigh(centred.T @ centred)[1][:, ::-1][:, :2]
    return centred @ vecs, "top two principal axes of h"


def embedding_panels(fig: Any, axes: Any, z: np.ndarray, h: np.ndarray, title: str) -> None:
    """Two panels: h (:func:`plane`) coloured by the 2-D latent's angle atan2(z₂, z₁) and by
    its radius ‖z‖ (the sweeps' embeddings figure and the audit's)."""
    z = np.asarray(z, dtype=float)
    xy, what_axes = plane(h)
    angle = np.arctan2(z[:, 1], z[:, 0])
    radius = np.linalg.norm(z, axis=1)
    for ax, (c, cmap, what) in zip(axes, ((angle, "twilight", "angle"),
                                          (radius, "viridis", "radius"))):
        sc = ax.scatter(xy[:, 0], xy[:, 1], c=c, cmap=cmap, s=3, linewidths=0)
        ax.set_aspect("equal", adjustable="datalim")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(f"{title}\ncolour: z {what}", fontsize=7)
        if what_axes != "h₁, h₂":
            ax.set_xlabel(what_axes, fontsize=6)
        fig.colorbar(sc, ax=ax, shrink=0.8).ax.tick_params(labelsize=6)


# ---- what is drawn ----------------------------------------------------------------------


@dataclass
class Drawn:
    """One target as the figures draw it: its checked arrays, its report, and the seed and
    held-out share its split was drawn with (a world's fixed ``test_rows`` win)."""

    inputs: AuditInputs
    report: Any  # AuditReport
    seed: int = 0
    test_fraction: float | None = None

    @property
    def name(self) -> str:
        return self.report.source or self.inputs.source

    @property
    def metrics(self) -> dict[str, Any]:
        return self.report.metrics

    def split(self) -> tuple[np.ndarray, np.ndarray]:
        """(train rows, test rows): the audit's own split (drawn once per target)."""
        return self._split

    @cached_property
    def _split(self) -> tuple[np.ndarray, np.ndarray]:
        rows = self.inputs.h.shape[0]
        if self.inputs.test_rows is not None:
            mask = np.zeros(rows, dtype=bool)
            mask[np.asarray(self.inputs.test_rows).astype(np.int64)] = True
            return np.flatnonzero(~mask), np.flatnonzero(mask)
        test, train = split_rows(rows, TEST_FRACTION if self.test_fraction is None
                                 else self.test_fraction, self.seed)
        return train, test

    def predicted(self, rows: np.ndarray) -> np.ndarray:
        """ẑ = Ŵh + ĉ at ``rows``, Ŵ and ĉ fitted on the train rows (held-out where ``rows``
        are test rows)."""
        w, c = self._linear_map
        return np.asarray(self.inputs.h[rows], dtype=np.float64) @ w.T + c

    @cached_property
    def _linear_map(self) -> tuple[np.ndarray, np.ndarray]:
        """(Ŵ, ĉ) fitted on the train rows, once per target (the predictions and the frames
        both decode with it)."""
        train, _ = self.split()
        return fit_linear_map(self.inputs.h[train], self.inputs.z[train])

    @property
    def has_z(self) -> bool:
        return self.inputs.z is not None and "r2_h_to_z_heldout_per_dim" in self.metrics


def _sample(rows: np.ndarray, k: int = MAX_POINTS) -> np.ndarray:
    if rows.size <= k:
        return rows
    return np.sort(np.random.default_rng(0).choice(rows, k, replace=False))


def _short(name: str, width: int = 40) -> str:
    return name if len(name) <= width else "…" + name[-(width - 1):]


def _predictions(fig: Any, d: Drawn) -> None:
    m = d.metrics
    z = np.asarray(d.inputs.z, dtype=np.float64)
    n = z.shape[1]
    _, test = d.split()
    shown = min(n, MAX_LATENTS)
    axes = fig.subplots(1, shown + 1, squeeze=False).flat
    pred = d.predicted(test)
    r2 = m["r2_h_to_z_heldout_per_dim"]
    ceiling = m.get("r2_h_to_z_ceiling_per_dim")
    keep = _sample(np.arange(test.size))
    for j in range(shown):
        ax = axes[j]
        ax.scatter(z[test[keep], j], pred[keep, j], s=3, alpha=0.5, linewidths=0)
        lo, hi = float(z[test, j].min()), float(z[test, j].max())
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        extra = f", ceiling {ceiling[j]:.3f}" if ceiling else ""
        ax.set_title(f"z{j}: R² {r2[j]:.3f}{extra}", fontsize=8)
        ax.set_xlabel(f"true z{j}", fontsize=7)
        ax.set_ylabel(f"held-out prediction of z{j}", fontsize=7)
        ax.tick_params(labelsize=6)
    ax = axes[shown]
    ax.bar(range(n), r2, color="C0", label="held-out R²")
    if ceiling:
        ax.scatter(range(n), ceiling, marker="_", s=200, color="k", zorder=3, label="ceiling")
    band = m.get("r2_h_to_z_heldout_floor_band")
    if band:  # the band's edges drawn too: on many rows it is thinner than a line
        ax.axhspan(band[0], band[1], color="grey", alpha=0.4, lw=1, ec="grey",
                   label=f"uninformative floor [{band[0]:.3g}, {band[1]:.3g}]")
    ax.axhline(0, color="k", lw=0.5)
    ax.set_ylim(min(-0.05, (band or [0])[0] - 0.05, min(r2) - 0.05), 1.05)
    if n <= 16:
        ax.set_xticks(range(n), [f"z{j}" for j in range(n)])
    ax.set_title(f"held-out R² per latent (mean {m['r2_h_to_z_heldout']:.3f})", fontsize=8)
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=1)
    ax.tick_params(labelsize=6)
    fig.suptitle(_short(d.name), fontsize=8)


def _embeddings(fig: Any, d: Drawn) -> None:
    axes = fig.subplots(1, 2)
    keep = _sample(np.arange(d.inputs.h.shape[0]))
    embedding_panels(fig, axes, d.inputs.z[keep], d.inputs.h[keep],
                     f"{_short(d.name, 30)}: R² {d.metrics['r2_h_to_z_heldout']:.3f}")


#: the bound's figure: (metric key, label), in the order drawn
BOUND_BARS = (("whitening_error", "ε = ‖Cov h − I‖_F"), ("alignment_gap", "δ"), ("D", "D"),
              ("bound", "bound D + (ε + D)²"), ("bound_upper", "bound, upper (95%)"),
              ("procrustes_mse", "Procrustes MSE"))


def _bound(fig: Any, d: Drawn) -> None:
    m = d.metrics
    bars = [(label, float(m[k])) for k, label in BOUND_BARS if m.get(k) is not None]
    ax = fig.subplots()
    vals = [max(v, 1e-12) for _, v in bars]
    colours = ["C3" if label == "Procrustes MSE" else "C0" for label, _ in bars]
    ax.barh(range(len(bars)), vals, color=colours)
    for i, (_, v) in enumerate(bars):
        ax.text(vals[i], i, f" {v:.4g}", va="center", fontsize=7)
    if m.get("bound_trivial") is not None:
        ax.axvline(m["bound_trivial"], color="grey", ls="--", lw=1,
                   label=f"E‖z − z̄‖² = {m['bound_trivial']:.4g} (a constant h)")
        # outside the axes, to their right: no bar or bar label lies under it
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.set_yticks(range(len(bars)), [label for label, _ in bars], fontsize=7)
    ax.set_xscale("log")
    ax.set_xlim(min(vals) / 3, max(vals + [m.get("bound_trivial") or 0]) * 8)
    ax.invert_yaxis()
    holds = m.get("bound_holds")
    verdict = "" if holds is None else (" · MSE ≤ bound" if holds else " · MSE > bound")
    ax.set_title(f"{_short(d.name, 30)}: Theorem 3 (ρ = {m.get('rho', float('nan')):g})"
                 f"{verdict}", fontsize=8)
    ax.tick_params(labelsize=6)


def _frames(fig: Any, d: Drawn) -> None:
    frames, rows = d.inputs.frames, d.inputs.frame_rows
    pred = d.predicted(rows)
    z = np.asarray(d.inputs.z, dtype=np.float64)[rows]
    held_out = np.isin(rows, d.split()[1])  # frames of a world without fixed test rows may
    axes = fig.subplots(1, len(rows), squeeze=False).flat  # be among the fit's own rows
    for ax, img, true, got, out in zip(axes, frames, z, pred, held_out):
        ax.imshow(img)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title("true " + ", ".join(f"{v:+.2f}" for v in true) + "\ndecoded "
                     + ", ".join(f"{v:+.2f}" for v in got) + ("" if out else " (fit row)"),
                     fontsize=6)
    which = "held out" if held_out.all() else f"{held_out.sum()} of {held_out.size} held out"
    fig.suptitle(f"{_short(d.name)}: evaluation frames, true and decoded latents (linear fit "
                 f"on the audit's train rows; frames {which})", fontsize=8)


def _label_free(fig: Any, d: Drawn) -> None:
    from idaudit.maths.labelfree import canonical_correlations

    h = np.asarray(d.inputs.h, dtype=np.float64)
    hp = d.inputs.h_prime
    axes = fig.subplots(1, 2 if hp is not None else 1, squeeze=False).flat
    evals = np.sort(np.linalg.eigvalsh(np.cov(h, rowvar=False).reshape(h.shape[1], -1)))[::-1]
    ax = axes[0]
    ax.plot(np.arange(1, evals.size + 1), np.maximum(evals, 1e-12), "o-", ms=3)
    ax.axhline(1.0, color="k", ls="--", lw=0.8, label="white: every eigenvalue 1")
    ax.set_yscale("log")
    ax.set_xlabel("eigenvalue index", fontsize=7)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title(f"spectrum of Cov(h): ε {d.metrics.get('whitening_error', float('nan')):.3g},"
                 f" effective rank {d.metrics.get('effective_rank', float('nan')):.3g}",
                 fontsize=8)
    ax.legend(fontsize=6)
    ax.tick_params(labelsize=6)
    if hp is not None:
        cc = canonical_correlations(h, np.asarray(hp, dtype=np.float64))
        ax = axes[1]
        ax.plot(np.arange(1, cc.size + 1), cc, "o-", ms=3, label="canonical correlations")
        rho = d.inputs.rho
        if rho is not None:
            ax.axhline(rho, color="k", ls="--", lw=0.8, label=f"ρ = {rho:g} (identified: all)")
        ax.set_ylim(min(0.0, float(cc.min()) - 0.05), 1.02)
        ax.set_xlabel("index", fontsize=7)
        ax.xaxis.get_major_locator().set_params(integer=True)
        spread = d.metrics.get("canonical_spread")
        ax.set_title("canonical correlations of (h, h′)"
                     + (f": spread {spread:.3g}" if spread is not None else ""), fontsize=8)
        ax.legend(fontsize=6)
        ax.tick_params(labelsize=6)
    fig.suptitle(_short(d.name), fontsize=8)


@dataclass(frozen=True)
class Section:
    """One figure of the page: its ``title``, which targets it draws (``applies``), how it
    draws one (into a subfigure) and the height of one target's drawing in inches."""

    name: str
    title: str
    applies: Callable[[Drawn], bool]
    draw: Callable[[Any, Drawn], None]
    height: float
    width: Callable[[Drawn], float]


def _can_draw(d: Drawn) -> bool:
    return d.report.verdict != "inconclusive"


SECTIONS: tuple[Section, ...] = (
    Section("predictions", "held-out predictions against the true latents", lambda d: d.has_z,
            _predictions, 3.0, lambda d: 2.8 * (min(d.inputs.z.shape[1], MAX_LATENTS) + 1)),
    Section("embeddings", "the embedding coloured by the 2-D latent's angle and radius",
            lambda d: d.has_z and d.inputs.z.shape[1] == 2, _embeddings, 3.2, lambda d: 6.4),
    Section("frames", "evaluation frames, true and decoded",
            lambda d: d.has_z and d.inputs.frames is not None, _frames, 2.3,
            lambda d: 1.5 * len(d.inputs.frame_rows)),
    Section("label_free", "what h and h′ say without z", lambda d: not d.has_z, _label_free,
            3.0, lambda d: 5.6 if d.inputs.h_prime is not None else 3.2),
    Section("bound", "the bound beside its terms", lambda d: d.metrics.get("bound") is not None,
            _bound, 2.6, lambda d: 6.0),
)


def sections(drawn: list[Drawn]) -> list[tuple[Section, list[Drawn]]]:
    """The sections some target supports, each with the targets it draws (of the first
    :data:`MAX_DRAWN` targets)."""
    ok = [d for d in drawn[:MAX_DRAWN] if _can_draw(d)]
    return [(s, got) for s in SECTIONS if (got := [d for d in ok if s.applies(d)])]


def _rows(section: Section, targets: list[Drawn]) -> list[list[Drawn]]:
    """The targets in rows: at most :data:`PER_ROW` to a row, and a second one joins a row
    only while the row stays within :data:`ROW_INCHES` (so the page, whose column is that
    wide, never shrinks a figure to fit two targets side by side)."""
    rows: list[list[Drawn]] = []
    for d in targets:
        row = rows[-1] if rows else None
        if row is not None and len(row) < PER_ROW and \
                sum(section.width(t) for t in row) + section.width(d) <= ROW_INCHES:
            row.append(d)
        else:
            rows.append([d])
    return rows


def _size(section: Section, targets: list[Drawn]) -> tuple[float, float]:
    """(width, height) in inches of a section's targets, in :func:`_rows`."""
    rows = _rows(section, targets)
    return (max(sum(section.width(d) for d in row) for row in rows),
            section.height * len(rows))


def _fill(fig: Any, section: Section, targets: list[Drawn]) -> None:
    rows = _rows(section, targets)
    width = _size(section, targets)[0]
    for place, row in zip(fig.subfigures(len(rows), 1, squeeze=False).flat, rows):
        widths = [section.width(d) for d in row]
        spare = width - sum(widths)  # a short last row keeps the others' scale
        subs = place.subfigures(1, len(row) + (spare > 0), squeeze=False,
                                width_ratios=widths + ([spare] if spare > 0 else [])).flat
        for sub, d in zip(subs, row):
            section.draw(sub, d)


def section_figure(section: Section, targets: list[Drawn]) -> Any:
    """One section's figure: its targets side by side, in :func:`_rows`."""
    fig, _ = new_figure(0, figsize=_size(section, targets))
    _fill(fig, section, targets)
    return fig


def audit_figure(drawn: list[Drawn]) -> Any | None:
    """Every section in one figure (``--plot``), one row each; None where there is nothing
    to draw (an inconclusive audit)."""
    chosen = sections(drawn)
    if not chosen:
        return None
    sizes = [_size(s, got) for s, got in chosen]
    width, heights = max(w for w, _ in sizes), [h for _, h in sizes]
    fig, _ = new_figure(0, figsize=(width, sum(heights)))
    rows = fig.subfigures(len(chosen), 1, squeeze=False, height_ratios=heights).flat
    for row, (section, got) in zip(rows, chosen):
        _fill(row, section, got)
    return fig
