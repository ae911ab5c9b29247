"""The objective-form table of docs/objective-forms.md: the paper's lejepa form against the lejepa
library's (``--form official``), with and without a projector, and the other objectives
(``vicreg``, ``whiten``), on several worlds and seeds.

For every world × form × seed it trains one checkpoint (``idaudit.train``), then audits it and
plans with it (``idaudit.audit``, ``idaudit.plan``); a run with a projector is audited and
planned twice, on the backbone's output and on the projector's (``output="projector"``).
Results go to ``OUT/results.json`` cell by cell (a rerun skips the cells it has, and trains
only the checkpoints that are missing), and the table is printed as markdown.

    python scripts/objective_form_table.py --out oft --steps 5000 --seeds 2
    python scripts/objective_form_table.py --out oft --only reacher --reacher-data data/DIR
    python scripts/objective_form_table.py --out oft --print      # the table of what is done

``--forms`` limits the forms run (labels, as in FORMS).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import idaudit

#: the worlds of the table: (label, the train options that make it, its latent dimension)
WORLDS = [
    ("spiral", {"world": "spiral"}, 2),
    ("banana", {"world": "banana"}, 2),
    ("sinusoid", {"world": "sinusoid"}, 2),
    ("coupling N=8", {"world": "coupling", "dim": 8}, 8),
    ("coupling N=64", {"world": "coupling", "dim": 64}, 64),
    ("spiral, gennorm α=1.5", {"world": "spiral", "source": "gennorm", "alpha": 1.5}, 2),
    ("reacher", {"world": "reacher", "rho": 0.95}, 2),
]
#: the forms: (label, the train options, whether the projector is audited too)
FORMS = [
    ("paper", {}, False),
    ("official", {"form": "official"}, False),
    ("official + projector", {"form": "official"}, True),
    # the library's form at the paper's λ: what per-view SIGReg changes, apart from λ
    ("official, λ = 1e-3", {"form": "official", "lamb": 1e-3}, False),
    # other objectives beside lejepa's forms: VICReg as its authors define it, and the paper's
    # whitening form at the λ of its sweeps
    ("vicreg", {"objective": "vicreg"}, False),
    ("whiten, λ = 0.5", {"objective": "whiten", "lamb": 0.5}, False),
]
PROJECTOR_HIDDEN = 256  # the projector: Linear-BN-ReLU(256) × 2, Linear to the latent dimension


def slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text).strip("-").lower()


def cell(out: Path, world: tuple, form: tuple, seed: int, steps: int,
         reacher_data: str | None) -> dict:
    label, options, dim = world
    form_label, form_options, projected = form
    options = {**options, **form_options, "seed": seed}
    if projected:
        options["projector"] = f"{PROJECTOR_HIDDEN},{PROJECTOR_HIDDEN},{dim}"
    if options["world"] == "reacher":
        if reacher_data is None:
            raise SystemExit("the reacher row needs --reacher-data DIR (a rendered dataset)")
        options.pop("rho")
        options["data"] = reacher_data
    else:
        options["steps"] = steps
    ckpt = out / f"{slug(label)}-{slug(form_label)}-s{seed}.safetensors"
    t0 = time.perf_counter()
    if not ckpt.exists():
        idaudit.train(out=str(ckpt), **options)
    minutes = (time.perf_counter() - t0) / 60
    row = {"world": label, "form": form_label, "seed": seed, "options": options,
           "checkpoint": ckpt.name, "train_minutes": round(minutes, 2)}
    for output in (["backbone", "projector"] if projected else [None]):
        extra = {"output": output} if output else {}
        report = idaudit.audit(encoder=str(ckpt), **extra)
        plans = idaudit.plan(str(ckpt), **extra)
        key = output or "backbone"
        row[key] = {"r2_h_to_z_heldout": report.metrics["r2_h_to_z_heldout"],
                    "orthogonality_error": report.metrics["orthogonality_error"],
                    "cost_ratio_median": plans.cost_ratio_median}
    return row


def table(rows: list[dict]) -> str:
    """One line per world and form (seeds side by side): held-out R² and median plan cost ratio."""
    lines = ["| world | form | audited | R²(h → z) held-out, seed 0 / 1 | plan cost ratio, seed 0 / 1 |",
             "|---|---|---|---|---|"]
    for label, _, _ in WORLDS:
        for form_label, _, projected in FORMS:
            cells = sorted((r for r in rows if r["world"] == label and r["form"] == form_label),
                           key=lambda r: r["seed"])
            if not cells:
                continue
            for output in (["backbone", "projector"] if projected else ["backbone"]):
                r2 = " / ".join(f"{c[output]['r2_h_to_z_heldout']:.3f}" for c in cells)
                plan = " / ".join(f"{c[output]['cost_ratio_median']:.3f}" for c in cells)
                lines.append(f"| {label} | {form_label} | {output} | {r2} | {plan} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for checkpoints and results")
    ap.add_argument("--steps", type=int, default=5000, help="training steps, synthetic worlds")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--only", action="append", default=[], help="world label(s) to run")
    ap.add_argument("--reacher-data", help="a rendered Reacher dataset for the reacher row")
    ap.add_argument("--forms", action="append", default=[], help="form label(s) to run")
    ap.add_argument("--print", action="store_true", help="print the table of what is done")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "results.json"
    rows = json.loads(results.read_text()) if results.exists() else []
    done = {(r["world"], r["form"], r["seed"]) for r in rows}
    for world in WORLDS:
        if args.print or (args.only and world[0] not in args.only):
            continue
        for form in FORMS:
            if args.forms and form[0] not in args.forms:
                continue
            for seed in range(args.seeds):
                if (world[0], form[0], seed) in done:
                    continue
                row = cell(args.out, world, form, seed, args.steps, args.reacher_data)
                rows.append(row)
                tmp = results.with_suffix(".tmp")
                tmp.write_text(json.dumps(rows, indent=1))
                tmp.replace(results)
                print(json.dumps({k: row[k] for k in ("world", "form", "seed", "train_minutes")}
                                 | {k: row[k] for k in ("backbone", "projector") if k in row}),
                      flush=True)
    print(table(rows))
    minutes = [r["train_minutes"] for r in rows]
    if minutes:
        print(f"\n{len(rows)} runs, median {statistics.median(minutes):.2f} train minutes")


if __name__ == "__main__":
    main()
