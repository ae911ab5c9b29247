"""What an audit finds, through the library (``idaudit.audit``, ``idaudit.audit(AuditRequest(…))``):
metrics, verdicts, inconclusive reasons, the formats it opens, the values it refuses, several
targets with ``reduce``, bootstrap gates and ``gauss_sims``. How ``idaudit audit`` parses,
renders and exits is tests/test_audit_cli.py; that both agree is tests/test_api_parity.py.

Verdicts and exit codes: pass / ungated 0, fail 1, inconclusive 3; bad input raises
:class:`IdauditError` with exit code 2 and a one-line message.
"""

import re
import sys

import numpy as np
import pytest
import torch
from conftest import identity_linear, three_runs
from safetensors.torch import load_file, save_file
from scipy.stats import ortho_group

import idaudit
from idaudit.core.errors import IdauditError, library_spelling
from idaudit.core.requests import AuditRequest
from idaudit.maths.linear import standardize

GATE = {"min_r2": 0.999, "max_orthogonality_error": 0.01}
WORLD = {"world": "coupling", "dim": 4, "n_eval": 2000, "gauss_sims": 0}
BOUND_KEYS = ("alignment_gap", "D", "bound", "bound_holds", "bound_upper", "bound_vacuous")


def refused(fragment, audit=idaudit.audit, **kwargs):
    """``audit(**kwargs)`` raises an IdauditError with exit code 2 whose one-line message
    holds ``fragment`` (written as the CLI says it, read in the library's spelling); returns
    the message."""
    with pytest.raises(IdauditError, match=re.escape(library_spelling(fragment))) as info:
        audit(**kwargs)
    assert info.value.exit_code == 2, info.value
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message, message
    return message


# ---- arrays made by numpy alone -------------------------------------------------------


@pytest.fixture(scope="module")
def latents():
    rng = np.random.default_rng(20240)
    z = rng.standard_normal((4000, 8))
    q = ortho_group.rvs(8, random_state=11)
    return z, q, rng


@pytest.fixture(scope="module")
def npz_files(latents, tmp_path_factory):
    z, q, rng = latents
    d = tmp_path_factory.mktemp("arrays")
    # a rotation of the latents as the audit compares h with them (standardised on their
    # rows: their law is not declared) plus a little noise
    good = standardize(z) @ q.T + 1e-3 * rng.standard_normal(z.shape)
    np.savez(d / "good.npz", z=z, h=good)
    np.savez(d / "tanh.npz", z=z, h=np.tanh(2.0 * z @ q.T))
    np.savez(d / "const.npz", z=z, h=np.full_like(z, 0.7))
    nan = z @ q.T
    nan[123, 5] = np.nan
    np.savez(d / "nan.npz", z=z, h=nan)
    return {"good": d / "good.npz", "tanh": d / "tanh.npz", "const": d / "const.npz",
            "nan": d / "nan.npz", "good_h": good, "z": z}


def test_orthogonal_embedding_passes_the_gate(npz_files):
    report = idaudit.audit(encoder=npz_files["good"], **GATE, gauss_sims=5)
    assert report.verdict == "pass" and report.reason is None
    assert report.passed and report.exit_code == 0 and report.failed == []
    m = report.metrics
    assert m["r2_h_to_z_heldout"] > 0.99999
    assert m["orthogonality_error"] < 1e-3
    assert m["procrustes_mse"] < 1e-4
    assert m["n_samples"] == 4000 and m["latent_dim"] == 8 and m["embed_dim"] == 8
    # Whitening: ε = ‖Cov(h) − I‖_F (unbiased covariance) and the floor √(m(m+1)/(n−1)).
    cov = np.cov(npz_files["good_h"].T)
    assert m["whitening_error"] == pytest.approx(np.linalg.norm(cov - np.eye(8)), abs=1e-9)
    assert m["whitening_floor"] == pytest.approx(np.sqrt(8 * 9 / 3999), rel=1e-12)
    assert 7.9 < m["effective_rank"] <= 8.0
    assert 0.0 < m["gaussianity_p_value"] <= 1.0
    # the same arrays in memory, through the request the CLI builds, give the same numbers
    data = np.load(npz_files["good"])
    mem = idaudit.audit(AuditRequest.from_options(z=data["z"], h=data["h"], gauss_sims=5,
                                                  **GATE))
    assert mem.verdict == "pass" and mem.metrics == m


