"""Other JEPA projects' encoder files, opened by the library (idaudit.loading.loaders.load_target with
LoadOptions) and embedded by idaudit.models.encoders.embed: I-JEPA / V-JEPA 2 torch.save dicts, Hugging
Face model directories, Lightning .ckpt files, torch.compile'd state dicts, LeWM /
stable-worldmodel directories, the paper's run.pt, half-precision files; and the one-line
refusals (exit 2) where the file or the output is ambiguous or would run code.

Every model is a real tiny network built here (transformers, lightning, timm: random weights,
explicit seeds, never a download); the project's own modules (``--arch`` factories, classes of
pickled modules, LeWM's) are written into a temporary working directory, as a user's are.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from conftest import why_not_importable
from safetensors.torch import save_file
from standins import (
    JEPA_SOURCE,
    ddp,
    project_dir,
    save_ijepa,
    save_ijepa_and_target,
    save_lightning,
    user_module,
)

import idaudit
from idaudit.core.errors import IdauditError, library_spelling
from idaudit.core.request_parts import LoadOptions
from idaudit.loading.arrays import Arrays
from idaudit.loading.loaders import load_embedding_target, load_target
from idaudit.loading.opened import LoadedEncoder
from idaudit.models.encoders import embed

PROJECT = textwrap.dedent('''
    """A user's project: encoders as other JEPA codebases write them."""
    import torch
    from torch import nn


    class TokenNet(nn.Module):
        """Vectors (B, d) → tokens (B, d, width), as a ViT's patch tokens (no CLS token)."""

        def __init__(self, dim=4, width=8):
            super().__init__()
            self.embed = nn.Linear(1, width)
            self.pos = nn.Parameter(torch.zeros(dim, width))
            self.mix = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.GELU())

        def forward(self, x):
            t = self.embed(x.unsqueeze(-1)) + self.pos
            return t + self.mix(t)


    def make_tokens(dim=4, width=8):
        return TokenNet(dim, width)


    def make_linear(dim=4):
        return nn.Linear(dim, dim)


    class PatchViT(nn.Module):
        """A Hugging Face ViT that returns its patch tokens only, as I-JEPA's encoder does."""

        def __init__(self):
            super().__init__()
            from transformers import ViTConfig, ViTModel

            self.vit = ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=2,
                                          num_attention_heads=2, intermediate_size=64,
                                          image_size=32, patch_size=8), add_pooling_layer=False)

        def forward(self, x):
            return self.vit(pixel_values=x).last_hidden_state[:, 1:]


    def make_patch_vit():
        return PatchViT()


    def first_token(model, x):
        """--embed: the embedding of the model's tokens, token 0."""
        return model(x)[:, 0]


    class Pair(nn.Module):
        """Returns (tokens, pooled): a tuple output."""

        def __init__(self, dim=4):
            super().__init__()
            self.lin = nn.Linear(dim, dim)

        def forward(self, x):
            y = self.lin(x)
            return y.unsqueeze(1).repeat(1, 3, 1), 2 * y


    FACTORY_CALLS = []


    def make_mlp(dim=4, **options):
        FACTORY_CALLS.append(options)  # what a listed factory was called with
        return nn.Sequential(nn.Linear(dim, 8), nn.GELU(), nn.Linear(8, dim))


    def make_state(dim=4):
        """Not a network: a dict of tensors."""
        return {"w": torch.zeros(dim)}


    CALLS = []  # the batch size of every forward of a counted network, in order


    def counted(model):
        """``model`` with a forward hook appending each call's batch size to CALLS."""
        model.register_forward_hook(lambda module, args, out: CALLS.append(len(args[0])))
        return model


    class PooledViT(PatchViT):
        """Images → the mean of the patch tokens (B, D): an output pooled already."""

        def forward(self, x):
            return super().forward(x).mean(1)


    def make_pooled_counted():
        return counted(PooledViT())


    class CountedLinear(nn.Linear):
        """nn.Linear whose forwards are counted (a config can name only classes)."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            counted(self)
''') + JEPA_SOURCE


@pytest.fixture
def project(tmp_path, monkeypatch):
    """tmp_path holds the user's project (myproject.py) and is the working directory, not on
    sys.path (as under the idaudit executable); the modules imported from it are forgotten
    after."""
    project_dir(tmp_path, PROJECT, monkeypatch)
    yield tmp_path
    sys.modules.pop("myproject", None)


def refused(fragments, call, *args, **kwargs) -> str:
    """``call`` raises IdauditError, exit code 2, one line holding every fragment."""
    with pytest.raises(IdauditError) as info:
        call(*args, **kwargs)
    msg = str(info.value)
    assert info.value.exit_code == 2, msg
    assert "\n" not in msg, msg
    for fragment in [fragments] if isinstance(fragments, str) else fragments:
        assert library_spelling(fragment) in msg, msg  # written as the CLI says it
    return msg


def assert_same_state(module, state):
    got = module.state_dict()
    assert set(got) == set(state)
    for k, v in state.items():
        assert torch.equal(got[k], v.float() if v.is_floating_point() else v), k


# ---- I-JEPA / V-JEPA 2: a torch.save dict of DDP state dicts --------------------------------


def test_ijepa_checkpoint_equals_safetensors_with_arch(project):
    encoder, target = save_ijepa_and_target(project, "TokenNet", 8)

    options = dict(arch="myproject:make_tokens", pool="mean")
    from_ijepa = load_target("jepa.pth.tar", LoadOptions(key="target_encoder", **options))
    from_safetensors = load_target("target.safetensors", LoadOptions(**options))
    assert isinstance(from_ijepa, LoadedEncoder)
    assert_same_state(from_ijepa.module.module, target.state_dict())  # module. stripped

    x = torch.from_numpy(np.random.default_rng(1).standard_normal((300, 4))).float()
    h1, h2 = embed(from_ijepa.module, x), embed(from_safetensors.module, x)
    assert h1.shape == (300, 8)
    np.testing.assert_array_equal(h1.numpy(), h2.numpy())
    with torch.no_grad():
        np.testing.assert_allclose(h1.numpy(), target.eval()(x).mean(dim=1).numpy(), atol=1e-6)
    # the same audit on a synthetic world, number for number
    reports = [idaudit.audit(encoder=loaded.module, world="coupling", dim=4, n_eval=500,
                             gauss_sims=0, seed=3) for loaded in (from_ijepa, from_safetensors)]
    assert reports[0].metrics == reports[1].metrics
    assert 0 < reports[0].metrics["r2_h_to_z"] <= 1
    # the online encoder is another state dict of the same file
    online = load_target("jepa.pth.tar", LoadOptions(key="encoder", **options))
    assert_same_state(online.module.module, encoder.state_dict())


def test_ijepa_vit_patch_tokens(project):
    mp = user_module()
    torch.manual_seed(0)
    encoder, target = mp.PatchViT(), mp.PatchViT()
    save_ijepa(project / "vit.pth.tar", encoder, target, torch.nn.Linear(32, 32))
    save_file(target.state_dict(), str(project / "vit.safetensors"))
    images = torch.from_numpy(np.random.default_rng(2).standard_normal((6, 3, 32, 32))).float()
    got = {}
    for name, opts in (("ijepa", LoadOptions(arch="myproject:make_patch_vit",
                                             key="target_encoder", pool="mean")),
                       ("safetensors", LoadOptions(arch="myproject:make_patch_vit", pool="mean")),
                       ("embed", LoadOptions(arch="myproject:make_patch_vit", key="target_encoder",
                                             embed="myproject:first_token")),
                       ("cls", LoadOptions(arch="myproject:make_patch_vit", key="target_encoder",
                                           pool="cls"))):
        file = "vit.safetensors" if name == "safetensors" else "vit.pth.tar"
        got[name] = embed(load_target(file, opts).module, images).numpy()
    assert got["ijepa"].shape == (6, 32)
    np.testing.assert_array_equal(got["ijepa"], got["safetensors"])
    np.testing.assert_array_equal(got["embed"], got["cls"])
    with torch.no_grad():
        tokens = target.eval()(images)
    assert tokens.shape == (6, 16, 32)  # 16 patch tokens, no CLS token
    np.testing.assert_allclose(got["ijepa"], tokens.mean(dim=1).numpy(), atol=1e-5)
    np.testing.assert_allclose(got["cls"], tokens[:, 0].numpy(), atol=1e-5)
    # pool none flattens the tokens, explicitly
    flat = embed(load_target("vit.pth.tar", LoadOptions(arch="myproject:make_patch_vit",
                                                        key="target_encoder",
                                                        pool="none")).module, images)
    assert flat.shape == (6, 16 * 32)
    np.testing.assert_allclose(flat.numpy(), tokens.reshape(6, -1).numpy(), atol=1e-5)


def test_vjepa2_backbone_prefix_and_hint(project):
    user_module()
    torch.manual_seed(4)
    lin = torch.nn.Linear(4, 4)
    torch.save({"encoder": {f"module.backbone.{k}": v for k, v in lin.state_dict().items()}},
               str(project / "vjepa2.pt"))
    msg = refused(["the weights do not fit myproject:make_linear", "2 missing keys (weight, bias)",
                   "2 unexpected keys (backbone.weight, backbone.bias)",
                   "pass --prefix backbone."],
                  load_target, "vjepa2.pt", LoadOptions(arch="myproject:make_linear"))
    assert "module." not in msg  # the DDP wrapper is stripped before keys are compared
    loaded = load_target("vjepa2.pt", LoadOptions(arch="myproject:make_linear",
                                                  prefix="backbone"))
    assert_same_state(loaded.module, lin.state_dict())
    refused(["--prefix model.: no key of vjepa2.pt starts with 'model.'",
             "its keys start with backbone."],
            load_target, "vjepa2.pt", LoadOptions(arch="myproject:make_linear", prefix="model."))


# ---- Hugging Face model directories ----------------------------------------------------------


def tiny_vit(seed=0):
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(seed)
    config = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=64, image_size=32, patch_size=8)
    return ViTModel(config).eval()


def test_hf_vit_directory_with_pool_cls(tmp_path):
    model = tiny_vit()
    model.save_pretrained(str(tmp_path / "vit"))
    assert (tmp_path / "vit" / "model.safetensors").is_file()
    pixels = torch.from_numpy(np.random.default_rng(3).standard_normal((5, 3, 32, 32))).float()
    with torch.no_grad():
        out = model(pixel_values=pixels)
    loaded = load_target(tmp_path / "vit", LoadOptions(pool="cls"))
    np.testing.assert_allclose(embed(loaded.module, pixels).numpy(),
                               out.last_hidden_state[:, 0].numpy(), rtol=0, atol=1e-6)
    pooled = load_target(tmp_path / "vit", LoadOptions(output="pooler_output"))
    np.testing.assert_allclose(embed(pooled.module, pixels).numpy(), out.pooler_output.numpy(),
                               rtol=0, atol=1e-6)
    mean = load_target(tmp_path / "vit", LoadOptions(output="last_hidden_state", pool="mean"))
    np.testing.assert_allclose(embed(mean.module, pixels).numpy(),
                               out.last_hidden_state.mean(dim=1).numpy(), rtol=0, atol=1e-6)
    # a ModelOutput with no choice is refused, naming its fields
    bare = load_target(tmp_path / "vit")
    refused(["BaseModelOutputWithPooling with fields last_hidden_state, pooler_output",
             "--output FIELD"], embed, bare.module, pixels)
    refused("--key does not apply to a Hugging Face model directory",
            load_target, tmp_path / "vit", LoadOptions(key="state_dict"))


def test_hf_directory_with_pytorch_model_bin_and_bf16(tmp_path, in_cage):
    model = tiny_vit(seed=1)
    folder = tmp_path / "bin"
    model.config.save_pretrained(str(folder))
    state = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    torch.save(state, str(folder / "pytorch_model.bin"))  # read by transformers, weights_only
    loaded = load_target(folder, LoadOptions(pool="cls"))
    for k, v in loaded.module.module.state_dict().items():
        assert v.dtype == torch.float32, k
        if k in state:
            assert torch.equal(v, state[k].float()), k


# ---- Lightning (LeJEPA / stable-pretraining) -------------------------------------------------


def test_lightning_ckpt_with_key_and_prefix(project):
    user_module()
    torch.manual_seed(5)
    backbone, projector = torch.nn.Sequential(torch.nn.Linear(4, 4)), torch.nn.Linear(4, 16)
    ckpt = project / "last.ckpt"
    lit = save_lightning(ckpt, backbone, projector, torch.randn(16, 4), batch_size=8)
    loaded = load_target(ckpt, LoadOptions(arch="myproject:make_linear", key="state_dict",
                                           prefix="model.backbone.0."))
    assert_same_state(loaded.module, lit.model.backbone[0].state_dict())
    x = torch.randn(50, 4)
    with torch.no_grad():
        np.testing.assert_array_equal(embed(loaded.module, x).numpy(),
                                      lit.model.backbone(x).numpy())
    # the one state dict in the file is found without --key as well
    again = load_target(ckpt, LoadOptions(arch="myproject:make_linear",
                                          prefix="model.backbone.0"))
    assert_same_state(again.module, lit.model.backbone[0].state_dict())


# ---- torch.compile, tuples, --embed ----------------------------------------------------------


def test_orig_mod_state_dict(project):
    mp = user_module()
    torch.manual_seed(6)
    net = mp.TokenNet()
    compiled = torch.compile(net)  # state_dict() keys gain _orig_mod.; nothing is compiled here
    state = compiled.state_dict()
    assert all(k.startswith("_orig_mod.") for k in state)
    torch.save(state, str(project / "compiled.pt"))
    torch.save(ddp(state), str(project / "both.pt"))  # DDP of a compiled model
    for name in ("compiled.pt", "both.pt"):
        loaded = load_target(name, LoadOptions(arch="myproject:make_tokens", pool="mean"))
        assert_same_state(loaded.module.module, net.state_dict())


def test_tuple_outputs_and_output_index(project):
    mp = user_module()
    torch.manual_seed(7)
    pair = mp.Pair()
    save_file(pair.state_dict(), str(project / "pair.safetensors"))
    x = torch.randn(20, 4)
    with torch.no_grad():
        tokens, pooled = pair(x)
    second = load_target("pair.safetensors", LoadOptions(arch="myproject:Pair", output="1"))
    assert second.module.choice.output == 1  # "1" from the command line is an index
    np.testing.assert_array_equal(embed(second.module, x).numpy(), pooled.numpy())
    # without --output a tuple gives its element 0: here tokens, which need a pool
    first = load_target("pair.safetensors", LoadOptions(arch="myproject:Pair"))
    refused(["tokens of shape (20, 3, 4)", "--pool cls|mean|none", "--embed"],
            embed, first.module, x)
    cls = load_target("pair.safetensors", LoadOptions(arch="myproject:Pair", pool="cls"))
    np.testing.assert_array_equal(embed(cls.module, x).numpy(), tokens[:, 0].numpy())
    refused("--output 2 is out of range: the encoder returned 2 outputs", embed,
            load_target("pair.safetensors", LoadOptions(arch="myproject:Pair",
                                                        output=2)).module, x)


# ---- LeWM / stable-worldmodel -----------------------------------------------------------------


def lewm_config():
    return {"_target_": "myproject.JEPA",
            "encoder": {"_target_": "torch.nn.Linear", "in_features": 4, "out_features": 6},
            "projector": {"_target_": "torch.nn.Linear", "in_features": 6, "out_features": 3},
            "predictor": {"_target_": "torch.nn.Linear", "in_features": 3, "out_features": 3}}


def test_lewm_shaped_model_through_embed(project, in_cage):
    mp = user_module()
    torch.manual_seed(8)
    model = mp.JEPA(torch.nn.Linear(4, 6), torch.nn.Linear(6, 3), torch.nn.Linear(3, 3))
    x = torch.randn(40, 4)
    with torch.no_grad():
        want = model.projector(model.encoder(x))
    np.testing.assert_array_equal(embed(model, x).numpy(), want.numpy())  # no forward: encode
    # a stable-worldmodel directory: weights.pt (a state dict) + config.json (Hydra _target_)
    folder = project / "lewm"
    folder.mkdir()
    torch.save(model.state_dict(), str(folder / "weights.pt"))
    (folder / "config.json").write_text(json.dumps(lewm_config()))
    loaded = load_target(folder)
    assert type(loaded.module).__name__ == "JEPA"
    assert_same_state(loaded.module, model.state_dict())
    np.testing.assert_array_equal(embed(loaded.module, x).numpy(), want.numpy())
    assert isinstance(load_embedding_target(folder), LoadedEncoder)


def test_lewm_directory_refusals(project, monkeypatch):
    user_module()
    folder = project / "lewm"
    folder.mkdir()
    torch.save({}, str(folder / "weights.pt"))
    marker = project / "ran"
    (folder / "config.json").write_text(json.dumps(
        {"_target_": "os.system", "_args_": [f"touch {marker}"]}))
    refused(["_target_ 'os.system' is not in torch", "--trust-code"],
            load_target, folder)
    assert not marker.exists()
    # a module outside the ML packages and the project is never imported (its import runs
    # whatever it does): a stand-in that would leave a marker if imported
    sitedir = project / "site"
    sitedir.mkdir()
    (sitedir / "sideeffect.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                           "import torch\nclass Net(torch.nn.Linear): pass\n")
    monkeypatch.syspath_prepend(str(sitedir))
    (folder / "config.json").write_text(json.dumps(
        {"_target_": "sideeffect.Net", "in_features": 2, "out_features": 2}))
    refused(["_target_ 'sideeffect.Net' is not in torch", "--trust-code"], load_target, folder)
    assert not marker.exists() and "sideeffect" not in sys.modules
    config = lewm_config()
    config["encoder"] = {"_target_": "myproject.make_mlp", "dim": 4}  # a function
    (folder / "config.json").write_text(json.dumps(config))
    refused("_target_ 'myproject.make_mlp' is a function", load_target, folder)
    monkeypatch.setitem(sys.modules, "hydra", None)  # hydra not installed
    monkeypatch.delitem(sys.modules, "hydra.utils", raising=False)
    refused(["needs hydra, which cannot be imported (it is not installed)",
             "pip install 'idaudit[hydra]'"], load_target, folder)


@pytest.mark.parametrize("where", ["value", "key", "nested list", "escaped"])
def test_lewm_config_interpolations_are_refused(project, where):
    """Hydra resolves ``${…}`` before it instantiates, so a resolver can build a node the
    literal-_target_ vetting never saw (``oc.create`` of a ``builtins.open``: a file truncated,
    issue 27 item 1): an untrusted config with any interpolation is refused, and nothing runs."""
    user_module()
    folder = project / "lewm"
    folder.mkdir()
    torch.save({}, str(folder / "weights.pt"))
    victim = project / "victim.txt"
    victim.write_text("precious\n")
    payload = "${oc.create:{_target_: builtins.open, file: " + str(victim) + ", mode: w}}"
    config = lewm_config()
    if where == "value":
        config["encoder"]["in_features"] = payload
    elif where == "key":
        config[payload] = 1
    elif where == "nested list":
        config["predictor"]["_args_"] = [[payload]]
    else:
        config["encoder"]["note"] = "\\" + payload  # an escaped one is refused too
    (folder / "config.json").write_text(json.dumps(config))
    refused(["interpolation", "--trust-code"], load_target, folder)
    assert victim.read_text() == "precious\n"


def test_lewm_config_may_call_only_listed_network_factories(project, monkeypatch, in_cage):
    """Untrusted, a ``_target_`` may name a function only where idaudit lists it as a network
    factory (stable-worldmodel's lewm.yaml builds its encoder with stable_pretraining's
    ``vit_hf``, a function): called with keywords only, never one that downloads, its result
    checked to be an nn.Module. Any other function of the trusted packages (``torch.save``
    writes files) stays refused. The listing is idaudit's own table, extended here with the
    project's factories to exercise it without stable_pretraining."""
    from idaudit.loading import trust

    mp = user_module()
    folder = project / "lewm"
    folder.mkdir()
    torch.manual_seed(21)
    model = mp.JEPA(mp.make_mlp(4), torch.nn.Linear(4, 3), torch.nn.Linear(3, 3))
    torch.save(model.state_dict(), str(folder / "weights.pt"))
    config = lewm_config()
    config["encoder"] = {"_target_": "myproject.make_mlp", "dim": 4}
    config["projector"]["in_features"] = 4
    (folder / "config.json").write_text(json.dumps(config))
    refused(["_target_ 'myproject.make_mlp' is a function; calling it runs code the file names",
             "network factories stable_pretraining.backbone.utils.vit_hf", "--trust-code"],
            load_target, folder)
    monkeypatch.setitem(trust.CONFIG_FACTORIES, "myproject.make_mlp", {"pretrained": False})
    monkeypatch.setitem(trust.CONFIG_FACTORIES, "myproject.make_state", {})
    mp.FACTORY_CALLS.clear()
    loaded = load_target(folder)
    # the config leaves pretrained out; the listed value is passed all the same, so a
    # factory whose default were pretrained=True would still not download
    assert mp.FACTORY_CALLS and all(c == {"pretrained": False} for c in mp.FACTORY_CALLS)
    assert_same_state(loaded.module, model.state_dict())
    x = torch.randn(16, 4)
    with torch.no_grad():
        want = model.projector(model.encoder(x))
    np.testing.assert_array_equal(embed(loaded.module, x).numpy(), want.numpy())
    for node, fragment in [
            ({"_target_": "myproject.make_mlp", "dim": 4, "pretrained": True},
             "is given pretrained: True; idaudit never downloads"),
            ({"_target_": "myproject.make_mlp", "_args_": [4]}, "is given positional _args_"),
            ({"_target_": "myproject.make_state"}, "_target_ 'myproject.make_state' returned "
             "dict, not a torch nn.Module"),
            ({"_target_": "torch.save", "obj": 1, "f": str(project / "written")},
             "_target_ 'torch.save' is a function; calling it runs code the file names")]:
        config["encoder"] = node
        (folder / "config.json").write_text(json.dumps(config))
        refused(fragment, load_target, folder)
    assert not (project / "written").exists()


