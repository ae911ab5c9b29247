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