def test_nonlinear_embedding_fails_the_gate(npz_files):
    report = idaudit.audit(encoder=npz_files["tanh"], **GATE, gauss_sims=5)
    assert report.verdict == "fail" and report.exit_code == 1 and not report.passed
    m = report.metrics
    assert 0.5 < m["r2_h_to_z_heldout"] < 0.95
    assert m["orthogonality_error"] > 0.1
    gate = {t.metric: t for t in report.thresholds}
    assert set(gate) == {"r2_h_to_z_heldout", "orthogonality_error"}
    assert gate["r2_h_to_z_heldout"].passed is False
    assert gate["orthogonality_error"].passed is False
    assert gate["r2_h_to_z_heldout"].actual == m["r2_h_to_z_heldout"]
    assert [t.metric for t in report.failed] == ["r2_h_to_z_heldout", "orthogonality_error"]


def test_collapsed_embedding_is_inconclusive(npz_files):
    report = idaudit.audit(encoder=npz_files["const"], **GATE, gauss_sims=5)
    assert report.verdict == "inconclusive" and report.exit_code == 3 and not report.passed
    assert report.reason.startswith("the embedding collapsed: h has (near-)zero variance")
    # No verdict on the thresholds: they are reported but neither passed nor failed.
    assert [(g["metric"], g["passed"], g["actual"]) for g in report.to_dict()["gate"]] == [
        ("r2_h_to_z_heldout", None, None), ("orthogonality_error", None, None)]


def test_nan_embedding_is_inconclusive(npz_files):
    report = idaudit.audit(encoder=npz_files["nan"], **GATE, gauss_sims=5)
    assert report.verdict == "inconclusive" and report.exit_code == 3
    assert report.reason == "h contains NaN or Inf values"
    assert report.metrics == {"n_samples": 4000, "latent_dim": 8, "embed_dim": 8}


def test_too_few_rows_is_inconclusive(tmp_path):
    rng = np.random.default_rng(3)
    z = rng.standard_normal((20, 4))
    np.savez(tmp_path / "few.npz", z=z, h=z)
    report = idaudit.audit(encoder=tmp_path / "few.npz", gauss_sims=0)
    assert report.verdict == "inconclusive" and report.exit_code == 3
    assert report.reason == ("too few samples: 20 rows for a 4-dimensional latent and a "
                             "4-dimensional embedding (need at least 26 for held-out fits)")


def test_gauss_sims_choose_the_null_law(npz_files):
    m = idaudit.audit(encoder=npz_files["good"], gauss_sims=19).metrics
    assert m["gaussianity_method"] == "monte carlo (19 simulations)"
    assert round(m["gaussianity_p_value"] * 20) == pytest.approx(m["gaussianity_p_value"] * 20)
    m = idaudit.audit(encoder=npz_files["good"]).metrics
    assert m["gaussianity_method"] == "asymptotic" and 0 <= m["gaussianity_p_value"] <= 1
    assert m["gaussianity_statistic"] > 0


# ---- OU pairs: h′ and ρ give the Theorem 3 bound ---------------------------------------


@pytest.fixture(scope="module")
def ou_arrays():
    rng = np.random.default_rng(77)
    n, rho, sigma = 2000, 0.9, 0.1
    z = rng.standard_normal((n, 4))
    zp = rho * z + np.sqrt(1 - rho**2) * rng.standard_normal((n, 4))
    q = ortho_group.rvs(4, random_state=5)
    h = z @ q.T + sigma * rng.standard_normal((n, 4))
    hp = zp @ q.T + sigma * rng.standard_normal((n, 4))
    return {"z": z, "h": h, "h_prime": hp, "rho": np.array(rho)}


