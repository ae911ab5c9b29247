"""How well do label-free signals predict the true R²(h → z)? Calibration on sweeps.

Reads the run records of one or more ``idaudit sweep`` directories (their ``label_free``
signals and the true held-out R²), prints a Markdown table of each signal's Spearman rank
correlation with the truth, the false-pass / false-fail rates of the recommended label-free
gate against the truth "R² ≥ 0.99", and writes a figure.

    python scripts/calibrate_label_free.py SWEEP_DIR [SWEEP_DIR ...] [--figure PATH]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

# signal name → (how to read it from a record's label-free dict and embed dim m, direction:
# +1 when larger means more identifiable, −1 when smaller does)
SIGNALS = {
    "ε / √m": (lambda s, m: s["whitening_error"] / math.sqrt(m), -1),
    "ε, floor-corrected / √m": (lambda s, m: s["whitening_error_corrected"] / math.sqrt(m), -1),
    "δ / m": (lambda s, m: s["alignment_gap"] / m, -1),
    "D / m": (lambda s, m: s["D"] / m, -1),
    "canonical shortfall ρ − mean cc": (lambda s, m: s["canonical_shortfall"], -1),
    "canonical spread ρ̂ − mean cc": (lambda s, m: s["canonical_spread"], -1),
    "δ at ρ̂ / m": (lambda s, m: s["alignment_gap_rho_estimated"] / m, -1),
    "Gaussianity statistic": (lambda s, m: s["gaussianity_statistic"], -1),
    "effective rank / m": (lambda s, m: s["effective_rank"] / m, +1),
}
TRUTH = 0.99


def recommended_gate(s: dict, m: int) -> bool:
    """The label-free gate docs/label-free.md recommends."""
    return (s["canonical_shortfall"] <= 0.01 and s["whitening_error_corrected"] <= 0.1 * math.sqrt(m)
            and s["effective_rank"] >= 0.9 * m)


def load(dirs: list[Path]) -> list[dict]:
    rows, seen = [], set()
    for d in dirs:
        for f in sorted((d / "runs").glob("*.json")):
            if f.name.endswith(".failed.json"):
                continue
            rec = json.loads(f.read_text())
            if rec.get("id") in seen:  # the same run in two suites counts once
                continue
            seen.add(rec.get("id"))
            lf = rec.get("label_free")
            r2 = rec.get("metrics", {}).get("r2_h_to_z_heldout")
            if not lf or r2 is None or "canonical_shortfall" not in lf:
                continue
            rows.append({"suite": d.name, "r2": float(r2), "m": int(lf["embed_dim"]), "lf": lf,
                         "options": rec.get("options", {})})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--figure", type=Path, default=None)
    args = ap.parse_args()
    rows = load(args.dirs)
    if len(rows) < 5:
        raise SystemExit(f"only {len(rows)} runs with label-free signals in {args.dirs}")
    truth = np.array([r["r2"] for r in rows])
    good = truth >= TRUTH
    print(f"{len(rows)} runs ({', '.join(sorted({r['suite'] for r in rows}))}); "
          f"{int(good.sum())} with held-out R²(h → z) ≥ {TRUTH}\n")
    print("| label-free signal | Spearman ρ with the true held-out R² (sign: higher = better) |")
    print("|---|---|")
    ranks = []
    for name, (get, sign) in SIGNALS.items():
        vals = np.array([get(r["lf"], r["m"]) for r in rows], dtype=float)
        ok = np.isfinite(vals)
        rho = spearmanr(sign * vals[ok], truth[ok]).statistic
        print(f"| {name} | {rho:+.3f} |")
        ranks.append(np.argsort(np.argsort(sign * np.where(ok, vals, np.nanmedian(vals)))))
    combined = np.mean(ranks, axis=0)
    print(f"| **combined** (mean of the signals' ranks) | {spearmanr(combined, truth).statistic:+.3f} |")
    verdict = np.array([recommended_gate(r["lf"], r["m"]) for r in rows])
    fp = float(np.mean(verdict[~good])) if (~good).any() else float("nan")
    fn = float(np.mean(~verdict[good])) if good.any() else float("nan")
    print(f"\nrecommended gate (canonical_shortfall ≤ 0.01, ε_corrected ≤ 0.1·√m, effective rank "
          f"≥ 0.9·m) against the truth R² ≥ {TRUTH}: false-pass rate {fp:.3f} "
          f"({int(verdict[~good].sum())} of {int((~good).sum())}), false-fail rate {fn:.3f} "
          f"({int((~verdict[good]).sum())} of {int(good.sum())})")
    if args.figure is not None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=(10, 4))  # no pyplot: the backend stays the caller's
        FigureCanvasAgg(fig)
        axes = fig.subplots(1, 2)
        for suite in sorted({r["suite"] for r in rows}):
            sel = [r for r in rows if r["suite"] == suite]
            axes[0].scatter([max(r["lf"]["canonical_shortfall"], 1e-5) for r in sel],
                            [r["r2"] for r in sel], s=12, label=suite)
            axes[1].scatter([r["lf"]["whitening_error_corrected"] / math.sqrt(r["m"]) + 1e-5
                             for r in sel], [r["r2"] for r in sel], s=12, label=suite)
        for ax, label in zip(axes, ("canonical shortfall ρ − mean cc", "ε floor-corrected / √m")):
            ax.set_xscale("log")
            ax.set_xlabel(label)
            ax.set_ylabel("true held-out R²(h → z)")
            ax.axhline(TRUTH, color="grey", lw=0.8, ls="--")
        axes[0].axvline(0.01, color="grey", lw=0.8, ls=":")
        axes[1].axvline(0.1, color="grey", lw=0.8, ls=":")
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        args.figure.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.figure, dpi=120)
        print(f"\nfigure: {args.figure}")


if __name__ == "__main__":
    main()
