"""The metric catalogue is the one list of metrics: what the audits, the consistency check and
the sweep tables report is in it and nothing more; gates, needs messages, docs/metrics.md and
``idaudit metrics`` follow it."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import ortho_group
from typer.testing import CliRunner

from idaudit.cli import app
from idaudit.core.errors import IdauditError
from idaudit.evaluations.audit import audit_inputs, combine_reports, gated_report
from idaudit.evaluations.consistency import CONSISTENCY_METRICS, check_consistency
from idaudit.evaluations.gate import KNOWN_METRICS, make_threshold
from idaudit.evaluations.inputs import AuditInputs
from idaudit.experiments.aggregate import REPORT_METRICS, _scalars, aggregate
from idaudit.maths.catalogue import (
    BY_KEY,
    CATALOGUE,
    NEED_TEXT,
    Metric,
    _check,
    catalogue_json,
    entries,
    gate_keys,
)
from idaudit.maths.metrics import audit_metrics

ROOT = Path(__file__).resolve().parents[1]
RHO = 0.9
runner = CliRunner()


def _arrays(seed=0, rows=800, n=3, m=4):
    """z, h = a noisy rotation of z into m > n dims, h′ of the OU successors z′, x a mixing."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((rows, n))
    zp = RHO * z + np.sqrt(1 - RHO**2) * rng.standard_normal(z.shape)
    q = ortho_group.rvs(m, random_state=seed)[:, :n]
    h, hp = (a @ q.T + 0.05 * rng.standard_normal((rows, m)) for a in (z, zp))
    x = np.tanh(z @ rng.standard_normal((n, 5)))
    return z, h, hp, x


def _inputs(seed=0, pairs=True, x=True):
    z, h, hp, xs = _arrays(seed)
    return AuditInputs(z=z, h=h, h_prime=hp if pairs else None, rho=RHO if pairs else None,
                       x=xs if x else None, source=f"run{seed}")


def _audits(label_free):
    """An audit with every input (pairs, x, an angle, a bootstrap, m ≠ n), and two gated
    together."""
    kw = dict(gauss_sims=0, label_free=label_free)
    if not label_free:
        kw.update(circular=(0,), bootstrap=5, angle_sigma=1.0)
    reps = [audit_inputs(_inputs(seed), **kw) for seed in (0, 1)]
    assert all(r.verdict == "ungated" for r in reps), [r.reason for r in reps]
    return [reps[0].metrics, combine_reports(reps).metrics]


@pytest.fixture(scope="module")
def produced():
    """report → the metrics every code path of that report returned."""
    _, h, _, _ = _arrays(0)
    _, h2, _, _ = _arrays(0)
    h2 = h2 @ ortho_group.rvs(4, random_state=5)
    cons = check_consistency([h, h2, np.tanh(h)], ["a", "b", "c"]).metrics
    return {"audit": _audits(False), "label_free": _audits(True), "consistency": [cons]}


def _scalar(v):
    return isinstance(v, (bool, int, float, np.integer, np.floating))


@pytest.mark.parametrize("report", ["audit", "label_free", "consistency"])
def test_every_reported_number_is_catalogued_and_every_entry_is_reported(produced, report):
    metrics = produced[report]
    keys = set().union(*metrics)
    numbers = {k for m in metrics for k, v in m.items() if _scalar(v)}
    listed = {m.key for m in entries(report)}
    assert numbers == {m.key for m in entries(report) if m.gate}, (
        f"reported but not catalogued: {sorted(numbers - listed)}; catalogued as gateable "
        f"but not a number here: {sorted({m.key for m in entries(report) if m.gate} - numbers)}")
    assert listed <= keys, f"catalogued for {report} but never reported: {sorted(listed - keys)}"


def test_a_gate_takes_every_number_an_audit_reports(produced):
    assert KNOWN_METRICS == gate_keys("audit", "label_free")
    assert CONSISTENCY_METRICS == gate_keys("consistency") == {
        "consistency_r2", "consistency_r2_in_sample", "consistency_orthogonality_error",
        "consistency_procrustes_mse", "n_runs", "n_samples"}
    for report, known in (("audit", KNOWN_METRICS), ("label_free", KNOWN_METRICS),
                          ("consistency", CONSISTENCY_METRICS)):
        for metrics in produced[report]:
            gates = [make_threshold(k, "min", -1e300, known) for k, v in metrics.items()
                     if _scalar(v)]
            assert gated_report(metrics, gates).verdict == "pass"
    with pytest.raises(IdauditError, match="unknown metric 'r2_h_to_z0'"):
        make_threshold("r2_h_to_z0", "min", 0.5)  # a sweep column, no audit reports it