@pytest.fixture
def ou_npz(ou_arrays, tmp_path):
    np.savez(tmp_path / "ou.npz", **ou_arrays)
    return tmp_path / "ou.npz"


def test_ou_pairs_give_the_bound(ou_arrays, ou_npz):
    report = idaudit.audit(encoder=ou_npz, gauss_sims=0)
    assert report.verdict == "ungated" and report.exit_code == 0
    m = report.metrics
    for key in BOUND_KEYS:
        assert key in m, key
    # Recompute δ, D and the bound with numpy alone.
    h, hp, rho = ou_arrays["h"], ou_arrays["h_prime"], float(ou_arrays["rho"])
    cov = np.cov(h.T)
    delta = max(np.mean(np.sum((hp - h) ** 2, 1)) - 2 * (1 - rho) * np.trace(cov), 0.0)
    d = delta / (2 * rho * (1 - rho))
    eps = np.linalg.norm(cov - np.eye(4))
    assert delta > 0.01
    assert m["alignment_gap"] == pytest.approx(delta, rel=1e-9)
    assert m["D"] == pytest.approx(d, rel=1e-9)
    assert m["bound"] == pytest.approx(d + (eps + d) ** 2, rel=1e-9)
    # An orthogonal map plus small noise: the bound holds, and is not vacuous.
    assert m["procrustes_mse"] == pytest.approx(4 * 0.1**2, rel=0.15)
    assert m["bound_holds"] is True and m["procrustes_mse"] <= m["bound"]
    assert m["bound_vacuous"] is False
    assert m["bound"] <= m["bound_upper"] and m["bound_upper_confidence"] == 0.95
    # the arrays in memory (ρ as a float) give the same numbers as the file
    mem = idaudit.audit(ou_arrays["z"], ou_arrays["h"], ou_arrays["h_prime"], rho, gauss_sims=0)
    assert mem.metrics == m


def test_bound_gate_on_a_boolean_metric(ou_npz):
    report = idaudit.audit(encoder=ou_npz, gauss_sims=0, min={"bound_holds": 1},
                           max={"alignment_gap": 0.001})
    assert report.verdict == "fail" and report.exit_code == 1
    gate = {t.metric: t for t in report.thresholds}
    assert gate["bound_holds"].passed is True and gate["bound_holds"].actual == 1.0
    assert gate["alignment_gap"].passed is False
    assert [t.metric for t in report.failed] == ["alignment_gap"]


def test_bound_metrics_need_h_prime(npz_files):
    refused("needs h′ and ρ", encoder=npz_files["good"], gauss_sims=0, max={"alignment_gap": 1})


def test_gate_on_the_lower_end_of_the_bootstrap_interval(ou_npz):
    report = idaudit.audit(encoder=ou_npz, bootstrap=50, gauss_sims=0,
                           min={"r2_h_to_z_heldout_ci_low": 0.5})
    assert report.verdict == "pass" and report.exit_code == 0
    m = report.metrics
    assert m["r2_h_to_z_heldout_ci_low"] == m["r2_h_to_z_heldout_ci"][0]
    assert m["r2_h_to_z_heldout_ci_low"] <= m["r2_h_to_z_heldout"]
    refused("needs --bootstrap", encoder=ou_npz, min={"r2_h_to_z_heldout_ci_low": 0.5})


# ---- .safetensors arrays ---------------------------------------------------------------


