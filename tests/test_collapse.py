"""A collapsed run is named, not scored: the one criterion, train's warning and log, the
sweep's status, the report's count; the whitening objective's own λ."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from idaudit.core.storage import open_store
from idaudit.experiments.aggregate import aggregate, write_tables
from idaudit.experiments.figures import bound_counts
from idaudit.experiments.sweep import _record
from idaudit.maths.bounds import whitening_error
from idaudit.training.collapse import (
    COLLAPSE_VARIANCE,
    collapse_reason,
    embedding_collapsed,
    is_collapsed,
    record_collapsed,
)
from idaudit.training.runs import resolve


def test_a_constant_embedding_collapsed_and_a_white_one_did_not():
    rng = np.random.default_rng(0)
    constant = np.ones((1000, 4)) * 3.0 + 1e-6 * rng.standard_normal((1000, 4))
    white = rng.standard_normal((1000, 4))
    assert embedding_collapsed(constant)
    assert not embedding_collapsed(white)
    assert whitening_error(constant) == pytest.approx(math.sqrt(4), rel=1e-6)  # ε = √m
    # at the threshold ε is within 1 % of √m (ε ≥ √m − tr/√m), whatever the spectrum
    at = np.diag(np.sqrt([0.04, 0.0, 0.0, 0.0]))  # tr Cov = 0.04 = 0.01·m
    h = rng.standard_normal((20000, 4)) @ at
    assert is_collapsed(0.04, 4) and not is_collapsed(0.0401, 4)
    assert whitening_error(h) >= 0.99 * math.sqrt(4) - 1e-3


def test_the_reason_names_the_numbers_and_records_fall_back_on_their_metrics():
    flat = {"total_variance_h": 3.3e-10, "embed_dim": 2, "whitening_error": 1.4142135,
            "orthogonality_error": 1.0}
    healthy = {"total_variance_h": 1.98, "embed_dim": 2, "whitening_error": 0.03}
    reason = collapse_reason(flat)
    assert reason is not None and "3.3e-10" in reason and "√m = 1.414" in reason
    assert collapse_reason(healthy) is None
    assert collapse_reason({"embed_dim": 2}) is None  # nothing to judge
    assert record_collapsed({"metrics": flat}) and not record_collapsed({"metrics": healthy})
    assert not record_collapsed({"collapsed": False, "metrics": flat})  # the field wins
    assert COLLAPSE_VARIANCE == 0.01


def test_whiten_has_its_own_lambda_declared_on_the_objective():
    from idaudit.maths.losses import WHITEN, WHITEN_LAMB

    assert WHITEN.default_lamb == WHITEN_LAMB == 0.5
    r = resolve({"world": "spiral", "objective": "whiten"})
    assert r.train.lamb == 0.5 and r.sources["lamb"] == (0.5, "objective whiten")
    assert resolve({"world": "spiral", "objective": "whiten", "lamb": 1e-3}).train.lamb == 1e-3
    assert resolve({"world": "spiral"}).train.lamb == 1e-3  # LeJEPA's unchanged


def test_train_warns_of_a_collapse_exits_0_and_logs_it_with_progress_lines(tmp_path):
    """`--objective whiten --lamb 1e-3` collapses on spiral within its first 50 steps
    (tr Cov(h) ≈ 1e-10); stdout and stderr are pipes, not a terminal: plain lines."""
    out = tmp_path / "w.safetensors"
    proc = subprocess.run(
        [sys.executable, "-m", "idaudit", "train", "--world", "spiral", "--objective", "whiten",
         "--lamb", "1e-3", "--steps", "200", "--n-eval", "1000", "--eval-every", "0",
         "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "warning: the embedding collapsed" in proc.stderr
    log = json.loads(out.with_name("w.log.json").read_text())
    assert log["collapsed"] is True and log["metrics"]["total_variance_h"] < 1e-4
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("train: ")]
    steps = [int(ln.split()[1].split("/")[0]) for ln in lines]
    assert set(range(20, 201, 20)) <= set(steps)  # every tenth of 200 steps
    assert all(ln.split()[1].endswith("/200") and "ETA" in ln for ln in lines)


def test_a_collapsed_run_is_filed_finished_and_counted_apart(tmp_path):
    class Bar:
        info = ""

        def advance(self, n, info):
            self.info = info

    counts = {"total": 2, "skipped": 0, "ok": 0, "failed": 0, "collapsed": 0}
    rec = {"status": "collapsed", "id": "r1", "metrics": {"total_variance_h": 0.0},
           "collapsed": True}
    bar = Bar()
    _record(open_store(tmp_path), "r1", {"world": "spiral"}, rec, counts, bar)
    runs = tmp_path / "runs"
    assert (runs / "r1.json").exists() and not (runs / "r1.failed.json").exists()
    assert counts == {"total": 2, "skipped": 0, "ok": 1, "failed": 0, "collapsed": 1}
    assert bar.info == "1 ok (1 collapsed), 0 failed"
    assert json.loads((runs / "r1.json").read_text())["status"] == "collapsed"


def _rec(seed, collapsed, bound, mse):
    tv = 1e-10 if collapsed else 2.0
    return {"run": {"world": "spiral", "objective": "whiten", "lamb": 1e-3, "seed": seed},
            "status": "collapsed" if collapsed else "ok", "collapsed": collapsed,
            "metrics": {"r2_h_to_z": 0.02 if collapsed else 0.98, "bound": bound,
                        "procrustes_mse": mse, "total_variance_h": tv, "embed_dim": 2},
            "seconds": 1.0}


def test_report_counts_collapsed_runs_apart_from_the_bound(tmp_path):
    # two collapsed runs on the diagonal (bound = 2 = m; MSE 2.0036 above, 1.998 under) and
    # one healthy run under its bound
    recs = [_rec(0, True, 2.0, 2.0036), _rec(1, True, 2.0, 1.998), _rec(2, False, 0.01, 0.005)]
    assert bound_counts(recs) == {"whitening (the paper's VICReg)": (1, 1, 2)}
    rows = aggregate(recs)
    assert [r["n_collapsed"] for r in rows] == [2]
    text = write_tables(rows, tmp_path)["markdown"].read_text()
    assert "2 of 3 runs collapsed" in text
