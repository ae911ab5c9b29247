"""Frames per second rendering the Reacher: the straightforward loop vs ``RenderPool``.

The straightforward loop is ``naive_render`` in benchmarks/naive_reacher.py: ``physics.render``
per frame at dm_control's default settings (a new ``Camera`` per call, the default offscreen
buffer, multisampling and shadow map); its timed call includes its own ``suite.load`` (a
warm-up call first pays the imports and the GL start). ``RenderPool`` renders in ``workers``
spawned processes; its start-up (spawning, importing, loading the physics, the GL context in
each worker) is timed apart from the rendering. For reference, one in-process
``ReacherRenderer`` (the pool's settings, no parallelism) is timed too. Angles are N(0, I₂).

Then frames/s by image size (``--sizes``, 64 px always included as the baseline): one
in-process ``ReacherRenderer`` per size, the median of ``--repeats`` timings of
``--size-frames`` frames, alone and with each frame also compressed as the evaluation cache
writes it (``np.savez_compressed``), and the time per frame against 64 px in this invocation.
``--sizes-only`` prints only that table.

    python benchmarks/bench_reacher_render.py [--naive-frames 150] [--frames 3000] [--workers 2]
        [--sizes 64,128,224] [--size-frames 300] [--repeats 3] [--sizes-only]
"""

from __future__ import annotations

import argparse
import io
import statistics
import time

import numpy as np
from naive_reacher import naive_render

from idaudit.worlds.reacher.render import ReacherRenderer, RenderPool


def by_size(sizes: list[int], frames: int, repeats: int, seed: int) -> None:
    """The table of frames/s by image size (medians), ratios against 64 px."""
    angles = np.random.default_rng(seed + 1).standard_normal((frames, 2))
    rows = []
    for size in sorted({64, *sizes}):
        renderer = ReacherRenderer(size)
        renderer.render(angles[:2])  # the GL context's first frame
        render_s, write_s = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            images = renderer.render(angles)
            render_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            np.savez_compressed(io.BytesIO(), x=images)
            write_s.append(time.perf_counter() - t0)
        r, w = statistics.median(render_s), statistics.median(write_s)
        rows.append((size, frames / r, frames / (r + w), r / frames, min(render_s), max(render_s)))
        del renderer
    base = next(row for row in rows if row[0] == 64)
    print(f"\nReacherRenderer in-process by image size: {frames} frames, median of {repeats} "
          "(range of the render times in brackets)")
    print(f"{'size':>9} | {'frames/s':>9} | {'+ compressed':>12} | {'time/frame vs 64 px':>19} | "
          "render s (min–max)")
    for size, fps, fps_w, per, lo, hi in rows:
        print(f"{size:>4}×{size:<4} | {fps:9.1f} | {fps_w:12.1f} | {per / base[3]:18.2f}x | "
              f"{lo:.2f}–{hi:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--naive-frames", type=int, default=150)
    parser.add_argument("--frames", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sizes", default="64,128,224",
                        help="image sizes (px, comma-separated) of the table; 64 is always in")
    parser.add_argument("--size-frames", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes-only", action="store_true",
                        help="print only the table by image size")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.sizes_only:
        by_size(sizes, args.size_frames, args.repeats, args.seed)
        return

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

    from idaudit.worlds.reacher.data import ReacherSpec, build_dataset

    pairs = max(1, (args.frames - 500) // 2)
    spec = ReacherSpec(mode="ou", rho=0.95, pairs=pairs, n_eval=500, seed=args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        build_dataset(f"{tmp}/ds", spec, workers=args.workers)
        world_s = time.perf_counter() - t0
    frames = spec.images()  # both views of each pair, the evaluation images and their partners
    print(f"idaudit world reacher (build_dataset, {args.workers} workers, start-up and writing "
          f"included): {frames} frames in {world_s:.2f} s  {frames / world_s:8.1f} frames/s  "
          f"→ {frames / world_s / naive_fps:.1f}x the naive loop")
    by_size(sizes, args.size_frames, args.repeats, args.seed)


if __name__ == "__main__":
    main()
