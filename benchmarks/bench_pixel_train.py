"""Images/s of a pixel training step: idaudit's loop against a straightforward one.

For the paper's configuration (64 × 64 images, the CNN at width 32) and the CPU recipe
(its image size and width), both loops train the same model with the same LeJEPA loss on
the same uint8 pairs in this process:

* straightforward: the batch is gathered from the uint8 arrays, converted to float NCHW
  (``permute(0, 3, 1, 2).contiguous()``), normalised, and a plain AdamW step is taken;
* idaudit: :class:`idaudit.training.loop.Stepper` over an :class:`EpochPairs` source — the
  model reads the NHWC uint8 batch directly (channels-last activations), fused AdamW.

Synthetic images (random angles are not needed to time a step); medians over steps after a
warm-up, alternating the two loops so that machine noise falls on both.

    python benchmarks/bench_pixel_train.py [--steps 12] [--batch 256]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from idaudit.maths.losses import OBJECTIVES, random_directions
from idaudit.models.encoders import PixelEncoder
from idaudit.training.config import TrainConfig
from idaudit.training.loop import Stepper
from idaudit.worlds import KINDS
from idaudit.worlds.base import EpochPairs


def straightforward_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: np.ndarray,
                         xp: np.ndarray, idx: np.ndarray, mean: torch.Tensor,
                         std: torch.Tensor, gen: torch.Generator) -> float:
    views = np.concatenate([x[idx], xp[idx]])
    t = torch.from_numpy(views).permute(0, 3, 1, 2).contiguous().float() / 255.0
    t = (t - mean) / std
    h = model(t).reshape(2, len(idx), -1)
    loss, _ = OBJECTIVES.get("lejepa")(h, 5e-3, 1.0, random_directions(2, 256, gen,
                                                                        torch.device("cpu")))
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.detach())


def bench(name: str, size: int, width: int, steps: int, batch: int) -> None:
    rng = np.random.default_rng(0)
    n = max(4 * batch, 2048)
    x = rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8)
    xp = rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8)
    mean, std = [0.3, 0.35, 0.45], [0.1, 0.1, 0.12]

    torch.manual_seed(0)
    ours = PixelEncoder(mean, std, width=width, image_size=size).train()
    cfg = TrainConfig(objective="lejepa", epochs=1, batch=batch).resolved(
        frozenset(), KINDS.get("reacher").train_defaults(), "reacher")
    gen = torch.Generator().manual_seed(0)
    stepper = Stepper(EpochPairs(x, xp, batch, gen, torch.device("cpu")), ours, cfg, 10**6,
                      1.0, gen, torch.device("cpu"))

    torch.manual_seed(0)
    plain = PixelEncoder(mean, std, width=width, image_size=size).cnn.train()
    opt = torch.optim.AdamW(plain.parameters(), lr=3e-3, weight_decay=1e-4)
    m_t = torch.tensor(mean).view(1, 3, 1, 1)
    s_t = torch.tensor(std).view(1, 3, 1, 1)
    g2 = torch.Generator().manual_seed(1)

    t_ours, t_plain = [], []
    for it in range(steps + 2):
        idx = np.sort(rng.choice(n, batch, replace=False))
        t0 = time.perf_counter()
        float(stepper.step(it))
        a = time.perf_counter() - t0
        t0 = time.perf_counter()
        straightforward_step(plain, opt, x, xp, idx, m_t, s_t, g2)
        b = time.perf_counter() - t0
        if it >= 2:  # warm-up steps are not counted
            t_ours.append(a)
            t_plain.append(b)
    imgs = 2 * batch
    fast, slow = imgs / statistics.median(t_ours), imgs / statistics.median(t_plain)
    params = sum(p.numel() for p in ours.parameters())
    print(f"{name:28s} {size:3d} px  width {width:2d}  {params / 1e6:5.2f} M params   "
          f"straightforward {slow:7.0f} img/s   idaudit {fast:7.0f} img/s   ({fast / slow:.2f}x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    cpu = KINDS.get("reacher").recipes()["cpu"].options
    print(f"training step, batch {args.batch} pairs ({2 * args.batch} images), "
          f"{torch.get_num_threads()} threads, median of {args.steps} steps:")
    bench("paper (64 px, width 32)", 64, 32, args.steps, args.batch)
    bench("cpu recipe", int(cpu["image_size"]), int(cpu["encoder_kwargs"]["width"]),
          args.steps, args.batch)


if __name__ == "__main__":
    main()
