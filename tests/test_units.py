"""No verdict depends on the units of z (docs/metrics.md, "Units"): the rotation metrics read
z standardised on the rows (each latent scaled to unit variance) unless its world draws it
white, and the report says when Cov(z) is far from the identity or h is not whitened."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import ortho_group

import idaudit
from idaudit.evaluations.report import comparability_notes, verdict_lines
from idaudit.maths.catalogue import BY_KEY
from idaudit.maths.metrics import audit_metrics

ROOT = Path(__file__).resolve().parents[1]
GATE = {"min": {"r2_h_to_z_heldout": 0.9}, "max": {"orthogonality_error": 0.2,
                                                   "procrustes_mse": 0.5}}


def pairs(rows: int = 3000, seed: int = 0, rho: float = 0.9, noise: float = 0.1):
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((rows, 3))
    zp = rho * z + math.sqrt(1 - rho**2) * rng.standard_normal(z.shape)
    q = ortho_group.rvs(3, random_state=seed)
    return z, z @ q.T + noise * rng.standard_normal(z.shape), \
        zp @ q.T + noise * rng.standard_normal(z.shape), rho


def gated(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k in BY_KEY and BY_KEY[k].gate and
            BY_KEY[k].direction is not None and isinstance(v, (int, float))}


@pytest.mark.parametrize("encoder", ["orthogonal", "stretched", "bent"])
def test_every_gated_metric_and_the_verdict_are_the_same_at_every_scale(encoder):
    """An orthogonal encoder, a stretched one and a bent one (tanh), their latents recorded at
    scales 1, 10 and 100 and per latent with offsets: every gated number the same (to 1e-6),
    "bound holds" and the verdict too."""
    z, h, hp, rho = pairs()
    if encoder == "stretched":
        h, hp = h * [1.0, 3.0, 0.3], hp * [1.0, 3.0, 0.3]
    elif encoder == "bent":
        h, hp = np.tanh(h), np.tanh(hp)
    base = idaudit.audit(z, h, hp, rho, gate=GATE, gauss_sims=0)
    a = gated(base.metrics)
    assert {"orthogonality_error", "procrustes_mse", "bound", "r2_h_to_z_heldout"} <= set(a)
    for recorded in (10 * z, 100 * z, z * [1.0, 100.0, 0.01] + 7.0):
        rep = idaudit.audit(recorded, h, hp, rho, gate=GATE, gauss_sims=0)
        assert rep.verdict == base.verdict
        assert rep.metrics["bound_holds"] == base.metrics["bound_holds"]
        b = gated(rep.metrics)
        for key, value in a.items():
            assert b[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key


def test_the_rotation_metrics_in_z_own_units_did_depend_on_them():
    """What the audit did before (z in its own units, as it still does for a world that draws
    z white): Procrustes grows with the square of the scale and the bound stops holding."""
    z, h, hp, rho = pairs()
    one = audit_metrics(z, h, hp, rho, gauss_slices=0, z_white=True)
    ten = audit_metrics(10 * z, h, hp, rho, gauss_slices=0, z_white=True)
    assert one["bound_holds"] and not ten["bound_holds"]
    assert ten["procrustes_mse"] > 50 * one["procrustes_mse"]
    # standardised, the exact rotation's orthogonality error is ‖diag Ĉ(z) − I‖_F/√N (Ĉ a mean
    # over the rows): the sampling of the variances alone
    exact = audit_metrics(5 * z, z @ ortho_group.rvs(3, random_state=1).T, gauss_slices=0)
    assert exact["orthogonality_error"] == pytest.approx(
        np.linalg.norm(np.diag(z.var(0)) - np.eye(3)) / math.sqrt(3), rel=1e-9)
    assert exact["latents_standardized"] is True and one["latents_standardized"] is False


def test_the_report_says_which_numbers_compare():
    z, h, hp, rho = pairs()
    pixels = idaudit.audit(30 + 7.6 * z, h, hp, rho, gauss_sims=0)
    notes = comparability_notes(pixels.metrics)
    assert len(notes) == 1 and notes[0].startswith("Cov(z) is far from the identity")
    assert "standardised on these rows" in notes[0]
    lines = verdict_lines(pixels)
    assert lines[1] == f"note: {notes[0]}"  # in the first lines, under the verdict
    white = idaudit.audit(z, h, hp, rho, gauss_sims=0)
    assert comparability_notes(white.metrics) == []
    loud = idaudit.audit(z, 5 * h, 5 * hp, rho, gauss_sims=0)
    (note,) = comparability_notes(loud.metrics)
    assert note.startswith("h is not whitened (ε = ")


def test_the_docs_table_is_current():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "units_table.py"), "--check"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_a_world_drawn_white_keeps_z_and_embed_says_so(tmp_path):
    """The spiral world draws z white: its audit uses z as it is, and the arrays idaudit embed
    writes carry z_white, so auditing them gives the same numbers."""
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    direct = idaudit.audit(encoder=net, world="spiral", n_eval=800, gauss_sims=0)
    assert direct.metrics["latents_standardized"] is False
    idaudit.embed(net, world="spiral", n_eval=800, out=str(tmp_path / "e.npz"))
    assert int(np.load(tmp_path / "e.npz")["z_white"]) == 1
    again = idaudit.audit(str(tmp_path / "e.npz"), gauss_sims=0)
    for key in ("procrustes_mse", "orthogonality_error", "bound_trivial"):
        assert again.metrics[key] == pytest.approx(direct.metrics[key], rel=1e-9), key
