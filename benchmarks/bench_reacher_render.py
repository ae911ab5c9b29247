"""Frames per second rendering the Reacher: the straightforward loop vs ``RenderPool``.

The straightforward loop is ``naive_render`` in benchmarks/naive_reacher.py: ``physics.render``
per frame at dm_control's default settings (a new ``Camera`` per call, the default offscreen
buffer, multisampling and shadow map); its timed call includes its own ``suite.load`` (a
warm-up call first pays the imports and the GL start). ``RenderPool`` renders in ``workers``
spawned processes; its start-up (spawning, importing, loading the physics, the GL context in
each worker) is timed apart from the rendering. For reference, one in-process
``ReacherRenderer`` (the pool's settings, no parallelism) is timed too. Angles are N(0, I₂).

    python benchmarks/bench_reacher_render.py [--naive-frames 150] [--frames 3000] [--workers 2]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from naive_reacher import naive_render

from idaudit.worlds.reacher import ReacherRenderer, RenderPool


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--naive-frames", type=int, default=150)
    parser.add_argument("--frames", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    angles = rng.standard_normal((args.frames, 2))
    naive_angles = rng.standard_normal((args.naive_frames, 2))

    naive_render(naive_angles[:2])  # imports, GL start
    t0 = time.perf_counter()
    naive = naive_render(naive_angles)
    naive_s = time.perf_counter() - t0
    naive_fps = len(naive) / naive_s
    print(f"naive_render:           {len(naive):5d} frames in {naive_s:6.2f} s  "
          f"{naive_fps:8.1f} frames/s")

    t0 = time.perf_counter()
    with RenderPool(workers=args.workers, chunk=args.chunk) as pool:
        # warm-up: one-frame chunks so that every worker gets work and finishes its start-up
        pool.chunk = 1
        pool.render(np.zeros((4 * pool.workers, 2)))
        pool.chunk = args.chunk
        startup_s = time.perf_counter() - t0
        runs, times = [], []
        for _ in range(2):
            t0 = time.perf_counter()
            runs.append(pool.render(angles))
            times.append(time.perf_counter() - t0)
    best = min(times)
    pool_fps = args.frames / best
    print(f"RenderPool(workers={pool.workers}): start-up {startup_s:.2f} s (not in the timings)")
    print(f"RenderPool(workers={pool.workers}): {args.frames:5d} frames in "
          f"{' / '.join(f'{t:.2f}' for t in times)} s (best {best:.2f} s)  {pool_fps:8.1f} frames/s")
    print(f"speed-up over naive_render: {pool_fps / naive_fps:.1f}x")
    identical = runs[0].shape == runs[1].shape and np.array_equal(runs[0], runs[1])
    print(f"pool images byte-identical across two runs: {identical}")
    k = min(500, args.frames)
    renderer = ReacherRenderer()
    renderer.render(angles[:2])
    t0 = time.perf_counter()
    local = renderer.render(angles[:k])
    local_s = time.perf_counter() - t0
    print(f"ReacherRenderer in-process (one worker's settings, for reference): {k} frames in "
          f"{local_s:.2f} s  {k / local_s:8.1f} frames/s")
    print(f"pool images byte-identical to the in-process ReacherRenderer (first {k}): "
          f"{bool(np.array_equal(runs[0][:k], local))}")

    # the `idaudit world reacher` code path end to end: angles, pool start-up, rendering,
    # compressing and writing the chunks, normalisation statistics
    import tempfile

    from idaudit.worlds.reacher_data import ReacherSpec, build_dataset

    pairs = max(1, (args.frames - 500) // 2)
    spec = ReacherSpec(mode="ou", rho=0.95, pairs=pairs, n_eval=500, seed=args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        build_dataset(f"{tmp}/ds", spec, workers=args.workers)
        world_s = time.perf_counter() - t0
    frames = 2 * pairs + 500
    print(f"idaudit world reacher (build_dataset, {args.workers} workers, start-up and writing "
          f"included): {frames} frames in {world_s:.2f} s  {frames / world_s:8.1f} frames/s  "
          f"→ {frames / world_s / naive_fps:.1f}x the naive loop")


if __name__ == "__main__":
    main()
