"""Training a pixel encoder (the paper's CNN) on a pre-rendered Reacher dataset.

AdamW (weight decay 1e-4), cosine annealing over epochs, gradient clipping at 1.0,
loss λ·SIGReg + (1−λ)·alignment on the two views of each pair; images are normalised per
channel with the dataset's statistics.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from ..encoders import build_encoder
from ..errors import require
from ..losses import alignment, random_directions, sigreg
from ..progress import ProgressBar
from .loop import pick_device


@dataclass
class PixelConfig:
    lamb: float = 5e-3
    epochs: int = 100
    batch: int = 256
    lr: float = 3e-3
    weight_decay: float = 1e-4
    clip: float = 1.0
    n_slices: int = 256
    seed: int = 0
    device: str = "auto"

    def validate(self) -> PixelConfig:
        require(0.0 <= self.lamb <= 1.0, f"--lamb must lie in [0, 1], got {self.lamb}")
        require(self.epochs >= 1, f"--epochs must be ≥ 1, got {self.epochs}")
        require(self.batch >= 2, f"--batch must be ≥ 2, got {self.batch}")
        require(self.lr > 0, f"--lr must be > 0, got {self.lr}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def embed_images(encoder: torch.nn.Module, x: np.ndarray, device, chunk: int = 1024
                 ) -> torch.Tensor:
    encoder.eval()
    outs = []
    with torch.no_grad():
        for i in range(0, len(x), chunk):
            outs.append(encoder(torch.from_numpy(np.ascontiguousarray(x[i:i + chunk]))
                                .to(device)).float().cpu())
    return torch.cat(outs)


@dataclass
class PixelResult:
    encoder: torch.nn.Module
    config: PixelConfig
    history: list[dict[str, Any]]
    seconds: float
    device: str


def train_pixels(data, cfg: PixelConfig, progress: bool = False) -> PixelResult:
    """Train the CNN on ``data`` (a ReacherData); the final model is kept (no selection)."""
    cfg.validate()
    device = pick_device(cfg.device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        enc = build_encoder("pixel_cnn", {"mean": data.meta["channel_mean"],
                                          "std": data.meta["channel_std"]}).to(device)
    opt = torch.optim.AdamW(enc.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.epochs)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    n = len(data.z)
    b = min(cfg.batch, n)
    per_epoch = max(1, n // b)
    history: list[dict[str, Any]] = []
    bar = ProgressBar(progress, cfg.epochs * per_epoch, "train")
    t0 = time.perf_counter()
    with bar:
        for epoch in range(cfg.epochs):
            enc.train()
            perm = torch.randperm(n, generator=gen).numpy()
            total = 0.0
            for i in range(per_epoch):
                idx = np.sort(perm[i * b:(i + 1) * b])
                x = torch.from_numpy(np.concatenate([data.x[idx], data.x_prime[idx]])).to(device)
                h = enc(x).reshape(2, len(idx), -1)
                dirs = random_directions(h.shape[-1], cfg.n_slices, gen, device)
                loss = cfg.lamb * sigreg(h, dirs) + (1 - cfg.lamb) * alignment(h)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(enc.parameters(), cfg.clip)
                opt.step()
                total += float(loss.detach())
                bar.advance(1, f"epoch {epoch + 1}  loss {float(loss.detach()):.4g}")
            sched.step()
            mean_loss = total / per_epoch
            if not math.isfinite(mean_loss):
                from ..errors import IdauditError

                raise IdauditError(f"training diverged in epoch {epoch + 1}", exit_code=3)
            history.append({"epoch": epoch + 1, "loss": mean_loss})
    return PixelResult(enc.cpu().eval(), cfg, history, time.perf_counter() - t0, str(device))
