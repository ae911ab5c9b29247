"""The high-probability bound holds at its stated rate (simulation)."""

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from idaudit.maths.metrics import audit_metrics


def _script(name: str):
    """A module of scripts/ (the simulation lives there, beside the table it prints)."""
    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_scripts_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


coverage_simulation = _script("bound_coverage").coverage_simulation


@pytest.mark.parametrize("dim,n_rows,reps", [(8, 2000, 200), (64, 2000, 100),
                                              (256, 2000, 40), (1024, 2500, 8)])
def test_upper_bound_holds_at_its_stated_rate(dim, n_rows, reps):
    alpha = 0.05
    miss = coverage_simulation(dim, n_rows, reps, confidence=1 - alpha, seed=dim)
    slack = 3 * math.sqrt(alpha / 2 * (1 - alpha / 2) / reps)  # binomial noise, 3 sd
    assert miss["whitening_error"] <= alpha / 2 + slack, miss
    assert miss["alignment_gap"] <= alpha / 2 + slack, miss
    assert miss["bound"] <= alpha + slack, miss
    if dim >= 64:  # what it replaces: the floor-corrected value is no bound at all
        assert miss["floor_corrected"] >= 0.1, miss


def test_audit_reports_the_upper_bound():
    rng = np.random.default_rng(7)
    dim, rho = 256, 0.95
    q, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
    z = rng.standard_normal((10_000, dim))
    zp = rho * z + math.sqrt(1 - rho**2) * rng.standard_normal(z.shape)
    m = audit_metrics(z, 0.97 * z @ q.T, 0.97 * zp @ q.T, rho, gauss_slices=0)
    assert m["bound_upper"] >= 0.0009 * dim  # the population error of h = 0.97·Qz
    assert m["bound_upper"] >= m["bound"] >= m["procrustes_mse"]
    assert m["whitening_error_upper"] > m["whitening_error"]
    assert m["alignment_gap_upper"] >= m["alignment_gap"]
    assert m["bound_upper_confidence"] == 0.95 and "bound_corrected" not in m
