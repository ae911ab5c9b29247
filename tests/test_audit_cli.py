"""``idaudit audit`` end to end through typer's CliRunner: arrays, encoders, gates, reports.

Exit codes: 0 pass, 1 a threshold failed, 2 bad input or usage (one line, no traceback),
3 inconclusive (collapsed embedding, NaN/Inf, too few samples).
"""

import json
import sys
import textwrap
from xml.etree import ElementTree as ET

import numpy as np
import pytest
import torch
from conftest import identity_linear, run
from safetensors.torch import load_file, save_file
from scipy.stats import ortho_group

GATE = ("--min-r2", "0.999", "--max-orthogonality-error", "0.01")
FAST = ("--gauss-sims", "5")
WORLD = ("--world", "coupling", "--dim", "4", "--n-eval", "2000", "--gauss-sims", "0")
CONTRACT = ("r2_h_to_z_heldout", "mcc", "orthogonality_error", "procrustes_mse",
            "whitening_error", "whitening_floor", "effective_rank", "gaussianity_p_value")
BOUND_KEYS = ("alignment_gap", "D", "bound", "bound_holds", "bound_upper", "bound_vacuous")


def assert_one_line_error(res, fragment, code=2):
    assert res.exit_code == code, res.output
    assert "Traceback" not in res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1, res.output
    assert lines[0].startswith("error:"), res.output
    assert fragment in res.output, res.output


def read_json(path):
    return json.loads(path.read_text())


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
    good = z @ q.T + 1e-3 * rng.standard_normal(z.shape)
    np.savez(d / "good.npz", z=z, h=good)
    np.savez(d / "tanh.npz", z=z, h=np.tanh(2.0 * z @ q.T))
    np.savez(d / "const.npz", z=z, h=np.full_like(z, 0.7))
    nan = z @ q.T
    nan[123, 5] = np.nan
    np.savez(d / "nan.npz", z=z, h=nan)
    return {"good": d / "good.npz", "tanh": d / "tanh.npz", "const": d / "const.npz",
            "nan": d / "nan.npz", "good_h": good, "z": z}


def test_orthogonal_embedding_passes_the_gate(npz_files, tmp_path):
    out = tmp_path / "good.json"
    res = run("audit", npz_files["good"], *GATE, *FAST, "--json", out)
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    report = read_json(out)
    assert report["verdict"] == "pass" and report["reason"] is None
    m = report["metrics"]
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


def test_nonlinear_embedding_fails_the_gate(npz_files, tmp_path):
    out = tmp_path / "tanh.json"
    res = run("audit", npz_files["tanh"], *GATE, *FAST, "--json", out)
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output
    assert "gate failed" in res.output
    report = read_json(out)
    assert report["verdict"] == "fail"
    m = report["metrics"]
    assert 0.5 < m["r2_h_to_z_heldout"] < 0.95
    assert m["orthogonality_error"] > 0.1
    gate = {g["metric"]: g for g in report["gate"]}
    assert set(gate) == {"r2_h_to_z_heldout", "orthogonality_error"}
    assert gate["r2_h_to_z_heldout"]["passed"] is False
    assert gate["orthogonality_error"]["passed"] is False
    assert gate["r2_h_to_z_heldout"]["actual"] == m["r2_h_to_z_heldout"]


def test_collapsed_embedding_is_inconclusive(npz_files, tmp_path):
    out = tmp_path / "const.json"
    res = run("audit", npz_files["const"], *GATE, *FAST, "--json", out)
    assert res.exit_code == 3, res.output
    assert "collapsed" in res.output
    assert "Traceback" not in res.output
    report = read_json(out)
    assert report["verdict"] == "inconclusive"
    assert "collapsed" in report["reason"]
    # No verdict on the thresholds: they are reported but neither passed nor failed.
    assert [(g["metric"], g["passed"], g["actual"]) for g in report["gate"]] == [
        ("r2_h_to_z_heldout", None, None), ("orthogonality_error", None, None)]


