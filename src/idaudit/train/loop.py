"""The online training loop: sample pairs, encode both views, step the objective."""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..encoders import build_encoder
from ..errors import IdauditError
from ..losses import OBJECTIVES, objective_needs_directions, random_directions, sigma_for
from ..metrics import identifiability_metrics, linear_r2
from ..progress import ProgressBar
from ..worlds import World
from .config import TrainConfig
from .schedule import constant_then_cosine


def pick_device(name: str = "auto") -> torch.device:
    """``auto`` → CUDA when present, else CPU; ``cuda`` without a GPU is an input error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise IdauditError("--device cuda was asked for but no CUDA device is available")
    try:
        return torch.device(name)
    except RuntimeError:
        raise IdauditError(f"unknown device {name!r}; use auto, cpu or cuda") from None


@dataclass
class EvalSet:
    """Fixed evaluation pairs: z, z′ = OU(z), and their observations."""

    z: torch.Tensor
    z_prime: torch.Tensor
    x: torch.Tensor
    x_prime: torch.Tensor


def make_eval_set(world: World, n: int, seed: int) -> EvalSet:
    gen = torch.Generator().manual_seed(10_007 * seed + 99_991)
    z, zp = world.sample_pairs(n, gen)
    return EvalSet(z, zp, world.observe(z), world.observe(zp))


@torch.no_grad()
def embed(encoder: nn.Module, x: torch.Tensor, device: torch.device,
          chunk: int = 8192) -> torch.Tensor:
    """h = encoder(x) in eval mode, in chunks, returned on the CPU."""
    was_training = encoder.training
    encoder.eval()
    out = [encoder(x[i:i + chunk].to(device)).float().cpu() for i in range(0, x.shape[0], chunk)]
    encoder.train(was_training)
    return torch.cat(out)


def evaluate(encoder: nn.Module, ev: EvalSet, rho: float, device: torch.device
             ) -> dict[str, Any]:
    h = embed(encoder, ev.x, device)
    hp = embed(encoder, ev.x_prime, device)
    return identifiability_metrics(ev.z, h, hp, rho)


def make_optimizer(params, lr: float, weight_decay: float, device: torch.device):
    try:
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    except (RuntimeError, TypeError):  # fused not available for this device/dtype
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


class Stepper:
    """One training step of an objective on a world (the fast path train uses).

    ``step(it)`` samples a batch of pairs, encodes both views, and takes one AdamW step;
    it returns the loss as a 0-d tensor (no host sync).
    """

    def __init__(self, world: World, encoder: nn.Module, cfg: TrainConfig,
                 device: torch.device, gen: torch.Generator) -> None:
        self.world, self.encoder, self.cfg, self.device, self.gen = world, encoder, cfg, device, gen
        self.objective = OBJECTIVES.get(cfg.objective)
        self.needs_dirs = objective_needs_directions(cfg.objective)
        self.sigma = sigma_for(cfg.sigma, world.latent_dim, world.view_correlation(cfg.views))
        self.opt = make_optimizer(encoder.parameters(), cfg.lr, cfg.weight_decay, device)

    def step(self, it: int) -> torch.Tensor:
        cfg, b = self.cfg, self.cfg.batch
        lr = constant_then_cosine(it, cfg.steps, cfg.lr)
        for group in self.opt.param_groups:
            group["lr"] = lr
        z, zp = self.world.sample_views(b, self.gen, cfg.views)
        x = self.world.observe(torch.cat([z, zp])).to(self.device, non_blocking=True)
        h = self.encoder(x).reshape(2, b, -1)
        dirs = (random_directions(h.shape[-1], cfg.n_slices, self.gen, self.device)
                if self.needs_dirs else None)
        loss, _ = self.objective(h, cfg.lamb, self.sigma, dirs)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.detach()


@dataclass
class TrainResult:
    encoder: nn.Module
    encoder_name: str
    encoder_kwargs: dict[str, Any]
    config: TrainConfig
    metrics: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)
    best_init: int = 0
    seconds: float = 0.0
    steps_per_second: float = 0.0
    device: str = "cpu"


def _init_seed(seed: int, init: int) -> int:
    return 1_000_003 * seed + 7919 * init + 17


def train(world: World, cfg: TrainConfig, progress: bool = False) -> TrainResult:
    """Train ``cfg.inits`` encoders on ``world``; keep the one with the lowest final loss."""
    cfg.validate()
    device = pick_device(cfg.device)
    enc_name, enc_kwargs = (cfg.encoder, dict(cfg.encoder_kwargs or {})) if cfg.encoder \
        else world.default_encoder()
    ev = make_eval_set(world, cfg.n_eval, cfg.seed)
    mixing_r2 = linear_r2(ev.x, ev.z)
    bar = ProgressBar(progress, cfg.steps * cfg.inits, "train")
    best: tuple[float, int, dict, list] | None = None
    history: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    with bar:
        for init in range(cfg.inits):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(_init_seed(cfg.seed, init))
                encoder = build_encoder(enc_name, enc_kwargs)
            encoder.to(device).train()
            gen = torch.Generator().manual_seed(_init_seed(cfg.seed, init) + 1)
            stepper = Stepper(world, encoder, cfg, device, gen)
            losses = torch.empty(cfg.steps, device=device)
            curve: list[dict[str, Any]] = []
            for it in range(cfg.steps):
                losses[it] = stepper.step(it)
                last = it + 1 == cfg.steps
                if (it + 1) % cfg.eval_every == 0 or last:
                    m = evaluate(encoder, ev, world.rho, device)
                    loss_now = float(losses[it])
                    if not math.isfinite(loss_now):
                        raise IdauditError(f"training diverged at step {it + 1} (loss {loss_now})",
                                           exit_code=3)
                    curve.append({"step": it + 1, "loss": loss_now,
                                  "r2_h_to_z": m["r2_h_to_z"],
                                  "orthogonality_error": m["orthogonality_error"]})
                    bar.show(f"init {init}  loss {loss_now:.4g}  R² {m['r2_h_to_z']:.4f}")
                if (it + 1) % 50 == 0 or last:
                    bar.advance(50 if not last else (it + 1) - 50 * (it // 50))
            tail = max(1, min(cfg.steps, max(50, cfg.steps // 20)))
            final = float(losses[-tail:].mean())
            history.append({"init": init, "final_loss": final, "curve": curve,
                            "loss_every_10": losses[::10].cpu().tolist()})
            if best is None or final < best[0] or not math.isfinite(best[0]):
                best = (final, init, copy.deepcopy(encoder.state_dict()), curve)
    seconds = time.perf_counter() - t0
    assert best is not None
    encoder = build_encoder(enc_name, enc_kwargs).to(device)
    encoder.load_state_dict(best[2])
    metrics = evaluate(encoder, ev, world.rho, device)
    metrics["mixing_r2_x_to_z"] = mixing_r2
    metrics["final_loss"] = best[0]
    return TrainResult(encoder=encoder.cpu(), encoder_name=enc_name, encoder_kwargs=enc_kwargs,
                       config=cfg, metrics=metrics, history=history, best_init=best[1],
                       seconds=seconds, steps_per_second=cfg.steps * cfg.inits / seconds,
                       device=str(device))
