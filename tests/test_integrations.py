"""Other projects' encoders end to end through the CLI, on the Reacher world at 32 px.

One test per project family: a tiny real model built with the real library (transformers,
lightning, hydra; random weights, explicit seeds, never a download), saved exactly as that
project saves it, then ``idaudit audit`` (and ``embed``) run on it as a user would, from the
directory that holds the user's ``myproject.py``. Where two routes hold the same weights
(an I-JEPA ``.pth.tar`` with ``--key`` and the same state dict as safetensors), their
``--json`` metrics are equal, number for number. The refusals are one line and exit 2.

Evaluation images (100 OU pairs at 32 px: 100 rows, enough held-out fits for a 32-wide
embedding, which needs 2·(2 + 32) + 10 = 78) are rendered once into a temporary
``$IDAUDIT_CACHE`` shared by the module; the cache test renders into its own.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import one_line, run, why_not_importable
from safetensors.torch import save_file
from standins import (
    ddp,
    project_dir,
    save_ijepa_and_target,
    save_lightning,
    user_module,
    vit_project,
)

pytest.importorskip("dm_control")
pytest.importorskip("transformers")

from idaudit.maths.linear import standardize  # noqa: E402
from idaudit.worlds.reacher import eval_pairs as reacher_eval  # noqa: E402

SIZE, N_EVAL, RHO = 32, 100, 0.95
REACHER = ("--world", "reacher", "--image-size", SIZE, "--n-eval", N_EVAL)

PROJECT = vit_project(size=SIZE, hidden=32, patch=8)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """The module's evaluation cache, rendered once (as the CLI renders it)."""
    root = tmp_path_factory.mktemp("idaudit-cache")
    reacher_eval.reacher_eval_set(RHO, SIZE, N_EVAL, cache_dir=root)
    return root


@pytest.fixture
def project(tmp_path, monkeypatch, cache):
    """tmp_path holds the user's myproject.py and is the working directory (not on sys.path,
    as under the idaudit executable); $IDAUDIT_CACHE is the module's cache; the modules
    imported from tmp_path are forgotten after."""
    monkeypatch.setenv("IDAUDIT_CACHE", str(cache))
    project_dir(tmp_path, PROJECT, monkeypatch)
    yield tmp_path
    sys.modules.pop("myproject", None)


def finite_metrics(metrics: dict) -> dict:
    """``metrics`` after checking that every number in it is finite."""
    for k, v in metrics.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            assert math.isfinite(v), (k, v)
    return metrics


def audit_json(*args, code: int = 0) -> dict:
    """``idaudit audit ARGS --json …``: its exit code checked, its metrics (all finite)."""
    out = Path.cwd() / f"audit-{len(list(Path.cwd().glob('audit-*.json')))}.json"
    res = run("audit", *args, "--json", out)
    assert res.exit_code == code, res.output
    report = json.loads(out.read_text())
    assert report["metrics"]["n_samples"] == N_EVAL
    return finite_metrics(report["metrics"])


# ---- I-JEPA: a .pth.tar of DDP state dicts ---------------------------------------------------


def test_ijepa_pth_tar_equals_safetensors_with_arch(project):
    save_ijepa_and_target(project, "make_vit", 32)
    arch = ("--arch", "myproject:make_vit", "--pool", "mean")
    from_ijepa = audit_json("jepa.pth.tar", "--key", "target_encoder", *arch, *REACHER)
    from_safetensors = audit_json("target.safetensors", *arch, *REACHER)
    assert from_ijepa == from_safetensors
    assert from_ijepa["embed_dim"] == 32 and 0 < from_ijepa["r2_h_to_z"] <= 1
    online = audit_json("jepa.pth.tar", "--key", "encoder", *arch, *REACHER)
    assert online["r2_h_to_z"] != from_ijepa["r2_h_to_z"]  # another state dict, other weights
    # without --key: the candidates are listed
    one_line(run("audit", "jepa.pth.tar", *arch, *REACHER), 2,
             "jepa.pth.tar holds several state dicts: encoder, predictor, target_encoder; "
             "choose one with --key")
    one_line(run("audit", "jepa.pth.tar", *REACHER), 2,
             "pass --arch module.path:factory or timm:NAME for the network they belong to and "
             "choose one with --key (encoder, predictor, target_encoder)")
    # patch tokens (100, 16, 32) without --pool: refused, naming --pool
    one_line(run("audit", "jepa.pth.tar", "--key", "target_encoder", "--arch", "myproject:make_vit",
                 *REACHER), 2, "the encoder returned tokens of shape (2, 16, 32) (batch, "
             "tokens, dim); choose how to pool them with --pool cls|mean|none")