def test_safetensors_arrays_match_npz(npz_files, ou_arrays, ou_npz, tmp_path):
    z = np.load(npz_files["good"])["z"]
    h = np.load(npz_files["good"])["h"]
    st = tmp_path / "good.safetensors"
    save_file({"z": torch.from_numpy(z), "h": torch.from_numpy(h)}, str(st))
    a = idaudit.audit(encoder=npz_files["good"], gauss_sims=0)
    b = idaudit.audit(encoder=st, gauss_sims=0)
    assert a.exit_code == b.exit_code == 0
    ma, mb = a.metrics, b.metrics
    assert mb["r2_h_to_z_heldout"] == pytest.approx(ma["r2_h_to_z_heldout"], abs=1e-12)
    assert mb["orthogonality_error"] == pytest.approx(ma["orthogonality_error"], abs=1e-12)
    # float32 tensors are audited in float32: the same numbers to float32 accuracy.
    st32 = tmp_path / "good32.safetensors"
    save_file({"z": torch.from_numpy(z).float(), "h": torch.from_numpy(h).float()}, str(st32))
    c = idaudit.audit(encoder=st32, gauss_sims=0)
    assert c.exit_code == 0
    assert c.metrics["r2_h_to_z_heldout"] == pytest.approx(ma["r2_h_to_z_heldout"], abs=1e-5)
    # h_prime and a 0-d rho tensor travel in safetensors as well.
    ou = tmp_path / "ou.safetensors"
    save_file({k: torch.from_numpy(np.asarray(v)) for k, v in ou_arrays.items()}, str(ou))
    d = idaudit.audit(encoder=ou, gauss_sims=0)
    e = idaudit.audit(encoder=ou_npz, gauss_sims=0)
    assert d.exit_code == e.exit_code == 0
    assert d.metrics["rho"] == 0.9
    assert d.metrics["bound"] == pytest.approx(e.metrics["bound"], rel=1e-12)


# ---- encoder routes on a synthetic world -----------------------------------------------


