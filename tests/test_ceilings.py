"""Ceilings where the world hides part of a latent: angles seen mod 2π. The ceiling of the
held-out R²(h → z) is the held-out R² of E[θ | θ mod 2π], fitted and scored as the audit
scores; checked against independent computations (scipy's normal density summed over many
turns, scikit-learn's fit and score) and by what known encoders reach."""

import math

import numpy as np
import pytest
from scipy.stats import norm
from sklearn.linear_model import LinearRegression
from sklearn.metrics import r2_score

from idaudit.core.errors import IdauditError
from idaudit.evaluations.audit import audit_inputs
from idaudit.evaluations.gate import make_threshold
from idaudit.evaluations.inputs import AuditInputs
from idaudit.loading.arrays import arrays_from_mapping
from idaudit.maths.ceilings import (
    angle_posterior_mean,
    ceiling_predictor,
    empirical_posterior_mean,
    wrap_angle,
)
from idaudit.maths.metrics import audit_metrics
from idaudit.maths.moments import split_rows


def _angles(seed=0, rows=6000, sigma=1.0):
    return sigma * np.random.default_rng(seed).standard_normal((rows, 2))


@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.5])
def test_posterior_mean_matches_the_density_summed_over_many_turns(sigma):
    w = np.linspace(-math.pi, math.pi, 201, endpoint=False)
    c = w[None] + 2 * math.pi * np.arange(-40, 41)[:, None]
    p = norm.pdf(c, scale=sigma)
    want = (c * p).sum(0) / p.sum(0)
    assert np.max(np.abs(angle_posterior_mean(w, sigma) - want)) < 1e-12
    assert np.allclose(angle_posterior_mean(w + 2 * math.pi, sigma), want, atol=1e-9)


def test_the_ceiling_is_the_best_guess_fitted_and_scored_as_scikit_learn_does():
    z = _angles(0)
    m = audit_metrics(z, wrap_angle(z), circular=(0, 1), angle_sigma=1.0, seed=3)
    test, train = split_rows(len(z), 0.5, 3)
    guess = ceiling_predictor(z, (0, 1), 1.0)
    fit = LinearRegression().fit(guess[train], z[train])
    per_dim = r2_score(z[test], fit.predict(guess[test]), multioutput="raw_values")
    assert m["r2_h_to_z_ceiling_per_dim"] == pytest.approx(per_dim, abs=1e-9)
    assert m["r2_h_to_z_ceiling"] == pytest.approx(per_dim.mean(), abs=1e-9)
    keep = test[np.all(np.abs(z[test]) < math.pi, axis=1)]
    assert m["unwrapped_test_rows"] == keep.size
    ours = LinearRegression().fit(wrap_angle(z)[train], z[train])
    assert m["r2_h_to_z_heldout_unwrapped"] == pytest.approx(
        r2_score(z[keep], ours.predict(wrap_angle(z)[keep])), abs=1e-9)


def test_what_known_encoders_reach_of_the_ceiling():
    """The best guess itself reaches 1 of the ceiling; the wrapped angle less (it does not
    hedge near ±π) but nearly everything on the rows that need no wrapping; the true (unwrapped)
    angles, which no image shows, more than 1."""
    z = _angles(1)
    best, wrapped, truth = (audit_metrics(z, h, circular=(0, 1), angle_sigma=1.0)
                            for h in (ceiling_predictor(z, (0, 1), 1.0), wrap_angle(z), z))
    assert best["r2_h_to_z_of_ceiling"] == pytest.approx(1.0, abs=1e-12)
    assert wrapped["r2_h_to_z_of_ceiling"] < 0.995
    assert wrapped["r2_h_to_z_heldout_unwrapped"] > max(0.99, wrapped["r2_h_to_z_heldout"] + 0.03)
    assert truth["r2_h_to_z_of_ceiling"] > 1.0
    assert 0.9 < best["r2_h_to_z_ceiling"] < 0.97  # ≈ 0.9485 in expectation for N(0, 1)


def test_in_expectation_no_function_of_the_wrapped_angle_beats_the_ceiling():
    """Over evaluation sets, an encoder that sees the angles only mod 2π — here a flexible
    fit of the wrapped angle (a degree-7 polynomial per joint, fitted on other draws) —
    reaches at most the ceiling on average."""
    shares = []
    fit_z = _angles(99, rows=40000)
    feats = lambda a: np.stack([wrap_angle(a) ** p for p in range(1, 8)], axis=-1)  # noqa: E731
    coef = [np.linalg.lstsq(np.c_[np.ones(len(fit_z)), feats(fit_z[:, j])], fit_z[:, j],
                            rcond=None)[0] for j in range(2)]
    for seed in range(8):
        z = _angles(seed, rows=4000)
        h = np.stack([np.c_[np.ones(len(z)), feats(z[:, j])] @ coef[j] for j in range(2)], 1)
        shares.append(audit_metrics(z, h, circular=(0, 1), angle_sigma=1.0,
                                    seed=seed)["r2_h_to_z_of_ceiling"])
    assert np.mean(shares) <= 1.0 + 1e-3, shares


