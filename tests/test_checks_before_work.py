"""Checks before work (issue 57, item 2): too few evaluation rows for an encoder's width is
inconclusive right after the two-input probe, before the evaluation set is rendered or
embedded; fewer than 10·m fit rows is a warning whose numbers a simulation justifies
(scripts/few_fit_rows.py, docs/metrics.md "How many rows"); a negative R² is no share of a
ceiling."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from idaudit import audit
from idaudit.evaluations.pipeline import PROBE_ROWS
from idaudit.evaluations.report import ceiling_note, few_rows_warning, verdict_lines
from idaudit.maths.floors import heldout_floor_mean, simulated_heldout_r2

REFUSAL = ("too few samples: 300 rows for a 2-dimensional latent and a 512-dimensional "
           "embedding (need at least 1038 for held-out fits)")


class Counting(nn.Module):
    """A wide linear encoder that counts the rows it embeds."""

    def __init__(self, d_in: int, m: int = 512) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(d_in, m)
        self.rows = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.rows += x.shape[0]
        return self.lin(x.float().flatten(1))


# ---- rows versus width, from the probe --------------------------------------------------

def test_a_vector_world_is_refused_after_the_probe_before_the_set_is_embedded():
    enc = Counting(2)
    report = audit(encoder=enc, world="spiral", n_eval=300)
    assert (report.verdict, report.exit_code, report.reason) == ("inconclusive", 3, REFUSAL)
    assert report.metrics == {"n_samples": 300, "latent_dim": 2, "embed_dim": 512}
    assert enc.rows == PROBE_ROWS  # the probe's two rows, never the 300 of the set


def test_the_label_free_rule_is_checked_from_the_probe_too():
    enc = Counting(2)
    report = audit(encoder=enc, world="spiral", n_eval=300, label_free=True)
    assert report.exit_code == 3 and enc.rows == PROBE_ROWS
    assert report.reason == ("too few samples: 300 rows for a 512-dimensional embedding "
                             "(need at least 522)")


def test_enough_rows_embed_the_whole_set():
    enc = Counting(2, m=8)
    report = audit(encoder=enc, world="spiral", n_eval=300)
    assert report.verdict == "ungated" and enc.rows == PROBE_ROWS + 2 * 300  # x and x′


@pytest.fixture
def no_render(monkeypatch):
    """Reacher's evaluation pairs, never rendered: a call is counted and refused."""
    pytest.importorskip("dm_control")
    from idaudit.worlds.reacher import eval_pairs

    calls = []

    def refuse(*args, **kwargs):
        calls.append(args)
        raise AssertionError("the evaluation set was rendered")

    monkeypatch.setattr(eval_pairs, "reacher_eval_set", refuse)
    return calls


def test_a_wide_encoder_on_reacher_is_refused_before_anything_is_rendered(tmp_path, no_render):
    enc = Counting(3 * 16 * 16)
    cache = tmp_path / "cache"
    report = audit(encoder=enc, world="reacher", image_size=16, n_eval=300, cache_dir=cache)
    assert (report.verdict, report.exit_code, report.reason) == ("inconclusive", 3, REFUSAL)
    assert report.world is not None and report.world["name"] == "reacher"
    assert no_render == [] and enc.rows == PROBE_ROWS and not cache.exists()