def test_nan_embedding_is_inconclusive(npz_files, tmp_path):
    out = tmp_path / "nan.json"
    res = run("audit", npz_files["nan"], *GATE, *FAST, "--json", out)
    assert res.exit_code == 3, res.output
    assert "NaN" in res.output
    assert "Traceback" not in res.output
    report = read_json(out)
    assert report["verdict"] == "inconclusive" and "NaN" in report["reason"]
    assert report["metrics"] == {"n_samples": 4000, "latent_dim": 8, "embed_dim": 8}


def test_too_few_rows_is_inconclusive(tmp_path):
    rng = np.random.default_rng(3)
    z = rng.standard_normal((20, 4))
    np.savez(tmp_path / "few.npz", z=z, h=z)
    res = run("audit", tmp_path / "few.npz", "--gauss-sims", "0", "--junit", tmp_path / "j.xml")
    assert res.exit_code == 3, res.output
    assert "too few samples" in res.output
    # The reason is one unwrapped line (greppable in CI logs).
    assert any(line.startswith("inconclusive: too few samples") and "need at least 26" in line
               for line in res.output.splitlines()), res.output
    suite = ET.parse(tmp_path / "j.xml").getroot()
    cases = suite.findall("testcase")
    assert len(cases) == 1 and cases[0].find("error") is not None
    assert suite.get("errors") == "1" and suite.get("failures") == "0"
    assert "need at least 26" in cases[0].find("error").get("message")


def test_json_report_layout(npz_files, tmp_path):
    out = tmp_path / "a.json"
    res = run("audit", npz_files["good"], *GATE, *FAST, "--json", out)
    assert res.exit_code == 0, res.output
    report = read_json(out)
    assert set(report) >= {"verdict", "reason", "source", "world", "metrics", "gate"}
    assert report["verdict"] == "pass"
    assert report["source"].endswith("good.npz") and report["world"] is None
    for key in CONTRACT:
        assert key in report["metrics"], key
        assert isinstance(report["metrics"][key], float), key
    assert len(report["gate"]) == 2
    for g in report["gate"]:
        assert set(g) == {"metric", "op", "value", "actual", "passed"}
        assert g["passed"] is True
        assert g["actual"] == report["metrics"][g["metric"]]
    assert [(g["metric"], g["op"], g["value"]) for g in report["gate"]] == [
        ("r2_h_to_z_heldout", "min", 0.999), ("orthogonality_error", "max", 0.01)]


def test_gauss_sims_choose_the_null_law(npz_files, tmp_path):
    out = tmp_path / "a.json"
    res = run("audit", npz_files["good"], "--gauss-sims", "19", "--json", out)
    assert res.exit_code == 0, res.output
    m = read_json(out)["metrics"]
    assert m["gaussianity_method"] == "monte carlo (19 simulations)"
    assert round(m["gaussianity_p_value"] * 20) == pytest.approx(m["gaussianity_p_value"] * 20)
    res = run("audit", npz_files["good"], "--json", out)
    m = read_json(out)["metrics"]
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


def test_ou_pairs_give_the_bound(ou_arrays, tmp_path):
    np.savez(tmp_path / "ou.npz", **ou_arrays)
    out = tmp_path / "ou.json"
    res = run("audit", tmp_path / "ou.npz", "--gauss-sims", "0", "--json", out)
    assert res.exit_code == 0, res.output
    m = read_json(out)["metrics"]
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


def test_bound_gate_on_a_boolean_metric(ou_arrays, tmp_path):
    np.savez(tmp_path / "ou.npz", **ou_arrays)
    out = tmp_path / "ou.json"
    res = run("audit", tmp_path / "ou.npz", "--gauss-sims", "0", "--min", "bound_holds=1",
              "--max", "alignment_gap=0.001", "--json", out)
    assert res.exit_code == 1, res.output
    gate = {g["metric"]: g for g in read_json(out)["gate"]}
    assert gate["bound_holds"]["passed"] is True and gate["bound_holds"]["actual"] == 1.0
    assert gate["alignment_gap"]["passed"] is False


def test_bound_metrics_need_h_prime(npz_files):
    res = run("audit", npz_files["good"], "--gauss-sims", "0", "--max", "alignment_gap=1")
    assert_one_line_error(res, "needs h′ and ρ")


# ---- .safetensors arrays ---------------------------------------------------------------


