"""The Reacher render pool against llvmpipe's bound: frames/s over what the cores allow.

llvmpipe (Mesa's CPU rasteriser) costs ``c`` CPU-seconds per frame (with MuJoCo's physics
step for that frame), measured as the CPU time of one render worker rendering ``--frames``
frames on its own. With ``cores`` cores fully busy and no overhead the pool could give at most
``cores / c`` frames/s: the bound. The pool's frames/s (``RenderPool(cores)``, wall time of one
``render`` call, start-up excluded) is printed over that bound, for the workers as idaudit
starts them (``LP_NUM_THREADS=0``: llvmpipe rasterises in the worker's own thread) and as
llvmpipe would by default (a rasteriser thread per core), in alternating rounds; medians. The
bound is the one measured with ``LP_NUM_THREADS=0`` (the cheaper per frame): both setups are
compared with the same bound. The images of both setups are compared byte for byte.

    python benchmarks/bench_render_bound.py [--frames 3000] [--rounds 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from idaudit.worlds.reacher import render as reacher
from idaudit.worlds.reacher.render import RenderPool


def cpu_per_frame(angles: np.ndarray) -> tuple[float, float]:
    """In a render worker: (CPU-seconds, wall seconds) per frame of rendering ``angles``."""
    worker = reacher._WORKER
    assert worker is not None, "not in a render worker"
    worker.render(angles[:4])  # the context's first frames
    c0, w0 = time.process_time(), time.perf_counter()
    worker.render(angles)
    return ((time.process_time() - c0) / len(angles), (time.perf_counter() - w0) / len(angles))


def one_round(lp_threads: str | None, angles: np.ndarray, workers: int
              ) -> tuple[float, float, bytes]:
    """With ``LP_NUM_THREADS`` as given (None: idaudit's default for its workers): (the pool's
    frames/s over ``angles``, one worker's CPU-seconds per frame, the images' bytes)."""
    saved = os.environ.pop("LP_NUM_THREADS", None)
    if lp_threads is not None:
        os.environ["LP_NUM_THREADS"] = lp_threads
    try:
        with RenderPool(workers=1) as pool:  # one worker alone: its CPU per frame
            cpu, _ = pool.call(cpu_per_frame, angles[: max(200, len(angles) // 4)])
        with RenderPool(workers=workers) as pool:
            pool.render(angles[: 4 * workers])  # every worker's first frames
            t0 = time.perf_counter()
            images = pool.render(angles)
            fps = len(angles) / (time.perf_counter() - t0)
    finally:
        os.environ.pop("LP_NUM_THREADS", None)
        if saved is not None:
            os.environ["LP_NUM_THREADS"] = saved
    return fps, cpu, images.tobytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    angles = np.random.default_rng(args.seed).standard_normal((args.frames, 2))
    cores = args.workers
    default_threads = str(os.cpu_count() or 1)  # llvmpipe's own default: a thread per core
    setups = {"LP_NUM_THREADS=0 (idaudit's workers)": None,
              f"LP_NUM_THREADS={default_threads} (llvmpipe's default)": default_threads}
    fps: dict[str, list[float]] = {k: [] for k in setups}
    cpu: dict[str, list[float]] = {k: [] for k in setups}
    images: dict[str, bytes] = {}
    for r in range(args.rounds):
        order = list(setups) if r % 2 == 0 else list(setups)[::-1]
        for name in order:
            f, c, data = one_round(setups[name], angles, cores)
            fps[name].append(f)
            cpu[name].append(c)
            images.setdefault(name, data)
            print(f"round {r + 1}: {name}: {f:.0f} frames/s, {c * 1e3:.2f} ms CPU per frame",
                  flush=True)
    first = next(iter(setups))
    bound = cores / statistics.median(cpu[first])
    print(f"\n{args.frames} frames, {cores} workers, medians of {args.rounds} rounds; "
          f"bound = {cores} cores / {statistics.median(cpu[first]) * 1e3:.2f} ms CPU per "
          f"frame = {bound:.0f} frames/s")
    for name in setups:
        f = statistics.median(fps[name])
        print(f"{name:44s} {f:6.0f} frames/s  {f / bound:6.1%} of the bound  "
              f"{statistics.median(cpu[name]) * 1e3:.2f} ms CPU per frame")
    same = len(set(images.values())) == 1
    print(f"images byte-identical across the setups: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