# ---- V-JEPA 2: module.backbone. keys; Hugging Face directories --------------------------------


def test_vjepa2_backbone_prefix(project):
    mp = user_module()
    torch.manual_seed(1)
    encoder, target = mp.make_vit(), mp.make_vit()
    wrapped = {f"backbone.{k}": v for k, v in target.state_dict().items()}  # MultiSeqWrapper
    torch.save({"encoder": ddp({f"backbone.{k}": v for k, v in encoder.state_dict().items()}),
                "target_encoder": ddp(wrapped), "epoch": 3}, str(project / "vjepa2.pt"))
    save_file(target.state_dict(), str(project / "target.safetensors"))
    arch = ("--arch", "myproject:make_vit", "--pool", "mean")
    with_prefix = audit_json("vjepa2.pt", "--key", "target_encoder", "--prefix", "backbone.",
                             *arch, *REACHER)
    assert with_prefix == audit_json("target.safetensors", *arch, *REACHER)
    one_line(run("audit", "vjepa2.pt", "--key", "target_encoder", *arch, *REACHER), 2,
             "the keys under 'backbone.' fit: pass --prefix backbone.")


def test_hugging_face_directory_with_pool_cls(project):
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(2)
    ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=64, image_size=32,
                       patch_size=8)).save_pretrained(str(project / "vit"))
    cls = audit_json("vit", "--pool", "cls", *REACHER)
    assert cls == audit_json("vit", "--output", "last_hidden_state", "--pool", "cls", *REACHER)
    assert cls["embed_dim"] == 32
    one_line(run("audit", "vit", *REACHER), 2, "the encoder returned "
             "BaseModelOutputWithPooling with fields last_hidden_state, pooler_output; choose "
             "the embedding with --output FIELD")
    one_line(run("audit", "vit", "--key", "state_dict", "--pool", "cls", *REACHER), 2,
             "--key does not apply to a Hugging Face model directory")


# ---- Lightning (LeJEPA / stable-pretraining): state_dict, model.backbone. -----------------------


def test_lightning_ckpt_with_key_and_prefix(project):
    mp = user_module()
    torch.manual_seed(3)
    lit = save_lightning(project / "last.ckpt", mp.make_vit(), mp.make_projector(),
                         torch.rand(8, 3, SIZE, SIZE), batch_size=4)
    save_file(lit.model.backbone.state_dict(), str(project / "backbone.safetensors"))
    arch = ("--arch", "myproject:make_vit", "--pool", "mean")
    backbone = audit_json("last.ckpt", "--key", "state_dict", "--prefix", "model.backbone.",
                          *arch, *REACHER)
    assert backbone == audit_json("backbone.safetensors", *arch, *REACHER)
    one_line(run("audit", "last.ckpt", "--key", "state_dict", "--prefix", "model.head.", *arch,
                 *REACHER), 2, "--prefix model.head.: no key of last.ckpt entry 'state_dict' "
             "starts with 'model.head.' (its keys start with model.backbone., model.projector.)")


# ---- torch.compile: _orig_mod. keys ---------------------------------------------------------


def test_torch_compile_orig_mod_state_dict(project):
    mp = user_module()
    torch.manual_seed(4)
    net = mp.make_vit()
    state = torch.compile(net).state_dict()  # the wrapper's keys; nothing is compiled here
    assert state and all(k.startswith("_orig_mod.") for k in state)
    torch.save(state, str(project / "compiled.pt"))
    save_file(net.state_dict(), str(project / "plain.safetensors"))
    arch = ("--arch", "myproject:make_vit", "--pool", "mean")
    assert audit_json("compiled.pt", *arch, *REACHER) == \
        audit_json("plain.safetensors", *arch, *REACHER)


# ---- LeWM / stable-worldmodel: no forward, encode(info) --------------------------------------


def lewm_config() -> dict:
    return {"_target_": "myproject.JEPA", "encoder": {"_target_": "myproject.ClsViT"},
            "projector": {"_target_": "torch.nn.Linear", "in_features": 32, "out_features": 16},
            "predictor": {"_target_": "torch.nn.Linear", "in_features": 16, "out_features": 16}}