def test_safetensors_arrays_match_npz(npz_files, ou_arrays, tmp_path):
    z = np.load(npz_files["good"])["z"]
    h = np.load(npz_files["good"])["h"]
    st = tmp_path / "good.safetensors"
    save_file({"z": torch.from_numpy(z), "h": torch.from_numpy(h)}, str(st))
    a, b = tmp_path / "npz.json", tmp_path / "st.json"
    assert run("audit", npz_files["good"], "--gauss-sims", "0", "--json", a).exit_code == 0
    res = run("audit", st, "--gauss-sims", "0", "--json", b)
    assert res.exit_code == 0, res.output
    ma, mb = read_json(a)["metrics"], read_json(b)["metrics"]
    assert mb["r2_h_to_z_heldout"] == pytest.approx(ma["r2_h_to_z_heldout"], abs=1e-12)
    assert mb["orthogonality_error"] == pytest.approx(ma["orthogonality_error"], abs=1e-12)
    # float32 tensors are audited in float32: the same numbers to float32 accuracy.
    st32 = tmp_path / "good32.safetensors"
    save_file({"z": torch.from_numpy(z).float(), "h": torch.from_numpy(h).float()}, str(st32))
    c = tmp_path / "st32.json"
    assert run("audit", st32, "--gauss-sims", "0", "--json", c).exit_code == 0
    assert read_json(c)["metrics"]["r2_h_to_z_heldout"] == pytest.approx(
        ma["r2_h_to_z_heldout"], abs=1e-5)
    # h_prime and a 0-d rho tensor travel in safetensors as well.
    ou = tmp_path / "ou.safetensors"
    save_file({k: torch.from_numpy(np.asarray(v)) for k, v in ou_arrays.items()}, str(ou))
    np.savez(tmp_path / "ou.npz", **ou_arrays)
    d, e = tmp_path / "ou_st.json", tmp_path / "ou_npz.json"
    assert run("audit", ou, "--gauss-sims", "0", "--json", d).exit_code == 0
    assert run("audit", tmp_path / "ou.npz", "--gauss-sims", "0", "--json", e).exit_code == 0
    md, me = read_json(d)["metrics"], read_json(e)["metrics"]
    assert md["rho"] == 0.9
    assert md["bound"] == pytest.approx(me["bound"], rel=1e-12)


# ---- gate forms and CI reports ---------------------------------------------------------


def test_min_max_flags(npz_files, tmp_path):
    out = tmp_path / "a.json"
    res = run("audit", npz_files["good"], *FAST, "--min", "r2_h_to_z_heldout=0.999",
              "--min", "effective_rank = 7.5", "--max", "procrustes_mse=1e-3", "--json", out)
    assert res.exit_code == 0, res.output
    gate = read_json(out)["gate"]
    assert [(g["metric"], g["op"], g["value"], g["passed"]) for g in gate] == [
        ("r2_h_to_z_heldout", "min", 0.999, True), ("effective_rank", "min", 7.5, True),
        ("procrustes_mse", "max", 1e-3, True)]
    res = run("audit", npz_files["good"], *FAST, "--max", "procrustes_mse=1e-7")
    assert res.exit_code == 1, res.output
    assert "procrustes_mse" in res.output


