"""Speed of a LeJEPA step on the coupling world at large N: the coupling chain idaudit runs
(halves carried apart, joined once) against the same step with each layer slicing and
concatenating the full vector, as a layer-by-layer RealNVP is usually written.

Both sides use the same world, weights, batches and SIGReg directions in the same process and
differ only in the encoder's and the mixing's forward; they run in alternating blocks (the first
steps of each block not timed) and the medians of the per-step times are compared. One thread,
as a sweep's runs train.

    python benchmarks/bench_coupling_step.py [--dims 256,512,1024] [--rounds 5] [--steps 15]
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import contextmanager

import torch

import idaudit.models.encoders as encoders
import idaudit.worlds.mixings as mixings
from idaudit.training.loop import Stepper, _encoder_for, _sigma
from idaudit.training.runs import resolve
from idaudit.worlds import build_world


def chain_by_layer(x, weights, biases, parities):
    """The per-layer form: slice both halves, update one, concatenate, every layer."""
    for weight, bias, parity in zip(weights, biases, parities):
        half = x.shape[-1] // 2
        first, second = x[..., :half], x[..., half:]
        u, v = (first, second) if parity == 0 else (second, first)
        pre = u @ weight.T
        if bias is not None:
            pre = pre + bias
        v = v + torch.tanh(pre)
        x = torch.cat([u, v], -1) if parity == 0 else torch.cat([v, u], -1)
    return x


@contextmanager
def by_layer(on: bool):
    saved = mixings.coupling_chain
    if on:
        mixings.coupling_chain = encoders.coupling_chain = chain_by_layer
    try:
        yield
    finally:
        mixings.coupling_chain = encoders.coupling_chain = saved


def stepper(dim: int) -> Stepper:
    run = resolve({"world": "coupling", "dim": dim, "objective": "lejepa", "lamb": 1e-6})
    world, cfg = build_world(run.world), run.train
    gen = torch.Generator().manual_seed(0)
    device = torch.device("cpu")
    source = world.pair_source(cfg.views, cfg.batch, gen, device, cfg.n_views)
    name, kwargs = _encoder_for(world, cfg)
    torch.manual_seed(0)
    encoder = encoders.build_encoder(name, kwargs).train()
    return Stepper(source, encoder, cfg, 20_000, _sigma(world, cfg), gen, device)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dims", default="256,512,1024")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread; median ms per step")
    print(f"{'N':>6} {'by layer':>10} {'chain':>10} {'ratio':>7}")
    for dim in (int(d) for d in args.dims.split(",")):
        st = stepper(dim)
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.rounds):
            for on in (True, False):
                with by_layer(on):
                    for it in range(2 + args.steps):
                        t0 = time.perf_counter()
                        float(st.step(it))
                        if it >= 2:
                            times[on].append(time.perf_counter() - t0)
        old, new = (statistics.median(times[k]) * 1e3 for k in (True, False))
        print(f"{dim:>6} {old:>10.2f} {new:>10.2f} {old / new:>6.2f}×")


if __name__ == "__main__":
    main()