def test_lewm_model_through_embed(project):
    pytest.importorskip("hydra")
    mp = user_module()
    torch.manual_seed(5)
    model = mp.make_lewm()
    torch.save(model.state_dict(), str(project / "lewm.pt"))
    folder = project / "lewm"  # a stable-worldmodel directory: weights.pt + config.json
    folder.mkdir()
    torch.save(model.state_dict(), str(folder / "weights.pt"))
    (folder / "config.json").write_text(json.dumps(lewm_config()))
    through_embed = audit_json("lewm.pt", "--arch", "myproject:make_lewm", "--embed",
                               "myproject:encode_fn", *REACHER)
    assert through_embed["embed_dim"] == 16
    assert through_embed == audit_json("lewm", "--embed", "myproject:encode_fn", *REACHER)
    config = lewm_config()
    config["projector"] = {"_target_": "myproject.make_projector"}  # a function, not a class
    (folder / "config.json").write_text(json.dumps(config))
    one_line(run("audit", "lewm", *REACHER), 2, "_target_ 'myproject.make_projector' is a "
             "function; calling it runs code the file names (an untrusted config may call only "
             "the network factories stable_pretraining.backbone.utils.vit_hf); idaudit does "
             "that only with --trust-code")
    assert through_embed == audit_json("lewm", "--trust-code", "--embed", "myproject:encode_fn",
                                       *REACHER)


def test_lewm_directory_without_embed_uses_encode(project):
    pytest.importorskip("hydra")
    mp = user_module()
    torch.manual_seed(5)
    folder = project / "lewm"
    folder.mkdir()
    torch.save(mp.make_lewm().state_dict(), str(folder / "weights.pt"))
    (folder / "config.json").write_text(json.dumps(lewm_config()))
    assert audit_json("lewm", *REACHER) == \
        audit_json("lewm", "--embed", "myproject:encode_fn", *REACHER)


def test_a_lewm_run_as_stable_worldmodel_saves_it(project, tmp_path):
    """A LeWM run built from lewm.yaml's model section (its encoder by stable_pretraining's
    function vit_hf) and saved after two epochs by stable-worldmodel's own save_pretrained, as
    its SaveCkptCallback does: audited without --trust-code, the epoch chosen by --weights,
    with the numbers the trusted route gives."""
    pytest.importorskip("stable_pretraining", reason="stable-pretraining is not installed")
    pytest.importorskip("stable_worldmodel", reason="stable-worldmodel is not installed (it "
                        "also needs imageio, which its metadata does not name)")
    from standins import save_lewm_epochs

    run_dir, _ = save_lewm_epochs(tmp_path / "home")
    one_line(run("audit", run_dir, *REACHER), 2, "holds several weights files beside its "
             "config.json (weights_epoch_1.pt, weights_epoch_2.pt); choose one with --weights "
             "NAME (e.g. --weights weights_epoch_2.pt)")
    args = ("--normalize", "imagenet", *REACHER)
    second = audit_json(run_dir, "--weights", "weights_epoch_2.pt", *args)
    assert second["embed_dim"] == 32
    assert second == audit_json(run_dir, "--weights", "weights_epoch_2.pt", "--trust-code",
                                *args)
    first = audit_json(run_dir, "--weights", "weights_epoch_1.pt", *args)
    assert first["r2_h_to_z_heldout"] != second["r2_h_to_z_heldout"]
    one_line(run("audit", run_dir, "--weights", "weights_epoch_3.pt", *args), 2,
             "--weights weights_epoch_3.pt: no such file")


# ---- the paper's run.pt: arrays, no world ----------------------------------------------------


def test_paper_run_pt_is_audited_as_arrays(project):
    rng = np.random.default_rng(6)
    z = rng.standard_normal((N_EVAL, 2))
    q, _ = np.linalg.qr(rng.standard_normal((2, 2)))
    torch.manual_seed(6)
    # the paper's z is drawn white, but a run.pt does not say so: the audit standardises z on
    # its rows, and h is an exact rotation of that
    torch.save({"z": z, "x": np.tanh(z) + z, "h": standardize(z) @ q,
                "model_state_dict": torch.nn.Linear(2, 2).state_dict()},
               str(project / "run.pt"))
    metrics = audit_json("run.pt")
    assert metrics["r2_h_to_z_heldout"] == pytest.approx(1.0, abs=1e-9)
    assert metrics["orthogonality_error"] == pytest.approx(0.0, abs=1e-6)
    one_line(run("audit", "run.pt", *REACHER), 2, "arrays are audited as they are: --world, "
             "--n-eval, --image-size do not apply")