def test_the_audit_gates_on_the_share_and_says_it_in_words():
    from idaudit.evaluations.report import ceiling_note, notes

    z = _angles(2)
    inp = AuditInputs(z=z, h=ceiling_predictor(z, (0, 1), 1.0), circular=(0, 1),
                      angle_sigma=1.0)
    report = audit_inputs(inp, [make_threshold("r2_h_to_z_of_ceiling", "min", 0.999)])
    assert report.verdict == "pass"
    m = report.metrics
    words = notes(m)[0]
    assert words.startswith(f"held-out R²(h → z) {m['r2_h_to_z_heldout']:.3f} of a possible "
                            f"{m['r2_h_to_z_ceiling']:.3f} (100.0 % of the ceiling")
    plain = audit_inputs(AuditInputs(z=z, h=z), circular=(0, 1))  # no law: estimated
    assert plain.metrics["ceiling_law"] == "empirical" and "angle_sigma" not in plain.metrics
    assert m["ceiling_law"] == "normal" and m["angle_sigma"] == 1.0
    assert ceiling_note(plain.metrics) is not None
    assert "r2_h_to_z_ceiling" not in audit_inputs(AuditInputs(z=z, h=z)).metrics  # no angles


def test_the_law_comes_from_the_world_the_file_or_the_flag_once():
    z = _angles(3, rows=800)
    arrays = arrays_from_mapping({"z": z, "h": z, "circular": np.array([0, 1]),
                                  "angle_sigma": np.float64(1.0)}, "a.npz")
    assert arrays.angle_sigma == 1.0
    with pytest.raises(IdauditError, match="angle_sigma must be one number > 0, with circular"):
        arrays_from_mapping({"z": z, "h": z, "angle_sigma": np.float64(1.0)}, "a.npz")
    with pytest.raises(IdauditError, match="angle_sigma does not apply: these inputs bring"):
        audit_inputs(AuditInputs(z=z, h=z, circular=(0, 1), angle_sigma=1.0), angle_sigma=2.0)
    with pytest.raises(IdauditError, match="angle_sigma goes with circular"):
        audit_inputs(AuditInputs(z=z, h=z), angle_sigma=1.0)
    with pytest.raises(IdauditError, match="angle_sigma must be a number > 0"):
        audit_inputs(AuditInputs(z=z, h=z), circular=(0,), angle_sigma=0.0)


def test_reacher_evaluation_sets_carry_their_angles_law():
    """Reacher's evaluation angles are eval_angles' N(0, I₂): its evaluation sets say so, so
    an audit of any encoder on it reports the ceiling — on OU datasets, whose fit angles are
    N(0, I₂) too, not on trajectory ones (tests/test_sweep.py's tiny Reacher sweep checks both
    on rendered data)."""
    import inspect

    from idaudit.worlds.reacher import eval_pairs, world

    assert "angle_sigma=1.0, z_white=True)  # eval_angles: N(0, I₂)" in \
        inspect.getsource(eval_pairs)
    assert "angle_sigma=1.0 if self.rho is not None else None," in inspect.getsource(world)
    from idaudit.worlds.reacher.data import eval_angles

    z = eval_angles(200000)
    assert abs(z.std() - 1.0) < 0.01 and abs(z.mean()) < 0.01


def test_empirical_turns_known_answer():
    """Each arc's turns are summed over their count + 1; an arc with no reference adds none."""
    ref = np.array([0.5, 0.5 + 2 * math.pi, 0.5 + 2 * math.pi, -1.0 - 2 * math.pi])
    got = empirical_posterior_mean(ref, np.array([0.5 + 4 * math.pi, -1.0, 2.0]), bins=8)
    assert got == pytest.approx([0.5 + 2 * math.pi * 2 / 4, -1.0 - 2 * math.pi / 2, 2.0])


@pytest.mark.parametrize("sigma", [1.0, 2.5])
def test_the_estimated_ceiling_is_near_the_laws_by_simulation(sigma):
    """Without the law, the ceiling is estimated from the fit rows' turns; on N(0, σ²) angles it
    comes within 0.03 of the law's own ceiling at 6 000 rows, a little short on average
    (measured: 0.005–0.010 over 20 draws; the docstring of maths/ceilings.py says so)."""
    gaps = []
    for seed in range(8):
        z = _angles(seed, 6000, sigma)
        law = audit_metrics(z, wrap_angle(z), circular=(0, 1), angle_sigma=sigma, seed=seed)
        est = audit_metrics(z, wrap_angle(z), circular=(0, 1), seed=seed)
        assert est["ceiling_law"] == "empirical"
        gaps.append(est["r2_h_to_z_ceiling"] - law["r2_h_to_z_ceiling"])
    assert -0.03 < min(gaps) and max(gaps) < 0.01
    assert -0.02 < float(np.mean(gaps)) < 0.0
