"""docs/sweeps.md's N = 256 … 1024 table quotes the run records kept beside it
(docs/data/scaling-sweep/runs): each SIGReg and whitening cell, in-sample and held-out, is its
record's R²(h → z) to six decimals, and a seed is "not run" only where no record exists."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
METHODS = {"SIGReg": "lejepa", "whitening (paper's VICReg)": "whiten"}


def records() -> dict[tuple[int, str, int], tuple[float, float]]:
    out = {}
    for path in (ROOT / "docs" / "data" / "scaling-sweep" / "runs").glob("*.json"):
        rec = json.loads(path.read_text())
        opts, m = rec["options"], rec["metrics"]
        out[opts["dim"], opts["objective"], opts["seed"]] = (m["r2_h_to_z"],
                                                             m["r2_h_to_z_heldout"])
    return out


def test_the_scaling_table_quotes_its_records():
    text = (ROOT / "docs" / "sweeps.md").read_text(encoding="utf-8")
    section = text.split("### N = 256 … 1024, through the cluster path", 1)[1]
    recs = records()
    checked = 0
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 6 or cells[1] not in METHODS:
            continue
        n, objective = int(cells[0]), METHODS[cells[1]]
        held_out = [c.strip() for c in cells[5].split("/")]
        for seed in (0, 1):
            got = recs.get((n, objective, seed))
            if got is None:
                assert cells[2 + seed] == "not run" and held_out[seed] == "not run", line
                continue
            assert cells[2 + seed] == f"{got[0]:.6f}", line
            assert held_out[seed] == f"{got[1]:.6f}", line
            checked += 1
    assert checked == len([k for k in recs if k[1] in METHODS.values()]) >= 5


def test_the_infonce_rows_say_which_column_is_held_out_and_why_auto_matches_sigma_1():
    """The seed columns and the paper's are in-sample, the held-out column apart; InfoNCE has
    no record, so its in-sample cells stay empty ("not rerun", "not run"); `auto` is σ = 0.453
    on this world (ρ_v = ρ² for the anchor views), not 1."""
    from idaudit.maths.losses import sigma_for

    text = (ROOT / "docs" / "sweeps.md").read_text(encoding="utf-8")
    section = text.split("### N = 256 … 1024, through the cluster path", 1)[1]
    assert ("| N | method | in-sample, seed 0 | in-sample, seed 1 | paper (5 seeds, in-sample) | "
            "held-out, seed 0 / seed 1 | minutes per run, seed 0 / seed 1 |") in section
    assert not any(k[1] == "infonce" for k in records())
    infonce = [[c.strip() for c in line.strip().strip("|").split("|")]
               for line in section.splitlines()
               if line.startswith(("| 256 |", "| 512 |", "| 1024 |")) and "InfoNCE" in line]
    assert len(infonce) == 9
    for cells in infonce:
        assert cells[2:4] == ["not rerun", "not run"], cells
        assert cells[5].endswith(" / —"), cells
    sigma_1 = {c[0]: c[5] for c in infonce if c[1] == "InfoNCE σ = 1"}
    auto = {c[0]: c[5] for c in infonce if c[1] == "InfoNCE `auto`"}
    assert sigma_1 == auto and len(auto) == 3
    assert f"{sigma_for('auto', 256, 0.95 ** 2):.3f}" == "0.453"
    assert sigma_for("auto", 256, 0.95 ** 2) == sigma_for("auto", 1024, 0.95 ** 2)
    flat = " ".join(section.split())
    assert ("although `auto` is not 1 there (σ = 0.453, from ρ_v = ρ² = 0.9025 at every N): "
            "the loss is exactly 0 in float32 from the first step") in flat