# ---- --normalize: only for images reaching an encoder that is not an idaudit checkpoint -------


def test_normalize_is_refused_for_idaudit_checkpoints_and_vector_worlds(project):
    from idaudit.models.checkpoint import save_checkpoint
    from idaudit.models.encoders import build_encoder
    from idaudit.worlds import make_spec

    torch.manual_seed(7)  # an (untrained) idaudit checkpoint of the spiral world
    kwargs = {"in_dim": 2, "out_dim": 2, "width": 16, "depth": 1}
    save_checkpoint(project / "spiral.safetensors", build_encoder("mlp", kwargs), "mlp", kwargs,
                    make_spec("spiral"), {"seed": 0, "n_eval": 200})
    one_line(run("audit", "spiral.safetensors", "--normalize", "imagenet", *REACHER), 2,
             "--normalize does not apply to an idaudit checkpoint: it records its own input "
             "format")
    one_line(run("audit", "spiral.safetensors", "--normalize", "imagenet"), 2,
             "--normalize applies to image worlds (reacher); this world's inputs are vectors")
    torch.manual_seed(7)
    save_file(torch.nn.Linear(2, 2).state_dict(), str(project / "lin.safetensors"))
    one_line(run("audit", "lin.safetensors", "--arch", "torch.nn:Linear", "--arch-kwargs",
                 '{"in_features": 2, "out_features": 2}', "--world", "spiral", "--normalize",
                 "imagenet"), 2, "--normalize applies to image worlds (reacher)")


# ---- idaudit embed → .npz → audit: the same numbers -------------------------------------------


def test_embed_npz_audits_as_the_direct_audit(project):
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(8)
    ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=64, image_size=32,
                       patch_size=8)).save_pretrained(str(project / "vit"))
    res = run("embed", "vit", "--pool", "cls", "--normalize", "imagenet", *REACHER,
              "--out", "e.npz")
    assert res.exit_code == 0, res.output
    assert "wrote e.npz: z (100, 2), h (100, 32), h_prime (ρ = 0.95)" in res.output
    with np.load(project / "e.npz") as f:
        arrays = {k: f[k] for k in f.files}
    assert set(arrays) == {"z", "h", "h_prime", "rho", "circular", "angle_sigma", "seed",
                           "z_white"}
    assert float(arrays["angle_sigma"]) == 1.0  # the evaluation angles' law, for the ceiling
    assert arrays["z"].shape == (N_EVAL, 2) and arrays["h"].shape == (N_EVAL, 32)
    assert arrays["h_prime"].shape == (N_EVAL, 32) and float(arrays["rho"]) == RHO
    assert arrays["circular"].tolist() == [0, 1] and int(arrays["seed"]) == 0
    assert np.all(np.isfinite(arrays["h"])) and not np.array_equal(arrays["h"], arrays["h_prime"])
    direct = audit_json("vit", "--pool", "cls", "--normalize", "imagenet", *REACHER)
    assert audit_json("e.npz") == direct
    free = audit_json("e.npz", "--label-free")
    for key in ("rho_estimated", "canonical_mean", "alignment_gap_rho_estimated"):
        assert isinstance(free[key], float) and math.isfinite(free[key]), key
    assert 0 < free["canonical_mean"] <= free["rho_estimated"] <= 1


# ---- the evaluation set is rendered once, then read from the cache ----------------------------


def test_a_second_audit_reads_the_cached_evaluation_set(project, monkeypatch, tmp_path):
    from transformers import ViTConfig, ViTModel

    own = tmp_path / "own-cache"
    monkeypatch.setenv("IDAUDIT_CACHE", str(own))
    torch.manual_seed(9)
    ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=64, image_size=32,
                       patch_size=8)).save_pretrained(str(project / "vit"))
    first = audit_json("vit", "--pool", "mean", *REACHER)
    (entry,) = (own / "reacher-eval").iterdir()
    files = sorted(p.name for p in entry.iterdir())
    assert files == ["meta.json", "pairs-00000.npz"]
    stamps = {p.name: p.stat().st_mtime_ns for p in entry.iterdir()}

    def no_render(*args, **kwargs):
        raise AssertionError("rendered again although the cache was valid")

    monkeypatch.setattr(reacher_eval, "_render", no_render)
    assert audit_json("vit", "--pool", "mean", *REACHER) == first
    assert {p.name: p.stat().st_mtime_ns for p in entry.iterdir()} == stamps
    assert sorted(p.name for p in (own / "reacher-eval").iterdir()) == [entry.name]


