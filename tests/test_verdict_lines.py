"""What a newcomer meets first (issue 42, item 6): an audit's first lines say what its
verdict rests on — each gated metric's value against its threshold, R²(h → z)'s ceiling
where there is one — before the table, with the JSON's numbers; --keys and `idaudit metrics`
point to docs/metrics.md."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import run

import idaudit
from idaudit.evaluations.report import METRICS_DOC

ROOT = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


@pytest.fixture(scope="module")
def arrays(tmp_path_factory):
    """A rotation of z plus a little noise (R² ≈ 0.99) and plus much noise (≈ 0.8)."""
    d = tmp_path_factory.mktemp("verdict")
    rng = np.random.default_rng(0)
    z = rng.standard_normal((600, 2))
    q = np.array([[0.0, 1.0], [-1.0, 0.0]])
    for name, noise in (("good", 0.1), ("noisy", 0.5)):
        np.savez(d / f"{name}.npz", z=z, h=z @ q + noise * rng.standard_normal((600, 2)))
    return d


def audited(tmp_path, *args):
    """(the audit's output lines, its JSON)."""
    out = tmp_path / "r.json"
    res = run("audit", *args, "--json", out)
    assert res.exit_code in (0, 1, 3), res.output
    return res.output.splitlines(), json.loads(out.read_text())


def numbers(line: str) -> list[float]:
    return [float(v) for v in NUMBER.findall(line.replace("R²", "R").replace("of 2", ""))]


def test_a_pass_says_each_gate_and_the_ceiling_with_the_json_s_numbers(arrays, tmp_path):
    lines, rep = audited(tmp_path, arrays / "good.npz", "--circular", "0", "--angle-sigma", "1",
                         "--min-r2", "0.5", "--max-orthogonality-error", "0.3")
    first = lines[0]
    assert first.startswith("verdict: pass — R²(h → z), held-out ") and " ≥ 0.5 (ceiling " in \
        first and "; orthogonality error " in first and first.endswith(" ≤ 0.3"), first
    r2, gate, ceiling, orth, orth_gate = numbers(first)
    m = rep["metrics"]
    assert r2 == pytest.approx(m["r2_h_to_z_heldout"], abs=5e-4)
    assert ceiling == pytest.approx(m["r2_h_to_z_ceiling"], abs=5e-4)
    assert orth == pytest.approx(m["orthogonality_error"], abs=5e-4)
    assert [gate, orth_gate] == [t["value"] for t in rep["gate"]]
    assert [t["actual"] for t in rep["gate"]] == [m["r2_h_to_z_heldout"],
                                                   m["orthogonality_error"]]
    assert lines[1] == f"what each metric means: {METRICS_DOC} (idaudit metrics)"
    assert lines[2].strip().startswith("audit · ")  # then the table
    # the library's report says the same lines
    report = idaudit.audit(encoder=arrays / "good.npz", circular="0", angle_sigma=1.0,
                           min_r2=0.5, max_orthogonality_error=0.3)
    assert report.summary().splitlines() == lines[:2]


def test_a_failing_gate_over_several_targets_quotes_the_value_it_gated(arrays, tmp_path):
    lines, rep = audited(tmp_path, arrays / "good.npz", arrays / "noisy.npz", "--min-r2", "0.9")
    first = lines[0]
    assert first.startswith("verdict: fail — R²(h → z), held-out ") and \
        first.endswith(" (worst of 2) < 0.9"), first
    worst = min(r["metrics"]["r2_h_to_z_heldout"] for r in rep["runs"])
    assert rep["metrics"]["r2_h_to_z_heldout"] == worst
    assert numbers(first) == [pytest.approx(worst, abs=5e-4), 0.9]
    # each target side by side under the table: its own value and mark
    at = next(i for i, ln in enumerate(lines) if "each target" in ln)
    row = next(ln for ln in lines[at:] if ln.startswith("│ R²(h → z), held-out  "))
    values = [r["metrics"]["r2_h_to_z_heldout"] for r in rep["runs"]]
    assert [float(v) for v in re.findall(r"\d\.\d{6}", row)] == \
        [pytest.approx(v, abs=5e-7) for v in values]
    assert row.count("pass") == sum(v >= 0.9 for v in values) and "FAIL" in row


def test_an_ungated_audit_quotes_what_a_gate_would_read(arrays, tmp_path):
    lines, rep = audited(tmp_path, arrays / "good.npz")
    first = lines[0]
    assert first.startswith("verdict: no gate — nothing was checked (a report only); R²(h → "
                            "z), held-out "), first
    r2, orth = numbers(first.split("; ", 1)[1])
    assert r2 == pytest.approx(rep["metrics"]["r2_h_to_z_heldout"], abs=5e-4)
    assert orth == pytest.approx(rep["metrics"]["orthogonality_error"], abs=5e-4)
    lines, rep = audited(tmp_path, arrays / "good.npz", arrays / "noisy.npz")
    assert "(median of 2)" in lines[0]
    assert numbers(lines[0].split("; ", 1)[1]) == [
        pytest.approx(rep["metrics"]["r2_h_to_z_heldout"], abs=5e-4),
        pytest.approx(rep["metrics"]["orthogonality_error"], abs=5e-4)]


def test_an_inconclusive_audit_says_its_reason_first(tmp_path):
    z = np.random.default_rng(1).standard_normal((200, 2))
    np.savez(tmp_path / "flat.npz", z=z, h=np.ones((200, 2)))
    lines, rep = audited(tmp_path, tmp_path / "flat.npz", "--min-r2", "0.5")
    assert rep["verdict"] == "inconclusive"
    assert lines[0] == f"verdict: inconclusive — {rep['reason']}"


def test_keys_and_the_catalogue_point_to_the_metrics_guide():
    assert (ROOT / METRICS_DOC).is_file()
    res = run("metrics")
    assert res.exit_code == 0 and res.output.splitlines()[-1] == \
        f"each metric at length, with its formula: {METRICS_DOC}"
    help_text = " ".join(run("audit", "--help").output.replace("│", " ").split())
    assert f"what each means: `idaudit metrics`, {METRICS_DOC}" in help_text
