"""Training: short runs beat the raw mixing, are deterministic, and round-trip checkpoints."""

import pytest
import torch
from conftest import assert_contract

from idaudit.core.errors import IdauditError
from idaudit.core.jsontext import jsonable
from idaudit.core.registered import OBJECTIVES
from idaudit.evaluations.audit import audit
from idaudit.models.checkpoint import load_checkpoint, save_checkpoint
from idaudit.training import TrainConfig, constant_then_cosine, train
from idaudit.training.runs import run
from idaudit.worlds import build_world, make_spec


def test_schedule_constant_then_cosine():
    assert constant_then_cosine(0, 100, 3e-3) == 3e-3
    assert constant_then_cosine(49, 100, 3e-3) == 3e-3
    assert constant_then_cosine(50, 100, 3e-3) == pytest.approx(3e-3)
    assert constant_then_cosine(75, 100, 3e-3) == pytest.approx(1.5e-3)
    assert constant_then_cosine(100, 100, 3e-3) == pytest.approx(0.0, abs=1e-12)


def test_short_spiral_run_beats_the_raw_mixing():
    world = build_world(make_spec("spiral", rho=0.95))
    # 600 steps: R² 0.975 here (800: 0.979; 400: 0.967), the raw mixing 0.011
    result = train(world, TrainConfig(steps=600, seed=3, eval_every=200, n_eval=4000))
    m = result.metrics
    assert m["mixing_r2_x_to_z"] < 0.05
    assert m["r2_h_to_z"] > 0.8
    assert m["r2_h_to_z"] > m["mixing_r2_x_to_z"] + 0.5
    assert m["bound_holds"]
    curve = result.history[0]["curve"]
    assert [c["step"] for c in curve] == [200, 400, 600]


@pytest.mark.parametrize("objective", ["whiten", "infonce"])
def test_other_objectives_train(objective):
    world = build_world(make_spec("banana"))
    lamb = 0.5 if objective == "whiten" else 0.0
    result = train(world, TrainConfig(objective=objective, lamb=lamb, steps=400, seed=0,
                                      eval_every=400, n_eval=2000))
    assert result.metrics["r2_h_to_z"] > result.metrics["mixing_r2_x_to_z"] - 0.05
    assert result.metrics["r2_h_to_z"] > 0.5


def test_same_seed_same_numbers():
    world = build_world(make_spec("coupling", dim=4))
    cfg = dict(steps=60, seed=7, eval_every=30, n_eval=500, lamb=1e-3)
    a = train(world, TrainConfig(**cfg))
    b = train(world, TrainConfig(**cfg))
    assert a.metrics == b.metrics
    for pa, pb in zip(a.encoder.parameters(), b.encoder.parameters()):
        assert torch.equal(pa, pb)
    c = train(world, TrainConfig(**{**cfg, "seed": 8}))
    assert c.metrics["r2_h_to_z"] != a.metrics["r2_h_to_z"]


def test_inits_keep_the_lowest_final_loss():
    world = build_world(make_spec("coupling", dim=4))
    r = train(world, TrainConfig(steps=40, seed=1, inits=3, eval_every=40, n_eval=500))
    finals = [h["final_loss"] for h in r.history]
    assert len(finals) == 3
    assert r.best_init == min(range(3), key=finals.__getitem__)
    assert r.metrics["final_loss"] == min(finals)


def test_checkpoint_round_trip(tmp_path):
    spec = make_spec("sinusoid")
    cfg = TrainConfig(steps=100, seed=2, eval_every=50, n_eval=1000)
    r = train(build_world(spec), cfg)
    path = save_checkpoint(tmp_path / "c.safetensors", r.encoder, r.encoder_name,
                           r.encoder_kwargs, spec, r.config.to_dict(), r.metrics)
    ck = load_checkpoint(path)
    assert ck.world == spec and ck.train["steps"] == 100 and ck.train["lamb"] == 1e-3
    x = torch.randn(50, 2)
    torch.testing.assert_close(ck.encoder(x), r.encoder.eval()(x))


@pytest.mark.parametrize("objective", ["lejepa", "infonce"])
def test_train_audit_contract_on_every_shared_key(tmp_path, objective):
    rec = run({"world": "sinusoid", "objective": objective, "steps": 100, "seed": 2,
               "eval_every": 50, "n_eval": 1000}, tmp_path / "c.safetensors")
    report = audit(encoder=rec.checkpoint)  # the checkpoint's own evaluation set and seed
    shared = assert_contract(rec.metrics, report.metrics)
    assert len(shared) >= 25  # in-sample, held-out, bound, spectrum, Gaussianity, baseline
    for key in ("r2_h_to_z", "r2_h_to_z_heldout", "mcc", "procrustes_mse", "alignment_gap",
                "bound", "bound_holds", "mixing_r2_x_to_z", "gaussianity_statistic",
                "r2_h_to_z_heldout_floor_high", "r2_h_to_z_floor_mean"):
        assert key in shared, key
    # audit's default gauss_sims=0, as train's: the asymptotic p-value, no simulations; the
    # same number in both (it is a shared key)
    assert report.metrics["gaussianity_method"] == "asymptotic"
    assert "gaussianity_p_value" in shared and 0.0 <= report.metrics["gaussianity_p_value"] <= 1.0
    assert load_checkpoint(rec.checkpoint).metrics == jsonable(rec.metrics)