# ---- timm: runs where timm imports, one line naming the extra where it does not ---------------


def test_timm_arch_runs_or_names_the_extra(project):
    kwargs = dict(num_classes=0, img_size=SIZE, patch_size=8, depth=2, embed_dim=32, num_heads=2)
    why = why_not_importable("timm")  # not installed, or installed without its torchvision
    if why is not None:
        torch.manual_seed(10)
        save_file(torch.nn.Linear(2, 2).state_dict(), str(project / "w.safetensors"))
        one_line(run("audit", "w.safetensors", "--arch", "timm:vit_tiny_patch16_224",
                     "--arch-kwargs", json.dumps(kwargs), *REACHER), 2,
                 f"--arch timm:vit_tiny_patch16_224 needs timm, which cannot be imported ({why}"
                 "); pip install 'idaudit[vision]'")
        return
    import timm

    torch.manual_seed(10)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, **kwargs)
    save_file(model.state_dict(), str(project / "timm.safetensors"))
    torch.save({"target_encoder": ddp(model.state_dict())}, str(project / "timm.pth.tar"))
    arch = ("--arch", "timm:vit_tiny_patch16_224", "--arch-kwargs", json.dumps(kwargs))
    assert audit_json("timm.safetensors", *arch, *REACHER) == \
        audit_json("timm.pth.tar", "--key", "target_encoder", *arch, *REACHER)


# ---- docs/integrations.md: real flags, and files made before they are used -------------------


def test_the_integrations_guide_names_real_flags_and_makes_its_files():
    import re
    import shlex

    import typer

    from idaudit.cli import app

    text = (Path(__file__).parents[1] / "docs" / "integrations.md").read_text()
    script = "\n".join(re.findall(r"```bash\n(.*?)```", text, re.S)).replace("\\\n", " ")
    commands = typer.main.get_command(app).commands
    seen = 0
    for i, line in enumerate(script.splitlines()):
        words = shlex.split(line, comments=True)
        if not words or words[0] != "idaudit":
            continue
        seen += 1
        command = commands[words[1]]
        flags = {name for p in command.params for name in getattr(p, "opts", [])}
        for word in words[2:]:
            if word.startswith("--"):
                assert word.split("=")[0] in flags, (words[1], word)
        earlier = "\n".join(script.splitlines()[:i])
        targets = words[2:4] if words[1] == "consistency" else words[2:3]
        for target in targets:
            assert re.search(rf"""["'(]{re.escape(target)}["')/]|--out {re.escape(target)}\b""",
                             earlier), f"{target} is used before a block makes it"
    assert seen >= 20


def test_the_guides_row_counts_fit_the_real_encoders_widths():
    """Issue 40: the LeWM lines' --n-eval suits a real LeWM (192 wide), and the rule the guide
    states is the one the audit applies; issue 57: the rows it recommends for each width are
    the docs' one number, 20·m (docs/metrics.md, "How many rows")."""
    import re

    from idaudit.evaluations.inputs import min_rows

    text = (Path(__file__).parents[1] / "docs" / "integrations.md").read_text()
    lewm = text.split("## LeWM / stable-worldmodel", 1)[1].split("\n## ", 1)[0]
    counts = [int(n) for n in re.findall(r"--n-eval (\d+)", lewm)]
    assert counts and min(counts) >= min_rows(2, 192) == 398
    intro = text.split("\n| project |", 1)[0]
    for rows, width in re.findall(r"([\d ]+\d) for (?:LeWM's|a ViT-[SB]|I-JEPA's ViT-H/14) "
                                  r"\(?(\d+)\)?", intro):
        assert int(rows.replace(" ", "")) == 20 * int(width), (rows, width)
    assert len(re.findall(r"\d for (?:LeWM|a ViT|I-JEPA)", intro)) == 4
    # and the audit refuses one row fewer, naming the number
    import numpy as np

    import idaudit

    rng = np.random.default_rng(0)
    n = min_rows(2, 192)
    for rows, verdict in ((n - 1, "inconclusive"), (n, "ungated")):
        report = idaudit.audit(rng.standard_normal((rows, 2)), rng.standard_normal((rows, 192)))
        assert report.verdict == verdict, report.reason
    assert f"need at least {n}" in idaudit.audit(rng.standard_normal((n - 1, 2)),
                                                 rng.standard_normal((n - 1, 192))).reason
