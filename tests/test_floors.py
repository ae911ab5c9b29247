"""The uninformative floor (docs/metrics.md): what an encoder of the same width that knows
nothing of z scores on the same rows — h's rows shuffled against z's. Checked against the
audit's own R² (no shuffle), against the exact in-sample law (Beta, mean m/(n − 1)), against
Stein's held-out expectation, and by simulation: encoders drawn independently of z score
inside the band about as often as it says."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from idaudit import audit
from idaudit.core.defaults import FLOOR_DRAWS
from idaudit.maths.fit import _fit
from idaudit.maths.floors import (
    band,
    band_rank,
    heldout_floor_mean,
    in_sample_floor_mean,
    shuffled_r2,
)
from idaudit.maths.metrics import audit_metrics


def _split_moments(z, h, test_fraction=0.5, seed=0):
    f = _fit(z, h, None, None, None, (), test_fraction, seed, None, {})
    return f, f.m_tr.scatter[f.ih, f.ih], f.m_te.scatter[f.ih, f.ih]


def test_no_shuffle_gives_the_audits_own_r2():
    rng = np.random.default_rng(0)
    z = rng.exponential(size=(700, 3))
    h = np.c_[z @ rng.normal(size=(3, 3)), rng.normal(size=(700, 5))] + rng.normal(size=(700, 8))
    metrics = audit_metrics(z, h, gauss_slices=0)
    f, s_tr, s_te = _split_moments(z, h)
    ins, held = shuffled_r2(h, z, f.train_rows, f.test_rows, s_tr, s_te, 2, 0, identity=True)
    np.testing.assert_allclose(ins, metrics["r2_h_to_z"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(held, metrics["r2_h_to_z_heldout"], rtol=0, atol=1e-12)


def test_in_sample_mean_is_m_over_n_minus_1_for_any_h_and_z():
    """Over shuffles, E R² = m/(n − 1) exactly, here with skewed z and heavy-tailed h."""
    rng = np.random.default_rng(1)
    n, m = 400, 12
    z = rng.exponential(size=(n, 2)) ** 2
    h = rng.standard_t(3, size=(n, m))
    f, s_tr, s_te = _split_moments(z, h)
    ins, _ = shuffled_r2(h, z, f.train_rows, f.test_rows, s_tr, s_te, 4000, 3)
    assert in_sample_floor_mean(n, m) == pytest.approx(12 / 399)
    assert ins.mean() == pytest.approx(m / (n - 1), abs=4 * ins.std() / np.sqrt(ins.size))


def test_in_sample_band_is_the_beta_law_for_gaussian_z():
    """One Gaussian latent: R² ~ Beta(m/2, (n − 1 − m)/2); the shuffles' quantiles match it."""
    rng = np.random.default_rng(2)
    n, m = 600, 40
    z, h = rng.normal(size=(n, 1)), rng.normal(size=(n, m))
    f, s_tr, s_te = _split_moments(z, h)
    ins, _ = shuffled_r2(h, z, f.train_rows, f.test_rows, s_tr, s_te, 3000, 0)
    law = stats.beta(m / 2, (n - 1 - m) / 2)
    for q in (0.025, 0.5, 0.975):
        assert np.quantile(ins, q) == pytest.approx(law.ppf(q), abs=0.004)