def test_toml_gate_junit_and_markdown(npz_files, tmp_path):
    gate = tmp_path / "gate.toml"
    gate.write_text(textwrap.dedent("""\
        [min]
        r2_h_to_z_heldout = 0.999
        mcc = 0.9

        [max]
        orthogonality_error = 0.01
    """))
    out, junit, md = tmp_path / "a.json", tmp_path / "junit.xml", tmp_path / "summary.md"
    res = run("audit", npz_files["good"], *FAST, "--gate", gate, "--max", "whitening_error=1",
              "--json", out, "--junit", junit, "--markdown", md)
    # A rotation of the latents is not axis-aligned: MCC ≈ 0.6 < 0.9 fails the gate.
    assert res.exit_code == 1, res.output
    report = read_json(out)
    assert report["verdict"] == "fail"
    by_metric = {g["metric"]: g for g in report["gate"]}
    assert set(by_metric) == {"r2_h_to_z_heldout", "mcc", "orthogonality_error",
                              "whitening_error"}
    assert by_metric["mcc"]["passed"] is False and by_metric["mcc"]["actual"] < 0.9
    assert all(g["passed"] for k, g in by_metric.items() if k != "mcc")

    suite = ET.parse(junit).getroot()
    assert suite.tag == "testsuite"
    cases = suite.findall("testcase")
    assert len(cases) == 4 and suite.get("tests") == "4"
    assert suite.get("failures") == "1" and suite.get("errors") == "0"
    failing = [c for c in cases if c.find("failure") is not None]
    assert len(failing) == 1 and failing[0].get("name").startswith("mcc")
    assert "required ≥ 0.9" in failing[0].find("failure").get("message")
    names = sorted(c.get("name").split()[0] for c in cases)
    assert names == ["mcc", "orthogonality_error", "r2_h_to_z_heldout", "whitening_error"]

    text = md.read_text()
    assert "fail" in text.splitlines()[0]
    assert "| metric | value | gate | result |" in text
    for key in CONTRACT:
        assert f"`{key}`" in text, key
    mcc_row = next(line for line in text.splitlines() if line.startswith("| `mcc`"))
    assert "**FAIL**" in mcc_row and f"{report['metrics']['mcc']:.6f}" in mcc_row


def test_junit_all_pass_has_no_failure(npz_files, tmp_path):
    junit = tmp_path / "junit.xml"
    res = run("audit", npz_files["good"], *GATE, *FAST, "--junit", junit)
    assert res.exit_code == 0, res.output
    suite = ET.parse(junit).getroot()
    cases = suite.findall("testcase")
    assert len(cases) == 2
    assert all(c.find("failure") is None and c.find("error") is None for c in cases)
    assert suite.get("failures") == "0"


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


def audit_world(target, tmp_path, *extra):
    out = tmp_path / f"{target.stem}.json"
    res = run("audit", target, *WORLD, "--json", out, *extra)
    return res, (read_json(out) if out.exists() else None)


def test_torchscript_identity_equals_raw_mixing(tmp_path):
    path = tmp_path / "enc.pt"
    torch.jit.script(identity_linear()).save(str(path))
    res, report = audit_world(path, tmp_path)
    assert res.exit_code == 0, res.output
    m = report["metrics"]
    assert report["world"]["name"] == "coupling" and report["world"]["dim"] == 4
    assert m["n_samples"] == 2000
    assert m["r2_h_to_z"] == pytest.approx(m["mixing_r2_x_to_z"], abs=1e-6)
    assert 0.5 < m["mixing_r2_x_to_z"] < 0.99  # the coupling world is genuinely nonlinear
    for key in BOUND_KEYS:
        assert key in m, key


def test_torchscript_trace_of_any_invertible_linear_map(tmp_path):
    path = tmp_path / "traced.pt"
    torch.jit.trace(random_linear(seed=3), torch.randn(8, 4)).save(str(path))
    res, report = audit_world(path, tmp_path)
    assert res.exit_code == 0, res.output
    m = report["metrics"]
    # Linear R² is invariant to an invertible linear map of the regressors.
    assert m["r2_h_to_z"] == pytest.approx(m["mixing_r2_x_to_z"], abs=1e-6)


def test_torch_export_with_dynamic_batch(tmp_path):
    path = tmp_path / "enc.pt2"
    batch = torch.export.Dim("batch", min=1, max=1_000_000)
    program = torch.export.export(identity_linear(), (torch.randn(8, 4),),
                                  dynamic_shapes={"input": {0: batch}})
    torch.export.save(program, str(path))
    res, report = audit_world(path, tmp_path)
    assert res.exit_code == 0, res.output
    m = report["metrics"]
    assert m["r2_h_to_z"] == pytest.approx(m["mixing_r2_x_to_z"], abs=1e-6)
    # plan reads the same program on the same world
    res = run("plan", path, "--world", "coupling", "--dim", "4", "--pairs", "5",
              "--json", tmp_path / "p.json")
    assert res.exit_code == 0, res.output
    assert read_json(tmp_path / "p.json")["pairs"] == 5


