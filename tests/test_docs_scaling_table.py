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