@pytest.mark.parametrize("kwargs,fragment", [
    (dict(lamb=1.5), "lamb must"), (dict(lamb=-0.1), "lamb must"),
    (dict(objective="byol"), "valid: " + ", ".join(OBJECTIVES.names())),
    (dict(steps=0), "steps must"), (dict(sigma=-1.0), "sigma must"),
    (dict(sigma="wide"), "sigma must"),
])
def test_bad_train_config(kwargs, fragment):
    with pytest.raises(IdauditError) as exc:
        TrainConfig(**kwargs).validate()
    assert fragment in str(exc.value)


def test_every_run_says_which_encoder_and_mlp_is_sized_from_the_world(tmp_path):
    """Issue 40: `--encoder mlp` on coupling N = 8 trains (sized 8 → 8 from the world), the
    default is named as the world's matched encoder, and the line is in the record."""
    from conftest import run as cli

    res = cli("train", "--world", "coupling", "--dim", "8", "--encoder", "mlp", "--steps", "60",
              "--n-eval", "400", "--out", tmp_path / "mlp.safetensors")
    assert res.exit_code == 0, res.output
    assert ("encoder: mlp (in_dim 8, out_dim 8) — given by --encoder, sized from world coupling"
            in res.output)
    ck = load_checkpoint(tmp_path / "mlp.safetensors")
    assert (ck.encoder_name, ck.encoder_kwargs) == ("mlp", {"in_dim": 8, "out_dim": 8})
    res = cli("train", "--world", "coupling", "--dim", "8", "--steps", "20", "--n-eval", "400",
              "--out", tmp_path / "c.safetensors")
    assert res.exit_code == 0, res.output
    assert "encoder: coupling (dim 8, layers 4) — world coupling's own (the default" in res.output
    assert "--encoder mlp for a generic network" in res.output
    record = run({"world": "coupling", "dim": 8, "encoder": "mlp",
                  "encoder_kwargs": {"width": 32, "depth": 2}, "steps": 20, "n_eval": 400})
    assert record.encoder == ("encoder: mlp (in_dim 8, out_dim 8, width 32, depth 2) — given by "
                              "--encoder, sized from world coupling")
    assert record.metrics["embed_dim"] == 8


def test_a_vector_encoder_on_images_is_refused_before_any_render(tmp_path, monkeypatch):
    from conftest import run as cli

    monkeypatch.chdir(tmp_path)
    res = cli("train", "--world", "reacher", "--encoder", "mlp", "--out", "r.safetensors")
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1] == (
        "error: --encoder mlp takes vectors, and world 'reacher' gives images (32, 32, 3): use "
        "its own (the default) or cnn")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing rendered or written


def test_a_shape_error_names_the_worlds_dimension_and_the_raw_baseline_is_worded():
    """Issue 40, item 5: an 8-wide encoder on coupling with dim left at 2 says so; a gate the
    raw observations already pass gets a warning."""
    import idaudit

    net = torch.nn.Linear(8, 8)
    with pytest.raises(IdauditError) as err:
        idaudit.audit(encoder=net, world="coupling")
    text = str(err.value)
    assert "world 'coupling' gives 2-dimensional observations" in text
    assert "for another width give dim=N" in text and "--dim" not in text  # the library's
    torch.manual_seed(0)
    report = idaudit.audit(encoder=torch.nn.Linear(8, 8), world="coupling", dim=8, n_eval=2000,
                           min_r2=0.5)
    raw = report.metrics["mixing_r2_x_to_z"]
    assert 0.7 < raw < 0.8  # the paper's R²(x → z) on coupling
    said = [n for n in report.to_dict()["notes"] if "raw observations already pass" in n]
    assert said == [f"warning: the raw observations already pass the gate r2_h_to_z_heldout ≥ "
                    f"0.5: a linear read-out of x reaches R²(x → z) {raw:.3g} on this world, "
                    "with nothing learned; gate above it"]
    high = idaudit.audit(encoder=torch.nn.Linear(8, 8), world="coupling", dim=8, n_eval=2000,
                         min_r2=0.9)
    assert not [n for n in high.to_dict()["notes"] if "raw observations" in n]