def test_torch_export_with_static_batch_is_a_clean_error(tmp_path):
    path = tmp_path / "static.pt2"
    torch.export.save(torch.export.export(identity_linear(), (torch.randn(8, 4),)), str(path))
    res, _ = audit_world(path, tmp_path)
    # The encoder is called on chunks of 2000 rows; the program only accepts 8.
    assert_one_line_error(res, "the encoder failed on inputs of shape (2000, 4)")


def test_safetensors_weights_with_arch(arch_dir):
    weights = arch_dir / "w.safetensors"
    save_file(identity_linear().state_dict(), str(weights))
    res, report = audit_world(weights, arch_dir, "--arch", "myarch:make",
                              "--arch-kwargs", '{"dim": 4}')
    assert res.exit_code == 0, res.output
    m = report["metrics"]
    assert m["r2_h_to_z"] == pytest.approx(m["mixing_r2_x_to_z"], abs=1e-6)
    # The same weights as TorchScript give the very same numbers.
    ts = arch_dir / "same.pt"
    torch.jit.script(identity_linear()).save(str(ts))
    res2, report2 = audit_world(ts, arch_dir)
    assert res2.exit_code == 0, res2.output
    assert report2["metrics"]["r2_h_to_z_heldout"] == m["r2_h_to_z_heldout"]
    # plan takes the --arch weights too, and gives the TorchScript copy's numbers
    plans = []
    for target, extra in ((weights, ("--arch", "myarch:make", "--arch-kwargs", '{"dim": 4}')),
                          (ts, ())):
        out = arch_dir / "plan.json"
        res = run("plan", target, "--world", "coupling", "--dim", "4", "--pairs", "8",
                  "--gallery", "3000", "--json", out, *extra)
        assert res.exit_code == 0, res.output
        plans.append(read_json(out)["cost_ratios"])
    assert plans[0] == plans[1]


def test_dataset_from_idaudit_world(tmp_path):
    pairs = tmp_path / "pairs.safetensors"
    res = run("world", "coupling", "--dim", "4", "--pairs", "2000", "--out", pairs)
    assert res.exit_code == 0, res.output
    enc = tmp_path / "enc.pt"
    torch.jit.script(identity_linear()).save(str(enc))
    out = tmp_path / "data.json"
    res = run("audit", enc, "--data", pairs, "--gauss-sims", "0", "--json", out)
    assert res.exit_code == 0, res.output
    report = read_json(out)
    m = report["metrics"]
    assert report["world"]["name"] == "pairs" and report["world"]["rho"] == 0.95
    assert report["world"]["extra"]["world"]["name"] == "coupling"
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
    res = run("audit", pairs)
    assert_one_line_error(res, "--data")


def test_pickled_module_needs_trust_pickle(tmp_path):
    path = tmp_path / "pickled.pt"
    torch.save(random_linear(seed=1), str(path))
    res = run("audit", path, *WORLD)
    assert_one_line_error(res, "--trust-pickle")
    res, report = audit_world(path, tmp_path, "--trust-pickle")
    assert res.exit_code == 0, res.output
    m = report["metrics"]
    assert m["r2_h_to_z"] == pytest.approx(m["mixing_r2_x_to_z"], abs=1e-6)
    # A torch.save state dict opens without --trust-pickle (weights_only), but needs --arch.
    sd = tmp_path / "state.pt"
    torch.save(random_linear().state_dict(), str(sd))
    for extra in ((), ("--trust-pickle",)):
        assert_one_line_error(run("audit", sd, *WORLD, *extra),
                              "holds weights (a state dict); pass --arch")


# ---- bad input: exit 2, one line, no traceback -----------------------------------------


def test_truncated_and_corrupt_safetensors(tmp_path, npz_files):
    data = np.load(npz_files["good"])
    valid = tmp_path / "valid.safetensors"
    save_file({"z": torch.from_numpy(data["z"]), "h": torch.from_numpy(data["h"])}, str(valid))
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(valid.read_bytes()[:100])
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(np.random.default_rng(9).bytes(512))
    for path in (truncated, corrupt):
        assert_one_line_error(run("audit", path, "--gauss-sims", "0"), path.name)


