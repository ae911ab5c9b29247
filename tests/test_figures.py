"""Report figures: which ones a sweep supports, the numbers behind them, readable PNGs."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from idaudit.cli import app
from idaudit.experiments.aggregate import aggregate

pytest.importorskip("matplotlib")
from idaudit.experiments.aggregate import grid_cells  # noqa: E402
from idaudit.experiments.figures import draw_figures

runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"


def _rec(run, r2, orth=0.1, with_sample=False, seed=0):
    rec = {"run": {**run, "seed": seed}, "status": "ok",
           "metrics": {"r2_h_to_z": r2, "orthogonality_error": orth, "mixing_r2_x_to_z": 0.7,
                       "procrustes_mse": 0.5 * (1 - r2) + 1e-4, "bound": 2 * (1 - r2) + 1e-3,
                       "whitening_error": 0.1}}
    if with_sample:
        rng = np.random.default_rng(seed)
        z = rng.standard_normal((200, 2))
        rec["embedding_sample"] = {"z": z.tolist(), "h": (z @ [[0, -1], [1, 0]]).tolist()}
    return rec


def _write_runs(root, records):
    runs = root / "runs"
    runs.mkdir(parents=True)
    for i, rec in enumerate(records):
        (runs / f"r{i}.json").write_text(json.dumps(rec))


def _png_ok(path):
    import matplotlib.image as mpimg

    assert path.read_bytes()[:8] == PNG
    img = mpimg.imread(path)
    assert img.shape[0] > 200 and img.shape[1] > 300
    assert float(img[..., :3].std()) > 0.05  # something is drawn, not a blank canvas


def test_grid_heatmap_cells_are_the_seed_means():
    recs = [_rec({"world": "spiral", "objective": "lejepa", "lamb": lam, "rho": rho},
                 r2=r2 + 0.01 * s, orth=1 - r2, seed=s)
            for lam, rho, r2 in ((1e-3, 0.5, 0.9), (1e-3, 0.9, 0.95), (0.5, 0.5, 0.02),
                                 (0.5, 0.9, 0.01)) for s in (0, 1)]
    world, method, lambs, rhos, mats = grid_cells(aggregate(recs))
    assert (world, method, lambs, rhos) == ("spiral", "SIGReg", [1e-3, 0.5], [0.5, 0.9])
    np.testing.assert_allclose(mats["r2_h_to_z"], [[0.905, 0.955], [0.025, 0.015]])
    np.testing.assert_allclose(mats["orthogonality_error"], [[0.1, 0.05], [0.98, 0.99]])
    assert grid_cells(aggregate(recs[:2])) is None  # one λ, one ρ: no heat map


def test_report_draws_every_figure_the_runs_support(tmp_path):
    recs = []
    for dim in (2, 8, 32):  # scaling: R² against N
        for obj, r2 in (("lejepa", 0.9999), ("infonce", 0.9)):
            recs.append(_rec({"world": "coupling", "dim": dim, "objective": obj, "lamb": 1e-6},
                             r2, with_sample=dim == 2))
    _write_runs(tmp_path / "scaling", recs)
    res = runner.invoke(app, ["report", str(tmp_path / "scaling")])
    assert res.exit_code == 0, res.output
    figs = tmp_path / "scaling" / "figures"
    assert sorted(p.name for p in figs.iterdir()) == ["bound.png", "embeddings.png",
                                                       "r2_vs_n.png"]
    for p in figs.iterdir():
        _png_ok(p)

    recs = [_rec({"world": w, "objective": "lejepa", "source": "gennorm", "alpha": a,
                  "lamb": 1e-3}, 1 - abs(np.log2(a) - 1) / 10)
            for w in ("spiral", "banana") for a in (0.5, 1.0, 2.0, 4.0)]
    recs += [_rec({"world": "spiral", "objective": "lejepa", "lamb": lam, "rho": rho}, 0.5)
             for lam in (1e-3, 0.5) for rho in (0.5, 0.9)]
    out = tmp_path / "mixed"
    _write_runs(out, recs)
    paths = draw_figures(recs, aggregate(recs), out)
    assert sorted(p.name for p in paths) == ["bound.png", "grid_heatmaps.png", "r2_vs_alpha.png"]
    for p in paths:
        _png_ok(p)


def test_report_without_figures_writes_only_tables(tmp_path):
    _write_runs(tmp_path, [_rec({"world": "spiral", "lamb": 1e-3}, 0.98, with_sample=True)])
    res = runner.invoke(app, ["report", str(tmp_path), "--no-figures"])
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "figures").exists() and (tmp_path / "summary.md").exists()


def test_rho_trends_are_spearman_per_lambda(tmp_path):
    from scipy.stats import spearmanr

    from idaudit.experiments.aggregate import rho_trends

    rhos = [0.3, 0.5, 0.9, 0.99]
    up, bump = [0.1, 0.5, 0.8, 0.9], [0.2, 0.7, 0.6, 0.1]
    recs = [_rec({"world": "spiral", "objective": "lejepa", "lamb": lam, "rho": rho}, r2)
            for lam, vals in ((1e-3, up), (0.5, bump)) for rho, r2 in zip(rhos, vals)]
    trends = dict(rho_trends(aggregate(recs)))
    assert trends[1e-3] == pytest.approx(1.0)
    assert trends[0.5] == pytest.approx(spearmanr(rhos, bump).statistic)
    _write_runs(tmp_path, recs)
    assert runner.invoke(app, ["report", str(tmp_path), "--no-figures"]).exit_code == 0
    md = (tmp_path / "summary.md").read_text()
    assert "| 0.001 | +1.00 |" in md and f"| 0.5 | {trends[0.5]:+.2f} |" in md


def test_bound_figure_separates_non_gaussian_sources():
    from idaudit.experiments.figures import gaussian_source

    assert gaussian_source({"world": "spiral"})
    assert gaussian_source({"source": "gennorm", "alpha": 2.0})
    assert not gaussian_source({"source": "gennorm", "alpha": 1.0})
    assert not gaussian_source({"source": "laplace"})


def test_drawing_leaves_the_callers_backend_and_figures(tmp_path):
    import matplotlib
    import matplotlib.pyplot as plt

    from idaudit.evaluations.plan import plan_gallery

    recs = [_rec({"world": "coupling", "dim": dim, "objective": "lejepa", "lamb": lam,
                  "rho": rho, "source": "gennorm", "alpha": a}, 0.8 + 0.01 * dim + 0.1 * lam,
                 with_sample=dim == 2)
            for dim in (2, 8) for lam in (1e-3, 0.5) for rho in (0.5, 0.9) for a in (1.0, 2.0)]
    z = np.random.default_rng(0).standard_normal((500, 2))
    before = matplotlib.get_backend()
    try:
        plt.switch_backend("svg")  # a caller's own (headless) backend, not Agg
        mine = plt.figure()
        paths = draw_figures(recs, aggregate(recs), tmp_path)
        plan_gallery(z, z @ [[0.0, -1.0], [1.0, 0.0]], pairs=5).plot(tmp_path / "plan.png")
        assert matplotlib.get_backend() == "svg"
        assert plt.get_fignums() == [mine.number]  # the caller's figure, and no other, open
    finally:
        plt.close("all")
        plt.switch_backend(before)
    assert sorted(p.name for p in paths) == ["bound.png", "embeddings.png", "grid_heatmaps.png",
                                             "r2_vs_alpha.png", "r2_vs_n.png"]
    for p in [*paths, tmp_path / "plan.png"]:
        assert p.read_bytes()[:8] == PNG