@pytest.mark.parametrize("n,m", [(400, 20), (1000, 100)])
def test_heldout_mean_is_steins_for_a_gaussian_encoder(n, m):
    """Fresh Gaussian encoders independent of z: their mean held-out R² is the formula's."""
    rng = np.random.default_rng(n)
    vals = [audit_metrics(rng.normal(size=(n, 1)), rng.normal(size=(n, m)),
                          gauss_slices=0)["r2_h_to_z_heldout"] for _ in range(200)]
    se = np.std(vals) / np.sqrt(len(vals))
    expected = heldout_floor_mean(n - n // 2, n // 2, m)
    assert expected < -(m + 1) / (n - n // 2) * 0.9  # below 0 by about (m + 1)/(n_tr − m − 2)
    assert np.mean(vals) == pytest.approx(expected, abs=4 * se)


def test_the_band_holds_a_new_exchangeable_draw_as_often_as_it_says():
    """Ranks: among K + 1 exchangeable draws the last is inside the band of the first K with
    probability (K + 1 − 2j)/(K + 1), j = ⌊(1 − c)(K + 1)/2⌋ (≥ c where j ≥ 1)."""
    rng = np.random.default_rng(9)
    for k, expected in ((40, 39 / 41), (50, 49 / 51), (100, 97 / 101), (20, 19 / 21)):
        j = band_rank(k, 0.95)
        assert (k + 1 - 2 * j) / (k + 1) == pytest.approx(expected)
        draws = rng.exponential(size=(4000, k + 1))
        inside = [band(d[:k], 0.95)[0] <= d[k] <= band(d[:k], 0.95)[1] for d in draws]
        se = np.sqrt(expected * (1 - expected) / len(inside))
        assert np.mean(inside) == pytest.approx(expected, abs=4 * se)


def test_encoders_that_know_nothing_score_inside_the_band():
    """The claim of the docs, simulated: for encoders drawn independently of z (each audit its
    own z and h), the held-out and in-sample R² fall inside the 95 % band about 96 % of the
    time (39/41 for the default 40 shuffles); an encoder that carries z lies far above it."""
    rng = np.random.default_rng(5)
    inside_held = inside_in = 0
    sims = 300
    for _ in range(sims):
        z = rng.normal(size=(300, 2))
        h = np.tanh(rng.normal(size=(300, 6)) @ rng.normal(size=(6, 6)))
        a = audit_metrics(z, h, gauss_slices=0, floor_draws=FLOOR_DRAWS,
                          seed=int(rng.integers(1 << 30)))
        lo, hi = a["r2_h_to_z_heldout_floor_band"]
        inside_held += lo <= a["r2_h_to_z_heldout"] <= hi
        lo, hi = a["r2_h_to_z_floor_band"]
        inside_in += lo <= a["r2_h_to_z"] <= hi
    assert 0.92 <= inside_held / sims <= 0.99
    assert 0.92 <= inside_in / sims <= 0.99
    z = rng.normal(size=(300, 2))
    good = audit_metrics(z, z @ rng.normal(size=(2, 6)) + 0.1 * rng.normal(size=(300, 6)),
                         gauss_slices=0, floor_draws=100)
    assert good["r2_h_to_z_heldout_above_floor"] > 0.9
    assert good["r2_h_to_z_heldout_floor_high"] < 0.05


def test_many_latents_fit_a_seeded_subset():
    """64 latents of a 512-wide h would cost the shuffles 64 products over h: they fit
    max(2, 2048/512) = 4 of them, and the band is still centred on m/(n − 1) in-sample and
    holds an uninformative encoder."""
    rng = np.random.default_rng(10)
    n, d, m = 2000, 64, 512
    z, h = rng.normal(size=(n, d)), rng.normal(size=(n, m))
    a = audit_metrics(z, h, gauss_slices=0, floor_draws=FLOOR_DRAWS)
    assert a["floor_latents"] == 4 and a["floor_draws"] == FLOOR_DRAWS
    assert a["r2_h_to_z_floor_mean"] == pytest.approx(m / (n - 1), rel=0.05)
    lo, hi = a["r2_h_to_z_floor_band"]
    assert lo <= a["r2_h_to_z"] <= hi
    narrow = audit_metrics(z, h[:, :32], gauss_slices=0, floor_draws=10)
    assert narrow["floor_latents"] == 64  # 2048/32: every latent


def test_same_seed_same_band_and_off_with_zero():
    rng = np.random.default_rng(6)
    z, h = rng.normal(size=(500, 2)), rng.normal(size=(500, 4))
    a = audit_metrics(z, h, floor_draws=50, seed=3)
    b = audit_metrics(z, h, floor_draws=50, seed=3)
    assert a["r2_h_to_z_heldout_floor_band"] == b["r2_h_to_z_heldout_floor_band"]
    assert a["floor_draws"] == 50
    assert "floor_draws" not in audit_metrics(z, h)


def test_audit_reports_the_band_and_warns_on_a_gate_inside_it(tmp_path):
    """A 300-wide random embedding on 1 100 rows: in-sample R² ≈ 0.27 by chance. A gate
    --min r2_h_to_z=0.2 passes it, and the report says that such a gate says little."""
    rng = np.random.default_rng(7)
    z, h = rng.normal(size=(1100, 2)), rng.normal(size=(1100, 300))
    report = audit(z, h, min={"r2_h_to_z": 0.2})
    assert report.verdict == "pass"
    m = report.metrics
    assert m["floor_draws"] == FLOOR_DRAWS == 40
    lo, hi = m["r2_h_to_z_floor_band"]
    assert lo <= m["r2_h_to_z"] <= hi
    assert m["r2_h_to_z_floor_mean"] == pytest.approx(300 / 1099, abs=0.01)
    notes = report.to_dict()["notes"]
    assert any(n.startswith("an uninformative encoder of width 300") for n in notes)
    assert any("warning: the gate r2_h_to_z ≥ 0.2" in n for n in notes)
    assert "warning" in report.markdown()
    # a gate above the band: no warning
    clean = audit(z, h, min={"r2_h_to_z": 0.5}).to_dict()["notes"]
    assert not any("warning: the gate" in n for n in clean)
    # 550 fit rows for m = 300 (under 10·m): the few-rows warning stays (tests/test_checks_before_work.py)
    assert [n for n in clean if "warning" in n] == [n for n in clean if
                                                    n.startswith("warning: 550 fit rows")]


def test_floor_options_are_checked(tmp_path):
    rng = np.random.default_rng(8)
    z, h = rng.normal(size=(200, 2)), rng.normal(size=(200, 3))
    with pytest.raises(ValueError, match=r"floor_draws must lie in \[0, 100000\], got -1"):
        audit(z, h, floor_draws=-1)
    with pytest.raises(ValueError, match="floor_draws needs the true latents"):
        audit(z, h, h_prime=h, rho=0.9, label_free=True, floor_draws=10)
    assert "r2_h_to_z_floor_band" not in audit(z, h, floor_draws=0).metrics
    path = tmp_path / "a.npz"
    np.savez(path, z=z, h=h)
    report = audit(str(path), floor_draws=20)
    assert report.metrics["floor_draws"] == 20
    json.dumps(report.to_dict())  # lists and floats only