def random_linear(dim=4, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Linear(dim, dim)


ARCH_MODULE = '''\
import torch


def make(dim=4):
    return torch.nn.Linear(dim, dim)


class _Sum(torch.nn.Linear):
    def forward(self, x):
        return super().forward(x).sum()


def make_sum(dim=4):
    return _Sum(dim, dim)


class _Pooled(torch.nn.Linear):
    def forward(self, x):
        return super().forward(x).mean(0, keepdim=True)


def make_pooled(dim=4):
    return _Pooled(dim, dim)


def make_not_a_module(dim=4):
    return [dim]
'''


@pytest.fixture
def arch_dir(tmp_path, monkeypatch):
    """tmp_path holds myarch.py and is the current directory; imports are undone after."""
    import importlib

    (tmp_path / "myarch.py").write_text(ARCH_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "myarch", raising=False)
    importlib.invalidate_caches()
    return tmp_path


def audit_world(target, **extra):
    """``target`` audited on the 4-D coupling world's 2000 evaluation pairs."""
    return idaudit.audit(encoder=target, **WORLD, **extra)


def test_torchscript_identity_equals_raw_mixing(tmp_path):
    path = tmp_path / "enc.pt"
    torch.jit.script(identity_linear()).save(str(path))
    report = audit_world(path)
    assert report.exit_code == 0 and report.verdict == "ungated"
    m = report.metrics
    assert report.world["name"] == "coupling" and report.world["dim"] == 4
    assert report.source == str(path)
    assert m["n_samples"] == 2000
    assert m["r2_h_to_z"] == pytest.approx(m["mixing_r2_x_to_z"], abs=1e-6)
    assert 0.5 < m["mixing_r2_x_to_z"] < 0.99  # the coupling world is genuinely nonlinear
    for key in BOUND_KEYS:
        assert key in m, key
    # the module itself, in memory, gives the very same numbers
    assert audit_world(identity_linear()).metrics == m


def test_torchscript_trace_of_any_invertible_linear_map(tmp_path):
    path = tmp_path / "traced.pt"
    torch.jit.trace(random_linear(seed=3), torch.randn(8, 4)).save(str(path))
    report = audit_world(path)
    assert report.exit_code == 0
    m = report.metrics
    # Linear R² is invariant to an invertible linear map of the regressors.
    assert m["r2_h_to_z"] == pytest.approx(m["mixing_r2_x_to_z"], abs=1e-6)


def test_torch_export_with_dynamic_batch(tmp_path):
    path = tmp_path / "enc.pt2"
    batch = torch.export.Dim("batch", min=1, max=1_000_000)
    program = torch.export.export(identity_linear(), (torch.randn(8, 4),),
                                  dynamic_shapes={"input": {0: batch}})
    torch.export.save(program, str(path))
    report = audit_world(path)
    assert report.exit_code == 0
    m = report.metrics
    assert m["r2_h_to_z"] == pytest.approx(m["mixing_r2_x_to_z"], abs=1e-6)
    # plan reads the same program on the same world
    plan = idaudit.plan(path, world="coupling", dim=4, pairs=5)
    assert plan.to_dict()["pairs"] == 5 and len(plan.to_dict()["cost_ratios"]) == 5


def test_torch_export_with_static_batch_is_a_clean_error(tmp_path):
    path = tmp_path / "static.pt2"
    torch.export.save(torch.export.export(identity_linear(), (torch.randn(8, 4),)), str(path))
    # The program only accepts 8 rows: it fails on the first two, tried before the rest
    refused("the encoder failed on inputs of shape (2, 4)", audit=audit_world, target=path)


def test_safetensors_weights_with_arch(arch_dir):
    weights = arch_dir / "w.safetensors"
    save_file(identity_linear().state_dict(), str(weights))
    report = audit_world(weights, arch="myarch:make", arch_kwargs={"dim": 4})
    assert report.exit_code == 0
    m = report.metrics
    assert m["r2_h_to_z"] == pytest.approx(m["mixing_r2_x_to_z"], abs=1e-6)
    # The same weights as TorchScript give the very same numbers.
    ts = arch_dir / "same.pt"
    torch.jit.script(identity_linear()).save(str(ts))
    report2 = audit_world(ts)
    assert report2.exit_code == 0
    assert report2.metrics["r2_h_to_z_heldout"] == m["r2_h_to_z_heldout"]
    # plan takes the --arch weights too, and gives the TorchScript copy's numbers
    plans = [idaudit.plan(target, world="coupling", dim=4, pairs=8, gallery=3000, **extra)
             .to_dict()["cost_ratios"]
             for target, extra in ((weights, {"arch": "myarch:make", "arch_kwargs": {"dim": 4}}),
                                   (ts, {}))]
    assert len(plans[0]) == 8 and plans[0] == plans[1]


def test_dataset_from_idaudit_world(tmp_path):
    pairs = tmp_path / "pairs.safetensors"
    idaudit.write_world("coupling", dim=4, pairs=2000, out=pairs)
    enc = tmp_path / "enc.pt"
    torch.jit.script(identity_linear()).save(str(enc))
    report = idaudit.audit(encoder=enc, data=pairs, gauss_sims=0)
    assert report.exit_code == 0
    m = report.metrics
    assert report.world["name"] == "pairs" and report.world["rho"] == 0.95
    assert report.world["extra"]["world"]["name"] == "coupling"
    assert m["n_samples"] == 2000
    # Independent check: the in-sample least-squares R²(x → z) on the dataset itself.
    t = load_file(str(pairs))
    x, z = t["x"].double().numpy(), t["z"].double().numpy()
    xa = np.hstack([x, np.ones((len(x), 1))])
    resid = z - xa @ np.linalg.lstsq(xa, z, rcond=None)[0]
    r2 = np.mean(1 - resid.var(0) / z.var(0))
    assert m["mixing_r2_x_to_z"] == pytest.approx(r2, abs=1e-5)
    assert m["r2_h_to_z"] == pytest.approx(r2, abs=1e-5)
    # A dataset is not an encoder: auditing it directly says to use --data.
    refused("--data", encoder=pairs)


def test_pickled_module_needs_trust_pickle(tmp_path):
    path = tmp_path / "pickled.pt"
    torch.save(random_linear(seed=1), str(path))
    refused("--trust-code", audit=audit_world, target=path)
    report = audit_world(path, trust_pickle=True)
    assert report.exit_code == 0
    m = report.metrics
    assert m["r2_h_to_z"] == pytest.approx(m["mixing_r2_x_to_z"], abs=1e-6)
    # A torch.save state dict opens without trust_pickle (weights_only), but needs arch.
    sd = tmp_path / "state.pt"
    torch.save(random_linear().state_dict(), str(sd))
    for trust in (False, True):
        refused("holds weights (a state dict); pass --arch", audit=audit_world, target=sd,
                trust_pickle=trust)


# ---- bad input: IdauditError, exit code 2, one line ------------------------------------


def test_truncated_and_corrupt_safetensors(tmp_path, npz_files):
    data = np.load(npz_files["good"])
    valid = tmp_path / "valid.safetensors"
    save_file({"z": torch.from_numpy(data["z"]), "h": torch.from_numpy(data["h"])}, str(valid))
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(valid.read_bytes()[:100])
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(np.random.default_rng(9).bytes(512))
    for path in (truncated, corrupt):
        refused(path.name, encoder=path, gauss_sims=0)


def test_npz_input_errors(tmp_path):
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "no_h.npz", z=rng.standard_normal((100, 4)))
    refused("lacks the array h", encoder=tmp_path / "no_h.npz")
    np.savez(tmp_path / "rows.npz", z=rng.standard_normal((100, 4)),
             h=rng.standard_normal((90, 4)))
    refused("z has 100 rows but h has 90", encoder=tmp_path / "rows.npz")
    np.savez(tmp_path / "rho.npz", z=rng.standard_normal((100, 4)),
             h=rng.standard_normal((100, 4)), h_prime=rng.standard_normal((100, 4)),
             rho=np.array(1.5))
    refused("rho must lie strictly", encoder=tmp_path / "rho.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip file at all")
    refused("cannot read", encoder=tmp_path / "junk.npz")