def test_npz_input_errors(tmp_path):
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "no_h.npz", z=rng.standard_normal((100, 4)))
    assert_one_line_error(run("audit", tmp_path / "no_h.npz"), "lacks the array h")
    np.savez(tmp_path / "rows.npz", z=rng.standard_normal((100, 4)),
             h=rng.standard_normal((90, 4)))
    assert_one_line_error(run("audit", tmp_path / "rows.npz"), "z has 100 rows but h has 90")
    np.savez(tmp_path / "rho.npz", z=rng.standard_normal((100, 4)),
             h=rng.standard_normal((100, 4)), h_prime=rng.standard_normal((100, 4)),
             rho=np.array(1.5))
    assert_one_line_error(run("audit", tmp_path / "rho.npz"), "rho must lie strictly")
    (tmp_path / "junk.npz").write_bytes(b"not a zip file at all")
    assert_one_line_error(run("audit", tmp_path / "junk.npz"), "cannot read")


@pytest.mark.parametrize("arch,fragment", [
    ("nosuchmodule:make", "cannot import 'nosuchmodule'"),
    ("myarch:missing", "has no attribute 'missing'"),
    ("myarch", "module.path:factory"),
    ("myarch:make_not_a_module", "not a torch nn.Module"),
    ("myarch:make_sum", "the encoder returned ()"),
    ("myarch:make_pooled", "the encoder returned (1, 4) for a batch of 2000"),
])
def test_bad_arch(arch_dir, arch, fragment):
    weights = arch_dir / "w.safetensors"
    save_file(identity_linear().state_dict(), str(weights))
    res = run("audit", weights, *WORLD, "--arch", arch, "--arch-kwargs", '{"dim": 4}')
    assert_one_line_error(res, fragment)


def test_arch_kwargs_must_be_a_json_object(arch_dir):
    weights = arch_dir / "w.safetensors"
    save_file(identity_linear().state_dict(), str(weights))
    res = run("audit", weights, *WORLD, "--arch", "myarch:make", "--arch-kwargs", "{dim: 4}")
    assert_one_line_error(res, "--arch-kwargs is not valid JSON")
    res = run("audit", weights, *WORLD, "--arch", "myarch:make", "--arch-kwargs", '{"dim": 5}')
    assert_one_line_error(res, "do not fit myarch:make")


def test_encoder_input_size_does_not_fit_the_world(arch_dir):
    weights = arch_dir / "w3.safetensors"
    save_file(torch.nn.Linear(3, 3).state_dict(), str(weights))
    res = run("audit", weights, *WORLD, "--arch", "myarch:make", "--arch-kwargs", '{"dim": 3}')
    assert_one_line_error(res, "the encoder failed on inputs of shape (2000, 4)")
    ts = arch_dir / "enc3.pt"
    torch.jit.script(torch.nn.Linear(3, 3)).save(str(ts))
    assert_one_line_error(run("audit", ts, *WORLD), "the encoder failed on inputs of shape")


def test_gate_errors(npz_files, tmp_path):
    gate = tmp_path / "gate.toml"
    gate.write_text("[min]\nnosuch_metric = 1\n")
    assert_one_line_error(run("audit", npz_files["good"], "--gate", gate),
                          "unknown metric 'nosuch_metric'")
    assert_one_line_error(run("audit", npz_files["good"], "--min", "nosuchmetric=1"),
                          "unknown metric 'nosuchmetric'")
    assert_one_line_error(run("audit", npz_files["good"], "--min", "mcc"), "METRIC=VALUE")
    assert_one_line_error(run("audit", npz_files["good"], "--max", "mcc=high"),
                          "must be a number")
    bad_table = tmp_path / "tables.toml"
    bad_table.write_text("[minimum]\nmcc = 1\n")
    assert_one_line_error(run("audit", npz_files["good"], "--gate", bad_table),
                          "unknown tables")
    broken = tmp_path / "broken.toml"
    broken.write_text("[min\nmcc = ")
    assert_one_line_error(run("audit", npz_files["good"], "--gate", broken), "not valid TOML")
    assert_one_line_error(run("audit", npz_files["good"], "--gate", tmp_path / "none.toml"),
                          "gate file not found")
    # the bound needs h′ and ρ, which these arrays do not have
    assert_one_line_error(run("audit", npz_files["good"], "--max", "bound=1"), "not available")


