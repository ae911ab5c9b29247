"""Docs that said something the code does not (issue 57, finding 7), each checked against
what the code computes or what its record holds."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import identity_linear

import idaudit

ROOT = Path(__file__).resolve().parents[1]


def doc(name: str) -> str:
    return (ROOT / "docs" / name).read_text(encoding="utf-8")


def flat(text: str) -> str:
    """``text`` with its line breaks and indents as single spaces."""
    return re.sub(r"\s+", " ", text)


# ---- a. what an encoder's label-free report holds ---------------------------------------

def test_an_encoders_label_free_report_has_the_pair_signals_the_doc_names():
    """An encoder audited --label-free on its world's set (a Reacher checkpoint, or here a
    spiral encoder: the same embedding of x and x′) reports every pair signal the doc lists."""
    text = flat(doc("label-free.md"))
    sentence = text.split("its label-free report has the pair signals", 1)[1].split(").", 1)[0]
    keys = re.findall(r"`([a-z_A-Z]+)`", sentence)
    assert keys == ["rho_estimated", "canonical_spread", "canonical_shortfall",
                    "alignment_gap", "D", "bound", "bound_upper"]
    report = idaudit.audit(encoder=identity_linear(2), world="spiral", n_eval=300,
                           label_free=True)
    assert report.metrics["label_free"] is True and report.metrics["rho"] == 0.95
    for key in keys:
        assert math.isfinite(report.metrics[key]), key


# ---- b. the whitening floor -------------------------------------------------------------

FLOOR = "√(m(m+1)/(n−1))"


@pytest.mark.parametrize(("m", "n"), [(2, 1300), (1024, 10_000), (3, 11)])
def test_the_whitening_floor_is_the_formula_the_docs_print(m, n):
    from idaudit.maths.bounds import whitening_floor

    assert whitening_floor(n, m) == pytest.approx(math.sqrt(m * (m + 1) / (n - 1)), rel=1e-15)
    assert whitening_floor(n, m) != pytest.approx(math.sqrt(m * (m + 1) / n), rel=1e-6)


def test_every_text_of_the_floor_says_n_minus_1():
    from idaudit.evaluations.report import bound_note
    from idaudit.maths.bounds import whitening_floor
    from idaudit.maths.catalogue import BY_KEY

    for name in ("ci.md", "metrics.md", "label-free.md"):
        text = doc(name)
        assert FLOOR in text, name
        assert "√(m(m+1)/n)" not in text, name
    assert BY_KEY["whitening_floor"].label == f"ε floor {FLOOR}"
    assert "(√(m(m+1)/(n−1)))" in bound_note({"bound_floor_dominated": True})
    # docs/ci.md's example value
    assert f"{whitening_floor(10_000, 1024):.1f}" == "10.2"
    assert "(10.2 at n = 10 000, m = 1024)" in flat(doc("ci.md"))


# ---- c. the page's frames -----------------------------------------------------------------

def test_the_page_doc_says_which_frames_are_held_out():
    from idaudit.evaluations.figures import Drawn, _frames, new_figure
    from idaudit.evaluations.inputs import AuditInputs, frame_sample

    text = flat(doc("page.md"))
    assert ('a frame among the fit\'s rows is titled "(fit row)", and the figure\'s title says '
            'how many are held out (e.g. "frames 3 of 6 held out")') in text
    assert "six held-out frames" not in text
    rng = np.random.default_rng(0)
    z = rng.standard_normal((400, 2))
    h = z + 0.05 * rng.standard_normal((400, 2))
    pics = rng.integers(0, 255, (400, 8, 8, 3), dtype=np.uint8)
    frames, rows = frame_sample(pics, None)  # no fixed test rows: spread over every row
    d = Drawn(AuditInputs(z=z, h=h, frames=frames, frame_rows=rows), idaudit.audit(z, h), 0)
    fig, _ = new_figure(figsize=(8, 2))
    fig.clear()
    _frames(fig, d)
    held = int(np.isin(rows, d.split()[1]).sum())
    assert rows.size == 6 and 0 < held < 6
    assert fig._suptitle.get_text().endswith(f"frames {held} of 6 held out)")
    assert sum(ax.get_title().endswith(" (fit row)") for ax in fig.axes) == 6 - held


# ---- d. the integrations table and its record ---------------------------------------------

def test_the_integrations_table_is_its_scripts_record():
    record = json.loads((ROOT / "docs" / "data" / "integration-table.json").read_text())
    section = doc("integrations.md").split("## Measured: every route at 224 px", 1)[1]
    section = section.split("\n## ", 1)[0]
    intro = flat(section.split("| format |", 1)[0])
    versions = record["versions"]
    assert f"({record['date']};" in intro
    for name, label in (("python", "Python"), ("torch", "torch"),
                        ("transformers", "transformers")):
        assert f"{label} {versions[name]}" in intro, name
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0] not in ("format", "---"):
            rows[cells[0]] = cells
    checked = 0
    for rec in record["rows"]:
        if "skipped" in rec:
            continue
        cells = rows[rec["format"]]
        assert cells[1] == f"`{rec['command']}`"
        assert cells[2].split(" ")[0] == str(rec["exit"])
        r2 = rec["r2_h_to_z_heldout"]
        assert cells[3] == ("—" if r2 is None else f"{r2:.4f}"), rec["format"]
        checked += 1
    assert checked == 10
    assert rows["the paper's `run.pt` (arrays)"][3] == rows[
        "idaudit checkpoint (spiral world, `idaudit train --world spiral --steps 500`)"][3]


# ---- f. idaudit train's summary line -------------------------------------------------------

def test_the_train_summary_line_labels_its_r2_and_never_shows_0_steps_per_second():
    from idaudit.cli.train import rate_text, summary_line

    assert [rate_text(v) for v in (0.0123, 0.3, 5.26, 9.96, 123.4)] == [
        "0.012", "0.3", "5.3", "10", "123"]
    line = summary_line({"r2_h_to_z": 0.97216, "r2_h_to_z_heldout": 0.96841}, 0.0042, "cpu",
                        "s.safetensors", "s.safetensors.log.json")
    assert line == ("R²(h → z) in-sample 0.9722, held-out 0.9684; 0.0042 steps/s on cpu; "
                    "checkpoint s.safetensors; log s.safetensors.log.json")
    assert summary_line({}, 12.6, "cpu", "a", "b") == "13 steps/s on cpu; checkpoint a; log b"


# ---- g. idaudit report's summary.md ----------------------------------------------------------

def _records(directory: Path, seeds: tuple[int, ...], suite: str | None) -> None:
    (directory / "runs").mkdir(parents=True)
    for lamb in (0.001, 0.01):
        for seed in seeds:
            run = {"world": "spiral", "objective": "lejepa", "seed": seed, "steps": 100,
                   "rho": 0.95, "lamb": lamb}
            metrics = {"r2_h_to_z": 0.5 + lamb + seed / 100, "orthogonality_error": 0.25,
                       "mixing_r2_x_to_z": 0.0125}
            name = f"spiral-{lamb}-{seed}.json"
            (directory / "runs" / name).write_text(json.dumps(
                {"run": run, "status": "ok", "metrics": metrics, "seconds": 6.0}))
    if suite is not None:
        (directory / "sweep.json").write_text(json.dumps({"suite": suite}))


def test_the_summary_names_its_suite_and_fixed_options_and_one_seed_has_no_spread(tmp_path):
    from conftest import run

    _records(tmp_path / "one", (0,), "2d")
    res = run("report", str(tmp_path / "one"), "--no-figures")
    assert res.exit_code == 0, res.output
    md = (tmp_path / "one" / "summary.md").read_text().splitlines()
    assert md[:7] == [
        "# idaudit sweep: suite 2d", "",
        "Fixed in every run: method = SIGReg, objective = lejepa, ρ = 0.95, steps = 100, "
        "world = spiral. 1 seed per configuration, so no ± (one seed has no spread).", "",
        "| lamb | seeds | R²(h→z) | orthogonality error | mixing R²(x→z) |",
        "|---|---|---|---|---|",
        "| 0.001 | 1 | 0.501000 | 0.250000 | 0.012500 |"]
    assert not any("±" in line for line in md[4:])
    _records(tmp_path / "two", (0, 1), None)
    res = run("report", str(tmp_path / "two"), "--no-figures")
    assert res.exit_code == 0, res.output
    md = (tmp_path / "two" / "summary.md").read_text().splitlines()
    assert md[0] == "# idaudit sweep (sweep.json names no suite)"
    assert md[2].endswith("2 seeds per configuration: mean ± std over seeds (a configuration "
                          "of one seed shows no ±).")
    assert md[6].startswith("| 0.001 | 2 | 0.506000 ± 5.0e-03 | 0.250000 ± 0.0e+00 |")


def test_a_sweep_notes_its_suite_for_the_report(tmp_path):
    from idaudit.experiments.aggregate import sweep_suite
    from idaudit.experiments.sweep import _note_suite

    assert sweep_suite(tmp_path) is None
    _note_suite(tmp_path / "out", "scaling")
    assert sweep_suite(tmp_path / "out") == "scaling"


# ---- h and i. the page's figures with two targets; the bound's legend ----------------------

def _targets(k: int):
    from idaudit.evaluations.figures import Drawn
    from idaudit.evaluations.inputs import AuditInputs

    out = []
    for seed in range(k):
        rng = np.random.default_rng(seed)
        z = rng.standard_normal((600, 2))
        zp = 0.9 * z + math.sqrt(1 - 0.81) * rng.standard_normal((600, 2))
        h, hp = z + 0.05 * rng.standard_normal((600, 2)), zp
        out.append(Drawn(AuditInputs(z=z, h=h, h_prime=hp, rho=0.9),
                         idaudit.audit(z, h, hp, 0.9, floor_draws=0), 0))
    return out


def test_two_targets_keep_each_figures_size_and_fit_the_pages_column(tmp_path):
    from PIL import Image

    from idaudit.evaluations.figures import section_figure, sections
    from idaudit.evaluations.page import PAGE_DPI

    assert ("side by side while a row stays within the page's 1400-px column, else one target "
            "to a row, each figure at the size it has alone") in flat(doc("page.md"))
    one, two = sections(_targets(1)), sections(_targets(2))
    assert [s.name for s, _ in two] == ["predictions", "embeddings", "bound"]
    for (section, [single]), (_, pair) in zip(one, two):
        w1, h1 = section_figure(section, [single]).get_size_inches()
        w2, h2 = section_figure(section, pair).get_size_inches()
        # one target to a row: the same width, twice the height
        assert (w2, h2) == pytest.approx((w1, 2 * h1)), section.name
        assert w2 * PAGE_DPI <= 1400, section.name  # the page's column: never scaled down
    # the PNGs the page embeds: their pixel sizes
    from idaudit.evaluations.figures import png_bytes

    pred, pair = two[0]
    path = tmp_path / "p.png"
    path.write_bytes(png_bytes(section_figure(pred, pair), dpi=PAGE_DPI))
    assert Image.open(path).size == (1008, 720)  # 8.4 × 6 in at 120 dpi


def test_the_bound_legend_covers_no_bar_or_its_value():
    from idaudit.evaluations.figures import Drawn, _bound, new_figure
    from idaudit.evaluations.inputs import AuditInputs

    # h = 0.3·z, ρ = 0.5: the lowest bar's value reached under the legend at the lower right
    rng = np.random.default_rng(11)
    z = rng.standard_normal((1000, 2))
    zp = 0.5 * z + math.sqrt(0.75) * rng.standard_normal((1000, 2))
    h, hp = (0.3 * a + 0.01 * rng.standard_normal((1000, 2)) for a in (z, zp))
    d = Drawn(AuditInputs(z=z, h=h, h_prime=hp, rho=0.5),
              idaudit.audit(z, h, hp, 0.5, floor_draws=0), 0)
    assert d.metrics.get("bound_trivial") is not None  # the legend is drawn
    fig, _ = new_figure(figsize=(6.0, 2.6))
    fig.clear()
    _bound(fig, d)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    [ax] = fig.axes
    legend = ax.get_legend().get_window_extent(renderer)
    labels = [t.get_window_extent(renderer) for t in ax.texts]
    bars = [p.get_window_extent(renderer) for p in ax.patches]
    assert len(labels) == len(bars) >= 5
    assert not any(legend.overlaps(b) for b in labels + bars)
    assert legend.x0 >= ax.get_window_extent(renderer).x1  # right of the axes
    assert legend.x1 <= fig.bbox.x1  # and on the figure
