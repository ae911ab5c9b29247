"""Audit an encoder: reduce it to arrays (z, h, h′, ρ) and compute the shared metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .checkpoint import load_checkpoint
from .metrics import identifiability_metrics, linear_r2
from .train.loop import embed, make_eval_set
from .worlds import build_world


def audit_checkpoint(path: str | Path, n_eval: int | None = None,
                     seed: int | None = None) -> dict[str, Any]:
    """Metrics of an idaudit checkpoint on its own world's evaluation set.

    By default the evaluation set is the one ``train`` used (same size and seed), so the
    numbers equal those it logged.
    """
    ck = load_checkpoint(path)
    world = build_world(ck.world)
    n_eval = int(n_eval or ck.train.get("n_eval", 10_000))
    seed = int(ck.train.get("seed", 0) if seed is None else seed)
    ev = make_eval_set(world, n_eval, seed)
    import torch

    h = embed(ck.encoder, ev.x, torch.device("cpu"))
    hp = embed(ck.encoder, ev.x_prime, torch.device("cpu"))
    metrics = identifiability_metrics(ev.z, h, hp, world.rho)
    metrics["mixing_r2_x_to_z"] = linear_r2(ev.x, ev.z)
    return {
        "checkpoint": str(path),
        "world": ck.world.to_dict(),
        "encoder": {"name": ck.encoder_name, "kwargs": ck.encoder_kwargs},
        "eval": {"n": n_eval, "seed": seed},
        "metrics": metrics,
    }