@pytest.mark.parametrize("arch,fragment", [
    ("nosuchmodule:make", "cannot import 'nosuchmodule'"),
    ("myarch:missing", "has no attribute 'missing'"),
    ("myarch", "module.path:factory"),
    ("myarch:make_not_a_module", "not a torch nn.Module"),
    ("myarch:make_sum", "the encoder returned ()"),
    ("myarch:make_pooled", "the encoder returned (1, 4) for a batch of 2;"),
])
def test_bad_arch(arch_dir, arch, fragment):
    weights = arch_dir / "w.safetensors"
    save_file(identity_linear().state_dict(), str(weights))
    refused(fragment, audit=audit_world, target=weights, arch=arch, arch_kwargs={"dim": 4})


def test_arch_kwargs_that_do_not_fit_the_factory(arch_dir):
    weights = arch_dir / "w.safetensors"
    save_file(identity_linear().state_dict(), str(weights))
    refused("do not fit myarch:make", audit=audit_world, target=weights, arch="myarch:make",
            arch_kwargs={"dim": 5})
    refused("--arch-kwargs must be an object", audit=audit_world, target=weights,
            arch="myarch:make", arch_kwargs="{dim: 4}")


def test_encoder_input_size_does_not_fit_the_world(arch_dir):
    weights = arch_dir / "w3.safetensors"
    save_file(torch.nn.Linear(3, 3).state_dict(), str(weights))
    refused("the encoder failed on inputs of shape (2, 4)", audit=audit_world,
            target=weights, arch="myarch:make", arch_kwargs={"dim": 3})
    ts = arch_dir / "enc3.pt"
    torch.jit.script(torch.nn.Linear(3, 3)).save(str(ts))
    refused("the encoder failed on inputs of shape", audit=audit_world, target=ts)


def test_gate_errors(npz_files):
    good = npz_files["good"]
    refused("unknown metric 'nosuchmetric'", encoder=good, min={"nosuchmetric": 1})
    refused("unknown metric 'nosuch_metric'", encoder=good, gate={"min": {"nosuch_metric": 1}})
    refused("unknown tables", encoder=good, gate={"minimum": {"mcc": 1}})
    # the bound needs h′ and ρ, which these arrays do not have
    refused("not available", encoder=good, max={"bound": 1})


