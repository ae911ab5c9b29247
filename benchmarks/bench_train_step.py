"""Speed of one LeJEPA training step on the 2D spiral world: idaudit vs a straightforward step.

Both steps start from the same weights and see the same batches and SIGReg directions, in
the same process; they run in alternating blocks (the first steps of each block, while caches
and the allocator settle after the other implementation, are not timed) and the medians of the
per-step times are compared.

The straightforward step is how one writes it from the formulas: all three losses computed
every step (alignment, SIGReg, whitening), SIGReg through a (2B, 256, 17) tensor of cos/sin
and autograd, AdamW with default settings.

    python benchmarks/bench_train_step.py [--rounds 10] [--steps-per-round 40]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from idaudit.maths.losses import alignment, random_directions, sigreg_reference, whitening
from idaudit.models.encoders import MLP
from idaudit.training import TrainConfig
from idaudit.training.loop import Stepper, resolve_config
from idaudit.training.schedule import constant_then_cosine
from idaudit.worlds import build_world, make_spec


class StraightforwardStep:
    def __init__(self, world, encoder, cfg: TrainConfig, gen: torch.Generator) -> None:
        self.world, self.encoder, self.cfg, self.gen = world, encoder, cfg, gen
        self.opt = torch.optim.AdamW(encoder.parameters(), lr=cfg.lr,
                                     weight_decay=cfg.weight_decay)

    def step(self, it: int) -> torch.Tensor:
        cfg, b = self.cfg, self.cfg.batch
        for group in self.opt.param_groups:
            group["lr"] = constant_then_cosine(it, cfg.steps, cfg.lr)
        z, zp = self.world.sample_views(b, self.gen)
        h = self.encoder(self.world.observe(torch.cat([z, zp]))).reshape(2, b, -1)
        dirs = random_directions(h.shape[-1], cfg.n_slices, self.gen)
        align = alignment(h)
        sig = sigreg_reference(h, dirs)
        white = whitening(h)  # logged by straightforward loops, not optimised
        loss = cfg.lamb * sig + (1 - cfg.lamb) * align
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        _ = white.item()
        return loss.detach()


def make_steps() -> tuple[Stepper, StraightforwardStep]:
    """idaudit's step and the straightforward one on the spiral world (ρ = 0.95, λ = 1e-3),
    from the same weights, batches and SIGReg directions."""
    world = build_world(make_spec("spiral", rho=0.95))
    cfg = resolve_config(world, TrainConfig(steps=20_000, lamb=1e-3, seed=0))
    torch.manual_seed(0)
    enc = MLP()
    cpu = torch.device("cpu")
    source = world.pair_source(cfg.views, cfg.batch, torch.Generator().manual_seed(1), cpu)
    fast = Stepper(source, enc, cfg, cfg.steps, 1.0, source.gen, cpu)
    return fast, StraightforwardStep(world, copy.deepcopy(enc), cfg,
                                     torch.Generator().manual_seed(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--steps-per-round", type=int, default=25)
    ap.add_argument("--settle", type=int, default=5, help="untimed steps at each block start")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    fast, ref = make_steps()

    # same weights, same batches, same directions → same loss values
    n_check = 20
    l_fast = [float(fast.step(i)) for i in range(n_check)]
    l_ref = [float(ref.step(i)) for i in range(n_check)]
    diff = max(abs(a - b) for a, b in zip(l_fast, l_ref))
    print(f"loss values, first {n_check} steps (straightforward vs idaudit):")
    for i in (0, 1, 2, n_check - 1):
        print(f"  step {i:3d}: {l_ref[i]:.8f}  {l_fast[i]:.8f}")
    print(f"  max |difference| = {diff:.2e}  ({'OK' if diff <= 1e-5 else 'MISMATCH'} at 1e-5)")

    t_ref: list[float] = []
    t_fast: list[float] = []
    ratios: list[float] = []  # per round: paired, so a slow phase of the machine hits both
    it = n_check
    for _ in range(args.rounds):
        block: dict[str, list[float]] = {"ref": [], "fast": []}
        for name, stepper, times in (("ref", ref, t_ref), ("fast", fast, t_fast)):
            for j in range(args.settle + args.steps_per_round):
                t0 = time.perf_counter()
                stepper.step(it)
                if j >= args.settle:
                    dt = time.perf_counter() - t0
                    times.append(dt)
                    block[name].append(dt)
            it += 1
        ratios.append(statistics.median(block["ref"]) / statistics.median(block["fast"]))
    m_ref, m_fast = statistics.median(t_ref), statistics.median(t_fast)
    print(f"\nper-step time, median of {len(t_ref)} steps each in alternating blocks "
          f"({args.threads} threads):")
    print(f"  straightforward: {1e3 * m_ref:7.2f} ms  ({1 / m_ref:6.1f} steps/s)")
    print(f"  idaudit:         {1e3 * m_fast:7.2f} ms  ({1 / m_fast:6.1f} steps/s)")
    print(f"  speed-up: {m_ref / m_fast:.2f}x (ratio of medians); per-round ratios: median "
          f"{statistics.median(ratios):.2f}x, range {min(ratios):.2f}–{max(ratios):.2f}x")
    print(f"  20 000 steps: straightforward ≈ {20_000 * m_ref / 60:.1f} min, "
          f"idaudit ≈ {20_000 * m_fast / 60:.1f} min (plus evaluation every 500 steps)")


if __name__ == "__main__":
    main()
