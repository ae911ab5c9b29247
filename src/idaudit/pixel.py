"""The Reacher pixel world end to end: dataset → CNN training → checkpoint, audit, plan."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .audit import arrays_from_reacher
from .checkpoint import Checkpoint, save_checkpoint
from .io import write_json
from .train.pixels import PixelConfig, embed_images, train_pixels
from .worlds.reacher_data import ReacherSpec, build_dataset, load_dataset
from .worlds.spec import WorldSpec

PAPER_SCALE = {"pairs": 100_000, "epochs": 100, "lamb": 5e-3}


def reacher_world_spec(root: Path, meta: dict[str, Any]) -> WorldSpec:
    """The checkpoint's world: the dataset it was trained on (path, mode, ρ or stride)."""
    spec = meta["spec"]
    rho = spec["rho"] if spec["mode"] == "ou" else float(np.mean([meta["rho_0"], meta["rho_1"]]))
    return WorldSpec(name="reacher", dim=2,
                     source="gaussian" if spec["mode"] == "ou" else "trajectory", rho=rho,
                     extra={"dataset": str(Path(root).resolve()), "mode": spec["mode"],
                            "stride": spec["stride"], "pairs": spec["pairs"],
                            "circular": [0, 1]})


def estimate_seconds(cfg: PixelConfig, pairs: int, epochs: int, probe_steps: int = 2) -> float:
    """Seconds ``pairs`` × ``epochs`` of training would take here, from timed steps on noise."""
    from types import SimpleNamespace

    rng = np.random.default_rng(0)
    n = cfg.batch * probe_steps
    imgs = rng.integers(0, 256, (n, 64, 64, 3), dtype=np.uint8)
    fake = SimpleNamespace(meta={"channel_mean": [0.5] * 3, "channel_std": [0.25] * 3},
                           z=np.zeros((n, 2)), z_prime=np.zeros((n, 2)), x=imgs, x_prime=imgs)
    probe = PixelConfig(**{**cfg.to_dict(), "epochs": 1})
    t0 = time.perf_counter()
    train_pixels(fake, probe)
    per_step = (time.perf_counter() - t0) / probe_steps
    return per_step * epochs * max(1, pairs // cfg.batch)


def train_reacher(spec: ReacherSpec, cfg: PixelConfig, out: Path, data_dir: Path | None = None,
                  workers: int | None = None, progress: bool = False, say=print
                  ) -> tuple[Path, dict[str, Any]]:
    """Render (or reuse) the dataset, train the CNN, write checkpoint + log; return metrics."""
    root = Path(data_dir) if data_dir is not None else spec.default_dir()
    if cfg.device in ("auto", "cpu") and not torch.cuda.is_available() and (
            spec.pairs > 20_000 or cfg.epochs > 30):
        est = estimate_seconds(cfg, PAPER_SCALE["pairs"], PAPER_SCALE["epochs"])
        mine = estimate_seconds(cfg, spec.pairs, cfg.epochs)
        say(f"no GPU: on this CPU the paper-scale run (100 000 pairs × 100 epochs) trains for "
            f"about {est / 3600:.1f} h and this one for about {mine / 3600:.1f} h (plus "
            f"rendering); for a quick look try --pairs 3000 --epochs 10")
    build_dataset(root, spec, workers=workers, progress=progress)
    data = load_dataset(root)
    result = train_pixels(data, cfg, progress=progress)
    world = reacher_world_spec(root, data.meta)
    inputs = arrays_from_reacher(result.encoder, root, source=str(out), data=data)
    from .audit import audit_inputs

    report = audit_inputs(inputs, gauss_sims=0)
    metrics = report.metrics
    save_checkpoint(out, result.encoder, "pixel_cnn",
                    {"mean": data.meta["channel_mean"], "std": data.meta["channel_std"]},
                    world, {**cfg.to_dict(), "pairs": spec.pairs, "mode": spec.mode}, metrics)
    log = out.with_name(out.name.removesuffix(".safetensors") + ".log.json")
    write_json(log, {"world": world.to_dict(), "train": cfg.to_dict(), "device": result.device,
                     "seconds": result.seconds, "history": result.history, "metrics": metrics,
                     "dataset": data.meta})
    return log, metrics


def plan_reacher(ck: Checkpoint, pairs: int = 100, waypoints: int = 20, seed: int = 0,
                 k: int = 5, inside: float = 2.5) -> dict[str, Any]:
    """Latent straight-line plans between eval-gallery images, decoded to joint angles."""
    from .metrics import fit_linear_map
    from .plan import lqr_value_equivalence, plan_from_embeddings

    root = ck.world.extra["dataset"]
    data = load_dataset(root)
    h = embed_images(ck.encoder, data.x_eval, torch.device("cpu")).numpy()
    z = data.z_eval
    ok = np.flatnonzero((np.abs(z) < inside).all(1))
    rng = np.random.default_rng(seed)
    idx = rng.choice(ok, size=(pairs, 2), replace=len(ok) < 2 * pairs)
    res = plan_from_embeddings(h, z, h[idx[:, 0]], h[idx[:, 1]], z[idx[:, 0]], z[idx[:, 1]],
                               waypoints, k)
    q_hat, _ = fit_linear_map(z, h)
    res.update(lqr_value_equivalence(q_hat.numpy(), seed=seed))
    res["world"] = ck.world.to_dict()
    res["checkpoint"] = str(ck.path)
    return res