def test_missing_file_and_missing_world(tmp_path, arch_dir):
    refused("not found", encoder=tmp_path / "nope.npz")
    enc = tmp_path / "enc.pt"
    torch.jit.script(identity_linear()).save(str(enc))
    refused("no world to evaluate the encoder on", encoder=enc)
    weights = arch_dir / "w.safetensors"
    save_file(identity_linear().state_dict(), str(weights))
    refused("no world to evaluate the encoder on", encoder=weights, arch="myarch:make")
    refused("--arch goes with plain weights (.safetensors or a torch.save", audit=audit_world,
            target=enc, arch="myarch:make")


def test_option_range_errors(npz_files):
    good = npz_files["good"]
    refused("≥ 0", encoder=good, gauss_sims=-1)
    refused("--test-fraction", encoder=good, gauss_sims=0, test_fraction=1.5)
    refused("out of range", encoder=good, circular=(9,))
    refused("out of range", encoder=good, circular="9")


def test_test_fraction_is_refused_where_it_does_not_apply(npz_files):
    """Fixed evaluation rows (the Reacher world's images) and label-free audits fit no split:
    test_fraction there is refused, not silently ignored."""
    from idaudit.evaluations.audit import audit_inputs
    from idaudit.evaluations.inputs import AuditInputs

    rng = np.random.default_rng(0)
    z = rng.standard_normal((400, 2))
    inp = AuditInputs(z=z, h=z, test_rows=np.arange(300, 400))
    assert audit_inputs(inp, gauss_sims=0).metrics["n_test"] == 100
    with pytest.raises(IdauditError, match="fixes the held-out rows"):
        audit_inputs(inp, test_fraction=0.3)
    refused("label-free", encoder=npz_files["good"], label_free=True, test_fraction=0.3)
    report = idaudit.audit(encoder=npz_files["good"], test_fraction=0.3)
    assert report.exit_code == 0 and report.metrics["n_test"] == 1200


# ---- several targets: gated on the worst run or the median ----------------------------


def test_several_runs_are_gated_on_the_worst_or_the_median(tmp_path):
    z, paths = three_runs(tmp_path)  # two good seeds and a poor one
    worst = idaudit.audit(targets=paths, min_r2=0.95, gauss_sims=0)
    assert worst.verdict == "fail" and worst.exit_code == 1
    per_run = [r["metrics"]["r2_h_to_z_heldout"] for r in worst.runs]
    assert len(per_run) == 3 and worst.metrics["n_runs"] == 3
    assert worst.metrics["reduce"] == "worst"
    assert worst.metrics["n_samples"] == 2000 and isinstance(worst.metrics["n_samples"], int)
    assert worst.metrics["r2_h_to_z_heldout"] == min(per_run) < 0.95
    median = idaudit.audit(targets=paths, min_r2=0.95, reduce="median", gauss_sims=0)
    assert median.verdict == "pass" and median.exit_code == 0
    assert median.metrics["r2_h_to_z_heldout"] == pytest.approx(float(np.median(per_run)))
    np.savez(tmp_path / "flat.npz", z=z, h=np.zeros_like(z))
    flat = idaudit.audit(targets=[paths[0], tmp_path / "flat.npz"], min_r2=0.9)
    assert flat.exit_code == 3 and flat.verdict == "inconclusive"
    assert flat.reason.startswith(f"{tmp_path / 'flat.npz'}: the embedding collapsed")
    refused("several targets", targets=paths[:1], reduce="median")
    refused("--reduce must be", targets=paths, reduce="mean")


# ---- verdicts without a gate, crashes, refusals ----------------------------------------


def test_an_audit_without_thresholds_says_no_gate(npz_files):
    report = idaudit.audit(encoder=npz_files["good"], gauss_sims=5)
    assert report.verdict == "ungated" and report.thresholds == []
    assert report.to_dict()["gate"] == [] and report.reason is None
    assert report.exit_code == 0 and report.passed is False  # a report only: not a failure
    assert report.metrics["r2_h_to_z_heldout"] > 0.99999
    data = np.load(npz_files["good"])
    lib = idaudit.audit(data["z"], data["h"], gauss_sims=0)
    assert lib.verdict == "ungated" and lib.passed is False and lib.exit_code == 0
    gated = idaudit.audit(data["z"], data["h"], gauss_sims=0, min_r2=0.9)
    assert gated.verdict == "pass" and gated.passed


