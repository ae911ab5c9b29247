"""Stand-ins of other projects' code, shared by the tests and scripts/integration_table.py.

:func:`vit_project` is the source of a user's ``myproject.py``: tiny Hugging Face ViTs with
random weights in the shapes the JEPA projects use (I-JEPA's patch tokens, LeWM's CLS-token
encoder and its ``encode(info)`` without a forward). :func:`project_dir` makes a directory
hold it and be the working directory, not on ``sys.path`` (as under the idaudit
executable); :func:`user_module` imports it the way the user's own script would.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

#: LeWM's model shape (stable-worldmodel's JEPA): no forward, an encode(info) whose "emb"
#: is the embedding of each time step; needs ``nn`` (torch.nn) where it is pasted
JEPA_SOURCE = textwrap.dedent('''
    class JEPA(nn.Module):
        """LeWM's shape: encoder, projector, predictor; no forward, an encode(info)."""

        def __init__(self, encoder, projector, predictor):
            super().__init__()
            self.encoder, self.projector, self.predictor = encoder, projector, predictor

        def encode(self, info):
            pixels = info["pixels"].float()
            b = pixels.size(0)
            emb = self.projector(self.encoder(pixels.flatten(0, 1)))
            info["emb"] = emb.reshape(b, -1, emb.shape[-1])
            return info
''')

_VIT_PROJECT = textwrap.dedent('''
    """A user's project: the networks its checkpoints hold (tiny, random weights)."""
    import torch
    from torch import nn
    from transformers import ViTConfig, ViTModel

    SIZE, HIDDEN, PATCH = {size}, {hidden}, {patch}


    def vit_model(pooling=False):
        """A 2-layer Hugging Face ViT, HIDDEN wide, at SIZE px in PATCH-px patches."""
        return ViTModel(ViTConfig(hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=2 * HIDDEN, image_size=SIZE,
                                  patch_size=PATCH), add_pooling_layer=pooling)


    class PatchViT(nn.Module):
        """I-JEPA's encoder: images (B, 3, S, S) → patch tokens (B, N, D), no CLS token."""

        def __init__(self):
            super().__init__()
            self.vit = vit_model()

        def forward(self, x):
            return self.vit(pixel_values=x).last_hidden_state[:, 1:]


    def make_vit():
        return PatchViT()


    class ClsViT(nn.Module):
        """A ViT returning its CLS token (B, D): LeWM's encoder."""

        def __init__(self):
            super().__init__()
            self.vit = vit_model()

        def forward(self, x):
            return self.vit(pixel_values=x).last_hidden_state[:, 0]


    {jepa}

    def make_projector():
        return nn.Linear(HIDDEN, 16)


    def make_lewm():
        return JEPA(ClsViT(), make_projector(), nn.Linear(16, 16))


    def encode_fn(model, x):
        """--embed: LeWM's embedding of images x (B, 3, S, S), as one time step."""
        return model.encode({{"pixels": x.unsqueeze(1)}})["emb"][:, 0]
