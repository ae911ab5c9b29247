"""idaudit consistency: runs that differ by a rotation pass, warped ones fail, bad input is refused."""

import json

import numpy as np
import pytest
import torch
from conftest import run
from scipy.linalg import orthogonal_procrustes
from sklearn.linear_model import LinearRegression

from idaudit.evaluations.consistency import check_consistency


def _rot(dim, seed):
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((dim, dim)))
    return q


@pytest.fixture
def runs(tmp_path):
    rng = np.random.default_rng(0)
    z = rng.standard_normal((3000, 6))
    a = z @ _rot(6, 1).T + 0.05 * rng.standard_normal(z.shape)
    b = z @ _rot(6, 2).T + 0.05 * rng.standard_normal(z.shape)
    warped = np.tanh(1.5 * z @ _rot(6, 3).T)
    np.save(tmp_path / "a.npy", a)
    np.savez(tmp_path / "b.npz", h=b, z=z)
    np.savez(tmp_path / "warped.npz", h=warped)
    np.savez(tmp_path / "flat.npz", h=np.ones_like(z))
    np.savez(tmp_path / "short.npz", h=b[:2000])
    return tmp_path, a, b


def test_exact_rotations_score_one_and_zero():
    z = np.random.default_rng(1).standard_normal((500, 5))
    rep = check_consistency([z @ _rot(5, 1).T, z @ _rot(5, 2).T + 3.0, z], ["a", "b", "c"])
    m = rep.metrics
    assert m["n_runs"] == 3 and len(m["pairs"]) == 6  # both directions of every pair
    assert m["consistency_r2"] == pytest.approx(1.0, abs=1e-12)
    assert m["consistency_orthogonality_error"] == pytest.approx(0.0, abs=1e-10)
    assert m["consistency_procrustes_mse"] == pytest.approx(0.0, abs=1e-10)


def test_pair_metrics_agree_with_sklearn_and_scipy(runs):
    _, a, b = runs
    m = check_consistency([a, b], ["a", "b"], test_fraction=0.5, seed=0).metrics
    ab = next(p for p in m["pairs"] if p["from"] == "a")
    assert ab["r2_in_sample"] == pytest.approx(LinearRegression().fit(a, b).score(a, b), abs=1e-10)
    ac, bc = a - a.mean(0), b - b.mean(0)
    r, _ = orthogonal_procrustes(ac, bc)
    assert ab["procrustes_mse"] == pytest.approx(np.mean(np.sum((bc - ac @ r) ** 2, 1)), rel=1e-8)
    assert m["consistency_r2"] == min(p["r2"] for p in m["pairs"])
    assert m["consistency_orthogonality_error"] == max(p["orthogonality_error"]
                                                       for p in m["pairs"])


def test_rotated_runs_pass_and_a_warped_run_fails(runs):
    d, _, _ = runs
    res = run("consistency", d / "a.npy", d / "b.npz", "--min-r2", "0.99",
              "--max-orthogonality-error", "0.05", "--json", d / "ok.json", "--junit",
              d / "ok.xml", "--markdown", d / "ok.md")
    assert res.exit_code == 0, res.output
    rep = json.loads((d / "ok.json").read_text())
    assert rep["verdict"] == "pass" and rep["metrics"]["consistency_r2"] > 0.99
    assert 'failures="0"' in (d / "ok.xml").read_text()
    assert "`consistency_r2`" in (d / "ok.md").read_text()
    res = run("consistency", d / "a.npy", d / "warped.npz", "--min-r2", "0.99",
              "--max-orthogonality-error", "0.05", "--json", d / "bad.json")
    assert res.exit_code == 1, res.output
    rep = json.loads((d / "bad.json").read_text())
    assert rep["metrics"]["consistency_r2"] < 0.95
    assert rep["metrics"]["consistency_orthogonality_error"] > 0.3


@pytest.mark.parametrize("other,code,fragment", [
    ("flat.npz", 3, "collapsed"), ("short.npz", 3, "different numbers of inputs"),
])
def test_inconclusive_runs(runs, other, code, fragment):
    d, _, _ = runs
    res = run("consistency", d / "a.npy", d / other, "--min-r2", "0.9")
    assert res.exit_code == code and fragment in res.output and "Traceback" not in res.output


@pytest.mark.parametrize("args,fragment", [
    (("a.npy",), "at least two runs"),
    (("a.npy", "b.npz", "--min", "mcc=0.5"), "unknown metric 'mcc'"),
    (("a.npy", "b.npz", "--world", "spiral"), "apply only to encoders"),
    (("a.npy", "nope.npz"), "not found"),
])
def test_bad_input_is_refused(runs, args, fragment):
    d, _, _ = runs
    res = run("consistency", *[d / a if a.endswith((".npy", ".npz")) else a for a in args])
    assert res.exit_code == 2 and fragment in res.output and "Traceback" not in res.output


def test_encoders_embed_the_same_inputs(tmp_path):
    paths = []
    for seed in (0, 1):  # two orthogonal maps of the coupling world's observations
        lin = torch.nn.Linear(4, 4)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(_rot(4, seed)).float())
            lin.bias.zero_()
        paths.append(tmp_path / f"enc{seed}.pt")
        torch.jit.script(lin).save(str(paths[-1]))
    res = run("consistency", *paths, "--world", "coupling", "--dim", "4", "--n-eval", "1500",
              "--min-r2", "0.999", "--json", tmp_path / "c.json")
    assert res.exit_code == 0, res.output
    rep = json.loads((tmp_path / "c.json").read_text())
    assert rep["world"]["name"] == "coupling" and rep["metrics"]["n_samples"] == 1500
    assert rep["metrics"]["consistency_orthogonality_error"] < 1e-4