def save_epochs(folder, mp, epochs):
    """A LeWM directory as stable-worldmodel's SaveCkptCallback leaves it after ``epochs``
    epochs: config.json and weights_epoch_N.pt, each epoch's weights different (seed N)."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(lewm_config()))
    states = {}
    for epoch in epochs:
        torch.manual_seed(epoch)
        model = mp.JEPA(torch.nn.Linear(4, 6), torch.nn.Linear(6, 3), torch.nn.Linear(3, 3))
        states[epoch] = model.state_dict()
        torch.save(states[epoch], str(folder / f"weights_epoch_{epoch}.pt"))
    return states


def test_lewm_directory_with_a_weights_file_per_epoch(project, in_cage):
    mp = user_module()
    states = save_epochs(project / "run", mp, (1, 2, 10))
    refused(["holds several weights files beside its config.json (weights_epoch_1.pt, "
             "weights_epoch_2.pt, weights_epoch_10.pt); choose one with --weights NAME (e.g. "
             "--weights weights_epoch_10.pt)"], load_target, project / "run")
    for epoch in (1, 2, 10):
        loaded = load_target(project / "run", LoadOptions(weights=f"weights_epoch_{epoch}.pt"))
        assert_same_state(loaded.module, states[epoch])
    refused("--weights weights_epoch_3.pt: no such file in run (its .pt files: "
            "weights_epoch_1.pt, weights_epoch_2.pt, weights_epoch_10.pt)", load_target, "run",
            LoadOptions(weights="weights_epoch_3.pt"))
    refused("--weights names a file of the LeWM directory (weights_epoch_2.pt), not a path",
            LoadOptions, weights="../weights.pt")
    save_file(torch.nn.Linear(4, 4).state_dict(), str(project / "w.safetensors"))
    refused("--weights does not apply to w.safetensors", load_target, "w.safetensors",
            LoadOptions(arch="myproject:make_linear", weights="weights_epoch_2.pt"))
    refused("--weights does not apply to an encoder given as a Python Linear",
            idaudit.audit, encoder=torch.nn.Linear(2, 2), world="spiral",
            weights="weights_epoch_2.pt")
    z = np.random.default_rng(20).standard_normal((200, 2))
    refused("--weights does not apply to arrays z, h (audited as they are)", idaudit.audit,
            z=z, h=z, weights="weights_epoch_2.pt")
    refused("--weights does not apply to a gallery of arrays z, h", idaudit.plan, z=z, h=z,
            weights="weights_epoch_2.pt")


def test_a_lewm_run_as_stable_worldmodel_saves_it(tmp_path, in_cage):
    """The real thing: a LeWM run built from lewm.yaml's model section (its encoder made by
    stable_pretraining's function vit_hf) and saved each epoch as stable-worldmodel's
    SaveCkptCallback saves it. idaudit opens it untrusted, each epoch by --weights, and embeds
    images exactly as the model stable-worldmodel's own load_pretrained returns encodes them."""
    pytest.importorskip("stable_pretraining", reason="stable-pretraining is not installed")
    pytest.importorskip("stable_worldmodel", reason="stable-worldmodel is not installed (it "
                        "also needs imageio, which its metadata does not name)")
    from stable_worldmodel.wm.utils import load_pretrained
    from standins import save_lewm_epochs

    run_dir, states = save_lewm_epochs(tmp_path / "home")
    assert sorted(p.name for p in run_dir.iterdir()) == \
        ["config.json", "weights_epoch_1.pt", "weights_epoch_2.pt"]
    config = json.loads((run_dir / "config.json").read_text())
    assert config["encoder"]["_target_"] == "stable_pretraining.backbone.utils.vit_hf"
    refused(["(weights_epoch_1.pt, weights_epoch_2.pt); choose one with --weights NAME"],
            load_target, run_dir)
    images = torch.rand(5, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    embeddings = []
    for epoch in (1, 2):
        loaded = load_target(run_dir, LoadOptions(weights=f"weights_epoch_{epoch}.pt"))
        assert type(loaded.module).__name__ == "LeWM"
        assert_same_state(loaded.module, states[epoch])
        theirs = load_pretrained(f"lewm/weights_epoch_{epoch}.pt",
                                 cache_dir=str(tmp_path / "home")).eval()
        with torch.no_grad():
            want = theirs.encode({"pixels": images[:, None]})["emb"][:, 0]
        embeddings.append(embed(loaded.module, images).numpy())
        assert embeddings[-1].shape == (5, 32)
        np.testing.assert_allclose(embeddings[-1], want.numpy(), rtol=1e-6, atol=1e-6)
    assert np.abs(embeddings[0] - embeddings[1]).max() > 1e-3  # two epochs, two encoders
    config["encoder"]["pretrained"] = True  # vit_hf would download google/vit-…
    (run_dir / "config.json").write_text(json.dumps(config))
    refused(["_target_ 'stable_pretraining.backbone.utils.vit_hf' is given pretrained: True; "
             "idaudit never downloads", "--trust-code"], load_target, run_dir,
            LoadOptions(weights="weights_epoch_2.pt"))


# ---- every refusal that depends on options or output shapes costs one input -------------------


@pytest.fixture
def no_render(project, monkeypatch):
    """Rendering Reacher's evaluation images fails the test; the cache starts empty."""
    from idaudit.worlds.reacher import eval_pairs

    def render(*args, **kwargs):
        raise AssertionError("the evaluation images were rendered")

    monkeypatch.setattr(eval_pairs, "_render", render)
    monkeypatch.setenv("IDAUDIT_CACHE", str(project / "cache"))


REACHER_32 = dict(world="reacher", image_size=32, n_eval=1000)


def test_a_pool_for_a_pooled_output_is_refused_after_two_inputs(project, no_render):
    """``--pool mean`` on an encoder whose output is (batch, dim) already: refused after one
    forward pass of two images, before any image is rendered (it came after rendering the
    1000 pairs and a forward pass of them all); so is an ``--output`` the output lacks."""
    mp = user_module()
    torch.manual_seed(22)
    save_file(mp.PooledViT().state_dict(), str(project / "pooled.safetensors"))
    refused("--pool mean applies to tokens (batch, tokens, dim), but the encoder returned "
            "shape (2, 32)", idaudit.audit, "pooled.safetensors", arch="myproject:make_pooled_counted",
            pool="mean", **REACHER_32)
    assert mp.CALLS == [2]
    mp.CALLS.clear()
    refused("--output 1 picks an element of a tuple, but the encoder returned a tensor of "
            "shape (2, 32)", idaudit.audit, "pooled.safetensors",
            arch="myproject:make_pooled_counted", output=1, **REACHER_32)
    assert mp.CALLS == [2]


def test_several_targets_are_opened_and_tried_before_any_is_embedded(project, no_render):
    """With several targets, a refusal for the last (an ambiguous LeWM directory; a --pool
    its output does not take) comes before the first is embedded."""
    mp = user_module()
    save_epochs(project / "one", mp, (3,))
    save_epochs(project / "two", mp, (1, 2))
    config = lewm_config()
    config["encoder"] = {"_target_": "myproject.CountedLinear", "in_features": 4,
                         "out_features": 6}
    for name in ("one", "two"):
        (project / name / "config.json").write_text(json.dumps(config))
    refused("choose one with --weights NAME", idaudit.audit, targets=["one", "two"],
            world="coupling", dim=4)
    assert mp.CALLS == []  # not one forward pass: "two" was refused as it was opened
    torch.manual_seed(25)  # TorchScript image encoders: patch tokens (B, 4, 16), and pooled
    patches = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 8, stride=8), torch.nn.Flatten(2))
    image = torch.rand(1, 3, 32, 32)
    torch.jit.trace(patches, image).save(str(project / "tokens.ts"))
    torch.jit.trace(torch.nn.Sequential(patches, torch.nn.Flatten(1)), image).save(
        str(project / "pooled.ts"))
    refused("--pool cls applies to tokens (batch, tokens, dim), but the encoder returned "
            "shape (2, 64)", idaudit.audit, targets=["tokens.ts", "pooled.ts"], pool="cls",
            **REACHER_32)