''')


def vit_project(size: int = 32, hidden: int = 32, patch: int = 8) -> str:
    """The source of ``myproject.py`` with ViTs at ``size`` px, ``hidden`` wide, in ``patch``-px
    patches."""
    return _VIT_PROJECT.format(size=size, hidden=hidden, patch=patch,
                               jepa=JEPA_SOURCE.strip())


def project_dir(directory: Path, source: str, monkeypatch) -> Path:
    """``directory`` holding ``myproject.py`` (``source``) as the working directory, not on
    ``sys.path``; an earlier import of ``myproject`` forgotten (the caller forgets this one)."""
    (directory / "myproject.py").write_text(source)
    monkeypatch.chdir(directory)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(directory))])
    monkeypatch.delitem(sys.modules, "myproject", raising=False)
    importlib.invalidate_caches()
    return directory


def user_module():
    """myproject, imported the way a user's script would (the working directory on the path)."""
    sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module("myproject")
    finally:
        sys.path.remove(str(Path.cwd()))


def ddp(state: dict) -> dict:
    """A state dict as DistributedDataParallel saves it (I-JEPA, V-JEPA 2)."""
    return {f"module.{k}": v for k, v in state.items()}


def save_ijepa(path: Path, encoder, target, predictor) -> None:
    """torch.save as I-JEPA's train.py writes its checkpoint: DDP state dicts of the encoder,
    predictor and target encoder, the optimiser's and scaler's states, the epoch and more."""
    import torch

    opt = torch.optim.AdamW(list(encoder.parameters()) + list(predictor.parameters()), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    torch.save({"encoder": ddp(encoder.state_dict()), "predictor": ddp(predictor.state_dict()),
                "target_encoder": ddp(target.state_dict()), "opt": opt.state_dict(),
                "scaler": scaler.state_dict(), "epoch": 7, "loss": 0.25, "batch_size": 8,
                "world_size": 1, "lr": 1e-3}, str(path))


def save_ijepa_and_target(project: Path, make: str, width: int):
    """Under ``project``: ``jepa.pth.tar`` as I-JEPA writes it, of an encoder and a target
    made by the user module's ``make`` (seed 0) and a Linear(width, width) predictor, and the
    target alone as ``target.safetensors``; returns (encoder, target)."""
    import torch
    from safetensors.torch import save_file

    mp = user_module()
    torch.manual_seed(0)
    encoder, target = getattr(mp, make)(), getattr(mp, make)()
    save_ijepa(project / "jepa.pth.tar", encoder, target, torch.nn.Linear(width, width))
    save_file(target.state_dict(), str(project / "target.safetensors"))
    return encoder, target


def save_lightning(path: Path, backbone, projector, inputs, batch_size: int, lr: float = 0.1):
    """A LeJEPA-style LightningModule (``model.backbone``, ``model.projector``, as
    stable-pretraining names them) fitted one step on ``inputs`` by a real
    ``lightning.Trainer`` and written with ``trainer.save_checkpoint``; returns the module."""
    import lightning
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone, self.projector = backbone, projector

    class LeJEPA(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = Net()

        def training_step(self, batch, _):
            y = self.model.backbone(batch[0])
            return self.model.projector(y.mean(1) if y.ndim == 3 else y).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=lr)

    lit = LeJEPA()
    trainer = lightning.Trainer(max_steps=1, logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False,
                                accelerator="cpu", default_root_dir=str(Path(path).parent))
    data = torch.utils.data.TensorDataset(inputs)
    trainer.fit(lit, torch.utils.data.DataLoader(data, batch_size=batch_size))
    trainer.save_checkpoint(str(path))
    return lit


#: the ``model`` section of stable-worldmodel's scripts/train/config/lewm.yaml, shrunk (a
#: 2-layer ViT, 32 wide, at 32 px in 8-px patches; a 1-block predictor), its interpolations
#: kept: the encoder is built by stable_pretraining's *function* vit_hf
LEWM_YAML = textwrap.dedent("""
    embed_dim: 32
    img_size: 32
    patch_size: 8
    wm: {history_size: 3}
    model:
      _target_: stable_worldmodel.wm.lewm.LeWM
      encoder:
        _target_: stable_pretraining.backbone.utils.vit_hf
        size: tiny
        patch_size: ${patch_size}
        image_size: ${img_size}
        pretrained: false
        use_mask_token: false
        hidden_size: ${embed_dim}
        num_hidden_layers: 2
        num_attention_heads: 2
        intermediate_size: 64
      predictor:
        _target_: stable_worldmodel.wm.lewm.module.Predictor
        num_frames: ${wm.history_size}
        input_dim: ${embed_dim}
        hidden_dim: ${embed_dim}
        output_dim: ${embed_dim}
        depth: 1
        heads: 2
        mlp_dim: 64
        dim_head: 16
        dropout: 0.1
        emb_dropout: 0.0
      action_encoder:
        _target_: stable_worldmodel.wm.lewm.module.Embedder
        input_dim: ???
        emb_dim: ${embed_dim}
      projector:
        _target_: stable_worldmodel.wm.lewm.module.MLP
        input_dim: ${embed_dim}
        output_dim: ${embed_dim}
        hidden_dim: 64
        norm_fn:
          _target_: torch.nn.BatchNorm1d
          _partial_: true
""")


def save_lewm_epochs(home: Path, epochs: tuple[int, ...] = (1, 2)) -> tuple[Path, dict]:
    """A LeWM run as stable-worldmodel trains and saves it: ``hydra.utils.instantiate`` of
    the config's ``model`` (its action encoder's input_dim set as its train script sets it),
    then, at the end of each epoch, what its SaveCkptCallback does —
    ``save_pretrained(model, run_name, config=cfg.model, filename=f"weights_epoch_{epoch}.pt")``
    (the state dict; the config resolved into config.json) — under ``home`` (its cache
    directory); the weights move between epochs (seeded). Returns (the run's directory,
    {epoch: state dict})."""
    import hydra
    import torch
    from omegaconf import OmegaConf
    from stable_worldmodel.wm.utils import save_pretrained

    cfg = OmegaConf.create(LEWM_YAML)
    cfg.model.action_encoder.input_dim = 2
    torch.manual_seed(0)
    model = hydra.utils.instantiate(cfg.model)
    states = {}
    gen = torch.Generator().manual_seed(1)
    for epoch in epochs:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
        save_pretrained(model, run_name="lewm", config=cfg.model,
                        filename=f"weights_epoch_{epoch}.pt", cache_dir=str(home))
        states[epoch] = {k: v.clone() for k, v in model.state_dict().items()}
    return Path(home) / "checkpoints" / "lewm", states


# ---- render workers that fail (tests/test_gl_triton.py; importable by a spawned worker) ----

RENDER_INIT_ERROR = "cannot create a headless GL context with MUJOCO_GL=egl (stand-in)"


def segfault(*_args):
    """A render worker's task that dies as a native crash in MuJoCo or GL would."""
    import os
    import signal

    os.kill(os.getpid(), signal.SIGSEGV)


def failing_render_init(*_args) -> None:
    """A render worker's start that finds no working GL (as ReacherRenderer reports it)."""
    from idaudit.worlds.reacher import render as render_mujoco

    render_mujoco._WORKER_ERROR = RENDER_INIT_ERROR


# ---- hostile files shared by the security tests (issue 27) ----------------------------------


def from_file_module(victim: str):
    """A module whose forward maps ``victim`` shared and writes chosen bytes into it (what
    TorchScript vetting must refuse)."""
    import torch

    class FromFile(torch.nn.Module):
        def __init__(self, victim: str):
            super().__init__()
            self.victim = victim

        def forward(self, x):
            t = torch.from_file(self.victim, shared=True, size=4, dtype=torch.uint8)
            t.fill_(65)
            return x + t[:1].float() * 0

    return FromFile(victim)


def inflating_pickle(dst: Path, src: Path, nbytes: int) -> None:
    """``src`` (a torch.save zip) rewritten as ``dst`` whose data.pkl, deflated to a few MB,
    inflates to ``nbytes``: one BINBYTES object of zeros, streamed (never held in memory)."""
    import struct
    import zipfile

    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            if not info.filename.endswith("data.pkl"):
                zout.writestr(info.filename, zin.read(info.filename))
                continue
            zi = zipfile.ZipInfo(info.filename)
            zi.compress_type = zipfile.ZIP_DEFLATED
            with zout.open(zi, "w", force_zip64=True) as f:
                f.write(b"\x80\x04B" + struct.pack("<I", nbytes - 8))
                block, left = bytes(1 << 24), nbytes - 8
                while left > 0:
                    f.write(block[:min(left, len(block))])
                    left -= len(block)
                f.write(b"N.")