def test_missing_file_and_missing_world(tmp_path, arch_dir):
    assert_one_line_error(run("audit", tmp_path / "nope.npz"), "not found")
    enc = tmp_path / "enc.pt"
    torch.jit.script(identity_linear()).save(str(enc))
    assert_one_line_error(run("audit", enc), "no world to evaluate the encoder on")
    weights = arch_dir / "w.safetensors"
    save_file(identity_linear().state_dict(), str(weights))
    assert_one_line_error(run("audit", weights, "--arch", "myarch:make"),
                          "no world to evaluate the encoder on")
    assert_one_line_error(run("audit", enc, *WORLD, "--arch", "myarch:make"),
                          "--arch goes with plain weights (.safetensors or a torch.save")


def test_option_range_errors(npz_files):
    assert_one_line_error(run("audit", npz_files["good"], "--gauss-sims", "-1"), "≥ 0")
    assert_one_line_error(run("audit", npz_files["good"], "--gauss-sims", "0",
                              "--test-fraction", "1.5"), "--test-fraction")
    assert_one_line_error(run("audit", npz_files["good"], "--circular", "0,x"), "--circular")
    assert_one_line_error(run("audit", npz_files["good"], "--circular", "9"), "out of range")


def test_several_runs_are_gated_on_the_worst_or_the_median(tmp_path):
    rng = np.random.default_rng(11)
    z = rng.standard_normal((2000, 3))
    paths = []
    for i, noise in enumerate((0.05, 0.1, 0.6)):  # two good seeds and a poor one
        paths.append(tmp_path / f"run{i}.npz")
        np.savez(paths[-1], z=z, h=z + noise * rng.standard_normal(z.shape))
    res = run("audit", *paths, "--min-r2", "0.95", "--gauss-sims", "0", "--json",
              tmp_path / "worst.json")
    rep = read_json(tmp_path / "worst.json")
    assert res.exit_code == 1, res.output
    per_run = [r["metrics"]["r2_h_to_z_heldout"] for r in rep["runs"]]
    assert len(per_run) == 3 and rep["metrics"]["n_runs"] == 3
    assert rep["metrics"]["n_samples"] == 2000 and isinstance(rep["metrics"]["n_samples"], int)
    assert rep["metrics"]["r2_h_to_z_heldout"] == min(per_run) < 0.95
    res = run("audit", *paths, "--min-r2", "0.95", "--reduce", "median", "--gauss-sims", "0",
              "--json", tmp_path / "median.json")
    assert res.exit_code == 0, res.output
    assert read_json(tmp_path / "median.json")["metrics"]["r2_h_to_z_heldout"] == \
        pytest.approx(float(np.median(per_run)))
    np.savez(tmp_path / "flat.npz", z=z, h=np.zeros_like(z))
    res = run("audit", paths[0], tmp_path / "flat.npz", "--min-r2", "0.9")
    assert res.exit_code == 3 and "flat.npz" in res.output
    assert_one_line_error(run("audit", paths[0], "--reduce", "median"), "several targets")
    assert_one_line_error(run("audit", *paths, "--reduce", "mean"), "--reduce must be")


def test_gate_on_the_lower_end_of_the_bootstrap_interval(ou_arrays, tmp_path):
    np.savez(tmp_path / "ou.npz", **ou_arrays)
    out = tmp_path / "b.json"
    res = run("audit", tmp_path / "ou.npz", "--bootstrap", "50", "--gauss-sims", "0",
              "--min", "r2_h_to_z_heldout_ci_low=0.5", "--json", out)
    assert res.exit_code == 0, res.output
    m = read_json(out)["metrics"]
    assert m["r2_h_to_z_heldout_ci_low"] == m["r2_h_to_z_heldout_ci"][0]
    assert m["r2_h_to_z_heldout_ci_low"] <= m["r2_h_to_z_heldout"]
    assert_one_line_error(run("audit", tmp_path / "ou.npz", "--min",
                              "r2_h_to_z_heldout_ci_low=0.5"), "needs --bootstrap")