def test_hf_directory_normalises_as_its_preprocessor_config_says(tmp_path, capsys):
    """A Hugging Face directory saved with its image processor (mean = std = 0.5): without
    --normalize, images reach it as (x/255 − 0.5)/0.5, as its processor would give them, with
    a note; --normalize overrides it, with a note saying so where they differ."""
    from transformers import ViTConfig, ViTImageProcessor, ViTModel

    from idaudit.evaluations.pipeline import input_adapter

    torch.manual_seed(23)
    model = ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=64, image_size=32, patch_size=8),
                     add_pooling_layer=False).eval()
    model.save_pretrained(str(tmp_path / "vit"))
    ViTImageProcessor(image_mean=0.5, image_std=0.5, size={"height": 32, "width": 32}) \
        .save_pretrained(str(tmp_path / "vit"))
    images = np.random.default_rng(23).integers(0, 256, (6, 32, 32, 3), dtype=np.uint8)
    pixels = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255

    def cls(x):
        with torch.no_grad():
            return model(pixel_values=x).last_hidden_state[:, 0].numpy()

    loaded = load_target(tmp_path / "vit", LoadOptions(pool="cls"))
    got = embed(input_adapter(loaded, images, None), images).numpy()
    np.testing.assert_allclose(got, cls((pixels - 0.5) / 0.5), rtol=1e-5, atol=1e-5)
    assert np.abs(got - cls(pixels)).max() > 1e-2  # x/255 alone would be another embedding
    err = capsys.readouterr().err
    assert "preprocessor_config.json says (mean 0.5, 0.5, 0.5; std 0.5, 0.5, 0.5); " \
           "--normalize overrides it" in err, err
    loaded = load_target(tmp_path / "vit", LoadOptions(pool="cls"))
    got = embed(input_adapter(loaded, images, "imagenet"), images).numpy()
    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in ((0.485, 0.456, 0.406),
                                                             (0.229, 0.224, 0.225)))
    np.testing.assert_allclose(got, cls((pixels - mean) / std), rtol=1e-5, atol=1e-5)
    assert "normalises images otherwise (mean 0.5, 0.5, 0.5; std 0.5, 0.5, 0.5); --normalize " \
           "imagenet is used as given" in capsys.readouterr().err
    loaded = load_target(tmp_path / "vit", LoadOptions(pool="cls"))
    capsys.readouterr()
    input_adapter(loaded, images, "inception")  # the same statistics: nothing to say
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("config,want", [
    ({"image_mean": [0.5, 0.4, 0.3], "image_std": 0.25}, "0.5:0.4:0.3,0.25:0.25:0.25"),
    ({"image_mean": 0.5, "image_std": 0.5, "rescale_factor": 1 / 127.5},
     "0.25:0.25:0.25,0.25:0.25:0.25"),      # x·(1/127.5) = (x/255)·2: μ/2, σ/2
    ({"image_mean": 127.5, "image_std": 127.5, "do_rescale": False},
     "0.5:0.5:0.5,0.5:0.5:0.5"),            # raw pixels: μ/255, σ/255
    ({"do_normalize": False, "rescale_factor": 1 / 255}, "none"),
    ({"do_normalize": False, "do_rescale": False}, "0.0:0.0:0.0,0.00392156862745098:"
     "0.00392156862745098:0.00392156862745098"),
    ({"size": {"height": 224}}, None),      # declares no statistics
])
def test_model_normalize_reads_a_processor_config_as_x_over_255(tmp_path, config, want):
    """x̂ = (x·r − μ)/σ on pixels x ∈ [0, 255] is (x/255 − μ/(255r))/(σ/(255r))."""
    from idaudit.loading.image_input import model_normalize, parse_normalize

    (tmp_path / "p.json").write_text(json.dumps(config))
    got = model_normalize(tmp_path / "p.json")
    if want is None or want == "none":
        assert (got if want is None else got.normalize) == want
        return
    np.testing.assert_allclose(parse_normalize(got.normalize), parse_normalize(want),
                               rtol=1e-12)


