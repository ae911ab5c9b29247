"""The speed guard CI runs: each hot path as a ratio against a straightforward baseline in the
same process, so that a shared, noisy machine slows both sides alike.

* ``train_step`` — a LeJEPA step on the spiral world (``Stepper``) against the step written
  from the formulas (``bench_train_step.StraightforwardStep``: every loss each step, SIGReg
  through the (2B, M, knots) cos/sin table and autograd, plain AdamW);
* ``audit`` — every audit metric (``audit_metrics``) on 4 000 × 256 float32 embeddings against
  the lstsq/SVD fits of ``bench_audit_metrics.straightforward``;
* ``audit_process`` — ``idaudit audit FILE`` on 4 000 × 256 arrays as a whole process against
  those fits in a fresh process (``bench_audit_metrics.CHILD``): imports count;
* ``render`` — ``ReacherRenderer`` at 32 px (the CPU recipe's size; ``--render-size``) against
  ``physics.render`` per frame on a physics loaded once (``naive_reacher.naive_render``).

Rounds alternate which side runs first; a round's ratio is baseline time / idaudit time (the
medians of its repeats), and a check passes when the median of the rounds' ratios is at least
its floor (:data:`FLOORS`, set from measured spreads with a margin; docs in benchmarks/README.md).
Each check runs on the torch threads :data:`THREADS` gives it unless ``--threads`` says otherwise.
``--slow CHECK`` does idaudit's side of CHECK twice per timed call: the 2× regression the
guard must catch. Exit 0: every check at or above its floor; 1: a ratio below its floor;
2: usage (an unknown check, an unwritable ``--json``).

    python benchmarks/guard.py [--rounds 7] [--only train_step,audit] [--slow train_step]
                               [--retries 1] [--json F]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

# idaudit first, as the ``idaudit`` command loads it: its thread settings (OpenBLAS's 16-cycle
# spin timeout, OpenMP's spin count) reach only the libraries loaded after it. Loaded after
# torch (which loads numpy), numpy's OpenBLAS threads spin ≈ 0.1 s after each call and the
# audit's rounds, interleaved with torch's baseline, measured 1.9–2.4x instead of 3.8–4.9x
# (2026-12-06, idle); an audit alone in a torch-first process loses ≤ 10%.
from idaudit.core.threads import share_cpu  # noqa: E402 - first: see above

share_cpu()

#: the lowest median ratio each check may reach (baseline time / idaudit time), between the
#: measured ratios and those of idaudit's side done twice (benchmarks/README.md)
FLOORS = {"train_step": 3.3, "audit": 2.8, "audit_process": 2.0, "render": 3.3}
#: torch threads per check: one for the step and the render (beside a busy neighbour a 2-thread
#: step's rounds spread over 0.7–34x, a 1-thread step's over 3.7–6.3x), two for the audit (as
#: users run it; on one thread beside a neighbour its rounds fell to 0.2x)
THREADS = {"train_step": 1, "audit": 2, "audit_process": 2, "render": 1}


class Measured(NamedTuple):
    ratios: list[float]  # per round: median(base) / median(fast)
    seconds: dict[str, list[float]]  # per call, by side ("base", "fast")


def _rounds(rounds: int, base: Callable[[], None], fast: Callable[[], None],
            repeats: int) -> Measured:
    """Per-round ratios median(base)/median(fast), alternating which side goes first."""
    ratios: list[float] = []
    seconds: dict[str, list[float]] = {"base": [], "fast": []}
    for r in range(rounds):
        times: dict[str, list[float]] = {"base": [], "fast": []}
        order = (("base", base), ("fast", fast)) if r % 2 == 0 else (("fast", fast),
                                                                     ("base", base))
        for name, fn in order:
            fn()  # settle: caches and the allocator after the other side
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        ratios.append(statistics.median(times["base"]) / statistics.median(times["fast"]))
        for name, got in times.items():
            seconds[name].extend(got)
    return Measured(ratios, seconds)


def _twice(fn: Callable[[], None], slow: bool) -> Callable[[], None]:
    if not slow:
        return fn

    def doubled() -> None:
        fn()
        fn()
    return doubled


def check_train_step(rounds: int, slow: bool) -> Measured:
    from bench_train_step import make_steps

    fast, ref = make_steps()
    it = [0]

    def step(s) -> Callable[[], None]:
        def run() -> None:
            float(s.step(it[0]))  # the loss on the host: the step has finished
            it[0] += 1
        return run
    return _rounds(rounds, step(ref), _twice(step(fast), slow), repeats=15)


def check_audit(rounds: int, slow: bool) -> Measured:
    from bench_audit_metrics import embeddings, straightforward

    from idaudit.maths.metrics import audit_metrics

    z, h, hp = embeddings(4000, 256)
    audit_metrics(z[:500, :8], h[:500, :8], hp[:500, :8], 0.95)  # numba cache, BLAS
    return _rounds(rounds, lambda: straightforward(z, h, hp, 0.95),
                   _twice(lambda: audit_metrics(z, h, hp, 0.95), slow), repeats=3)


def check_audit_process(rounds: int, slow: bool, n: int = 4000, dim: int = 256) -> Measured:
    """``idaudit audit FILE --json`` as a whole process (imports, reading the arrays, every
    metric) against the straightforward fits in a fresh process that imports what they use
    (torch): an import the array audit does not need (torch's ≈ 2 s) fails this check, where
    the in-process ``audit`` check, whose process has torch loaded already, cannot see it."""
    import subprocess
    import tempfile

    import numpy as np
    from bench_audit_metrics import CHILD, embeddings

    z, h, hp = embeddings(n, dim)
    tmp = Path(tempfile.mkdtemp(prefix="guard-audit-"))
    path = tmp / "arrays.npz"
    np.savez(path, z=z.numpy(), h=h.numpy(), h_prime=hp.numpy(), rho=np.array(0.95))

    def run(argv: list[str]) -> None:
        res = subprocess.run(argv, capture_output=True, text=True)
        if res.returncode != 0:
            raise SystemExit(f"guard: {' '.join(argv[:4])} failed: {res.stderr.strip()[-500:]}")

    cli = [sys.executable, "-m", "idaudit", "audit", str(path), "--json", str(tmp / "a.json")]
    ref = [sys.executable, "-c", CHILD, str(path), str(Path(__file__).resolve().parent)]
    run(cli)  # numba's cache and the page cache warm, as a user's second audit finds them
    try:
        return _rounds(rounds, lambda: run(ref), _twice(lambda: run(cli), slow), repeats=1)
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


RENDER_FRAMES = 40  # per call: the naive loop renders ≈ 30 frames/s here


def check_render(rounds: int, slow: bool, size: int = 32, frames: int = RENDER_FRAMES
                 ) -> Measured:
    import numpy as np
    from naive_reacher import naive_physics, naive_render

    from idaudit.worlds.reacher.render import ReacherRenderer

    angles = np.random.default_rng(0).standard_normal((frames, 2))
    renderer = ReacherRenderer(size)
    renderer.render(angles[:2])
    physics = naive_physics()  # loaded once: the loop's per-frame cost is compared
    naive_render(angles[:2], size, physics)  # the GL start
    return _rounds(rounds, lambda: naive_render(angles, size, physics),
                   _twice(lambda: renderer.render(angles), slow), repeats=2)


CHECKS: dict[str, Callable[..., Measured]] = {
    "train_step": check_train_step, "audit": check_audit, "audit_process": check_audit_process,
    "render": check_render}


def measure(name: str, args: argparse.Namespace, slow: bool) -> dict:
    """Run check ``name`` once: its ratios, their median against the floor, the per-call
    seconds of each side (and frames/s for the render); prints its line."""
    import torch

    t0 = time.perf_counter()
    threads = args.threads or THREADS[name]
    torch.set_num_threads(threads)
    kwargs = {"size": args.render_size} if name == "render" else {}
    got = CHECKS[name](args.rounds, slow, **kwargs)
    med = statistics.median(got.ratios)
    per_call = {side: statistics.median(t) for side, t in got.seconds.items()}
    result = {"median_ratio": med, "floor": FLOORS[name], "ratios": got.ratios,
              "passed": med >= FLOORS[name], "slowed": slow, "seconds_per_call": per_call,
              "threads": threads, "seconds": time.perf_counter() - t0}
    print(f"{name:10s} {'ok  ' if result['passed'] else 'SLOW'} median {med:5.2f}x (floor "
          f"{FLOORS[name]}x; rounds {min(got.ratios):.2f}–{max(got.ratios):.2f}x)"
          f"{'  [slowed 2x]' if slow else ''}  {result['seconds']:.0f} s", flush=True)
    if name == "render":
        fps = {side: RENDER_FRAMES / t for side, t in per_call.items()}
        result.update(frames_per_second=fps, size=args.render_size)
        print(f"{'':10s} {args.render_size} px: {fps['fast']:.0f} frames/s against "
              f"{fps['base']:.0f} for physics.render per frame", flush=True)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", default=",".join(CHECKS), help="comma-separated checks")
    ap.add_argument("--slow", default="", help="checks whose idaudit side runs twice (a 2x "
                    "regression the guard must catch)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads for every check (default: THREADS, per check)")
    ap.add_argument("--render-size", type=int, default=32, help="image size of the render check")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ap.add_argument("--retries", type=int, default=0, help="measure a check below its floor "
                    "again, up to this many times; its last measurement is the verdict (a "
                    "neighbour's burst passes, a real regression fails every time)")
    args = ap.parse_args()
    only = [c for c in args.only.split(",") if c]
    slow = [c for c in args.slow.split(",") if c]
    unknown = sorted(set(only + slow) - set(CHECKS))
    if unknown or args.rounds < 1 or args.retries < 0:
        print(f"guard: unknown check {', '.join(unknown)}; valid: {', '.join(CHECKS)}"
              if unknown else "guard: --rounds must be at least 1 and --retries at least 0",
              file=sys.stderr)
        return 2
    if args.json is not None:
        try:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.touch()
        except OSError as exc:
            print(f"guard: cannot write {args.json}: {exc.strerror}", file=sys.stderr)
            return 2
    import torch

    results: dict[str, dict] = {}
    for name in only:
        results[name] = measure(name, args, name in slow)
        for attempt in range(2, args.retries + 2):
            if results[name]["passed"]:
                break
            print(f"{'':10s} below the floor: measuring again ({attempt} of {args.retries + 1})",
                  flush=True)
            results[name] = {**measure(name, args, name in slow), "attempt": attempt}
    failed = [name for name, got in results.items() if not got["passed"]]
    if args.json is not None:
        tmp = args.json.with_name(args.json.name + ".tmp")
        tmp.write_text(json.dumps({"torch": torch.__version__, "checks": results}, indent=1))
        tmp.replace(args.json)
    if failed:
        print(f"guard: below the floor: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
