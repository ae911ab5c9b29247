"""The Python API: one public name per action (idaudit.audit / plan / train …), each taking its
options as keywords or its request, typed reports, and assert_identifiable."""

import pytest
import torch
from scipy.stats import ortho_group

import idaudit
from idaudit.maths.linear import standardize
from idaudit.testing import assert_identifiable


def _latents(n=4000, d=3, seed=0):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_assert_identifiable_passes_on_a_rotation():
    z = _latents()
    q = torch.tensor(ortho_group.rvs(3, random_state=0))
    # the latents' law is not declared: the audit standardises them on their rows, and h is an
    # exact rotation of that
    report = assert_identifiable(z, torch.from_numpy(standardize(z)) @ q.T, min_r2=0.99,
                                 max_orthogonality_error=0.05)
    assert report.passed and report.verdict == "pass"
    assert report.metrics["r2_h_to_z_heldout"] > 0.999
    assert report.metrics["orthogonality_error"] < 1e-10


def test_assert_identifiable_fails_with_the_table_on_a_warped_embedding():
    z = _latents()
    warped = torch.stack([z[:, 0], z[:, 1] + z[:, 0] ** 2, torch.tanh(2 * z[:, 2])], 1)
    with pytest.raises(AssertionError) as exc:
        assert_identifiable(z, warped, min_r2=0.95, max_orthogonality_error=0.1)
    text = str(exc.value)
    assert text.startswith("embedding is not identifiable: r2_h_to_z_heldout = ")
    assert "| metric | value | gate | result |" in text
    assert "| `r2_h_to_z_heldout` |" in text and "**FAIL**" in text
    assert "| `orthogonality_error` |" in text


def test_assert_identifiable_inconclusive_is_a_failure_unless_allowed():
    z = _latents(n=500)
    constant = torch.ones(500, 3)
    with pytest.raises(AssertionError, match="collapsed"):
        assert_identifiable(z, constant)
    report = assert_identifiable(z, constant, allow_inconclusive=True)
    assert report.verdict == "inconclusive" and not report.passed and report.exit_code == 3


def test_audit_report_renders_markdown_for_notebooks():
    z = _latents()
    report = idaudit.audit(z, 2.0 * z, min_r2=0.9, max_orthogonality_error=0.1, gauss_sims=0)
    assert report.verdict == "fail" and [t.metric for t in report.failed] == [
        "orthogonality_error"]  # a scaled copy is linear but not a rotation
    md = report._repr_markdown_()
    assert md == report.markdown() and "| `orthogonality_error` |" in md


def test_audit_encoder_on_a_world_and_errors_are_value_errors():
    class Inverse(torch.nn.Module):
        def forward(self, x):
            return x  # the banana world's x is not z, so this is the raw mixing

    report = idaudit.audit(encoder=Inverse(), world="banana", n_eval=2000, gauss_sims=0)
    assert report.metrics["r2_h_to_z"] == pytest.approx(report.metrics["mixing_r2_x_to_z"])
    with pytest.raises(ValueError, match="unknown world"):
        idaudit.audit(encoder=Inverse(), world="moon")
    with pytest.raises(idaudit.IdauditError, match="either arrays"):
        idaudit.audit(_latents(), _latents(), encoder=Inverse(), world="banana")


def test_audit_takes_its_request():
    """``idaudit.audit(AuditRequest(...))``: the request as it is, the same report as keywords;
    a request with other arguments is refused."""
    from idaudit.core.requests import AuditRequest

    z = _latents()
    req = AuditRequest.from_options(z=z, h=2.0 * z, min_r2=0.9, gauss_sims=0)
    assert idaudit.audit(req).metrics == idaudit.audit(z, 2.0 * z, min_r2=0.9,
                                                       gauss_sims=0).metrics
    for extra in ({"min_r2": 0.5}, {"h": z}, {"encoder": "e.pt"}):
        with pytest.raises(idaudit.IdauditError, match="AuditRequest alone"):
            idaudit.audit(req, **extra)


def test_train_takes_its_request_alone():
    from idaudit.core.requests import TrainRequest

    with pytest.raises(idaudit.IdauditError, match="TrainRequest alone"):
        idaudit.train(TrainRequest(world="spiral"), steps=5)
    with pytest.raises(idaudit.IdauditError, match="takes a TrainRequest or options"):
        idaudit.train("spiral")


def test_run_ids_hash_the_resolved_config_and_the_version(monkeypatch):
    from idaudit.training import runs

    base = runs.resolve({"world": "spiral"}).id
    assert runs.resolve({"world": "spiral", "steps": 20_000, "rho": 0.95}).id == base
    assert runs.resolve({"world": "spiral", "steps": 100}).id != base
    assert runs.resolve({"world": "spiral", "device": "cpu"}).id == base
    monkeypatch.setattr(runs, "__version__", "9.9.9")
    assert runs.resolve({"world": "spiral"}).id != base


def test_train_on_a_pairs_file(tmp_path):
    from idaudit.worlds import build_world, make_spec, save_pairs

    path = save_pairs(tmp_path / "p.safetensors", build_world(make_spec("banana")), 2000, 0)
    rec = idaudit.train(data=str(path), epochs=3, batch=128, seed=1)
    assert rec.world["name"] == "pairs" and rec.train["views"] == "pair"
    assert rec.train["epochs"] == 3 and rec.history[0]["epoch_loss"].__len__() == 3
    assert rec.metrics["n_samples"] == 2000
    with pytest.raises(idaudit.IdauditError, match="steps does not apply"):
        idaudit.train(data=str(path), steps=10)