def test_a_broken_dependency_is_named_in_the_one_line_error(project, tmp_path):
    """An import that fails because of another (transformers wraps it in "Failed to import …
    (look up to see its traceback):") names the underlying cause in its one line."""
    from transformers import ViTConfig, ViTModel

    (project / "wrapping.py").write_text(textwrap.dedent('''
        try:
            import a_dependency_that_is_broken
        except ImportError as exc:
            raise RuntimeError("Failed to import wrapping.models because of the following "
                               "error (look up to see its traceback):") from exc
        def make():
            return None
    '''))
    refused(["--arch: cannot import 'wrapping' (RuntimeError: Failed to import wrapping.models",
             "caused by ModuleNotFoundError: No module named 'a_dependency_that_is_broken'"],
            load_target, _weights(project),
            LoadOptions(arch="wrapping:make"))
    torch.manual_seed(24)
    ViTModel(ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=32, image_size=16, patch_size=8)) \
        .save_pretrained(str(tmp_path / "vit"))
    # transformers' own lazy import of its ViT code, failing as a broken install makes it fail,
    # in a fresh process (this one may hold the ViT classes already)
    script = textwrap.dedent(f"""
        import sys
        sys.modules["transformers.models.vit.modeling_vit"] = None
        import idaudit.loading.programs
        idaudit.loading.programs.IN_CAGE = True  # the loader's own code, as its cage runs it
        from idaudit.core.errors import IdauditError
        from idaudit.core.request_parts import LoadOptions
        from idaudit.loading.loaders import load_target
        for trusted in (False, True):  # sized on the meta device first, or loaded at once
            try:
                load_target({str(tmp_path / "vit")!r}, LoadOptions(trust_pickle=trusted))
            except IdauditError as exc:
                print(exc)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                         timeout=600)
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out.stdout + out.stderr
    for line in lines:
        assert "caused by ModuleNotFoundError: import of transformers.models.vit.modeling_vit " \
               "halted" in line, line


def _weights(project):
    save_file(torch.nn.Linear(2, 2).state_dict(), str(project / "w.safetensors"))
    return "w.safetensors"


# ---- the paper's run.pt, half precision -------------------------------------------------------


def test_paper_run_pt_is_audited_as_arrays(tmp_path):
    rng = np.random.default_rng(9)
    z = rng.standard_normal((2000, 3))
    q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    run_pt = tmp_path / "run.pt"
    torch.manual_seed(9)
    state = torch.nn.Linear(3, 3).state_dict()
    torch.save({"z": z, "h": z @ q, "x": np.tanh(z) + z, "rho": np.float64(0.9),
                "model_state_dict": state,
                "config": {"world": "spiral", "steps": 100}}, str(run_pt))
    arrays = load_target(run_pt)
    assert isinstance(arrays, Arrays) and arrays.h_prime is None and arrays.rho == 0.9
    np.testing.assert_array_equal(arrays.z, z)
    report = idaudit.audit(encoder=str(run_pt), gauss_sims=0)
    assert report.metrics["r2_h_to_z"] == pytest.approx(1.0, abs=1e-6)
    assert report.metrics["r2_h_to_z_heldout"] == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_array_equal(load_embedding_target(run_pt), z @ q)
    refused("--pool does not apply to arrays", load_target, run_pt, LoadOptions(pool="mean"))
    # with --arch, the file's one state dict (model_state_dict) is the encoder
    model = load_target(run_pt, LoadOptions(arch="torch.nn:Linear",
                                            arch_kwargs={"in_features": 3, "out_features": 3}))
    assert_same_state(model.module, state)


def test_bf16_and_f16_arrays_and_weights(project):
    user_module()
    rng = np.random.default_rng(10)
    z = torch.from_numpy(rng.standard_normal((500, 2))).to(torch.bfloat16)
    h = torch.from_numpy(rng.standard_normal((500, 2))).to(torch.float16)
    save_file({"z": z, "h": h}, str(project / "half.safetensors"))
    torch.save({"z": z, "h": h}, str(project / "half.pt"))
    for name in ("half.safetensors", "half.pt"):
        arrays = load_target(name)
        assert arrays.z.dtype == np.float32 and arrays.h.dtype == np.float32
        np.testing.assert_array_equal(arrays.z, z.float().numpy())
        np.testing.assert_array_equal(arrays.h, h.float().numpy())
    torch.manual_seed(11)
    state = {k: v.to(torch.bfloat16) for k, v in torch.nn.Linear(4, 4).state_dict().items()}
    save_file(state, str(project / "w16.safetensors"))
    torch.save(state, str(project / "w16.pt"))
    for name in ("w16.safetensors", "w16.pt"):
        loaded = load_target(name, LoadOptions(arch="myproject:make_linear"))
        assert loaded.module.weight.dtype == torch.float32
        assert_same_state(loaded.module, state)


# ---- pickles: weights_only by default, the user's classes with --trust-code --------------


def test_user_class_pickle_needs_trust_and_is_found_in_the_working_directory(project, in_cage):
    mp = user_module()
    torch.manual_seed(12)
    net = mp.TokenNet()
    torch.save(net, str(project / "whole.pt"))
    sys.modules.pop("myproject")  # a fresh process: the class is not imported yet
    before = list(sys.path)
    refused(["holds an object of class myproject.TokenNet", "unpickling it runs code", "--trust-code"],
            load_target, "whole.pt")
    assert "myproject" not in sys.modules  # nothing ran
    loaded = load_target("whole.pt", LoadOptions(trust_pickle=True, pool="mean"))
    assert sys.path == before  # the working directory was importable only while unpickling
    assert type(loaded.module.module).__module__ == "myproject"
    assert_same_state(loaded.module.module, net.state_dict())


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_only_numpy_arrays_of_numbers_are_let_through(tmp_path):
    marker = tmp_path / "ran"
    torch.save({"h": np.zeros((4, 2)), "hook": _RunsCode(marker)}, str(tmp_path / "evil.pt"))
    refused([f"holds an object of class {os.system.__module__}.system", "--trust-code"], load_target,
            tmp_path / "evil.pt")
    assert not marker.exists()
    torch.save({"z": np.zeros((4, 2)), "h": np.array([None] * 4, dtype=object)},
               str(tmp_path / "objects.pt"))
    refused("holds an object of class numpy.dtypes.ObjectDType", load_target,
            tmp_path / "objects.pt")


def test_dict_of_tensors_needs_no_trust_but_an_arch(project):
    torch.save(torch.nn.Linear(4, 4).state_dict(), str(project / "state.pt"))
    refused(["state.pt holds weights (a state dict)", "pass --arch module.path:factory"],
            load_target, "state.pt")


# ---- refusals ----------------------------------------------------------------------------


def test_several_state_dicts_are_listed(project):
    mp = user_module()
    save_ijepa(project / "jepa.pth.tar", mp.TokenNet(), mp.TokenNet(), torch.nn.Linear(8, 8))
    refused("jepa.pth.tar holds several state dicts: encoder, predictor, target_encoder; "
            "choose one with --key", load_target, "jepa.pth.tar",
            LoadOptions(arch="myproject:make_tokens"))
    refused(["--key nope: jepa.pth.tar has no entry 'nope'", "encoder, predictor"],
            load_target, "jepa.pth.tar", LoadOptions(arch="myproject:make_tokens", key="nope"))


def test_tokens_without_pool_are_refused(project):
    mp = user_module()
    refused(["the encoder returned tokens of shape (10, 4, 8)", "--pool cls|mean|none",
             "--embed module:function"], embed, mp.TokenNet(), torch.randn(10, 4))
    save_file(torch.nn.Linear(4, 4).state_dict(), str(project / "lin.safetensors"))
    pooled = load_target("lin.safetensors", LoadOptions(arch="myproject:make_linear", pool="cls"))
    refused("--pool cls applies to tokens (batch, tokens, dim), but the encoder returned shape "
            "(10, 4)", embed, pooled.module, torch.randn(10, 4))


def test_mismatched_keys_are_named_and_counted(project):
    user_module()
    state = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)).state_dict()
    save_file(state, str(project / "seq.safetensors"))
    refused(["seq.safetensors: the weights do not fit myproject:make_linear",
             "2 missing keys (weight, bias)", "4 unexpected keys (0.bias, 0.weight, 1.bias, "
             "1.weight)", "the keys under '0.' fit: pass --prefix 0."],
            load_target, "seq.safetensors", LoadOptions(arch="myproject:make_linear"))
    save_file(torch.nn.Linear(3, 3).state_dict(), str(project / "small.safetensors"))
    refused("2 keys of other shapes (weight: (3, 3) in the file, (4, 4) in the model",
            load_target, "small.safetensors", LoadOptions(arch="myproject:make_linear"))


def test_timm_that_cannot_be_imported_is_one_line(monkeypatch):
    from idaudit.loading.architectures import build_arch

    why = why_not_importable("timm")  # not installed, or (here) without its torchvision
    if why is None:
        monkeypatch.setitem(sys.modules, "timm", None)
        why = "it is not installed"
    refused([f"--arch timm:vit_tiny_patch16_224 needs timm, which cannot be imported ({why})",
             "pip install 'idaudit[vision]'"], build_arch, "timm:vit_tiny_patch16_224",
            {"img_size": 32})
    refused("--arch-kwargs pretrained not taken for timm:vit_tiny_patch16_224", build_arch,
            "timm:vit_tiny_patch16_224", {"pretrained": True})


@pytest.mark.parametrize("options,fragment", [
    (dict(pool="max"), "--pool must be one of cls, mean, none, got 'max'"),
    (dict(output="last hidden"), "--output must be a field name"),
    (dict(key="a..b"), "--key must be names joined by dots"),
    (dict(embed="nocolon"), "embed must be a function (model, x) → (batch, m) or its name "
                            "module.path:function, got 'nocolon'"),  # the library's wording
    (dict(arch="nocolon"), "--arch must look like module.path:factory or timm:NAME"),
    (dict(arch_kwargs=[1]), "--arch-kwargs must be an object"),
    (dict(arch_kwargs={"dim": 4}), "--arch-kwargs goes with --arch"),
])
def test_load_options_are_checked(options, fragment):
    refused(fragment, LoadOptions, **options)


# ---- timm (runs where timm imports; skipped, with the reason, where it does not) -------------


def test_timm_vit_saved_as_ijepa(project, in_cage):
    why = why_not_importable("timm")
    if why is not None:
        pytest.skip(f"timm cannot be imported: {why}")
    import timm
    kwargs = dict(num_classes=0, img_size=32, patch_size=8, depth=2, embed_dim=32, num_heads=2)
    torch.manual_seed(13)
    encoder = timm.create_model("vit_tiny_patch16_224", pretrained=False, **kwargs)
    target = timm.create_model("vit_tiny_patch16_224", pretrained=False, **kwargs).eval()
    save_ijepa(project / "timm.pth.tar", encoder, target, torch.nn.Linear(32, 32))
    loaded = load_target("timm.pth.tar", LoadOptions(arch="timm:vit_tiny_patch16_224",
                                                     arch_kwargs=kwargs, key="target_encoder"))
    assert_same_state(loaded.module, target.state_dict())
    images = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        want = target(images)
    np.testing.assert_array_equal(embed(loaded.module, images).numpy(), want.numpy())


def test_timm_vit_mean_over_patch_tokens(project, in_cage):
    """A timm ViT saved with its default head: ``num_classes: 0`` pools already (the class
    token), so ``--pool mean`` is refused, pointing at what works; ``global_pool: "avg"``
    alone moves the final norm after the pooling (fc_norm.* against the file's norm.*), also
    pointing at it; ``{"num_classes": 0, "global_pool": "avg", "fc_norm": false}`` loads and
    gives the mean of the normed patch tokens, the class token left out."""
    why = why_not_importable("timm")
    if why is not None:
        pytest.skip(f"timm cannot be imported: {why}")
    import timm

    from idaudit.loading.architectures import TIMM_MEAN_POOL

    kwargs = dict(num_classes=0, img_size=32, patch_size=8, depth=2, embed_dim=32, num_heads=2)
    torch.manual_seed(26)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, **kwargs).eval()
    save_file(model.state_dict(), str(project / "timm.safetensors"))
    arch = "timm:vit_tiny_patch16_224"
    images = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(26))
    loaded = load_target("timm.safetensors", LoadOptions(arch=arch, arch_kwargs=kwargs,
                                                         pool="mean"))
    refused(["--pool mean applies to tokens (batch, tokens, dim), but the encoder returned "
             "shape (4, 32); a timm model pools its tokens itself",
             f"--arch-kwargs '{TIMM_MEAN_POOL}' (docs/integrations.md, I-JEPA)"],
            embed, loaded.module, images)
    refused(["2 missing keys (fc_norm.weight, fc_norm.bias)", "2 unexpected keys (norm.bias, "
             "norm.weight)", f"pass --arch-kwargs '{TIMM_MEAN_POOL}' for weights saved with "
             "norm.*"], load_target, "timm.safetensors",
            LoadOptions(arch=arch, arch_kwargs={**kwargs, "global_pool": "avg"}))
    loaded = load_target("timm.safetensors", LoadOptions(
        arch=arch, arch_kwargs={**kwargs, **json.loads(TIMM_MEAN_POOL)}))
    with torch.no_grad():
        tokens = model.forward_features(images)  # (4, 1 + 16, 32), normed
    assert tokens.shape == (4, 17, 32) and model.num_prefix_tokens == 1
    np.testing.assert_allclose(embed(loaded.module, images).numpy(),
                               tokens[:, 1:].mean(1).numpy(), rtol=1e-5, atol=1e-6)
    loaded = load_target("timm.safetensors", LoadOptions(   # every token, then --pool mean
        arch=arch, arch_kwargs={**kwargs, "global_pool": ""}, pool="mean"))
    np.testing.assert_allclose(embed(loaded.module, images).numpy(),
                               tokens.mean(1).numpy(), rtol=1e-5, atol=1e-6)