def test_a_crash_is_raised_never_a_verdict(npz_files, monkeypatch):
    """An unexpected exception inside idaudit reaches the caller as it is, never as a
    failed gate or an IdauditError (the CLI turns it into exit 5)."""
    import idaudit.evaluations.audit

    def boom(*args, **kwargs):
        raise IndexError("list index out of range")

    monkeypatch.setattr(idaudit.evaluations.audit, "audit_inputs", boom)
    with pytest.raises(IndexError, match="list index out of range") as info:
        idaudit.audit(encoder=npz_files["good"], min_r2=0.9)
    assert not isinstance(info.value, IdauditError)


def test_library_refuses_what_the_cli_refuses(npz_files):
    data = np.load(npz_files["good"])
    for kwargs, fragment in [({"bootstrap": -1}, "--bootstrap must be an integer ≥ 0"),
                             ({"gauss_sims": -2}, "--gauss-sims must be an integer ≥ 0"),
                             ({"circular": (0, 0)}, "latent index 0 is given twice"),
                             ({"circular": (0.5,)}, "must be integers, got 0.5"),
                             ({"min_r2": "0.9"}, "must be a number, got '0.9'"),
                             ({"gate": {"min": {"mcc": "0.9"}}}, "must be a number")]:
        refused(fragment, z=data["z"], h=data["h"], **kwargs)


# ---- issue 28: one way a target is opened, paths meaning in Python what they mean in the CLI ----


def test_paths_given_positionally_are_targets_as_in_the_cli(tmp_path):
    _, paths = three_runs(tmp_path)
    as_targets = idaudit.audit(targets=paths, reduce="median", gauss_sims=0)
    positional = idaudit.audit(*map(str, paths), reduce="median", gauss_sims=0)
    assert positional.metrics == as_targets.metrics
    one = idaudit.audit(paths[0], gauss_sims=0)
    assert one.metrics == idaudit.audit(targets=[paths[0]], gauss_sims=0).metrics
    z = np.load(paths[0])["z"]
    with pytest.raises(IdauditError, match="give paths .* or the arrays z, h, h_prime, not both"):
        idaudit.audit(paths[0], z)


def test_open_target_dispatches_on_one_enumeration_of_kinds(tmp_path):
    from idaudit.loading.arrays import Arrays
    from idaudit.loading.filekinds import FileKind, sniff
    from idaudit.loading.loaders import open_target
    from idaudit.loading.opened import LoadedEncoder

    _, paths = three_runs(tmp_path)
    np.save(tmp_path / "h.npy", np.load(paths[0])["h"])
    torch.jit.script(identity_linear(3)).save(str(tmp_path / "enc.pt"))
    torch.save({"z": torch.zeros(5, 3), "h": torch.ones(5, 3)}, str(tmp_path / "code.pt"))
    assert sniff(paths[0]) == FileKind.NPZ and sniff(tmp_path / "h.npy") == FileKind.NPY
    assert sniff(tmp_path / "enc.pt") == FileKind.TORCHSCRIPT
    assert sniff(tmp_path / "code.pt") == FileKind.TORCH_SAVE  # its archive is named "code"
    assert isinstance(open_target(paths[0]), Arrays)
    np.testing.assert_array_equal(open_target(paths[0], embedding=True), np.load(paths[0])["h"])
    np.testing.assert_array_equal(open_target(tmp_path / "h.npy", embedding=True),
                                  np.load(paths[0])["h"])
    assert isinstance(open_target(tmp_path / "enc.pt"), LoadedEncoder)
    assert open_target(tmp_path / "code.pt").h.tolist() == [[1.0] * 3] * 5
    module = identity_linear(3)
    assert open_target(module).module is module  # an encoder in Python, as every command takes it
    with pytest.raises(IdauditError, match="is a single .npy array"):
        open_target(tmp_path / "h.npy")
