"""idaudit.metrics, the audit's metrics as plain functions: every docstring example runs as a
doctest, every function documents Args/Returns/Example, the values equal the audit's keys on the
same rows (and independent scikit-learn/SciPy computations), known answers, and the example of
docs/metrics.md runs."""

from __future__ import annotations

import doctest
import io
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.linalg import orthogonal_procrustes
from scipy.optimize import linear_sum_assignment
from sklearn.linear_model import LinearRegression
from sklearn.metrics import r2_score

import idaudit
import idaudit.maths.metrics
import idaudit.metrics as fm
from idaudit.maths.linear import fit_linear_map

ROOT = Path(__file__).resolve().parents[1]
RHO = 0.8
#: the functions idaudit.metrics defines (audit_metrics is re-exported from idaudit.maths.metrics)
OWN = [name for name in fm.__all__ if name != "audit_metrics"]


def close(a: float, b: float) -> bool:
    """Equal up to floating-point rounding: the audit reads its fits from one shifted pass of
    moments, the functions from the covariance directly (they differ by ~1e-16)."""
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-14)


@pytest.fixture(scope="module")
def data():
    """z Gaussian 2000 × 3, h = z Q + small noise (Q a random rotation), h′ from one OU step."""
    rng = np.random.default_rng(0)
    z = rng.standard_normal((2000, 3))
    q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    h = z @ q + 0.05 * rng.standard_normal((2000, 3))
    z_prime = RHO * z + math.sqrt(1 - RHO**2) * rng.standard_normal((2000, 3))
    h_prime = z_prime @ q + 0.05 * rng.standard_normal((2000, 3))
    return z, h, h_prime


@pytest.fixture(scope="module")
def audited(data):
    z, h, h_prime = data
    return idaudit.maths.metrics.audit_metrics(z, h, h_prime, RHO)


def test_every_docstring_example_runs():
    tests = doctest.DocTestFinder().find(fm, "idaudit.metrics")
    runner = doctest.DocTestRunner(verbose=False)
    out = io.StringIO()
    for t in tests:
        runner.run(t, out=out.write)
    res = runner.summarize(verbose=False)
    assert res.failed == 0, out.getvalue()
    assert res.attempted >= len(fm.__all__)
    # every function of the module has an example that ran
    assert {t.name.split(".")[-1] for t in tests if t.examples} >= set(OWN)


@pytest.mark.parametrize("name", OWN)
def test_every_function_documents_args_returns_example(name):
    doc = getattr(fm, name).__doc__ or ""
    for section in ("Args:", "Returns:", "Example:"):
        assert re.search(rf"^\s+{section}\s*$", doc, re.M), f"{name} has no {section} section"
    assert ">>> " in doc.split("Example:", 1)[1], name