def test_a_crash_is_exit_5_never_a_verdict(npz_files, monkeypatch):
    """An unexpected exception inside idaudit is a bug: one line and exit 5, not exit 1."""
    import idaudit.auditing

    def boom(*args, **kwargs):
        raise IndexError("list index out of range")

    monkeypatch.setattr(idaudit.auditing, "audit_inputs", boom)
    res = run("audit", npz_files["good"], "--min-r2", "0.9")
    assert res.exit_code == 5 and "Traceback" not in res.output, res.output
    assert res.output.strip().splitlines() == [res.output.strip()]
    assert res.output.startswith("internal error: IndexError: list index out of range")
    monkeypatch.setenv("IDAUDIT_TRACEBACK", "1")
    res = run("audit", npz_files["good"])
    assert isinstance(res.exception, IndexError)


def test_test_fraction_is_refused_where_it_does_not_apply(npz_files):
    """Fixed evaluation rows (the Reacher world's images) and label-free audits fit no split:
    --test-fraction there is refused, not silently ignored."""
    from idaudit.auditing import AuditInputs, audit_inputs
    from idaudit.errors import IdauditError

    rng = np.random.default_rng(0)
    z = rng.standard_normal((400, 2))
    inp = AuditInputs(z=z, h=z, test_rows=np.arange(300, 400))
    assert audit_inputs(inp, gauss_sims=0).metrics["n_test"] == 100
    with pytest.raises(IdauditError, match="fixes the held-out rows"):
        audit_inputs(inp, test_fraction=0.3)
    assert_one_line_error(run("audit", npz_files["good"], "--label-free", "--test-fraction",
                              "0.3"), "label-free")
    assert run("audit", npz_files["good"], "--test-fraction", "0.3").exit_code == 0


def test_an_audit_without_thresholds_says_no_gate(npz_files, tmp_path):
    out, junit, md = tmp_path / "a.json", tmp_path / "junit.xml", tmp_path / "summary.md"
    res = run("audit", npz_files["good"], *FAST, "--json", out, "--junit", junit,
              "--markdown", md)
    assert res.exit_code == 0, res.output  # a report only: not a failure
    shown = " ".join(res.output.split())  # the title may wrap on a long path
    assert "NO GATE (report only)" in shown and "PASS" not in shown
    report = read_json(out)
    assert report["verdict"] == "ungated" and report["gate"] == []
    assert report["metrics"]["r2_h_to_z_heldout"] > 0.99999
    text = md.read_text()
    assert text.splitlines()[0].endswith("no gate") and "nothing was checked" in text
    suite = ET.parse(junit).getroot()
    assert suite.get("tests") == "1" and suite.get("skipped") == "1"
    assert suite.get("failures") == "0" and suite.get("errors") == "0"
    assert "nothing was checked" in suite.find("testcase/skipped").get("message")
    # the library says the same: not passed, exit code 0
    import idaudit

    data = np.load(npz_files["good"])
    lib = idaudit.audit(data["z"], data["h"], gauss_sims=0)
    assert lib.verdict == "ungated" and lib.passed is False and lib.exit_code == 0
    gated = idaudit.audit(data["z"], data["h"], gauss_sims=0, min_r2=0.9)
    assert gated.verdict == "pass" and gated.passed


def test_library_refuses_what_the_cli_refuses(npz_files):
    import idaudit
    from idaudit.errors import IdauditError

    data = np.load(npz_files["good"])
    for kwargs, fragment in [({"bootstrap": -1}, "--bootstrap must be an integer ≥ 0"),
                             ({"gauss_sims": -2}, "--gauss-sims must be an integer ≥ 0"),
                             ({"circular": (0, 0)}, "latent index 0 is given twice"),
                             ({"circular": (0.5,)}, "must be integers, got 0.5"),
                             ({"min_r2": "0.9"}, "must be a number, got '0.9'"),
                             ({"gate": {"min": {"mcc": "0.9"}}}, "must be a number")]:
        with pytest.raises(IdauditError, match=fragment):
            idaudit.audit(data["z"], data["h"], **kwargs)
