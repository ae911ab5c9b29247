"""The lejepa library's form as a training option: --form official, --n-views, --projector;
what checkpoints record, and audit/plan reading the backbone or the projector."""

import json
import re

import numpy as np
import pytest
import torch
from conftest import one_line, run

import idaudit
from idaudit.core.errors import IdauditError
from idaudit.maths.losses import alignment, objective_for, random_directions, sigreg, sigreg_per_view
from idaudit.models.encoders import Projected, Projector, build_encoder
from idaudit.training import TrainConfig
from idaudit.training.runs import resolve
from idaudit.worlds import build_world, make_spec


def test_official_objective_is_alignment_plus_lambda_times_per_view_sigreg():
    g = torch.Generator().manual_seed(3)
    h = torch.randn(4, 64, 3, generator=g, dtype=torch.float64)
    h[1:] += 2.0 * h[:1]  # views that agree, so pooled and per-view SIGReg differ
    a = random_directions(3, 16, g, dtype=torch.float64)
    loss, parts = objective_for("lejepa", "official")(h, 0.02, 1.0, a)
    want = alignment(h) + 0.02 * sigreg_per_view(h, a)
    assert loss.item() == pytest.approx(want.item(), rel=1e-12)
    paper, _ = objective_for("lejepa", "paper")(h, 0.02, 1.0, a)
    assert paper.item() == pytest.approx((0.02 * sigreg(h, a) + 0.98 * alignment(h)).item(),
                                         rel=1e-12)
    assert abs(paper.item() - loss.item()) > 1e-3
    assert parts["sigreg"].item() == pytest.approx(sigreg_per_view(h, a).item(), rel=1e-12)
    assert objective_for("lejepa") is objective_for("lejepa", None)
    with pytest.raises(IdauditError, match="unknown lejepa form"):
        objective_for("lejepa", "both")


def test_official_form_takes_the_library_lambda_on_every_world():
    spiral = resolve({"world": "spiral", "form": "official"})
    assert spiral.train.lamb == 0.02 and spiral.sources["lamb"] == (0.02, "form official")
    # the Reacher world's own λ (5e-3, for the paper's form) does not apply to the official form
    reacher = resolve({"world": "reacher", "rho": 0.95, "form": "official"})
    assert reacher.train.lamb == 0.02
    given = resolve({"world": "spiral", "form": "official", "lamb": 0.1})
    assert given.train.lamb == 0.1 and given.sources["lamb"] == (0.1, "given")
    paper = resolve({"world": "spiral"})
    assert paper.train.form == "paper" and paper.train.n_views == 2
    assert paper.train.lamb == 1e-3


def test_run_ids_leave_out_the_new_options_at_their_defaults():
    base = resolve({"world": "spiral"})
    assert not {"form", "n_views", "projector"} & set(base.id_basis["train"])
    assert resolve({"world": "spiral", "form": "paper", "n_views": 2}).id == base.id
    ids = {resolve({"world": "spiral", **o}).id for o in
           ({}, {"form": "official"}, {"n_views": 4}, {"projector": "8,2"})}
    assert len(ids) == 4


