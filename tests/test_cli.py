"""The CLI end to end through typer's CliRunner, and its errors (one line, exit 2)."""

import json

import pytest
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from idaudit.cli import app

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    path = d / "s.safetensors"
    res = run("train", "--world", "spiral", "--rho", "0.95", "--objective", "lejepa", "--lamb",
              "1e-3", "--steps", "300", "--seed", "1337", "--eval-every", "100", "--n-eval", "2000",
              "--out", path, "--quiet")
    assert res.exit_code == 0, res.output
    return path


def test_train_writes_checkpoint_and_log(ckpt):
    assert ckpt.exists()
    log = json.loads(ckpt.with_name("s.log.json").read_text())
    assert log["train"]["steps"] == 300
    assert [c["step"] for c in log["history"][0]["curve"]] == [100, 200, 300]
    assert log["metrics"]["r2_h_to_z"] > 0.5


def test_audit_json_has_the_contract_keys(ckpt, tmp_path):
    out = tmp_path / "a.json"
    res = run("audit", ckpt, "--json", out)
    assert res.exit_code == 0, res.output
    metrics = json.loads(out.read_text())["metrics"]
    for key in ("r2_h_to_z", "r2_z_to_h", "orthogonality_error", "procrustes_mse",
                "whitening_error", "alignment_gap", "D", "bound", "bound_holds",
                "mixing_r2_x_to_z"):
        assert key in metrics, key
    assert isinstance(metrics["bound_holds"], bool)
    log = json.loads(ckpt.with_name("s.log.json").read_text())
    assert metrics["r2_h_to_z"] == pytest.approx(log["metrics"]["r2_h_to_z"], rel=1e-12)


def test_plan_json(ckpt, tmp_path):
    out = tmp_path / "p.json"
    res = run("plan", ckpt, "--pairs", "10", "--gallery", "2000", "--json", out)
    assert res.exit_code == 0, res.output
    plan = json.loads(out.read_text())
    assert plan["pairs"] == 10 and len(plan["cost_ratios"]) == 10
    assert plan["cost_ratio_median"] > 0
    assert "lqr_value_rel_error_median" in plan


def test_world_writes_pairs(tmp_path):
    out = tmp_path / "w.safetensors"
    res = run("world", "coupling", "--dim", "6", "--pairs", "100", "--rho", "0.9", "--out", out)
    assert res.exit_code == 0, res.output
    t = load_file(str(out))
    assert t["z"].shape == (100, 6) and t["x_prime"].shape == (100, 6)


@pytest.mark.parametrize("args,fragment", [
    (["train", "--world", "moon"], "valid: spiral, banana, sinusoid, nvp, coupling"),
    (["train", "--objective", "byol"], "valid: infonce, lejepa, whiten"),
    (["train", "--encoder", "resnet", "--steps", "1"], "valid: cnn, coupling, mlp"),
    (["train", "--rho", "1.5"], "--rho"),
    (["train", "--rho", "0"], "--rho"),
    (["train", "--lamb", "2"], "--lamb"),
    (["train", "--world", "coupling", "--dim", "7"], "even"),
    (["train", "--source", "gennorm", "--alpha", "0"], "--alpha"),
    (["train", "--source", "gennorm", "--alpha", "-2"], "--alpha"),
    (["train", "--sigma", "wide"], "--sigma"),
    (["train", "--encoder-kwargs", "{bad"], "--encoder-kwargs"),
    (["world", "moon", "--out", "x.safetensors"], "valid:"),
    (["audit", "does-not-exist.safetensors"], "not found"),
    (["train", "--epochs", "5"], "--epochs does not apply to world 'spiral'"),
    (["train", "--stride", "4"], "--stride does not apply to world 'spiral'"),
    (["train", "--pairs", "40"], "--pairs does not apply to world 'spiral'"),
    (["train", "--workers", "2", "--steps", "1"], "--workers does not apply to world 'spiral'"),
    (["train", "--sigma", "2"], "--sigma only applies to --objective infonce"),
    (["train", "--objective", "infonce", "--lamb", "0.5"], "--lamb does not apply"),
    (["train", "--encoder-kwargs", "{}"], "--encoder-kwargs needs --encoder"),
    (["train", "--world", "banana", "--layers", "3"], "--layers only applies to coupling"),
    (["world", "spiral", "--trajectory", "--out", "x.safetensors"], "--trajectory does not "
                                                                     "apply"),
])
def test_bad_input_is_one_line_exit_2(args, fragment):
    res = run(*args)
    assert res.exit_code == 2, res.output
    assert fragment in res.output
    assert "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output


def test_corrupt_and_foreign_checkpoints(tmp_path, ckpt):
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(b"\x00\x01garbage" * 10)
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(ckpt.read_bytes()[:200])
    foreign = tmp_path / "foreign.safetensors"
    import torch

    save_file({"w": torch.zeros(2)}, str(foreign))
    wrong = tmp_path / "wrong.safetensors"
    state = load_file(str(ckpt))
    state = {k: v[..., :1].contiguous() for k, v in state.items()}
    from safetensors import safe_open

    with safe_open(str(ckpt), framework="pt") as f:
        meta = f.metadata()
    save_file(state, str(wrong), metadata=meta)
    for path, fragment in [(corrupt, "not a readable safetensors"),
                           (truncated, "not a readable safetensors"),
                           (foreign, "not an idaudit checkpoint"),
                           (wrong, "do not fit")]:
        for cmd in ("audit", "plan"):
            res = run(cmd, path)
            assert res.exit_code == 2, (cmd, path, res.output)
            # plan reads every encoder form audit reads, so both say the same
            expected = "neither an idaudit checkpoint" if path == foreign else fragment
            assert expected in res.output, res.output
            assert "Traceback" not in res.output