def test_a_submodule_of_its_own_and_a_re_export():
    assert fm.audit_metrics is idaudit.maths.metrics.audit_metrics
    assert set(fm.__all__) == {"r2", "per_dim_r2", "procrustes", "orthogonality", "mcc", "standardize",
                               "epsilon", "delta", "bound", "gaussianity", "audit_metrics"}
    assert "metrics" not in idaudit.__all__ and "metrics" not in idaudit._PUBLIC
    # importing it alone loads no torch (NumPy and SciPy only, as idaudit.maths)
    res = subprocess.run([sys.executable, "-c", "import sys, idaudit.metrics; "
                          "print('torch' in sys.modules)"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False"


def test_the_values_are_the_audits(data, audited):
    z, h, h_prime = data
    m = audited
    assert close(fm.r2(z, h), m["r2_h_to_z"])
    assert all(close(a, b) for a, b in zip(fm.per_dim_r2(z, h), m["r2_h_to_z_per_dim"],
                                           strict=True))
    assert close(fm.procrustes(z, h), m["procrustes_mse"])
    assert close(fm.orthogonality(fit_linear_map(fm.standardize(z), h)[0]), m["orthogonality_error"])
    assert close(fm.mcc(z, h), m["mcc"])
    eps, dlt = fm.epsilon(h), fm.delta(h, h_prime, RHO)
    assert close(eps, m["whitening_error"])
    assert close(dlt, m["alignment_gap"])
    assert close(fm.bound(eps, dlt, RHO), m["bound"])
    # from the audit's own ε and δ the bound is the same arithmetic, so the same float
    assert fm.bound(m["whitening_error"], m["alignment_gap"], RHO) == m["bound"]
    assert m["D"] == m["alignment_gap"] / (2 * RHO * (1 - RHO))
    # the same function with the audit's slices and seed: the same floats
    g = fm.gaussianity(h)
    for key in ("gaussianity_statistic", "gaussianity_p_value", "gaussianity_null_mean"):
        assert g[key] == m[key], key


def test_the_values_agree_with_scikit_learn_and_scipy(data):
    z, h, h_prime = data
    assert math.isclose(fm.r2(z, h), LinearRegression().fit(h, z).score(h, z), rel_tol=1e-10)
    pred = LinearRegression().fit(h, z).predict(h)
    np.testing.assert_allclose(fm.per_dim_r2(z, h), r2_score(z, pred, multioutput="raw_values"),
                               rtol=1e-10)
    zc, hc = z - z.mean(0), h - h.mean(0)
    zw = zc / zc.std(0)  # NumPy's population σ
    np.testing.assert_allclose(fm.standardize(z), zw, atol=1e-10)
    rot, _ = orthogonal_procrustes(zw, hc)
    assert math.isclose(fm.procrustes(z, h), float(np.mean(np.sum((hc - zw @ rot) ** 2, 1))),
                        rel_tol=1e-9)
    rot, _ = orthogonal_procrustes(zc, hc)  # z declared white: used as it is
    assert math.isclose(fm.procrustes(z, h, z_white=True),
                        float(np.mean(np.sum((hc - zc @ rot) ** 2, 1))), rel_tol=1e-9)
    corr = np.abs(np.corrcoef(z.T, h.T)[:3, 3:])
    rows, cols = linear_sum_assignment(-corr)
    assert math.isclose(fm.mcc(z, h), float(corr[rows, cols].mean()), rel_tol=1e-12)
    assert math.isclose(fm.epsilon(h), float(np.linalg.norm(np.cov(h.T) - np.eye(3))),
                        rel_tol=1e-12)
    gap = float(np.mean(np.sum((h_prime - h) ** 2, 1)) - 2 * (1 - RHO) * np.trace(np.cov(h.T)))
    assert math.isclose(fm.delta(h, h_prime, RHO), max(gap, 0.0), rel_tol=1e-9, abs_tol=1e-15)
    q = LinearRegression().fit(z, h).coef_  # (m, N): h ≈ Q z + c
    assert math.isclose(fm.orthogonality(q),
                        float(np.linalg.norm(q.T @ q - np.eye(3)) / math.sqrt(3)), rel_tol=1e-9)


def test_known_answers(data):
    z, h, _ = data
    assert fm.r2(z, z) == pytest.approx(1.0, abs=1e-12)
    assert fm.per_dim_r2(z, z) == pytest.approx([1.0, 1.0, 1.0], abs=1e-12)
    flipped = z[:, [2, 0, 1]] * np.array([-1.0, 3.0, -0.5])  # permuted, sign-flipped, scaled
    assert fm.mcc(z, flipped) == pytest.approx(1.0, abs=1e-12)
    white = np.linalg.solve(np.linalg.cholesky(np.cov(h.T)), (h - h.mean(0)).T).T
    assert fm.epsilon(white) == pytest.approx(0.0, abs=1e-12)
    rot = np.linalg.qr(h[:3].T)[0]
    assert fm.procrustes(z, fm.standardize(z) @ rot + 5.0) == pytest.approx(0.0, abs=1e-12)
    assert fm.procrustes(z, z @ rot + 5.0, z_white=True) == pytest.approx(0.0, abs=1e-12)
    assert fm.procrustes(7.0 * z, fm.standardize(z) @ rot) == pytest.approx(0.0, abs=1e-12)
    assert fm.orthogonality(np.eye(3)) == 0.0
    assert fm.delta(h, h, RHO) == 0.0  # no gap at all between the pairs: floored at 0
    assert fm.bound(0.0, 0.0, RHO) == 0.0


def test_torch_tensors_give_the_same_numbers(data):
    torch = pytest.importorskip("torch")
    z, h, h_prime = data
    zt, ht, hpt = (torch.from_numpy(a) for a in (z, h, h_prime))
    assert fm.r2(zt, ht) == fm.r2(z, h)
    assert fm.procrustes(zt, ht) == fm.procrustes(z, h)
    assert fm.mcc(zt, ht) == fm.mcc(z, h)
    assert fm.epsilon(ht) == fm.epsilon(h)
    assert fm.delta(ht, hpt, RHO) == fm.delta(h, h_prime, RHO)


def test_the_docs_example_runs(tmp_path):
    """docs/metrics.md's example of the functional module, as written, on the install it states."""
    from test_doc_examples import run_python

    lines = run_python("docs/metrics.md", "import numpy as np", tmp_path).stdout.splitlines()
    assert lines[0] == "R²(h → z) 0.997, Procrustes MSE 0.0081, MCC 0.78"
    bound, audits = re.fullmatch(r"bound (\S+), the audit's (\S+)", lines[1]).groups()
    assert bound == audits