@pytest.mark.parametrize("options,fragment", [
    ({"objective": "whiten", "form": "official"}, "form does not apply to objective whiten"),
    ({"objective": "infonce", "n_views": 3}, "n_views does not apply to objective infonce"),
    ({"form": "library"}, "form must be one of paper, official"),
    ({"n_views": 1}, "n_views must lie in [2, 64]"),
    ({"projector": "64,x"}, "projector takes comma-separated layer widths"),
    ({"projector": "0"}, "projector takes comma-separated layer widths"),
    ({"projector": ",".join(["4"] * 9)}, "at most 8 layers"),
])
def test_bad_form_options_are_refused_naming_the_option(options, fragment):
    with pytest.raises(IdauditError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        TrainConfig(**options).resolved()


def test_more_than_two_views_need_fresh_anchored_latents(tmp_path):
    world = build_world(make_spec("spiral"))
    g = torch.Generator().manual_seed(0)
    with pytest.raises(IdauditError, match="n_views 3 needs views anchor"):
        world.pair_source("pair", 8, g, torch.device("cpu"), 3)
    with pytest.raises(IdauditError, match="n_views 3 needs views anchor"):
        idaudit.train(world="spiral", views="pair", n_views=3, steps=5)
    idaudit.write_world("spiral", pairs=200, out=tmp_path / "p.safetensors")
    with pytest.raises(IdauditError, match="n_views 4 needs fresh latents; a pairs file"):
        idaudit.train(data=tmp_path / "p.safetensors", n_views=4, epochs=1)


def test_anchored_views_share_their_anchor_and_keep_the_two_view_draws():
    """Every pair of the V views is an OU pair of correlation ρ² (ρ = 0.8: 0.64), and the
    first two of V views are the draws two views would have given (same generator)."""
    world = build_world(make_spec("spiral", rho=0.8))
    views = world.sample_views(200_000, torch.Generator().manual_seed(1), "anchor", 4)
    assert len(views) == 4
    for u in range(4):
        for v in range(u + 1, 4):
            c = np.corrcoef(views[u][:, 0].numpy(), views[v][:, 0].numpy())[0, 1]
            assert c == pytest.approx(0.64, abs=0.01)
    two = world.sample_views(200_000, torch.Generator().manual_seed(1), "anchor")
    assert torch.equal(two[0], views[0]) and torch.equal(two[1], views[1])


def test_projector_is_linear_bn_relu_then_linear():
    head = Projector(3, [16, 16, 2])
    kinds = [type(m).__name__ for m in head]
    assert kinds == ["Linear", "BatchNorm1d", "ReLU", "Linear", "BatchNorm1d", "ReLU", "Linear"]
    assert head.out_dim == 2 and head[0].in_features == 3
    enc = build_encoder("projected", {"backbone": "mlp", "backbone_kwargs": {"in_dim": 2,
                                      "out_dim": 3, "width": 8, "depth": 1}, "widths": [5, 4]})
    x = torch.randn(10, 2)
    enc.eval()
    assert enc(x).shape == (10, 3) and enc.project(x).shape == (10, 4)
    enc.output = "projector"
    assert torch.equal(enc(x), enc.project(x))
    with pytest.raises(IdauditError, match="one of backbone, projector"):
        enc.output = "head"
    with pytest.raises(IdauditError, match="layer widths"):
        build_encoder("projected", {"widths": []})


@pytest.fixture(scope="module")
def projected_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("proj") / "p.safetensors"
    record = idaudit.train(world="spiral", steps=400, eval_every=0, n_eval=2000, form="official",
                           n_views=3, projector="32,2", out=str(path))
    return path, record


def test_checkpoint_records_the_form_and_the_projector(projected_checkpoint):
    from idaudit.models.checkpoint import load_checkpoint

    path, record = projected_checkpoint
    ck = load_checkpoint(path)
    assert isinstance(ck.encoder, Projected)
    assert ck.train["form"] == "official" and ck.train["n_views"] == 3
    assert ck.train["projector"] == "32,2" and ck.train["lamb"] == 0.02
    assert ck.encoder_kwargs["widths"] == [32, 2] and ck.encoder_kwargs["backbone"] == "mlp"
    # the training log's metrics are the backbone's, as audit reads it by default
    report = idaudit.audit(encoder=str(path))
    assert report.metrics["r2_h_to_z_heldout"] == pytest.approx(
        record.metrics["r2_h_to_z_heldout"], abs=1e-6)


def test_audit_and_plan_read_the_backbone_or_the_projector(projected_checkpoint):
    path, _ = projected_checkpoint
    enc = idaudit.models.checkpoint.load_checkpoint(path).encoder
    x = build_world(make_spec("spiral")).eval_set(500, 0).x
    with torch.no_grad():
        h, p = enc.backbone(x), enc.project(x)
    backbone = idaudit.audit(encoder=str(path), n_eval=2000)
    named = idaudit.audit(encoder=str(path), n_eval=2000, output="backbone")
    projector = idaudit.audit(encoder=str(path), n_eval=2000, output="projector")
    assert named.metrics == backbone.metrics
    assert projector.metrics["r2_h_to_z_heldout"] != backbone.metrics["r2_h_to_z_heldout"]
    assert not torch.allclose(h, p)
    plan_b = idaudit.plan(str(path), pairs=20)
    plan_p = idaudit.plan(str(path), pairs=20, output="projector")
    assert plan_b.cost_ratio_median != plan_p.cost_ratio_median
    out = path.parent / "projector.json"
    res = run("audit", path, "--output", "projector", "--n-eval", 2000, "--json", out)
    assert res.exit_code == 0, res.output
    cli = json.loads(out.read_text())["metrics"]["r2_h_to_z_heldout"]
    assert cli == pytest.approx(projector.metrics["r2_h_to_z_heldout"], abs=1e-12)


def test_output_on_a_checkpoint_without_projector_is_refused(tmp_path):
    path = tmp_path / "plain.safetensors"
    idaudit.train(world="spiral", steps=20, eval_every=0, n_eval=500, out=str(path))
    one_line(run("audit", path, "--output", "projector"), 2,
                     "--output does not apply to")
    one_line(run("plan", path, "--output", "backbone"), 2, "--output does not apply to")


def test_a_short_official_run_beats_the_raw_mixing():
    # 1000 steps: held-out R² 0.967 here (800: 0.946; 500: 0.42, before the fit sets in)
    record = idaudit.train(world="spiral", steps=1000, eval_every=0, n_eval=4000,
                           form="official", n_views=4)
    m = record.metrics
    assert m["r2_h_to_z_heldout"] > m["mixing_r2_x_to_z"] + 0.5
    assert m["r2_h_to_z_heldout"] > 0.8


def test_train_cli_takes_the_form_flags(tmp_path):
    res = run("train", "--world", "spiral", "--form", "official", "--show-config")
    assert res.exit_code == 0, res.output
    assert re.search(r"^lamb +=  ?0\.02 +\(form official\)$", res.output, re.M), res.output
    one_line(run("train", "--world", "spiral", "--objective", "infonce", "--form",
                         "official", "--steps", 10), 2, "--form does not apply")


# ---- the Reacher card's ceiling: angles drawn unwrapped, images that show them mod 2π ------


def test_no_function_of_the_wrapped_angle_beats_the_gaussian_conditional_mean():
    """A simulation of the claim in docs/reacher.md: for z ~ N(0, 1) seen only mod 2π, the
    held-out R² of E[z | wrap z] is ≈ 0.9485 and that of the wrapped angle ≈ 0.935; a
    degree-9 polynomial of the wrapped angle fitted freely does not beat the former."""
    from idaudit.maths.ceilings import angle_posterior_mean as gaussian_angle_mean
    from idaudit.maths.ceilings import wrap_angle
    from idaudit.worlds.reacher.data import r2_ceilings

    rng = np.random.default_rng(5)
    z_fit, z_test = rng.standard_normal((400_000, 1)), rng.standard_normal((400_000, 1))
    c = r2_ceilings(z_fit, z_test)
    assert c["bayes"][0] == pytest.approx(0.9485, abs=0.003)
    assert c["wrapped"][0] == pytest.approx(0.935, abs=0.003)
    w_fit, w_test = wrap_angle(z_fit[:, 0]), wrap_angle(z_test[:, 0])
    coef = np.polyfit(w_fit, z_fit[:, 0], 9)
    resid = z_test[:, 0] - np.polyval(coef, w_test)
    poly = 1 - resid.var() / z_test[:, 0].var()
    assert c["wrapped"][0] < poly <= c["bayes"][0] + 1e-3
    # E[z | wrap z] is wrap z away from ±π, and hedges towards 0 next to it
    assert gaussian_angle_mean(np.array([0.5]))[0] == pytest.approx(0.5, abs=1e-6)
    assert abs(gaussian_angle_mean(np.array([3.1]))[0]) < 1.0


def test_the_cards_evaluation_set_caps_r2_below_0_95():
    """The card's audit fits on the first 10 000 training angles and scores the 10 000 shared
    evaluation angles: no encoder of the images reaches R² 0.95 there (0.949 at best), and an
    embedding linear in the wrapped angles gets 0.938."""
    from idaudit.worlds.reacher.data import ReacherSpec, eval_angles, ou_angles, r2_ceilings

    for seed in (0, 1):
        spec = ReacherSpec(mode="ou", rho=0.95, stride=8, pairs=60_000, n_eval=10_000, seed=seed,
                           image_size=32)
        c = r2_ceilings(ou_angles(spec)[0][:10_000], eval_angles(10_000))
        assert np.mean(c["bayes"]) == pytest.approx(0.9492, abs=5e-4)
        assert np.mean(c["bayes"]) < 0.95
        assert np.mean(c["wrapped"]) == pytest.approx(0.9384, abs=5e-4)