def test_sweep_columns_are_what_runs_log():
    z, h, hp, x = _arrays(0, n=2, m=2)
    # as a world with angles and their law logs them (Reacher's OU datasets): with the ceiling
    logged = _scalars(audit_metrics(z, h, hp, RHO, x, gauss_slices=0, circular=(0, 1),
                                    angle_sigma=1.0))
    # rho_0, rho_1: a trajectory Reacher world's per-joint autocorrelations, logged by train
    assert set(REPORT_METRICS) <= set(logged) | {"rho_0", "rho_1"}
    assert list(REPORT_METRICS) == [m.key for m in CATALOGUE if "sweep" in m.reports]
    rows = aggregate([{"run": {"seed": s}, "metrics": {**logged, "rho_0": 0.9, "rho_1": 0.8}}
                      for s in (0, 1)])
    assert {f"{k}_mean" for k in REPORT_METRICS} <= set(rows[0])


def _missing_case(m):
    """(inputs lacking one of the entry's needs, label_free, what the message names)."""
    if "z" in m.needs:
        return _inputs(), True, [NEED_TEXT["z"]]
    only_label_free = "audit" not in m.reports
    pairs = not m.needs & {"h_prime", "rho"}
    return (_inputs(pairs=pairs), only_label_free,
            [NEED_TEXT[n] for n in ("h_prime", "rho", "bootstrap") if n in m.needs])


NEEDY = [m for m in CATALOGUE if m.needs and m.gate and m.key in KNOWN_METRICS]


@pytest.mark.parametrize("metric", NEEDY, ids=[m.key for m in NEEDY])
def test_a_gate_on_a_metric_whose_needs_are_missing_names_them(metric):
    inp, label_free, named = _missing_case(metric)
    gate = [make_threshold(metric.key, "min", 0.0)]
    with pytest.raises(IdauditError) as exc:
        audit_inputs(inp, gate, gauss_sims=0, label_free=label_free)
    msg = str(exc.value)
    assert f"metric {metric.key!r} is not available for these inputs (it needs" in msg, msg
    for text in named:
        assert text in msg, msg


def test_a_label_free_only_metric_in_an_audit_with_z_says_so():
    with pytest.raises(IdauditError, match=r"only a label-free audit reports it: label_free"):
        audit_inputs(_inputs(), [make_threshold("rho_estimated", "min", 0.5)], gauss_sims=0)


def test_the_cli_names_the_need(tmp_path):
    z, h, _, _ = _arrays(0)
    np.savez(tmp_path / "a.npz", z=z, h=h)
    res = runner.invoke(app, ["audit", str(tmp_path / "a.npz"), "--max", "D_upper=1"])
    assert res.exit_code == 2, res.output
    assert res.output.strip() == ("error: metric 'D_upper' is not available for these inputs "
                                  "(it needs h′ and ρ)")


def test_docs_metrics_mentions_every_key():
    text = (ROOT / "docs" / "metrics.md").read_text()
    mentioned = {w for span in re.findall(r"`([^`\n]+)`", text) for w in re.findall(r"\w+", span)}
    missing = [m.key for m in CATALOGUE if m.key not in mentioned]
    assert not missing, f"docs/metrics.md does not document {missing}"


def test_metrics_command_lists_every_key_and_its_json_round_trips(tmp_path):
    res = runner.invoke(app, ["metrics"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    shown = {line.split("│")[1].strip() for line in res.output.splitlines()
             if line.startswith("│") and line.split("│")[1].strip()}
    assert shown == set(BY_KEY)
    out = tmp_path / "metrics.json"
    # wide: the path of an xdist worker's tmp_path would wrap at 80 columns
    res = runner.invoke(app, ["metrics", "--json", str(out)], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and f"wrote {out}" in " ".join(res.output.split()), res.output
    data = json.loads(out.read_text())
    assert [d["key"] for d in data] == [m.key for m in CATALOGUE]
    assert data == catalogue_json()
    assert tuple(Metric.from_dict(d) for d in data) == CATALOGUE
    assert {d["direction"] for d in data} == {"higher", "lower", None}


def test_metrics_json_is_checked_like_every_output(tmp_path):
    res = runner.invoke(app, ["metrics", "--json", str(tmp_path)])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert res.output.startswith("error:") and "is a directory" in res.output, res.output


def test_a_broken_catalogue_is_refused():
    one = CATALOGUE[0]
    with pytest.raises(ValueError, match="duplicate key"):
        _check((one, one))
    with pytest.raises(ValueError, match="needs"):
        _check((Metric("k", "k", None, frozenset({"labels"}), frozenset({"audit"}), "m"),))
    with pytest.raises(ValueError, match="direction"):
        _check((Metric("k", "k", "up", frozenset(), frozenset({"audit"}), "m"),))