def test_the_command_line_refuses_it_the_same_way(tmp_path, no_render, monkeypatch):
    from conftest import run

    (tmp_path / "wide_arch.py").write_text(
        "from torch import nn\n"
        "def make():\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 512))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    torch.save(nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 512)).state_dict(), "w.pt")
    cache = tmp_path / "cache"
    res = run("audit", "w.pt", "--arch", "wide_arch:make", "--world", "reacher",
              "--image-size", 16, "--n-eval", 300, "--cache-dir", cache)
    assert res.exit_code == 3, res.output
    assert f"inconclusive: {REFUSAL}" in res.output
    assert no_render == [] and not cache.exists()


def test_several_targets_are_refused_before_the_first_is_embedded(tmp_path, no_render):
    small, wide = Counting(3 * 16 * 16, m=4), Counting(3 * 16 * 16)
    report = audit(targets=[small, wide], world="reacher", image_size=16, n_eval=300,
                   cache_dir=tmp_path / "cache")
    assert report.exit_code == 3 and report.reason.endswith(REFUSAL)
    assert report.metrics == {"n_runs": 2}
    assert no_render == [] and small.rows == wide.rows == PROBE_ROWS


# ---- fewer than 10·m fit rows: the simulation behind the warning -------------------------

N, M = 2, 32


@pytest.mark.parametrize(("n_fit", "reps"), [(N + M + 5, 400), (5 * M, 200), (10 * M, 200),
                                             (20 * M, 100), (40 * M, 100)])
def test_an_uninformative_encoder_scores_steins_expectation(n_fit, reps):
    """Held-out R² of h independent of z at n_fit fit rows (n_fit test rows) is Stein's
    1 − (1 + 1/n)(n − 2)/(n − m − 2)·n_te/(n_te − 1) within 4 standard errors of the
    simulation's mean, never above 0."""
    r2 = simulated_heldout_r2(M, n_fit, latents=N, reps=reps, seed=3)
    se = r2.std(ddof=1) / np.sqrt(reps)
    assert abs(r2.mean() - heldout_floor_mean(n_fit, n_fit, M)) < 4 * se + 0.01 * abs(r2.mean())
    assert r2.max() < 0


def test_the_threshold_10m_is_where_the_bias_is_a_tenth():
    """At the 2(n + m) + 10 minimum an uninformative m = 32 encoder scores about −7 and one of
    population R² 0.9 about 0.2; from 10·m fit rows on, −0.12 and 0.89 (bias ≤ 0.11·(1 − r))."""
    at_min = simulated_heldout_r2(M, N + M + 5, latents=N, reps=200, seed=4)
    assert at_min.mean() < -4
    good_min = simulated_heldout_r2(M, N + M + 5, latents=N, reps=200, seed=5, r2=0.9)
    assert good_min.mean() < 0.5
    at_10m = simulated_heldout_r2(M, 10 * M, latents=N, reps=200, seed=6)
    assert -0.135 < at_10m.mean() < -0.105
    good_10m = simulated_heldout_r2(M, 10 * M, latents=N, reps=100, seed=7, r2=0.9)
    assert 0.88 < good_10m.mean() < 0.895  # 0.9 − 0.1·0.12 = 0.888


def test_the_warning_quotes_steins_numbers():
    # 550 fit rows, m = 512 (the random ResNet-18 of issue 57 on 1 100 rows):
    # 1 − (1 + 1/550)·548/36·550/549 = −14.28
    line = few_rows_warning({"n_train": 550, "n_test": 550, "embed_dim": 512,
                             "r2_h_to_z_heldout": -307.7})
    assert line.startswith("warning: 550 fit rows for a 512-wide h (under 10·m = 5120)")
    assert "reads low by ≈ 14.3·(1 − true R²), an uninformative encoder scores ≈ -14.3" in line
    assert "≥ 20·m = 10240 rows" in line
    shuffled = few_rows_warning({"n_train": 550, "n_test": 550, "embed_dim": 512,
                                 "r2_h_to_z_heldout": -11.07,
                                 "r2_h_to_z_heldout_floor_mean": -101.5})
    assert "reads low by ≈ 102·(1 − true R²), h shuffled against z scores ≈ -102" in shuffled
    assert few_rows_warning({"n_train": 5120, "n_test": 5120, "embed_dim": 512,
                             "r2_h_to_z_heldout": 0.5}) is None


def test_an_audit_with_few_fit_rows_warns_first():
    torch.manual_seed(0)
    enc = nn.Sequential(nn.Linear(2, 64), nn.Tanh(), nn.Linear(64, 64))
    report = audit(encoder=enc, world="spiral", n_eval=400)  # 200 fit rows < 640
    lines = verdict_lines(report)
    assert report.exit_code == 0 and lines[1].startswith("warning: 200 fit rows for a 64-wide h")
    assert lines[1] in report.to_dict()["notes"]


# ---- a negative R² is no share of a ceiling ---------------------------------------------

def test_a_negative_r2_is_no_share_of_the_ceiling():
    note = ceiling_note({"r2_h_to_z_ceiling": 0.9493, "r2_h_to_z_heldout": -307.7,
                         "r2_h_to_z_of_ceiling": -307.7 / 0.9493})
    assert note == ("held-out R²(h → z) -307.700 of a possible 0.949 (below 0: no share of the "
                    "ceiling, the best guess from angles seen mod 2π)")
    assert "%" not in note
    ok = ceiling_note({"r2_h_to_z_ceiling": 0.9493, "r2_h_to_z_heldout": 0.934,
                       "r2_h_to_z_of_ceiling": 0.934 / 0.9493})
    assert "0.934 of a possible 0.949 (98.4 % of the ceiling" in ok
