"""Sweeps: the paper's experiment suites (or a user TOML grid) as independent training runs.

Each run is a dict of ``train`` options; its result is one JSON file named after its
options under ``OUT/runs/``, so a killed sweep resumes by skipping runs whose file exists.
Runs execute in a local process pool (one single-threaded run per core); a failed run is
recorded with its error and does not stop the others.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

from .errors import IdauditError
from .io import write_json

SEEDS_2D = [1337, 1338, 1339]
RHOS = [0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99]
OBJECTIVE_LAMB = {"lejepa": 1e-3, "whiten": 0.5, "infonce": 0.0}


def _runs(base: dict[str, Any], grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    keys = list(grid)
    return [{**base, **dict(zip(keys, values))} for values in itertools.product(*grid.values())]


def suite_2d() -> list[dict[str, Any]]:
    runs = []
    for obj in ("lejepa", "whiten"):
        runs += _runs({"objective": obj, "lamb": OBJECTIVE_LAMB[obj], "steps": 20_000,
                       "rho": 0.95},
                      {"world": ["spiral", "banana", "sinusoid", "nvp"], "seed": SEEDS_2D})
    return runs


def suite_scaling() -> list[dict[str, Any]]:
    dims = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    runs = []
    for obj, extra in (("lejepa", {"lamb": 1e-6}), ("whiten", {"lamb": 0.5}),
                       ("infonce", {"sigma": "1.0"}), ("infonce", {"sigma": "auto"}),
                       ("infonce", {"sigma": "sqrtn"})):
        for dim, seed in itertools.product(dims, range(5)):
            runs.append({"world": "coupling", "dim": dim, "objective": obj, "seed": seed,
                         "steps": 20_000, "rho": 0.95, "inits": 3 if dim <= 32 else 1, **extra})
    return runs


def suite_gennorm() -> list[dict[str, Any]]:
    alphas = [0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    runs = []
    for obj in ("lejepa", "whiten", "infonce"):
        base = {"objective": obj, "lamb": OBJECTIVE_LAMB[obj], "steps": 20_000, "rho": 0.95,
                "source": "gennorm"}
        runs += _runs(base, {"world": ["spiral", "banana", "sinusoid", "nvp"], "alpha": alphas,
                             "seed": SEEDS_2D})
    return runs


def suite_grid() -> list[dict[str, Any]]:
    return _runs({"world": "spiral", "objective": "lejepa", "steps": 20_000},
                 {"lamb": [1e-6, 1e-5, 1e-4, 1e-3, 5e-3, 1e-2, 5e-2, 1e-1, 0.5],
                  "rho": RHOS, "seed": SEEDS_2D})


def suite_reacher() -> list[dict[str, Any]]:
    """Pixel Reacher: OU pairs at each ρ and trajectory pairs at each stride, × λ × seeds."""
    conditions = ([{"mode": "ou", "rho": rho} for rho in RHOS]
                  + [{"mode": "trajectory", "stride": s} for s in (1, 2, 4, 8, 16, 32, 64)])
    return [{"world": "reacher", **cond, "lamb": lamb, "seed": seed, "epochs": 100,
             "pairs": 100_000}
            for cond in conditions for lamb in (1e-3, 5e-3, 1e-2, 5e-2) for seed in (0, 1, 2)]


SUITES: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "2d": suite_2d, "scaling": suite_scaling, "gennorm": suite_gennorm, "grid": suite_grid,
    "reacher": suite_reacher,
}

TRAIN_KEYS = {"world", "dim", "source", "alpha", "rho", "layers", "objective", "lamb", "sigma",
              "steps", "batch", "lr", "seed", "inits", "eval_every", "n_eval", "views",
              "mode", "stride", "epochs", "pairs"}


def load_suite(name: str) -> list[dict[str, Any]]:
    """A built-in suite by name, or a TOML file: ``[fixed]`` options and ``[grid]`` lists."""
    if name in SUITES:
        return SUITES[name]()
    path = Path(name)
    if not path.exists():
        raise IdauditError(f"unknown suite {name!r}; valid: {', '.join(SUITES)} or a .toml file")
    from .io import load_toml

    data = load_toml(path, "suite")
    fixed, grid = data.get("fixed", {}), data.get("grid", {})
    unknown = (set(fixed) | set(grid)) - TRAIN_KEYS
    if unknown:
        raise IdauditError(f"suite file {path}: unknown train options {sorted(unknown)}; "
                           f"valid: {', '.join(sorted(TRAIN_KEYS))}")
    if not all(isinstance(v, list) and v for v in grid.values()):
        raise IdauditError(f"suite file {path}: every [grid] entry must be a non-empty list")
    return _runs(fixed, grid)


OPTION_DEFAULTS = {"dim": 2, "objective": "lejepa", "world": "spiral", "source": "gaussian"}


def parse_value(text: str) -> Any:
    """``"3"`` → 3, ``"1e-3"`` → 0.001, anything else stays a string."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_assignments(items: list[str], what: str) -> dict[str, list[Any]]:
    """``["world=spiral,banana", "lamb=1e-3"]`` → {"world": ["spiral", "banana"], ...}."""
    out: dict[str, list[Any]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key or not values:
            raise IdauditError(f"{what} expects KEY=VALUE, got {item!r}")
        if key not in TRAIN_KEYS:
            raise IdauditError(f"{what}: unknown train option {key!r}; valid: "
                               f"{', '.join(sorted(TRAIN_KEYS))}")
        out[key] = [parse_value(v) for v in values.split(",")]
    return out


def shrink(runs: list[dict[str, Any]], seeds: int | None = None, steps: int | None = None,
           dims: list[int] | None = None, objectives: list[str] | None = None,
           only: dict[str, list[Any]] | None = None, overrides: dict[str, Any] | None = None
           ) -> list[dict[str, Any]]:
    """Keep the first ``seeds`` seeds, cap the steps, keep only the listed dims/objectives and
    runs whose options match ``only`` (a run without such an option is kept); then set
    ``overrides`` on every run."""
    out = []
    seed_values = sorted({r.get("seed", 0) for r in runs})[:seeds] if seeds else None
    only = dict(only or {})
    if dims:
        only["dim"] = dims
    if objectives:
        only["objective"] = objectives
    for r in runs:
        if seed_values is not None and r.get("seed", 0) not in seed_values:
            continue
        if any(r.get(k, OPTION_DEFAULTS.get(k)) not in vals for k, vals in only.items()
               if k in r or k in OPTION_DEFAULTS):  # runs without the option are kept
            continue
        if steps and r.get("world") != "reacher":  # pixel runs count epochs, not steps
            r = {**r, "steps": min(steps, r.get("steps", steps))}
        out.append({**r, **(overrides or {})})
    return out


def run_id(run: dict[str, Any]) -> str:
    """A readable, stable file name for a run's options."""
    parts = [f"{k}={run[k]}" for k in sorted(run)]
    digest = hashlib.sha1(json.dumps(run, sort_keys=True).encode()).hexdigest()[:10]
    head = "-".join(str(run.get(k)) for k in ("world", "objective") if k in run)
    return f"{head}-{digest}" if head else digest + "-" + "_".join(parts)[:40]


_WORKER_DEVICE = "cpu"  # set per pool worker: "cuda:i" when the machine has GPUs


def _init_worker(devices) -> None:
    global _WORKER_DEVICE
    _WORKER_DEVICE = devices.get()


def execute(run: dict[str, Any], data_root: str | None = None,
            device: str | None = None) -> dict[str, Any]:
    """Train one run (single-threaded on CPU) and return its result record (never raises).

    ``device`` defaults to this worker's device (CPU, or the GPU a pool assigned it);
    Reacher runs read their pre-rendered dataset under ``data_root``.
    """
    import torch

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    try:
        device = device or _WORKER_DEVICE
        if run.get("world") == "reacher":
            rec = _execute_reacher(run, Path(data_root or "data"), device)
        else:
            rec = _execute_latent(run, device)
        return {"run": run, "status": "ok", **rec, "seconds": time.perf_counter() - t0}
    except Exception as exc:  # recorded, the sweep goes on
        return {"run": run, "status": "failed", "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=5), "seconds": time.perf_counter() - t0}


def _execute_latent(run: dict[str, Any], device: str) -> dict[str, Any]:
    from .losses import SIGMA_RULES
    from .train import TrainConfig, train
    from .worlds import build_world, make_spec

    spec = make_spec(run.get("world", "spiral"), dim=run.get("dim"),
                     source=run.get("source", "gaussian"), alpha=run.get("alpha"),
                     rho=run.get("rho", 0.95), layers=run.get("layers"))
    sigma = run.get("sigma", 1.0)
    sigma = sigma if sigma in SIGMA_RULES else float(sigma)
    cfg = TrainConfig(**{k: v for k, v in run.items()
                         if k in {"objective", "lamb", "steps", "batch", "lr", "seed",
                                  "inits", "eval_every", "n_eval", "views"}},
                      sigma=sigma, device=device)
    world = build_world(spec)
    result = train(world, cfg)
    rec = {"metrics": result.metrics, "config": {"world": spec.to_dict(), "train": cfg.to_dict()},
           "train_seconds": result.seconds, "steps_per_second": result.steps_per_second,
           "device": result.device}
    if world.latent_dim == 2:
        rec["embedding_sample"] = embedding_sample(world, result.encoder, cfg)
    return rec


def reacher_spec(run: dict[str, Any]):
    """The dataset a Reacher run trains on; shared by every λ and seed of its condition."""
    from .worlds.reacher_data import ReacherSpec

    mode = run.get("mode", "ou")
    kw: dict[str, Any] = {"rho": float(run.get("rho", 0.95))} if mode == "ou" else \
        {"stride": int(run.get("stride", 8))}
    return ReacherSpec(mode=mode, pairs=int(run.get("pairs", 100_000)),
                       n_eval=int(run.get("n_eval", 10_000)), **kw).validate()


def reacher_data_dir(run: dict[str, Any], data_root: Path) -> Path:
    spec = reacher_spec(run)
    name = spec.default_dir().name + (f"-e{spec.n_eval}" if spec.n_eval != 10_000 else "")
    return Path(data_root) / name


def prepare_datasets(runs: list[dict[str, Any]], data_root: Path, workers: int | None = None,
                     progress: bool = False) -> list[Path]:
    """Render (or resume) every Reacher dataset the runs need, one after another."""
    from .worlds.reacher_data import build_dataset

    roots = []
    for run in runs:
        if run.get("world") == "reacher":
            root = reacher_data_dir(run, data_root)
            if root not in roots:
                roots.append(root)
                build_dataset(root, reacher_spec(run), workers=workers, progress=progress)
    return roots


def _execute_reacher(run: dict[str, Any], data_root: Path, device: str) -> dict[str, Any]:
    from .audit import arrays_from_reacher, audit_inputs
    from .train.pixels import PixelConfig, train_pixels
    from .worlds.reacher_data import load_dataset

    root = reacher_data_dir(run, data_root)
    data = load_dataset(root)
    cfg = PixelConfig(**{k: run[k] for k in ("lamb", "epochs", "batch", "lr", "seed")
                         if k in run}, device=device)
    result = train_pixels(data, cfg)
    inputs = arrays_from_reacher(result.encoder, root, source=run_id(run), data=data)
    metrics = dict(audit_inputs(inputs, gauss_sims=0).metrics)
    if data.meta["spec"]["mode"] == "trajectory":
        metrics.update(rho_0=data.meta["rho_0"], rho_1=data.meta["rho_1"])
    n = min(1500, len(data.z_eval))
    h = inputs.h[inputs.test_rows[:n]].double()
    metrics["final_loss"] = result.history[-1]["loss"]
    return {"metrics": metrics, "config": {"world": data.meta["spec"], "train": cfg.to_dict()},
            "device": result.device, "train_seconds": result.seconds,
            "embedding_sample": {"z": data.z_eval[:n].tolist(), "h": h.tolist()}}


def embedding_sample(world, encoder, cfg, n: int = 1500) -> dict[str, list[list[float]]]:
    """The first ``n`` evaluation latents z and their embeddings h (for the 2D figures)."""
    import torch

    from .train.loop import embed, make_eval_set

    ev = make_eval_set(world, min(n, cfg.n_eval), cfg.seed)
    h = embed(encoder, ev.x, torch.device("cpu"))
    return {"z": ev.z.double().tolist(), "h": h.double().tolist()}


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # no usable CUDA runtime
        return 0


def plan_workers(gpus: int, workers: int | None, n_runs: int) -> tuple[int, list[str]]:
    """(pool size, worker devices): one run per GPU when there are GPUs (at most one worker
    per GPU), else one single-threaded CPU run per core (or ``workers``); never more workers
    than runs."""
    if gpus:
        n = min(workers or gpus, gpus)
        devices = [f"cuda:{i}" for i in range(n)]
    else:
        n = workers or os.cpu_count() or 1
        devices = ["cpu"] * n
    n = max(1, min(n, n_runs or 1))
    return n, devices[:n]


def run_sweep(runs: list[dict[str, Any]], out_dir: str | Path, workers: int | None = None,
              progress: bool = False, executor: str = "local", address: str | None = None
              ) -> dict[str, int]:
    """Execute the runs whose result file is missing; return counts.

    ``executor`` local: a spawn process pool, one single-threaded run per core, or one run per
    GPU when the machine has GPUs; ray: Ray tasks (one CPU each, one GPU each when the cluster
    has GPUs), on the cluster at ``address`` or a local Ray instance. Reacher datasets are
    rendered first, under ``OUT/data``.
    """
    from .progress import ProgressBar

    if executor not in ("local", "ray"):
        raise IdauditError(f"unknown executor {executor!r}; valid: local, ray")
    out = Path(out_dir) / "runs"
    out.mkdir(parents=True, exist_ok=True)
    data_root = Path(out_dir) / "data"
    todo = [r for r in runs if not (out / f"{run_id(r)}.json").exists()]
    counts = {"total": len(runs), "skipped": len(runs) - len(todo), "ok": 0, "failed": 0}
    prepare_datasets(todo, data_root, progress=progress)
    workers, devices = plan_workers(_gpu_count() if executor == "local" else 0, workers,
                                    len(todo))
    with ProgressBar(progress, len(todo), "sweep") as bar:
        if executor == "ray" and todo:
            for rec in _ray_results(todo, address, str(data_root)):
                _record(out, rec, counts, bar)
        elif workers == 1:
            for r in todo:
                _record(out, execute(r, str(data_root), devices[0]), counts, bar)
        else:
            import multiprocessing as mp

            ctx = mp.get_context("spawn")
            queue = ctx.Queue()
            for device in devices:
                queue.put(device)
            with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                                     initargs=(queue,)) as pool:
                futures = [pool.submit(execute, r, str(data_root)) for r in todo]
                for fut in as_completed(futures):
                    _record(out, fut.result(), counts, bar)
    return counts


def _ray_results(todo: list[dict[str, Any]], address: str | None, data_root: str):
    """Yield run records as Ray tasks finish (Ray is the optional ``ray`` extra)."""
    try:
        import ray
    except ImportError:
        raise IdauditError('--executor ray needs Ray: pip install "idaudit[ray]"') from None
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 ignore_reinit_error=True)
    try:
        gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
        task = ray.remote(num_cpus=1, num_gpus=gpus)(execute)
        pending = [task.remote(r, data_root, "cuda" if gpus else "cpu") for r in todo]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])
    finally:
        if started:
            ray.shutdown()


def _record(out: Path, rec: dict[str, Any], counts: dict[str, int], bar) -> None:
    """Successful runs are ``ID.json`` (skipped on rerun); failures ``ID.failed.json`` (retried)."""
    counts[rec["status"]] += 1
    rid = run_id(rec["run"])
    write_json(out / (f"{rid}.json" if rec["status"] == "ok" else f"{rid}.failed.json"), rec)
    bar.advance(1, f"{counts['ok']} ok, {counts['failed']} failed")


# ---- aggregation ------------------------------------------------------------------------

REPORT_METRICS = ("r2_h_to_z", "r2_z_to_h", "orthogonality_error", "mixing_r2_x_to_z",
                  "whitening_error", "procrustes_mse", "bound", "r2_h_to_z0", "r2_h_to_z1",
                  "rho_0", "rho_1")


def _scalars(metrics: dict[str, Any]) -> dict[str, Any]:
    """The run's metrics plus, for 2D latents, R²(h → z_i) per latent as r2_h_to_z0/1."""
    per_dim = metrics.get("r2_h_to_z_per_dim") or []
    extra = {f"r2_h_to_z{i}": v for i, v in enumerate(per_dim)} if len(per_dim) == 2 else {}
    return {**metrics, **extra}


def load_results(out_dir: str | Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    runs_dir = Path(out_dir) / "runs"
    if not runs_dir.is_dir():
        raise IdauditError(f"{out_dir} has no runs/ directory (run `idaudit sweep` first)")
    ok, failed = [], []
    for path in sorted(runs_dir.glob("*.json")):
        try:
            rec = json.loads(path.read_text())
        except ValueError:
            raise IdauditError(f"{path} is not valid JSON") from None
        (failed if path.name.endswith(".failed.json") else ok).append(rec)
    return ok, failed


def method_label(run: dict[str, Any]) -> str:
    """SIGReg / VICReg / InfoNCE (σ=…): the name a run's objective has in the paper."""
    obj = run.get("objective", "lejepa")
    if obj == "infonce":
        return f"InfoNCE (σ={run.get('sigma', 1.0)})"
    return {"lejepa": "SIGReg", "whiten": "VICReg"}.get(obj, obj)


def aggregate(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and std over seeds of each configuration (all options but the seed)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        key = json.dumps({k: v for k, v in rec["run"].items() if k != "seed"}, sort_keys=True)
        groups.setdefault(key, []).append(rec)
    rows = []
    for key, recs in groups.items():
        row: dict[str, Any] = {**json.loads(key), "method": method_label(recs[0]["run"]),
                               "n_seeds": len(recs)}
        scalars = [_scalars(r["metrics"]) for r in recs]
        for m in REPORT_METRICS:
            vals = [x[m] for x in scalars if x.get(m) is not None]
            if vals:
                row[f"{m}_mean"] = float(np.mean(vals))
                row[f"{m}_std"] = float(np.std(vals))
        rows.append(row)
    return rows


def grid_cells(rows: list[dict[str, Any]]) -> tuple[str, str, list[float], list[float],
                                          dict[str, np.ndarray]] | None:
    """(world, method, λs, ρs, {metric: λ × ρ matrix of means}) of the world and method with
    the most λ, ρ cells; None when λ and ρ do not both vary."""
    rows = [r for r in rows if r.get("lamb") is not None and r.get("rho") is not None
            and "r2_h_to_z_mean" in r]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r.get("world", "spiral"), r["method"]), []).append(r)
    if not groups:
        return None
    (world, method), rows = max(groups.items(), key=lambda kv: len(kv[1]))
    lambs = sorted({r["lamb"] for r in rows})
    rhos = sorted({r["rho"] for r in rows})
    if len(lambs) < 2 or len(rhos) < 2:
        return None
    mats = {}
    for metric in ("r2_h_to_z", "orthogonality_error"):
        grid = np.full((len(lambs), len(rhos)), np.nan)
        for r in rows:
            if f"{metric}_mean" in r:
                grid[lambs.index(r["lamb"]), rhos.index(r["rho"])] = r[f"{metric}_mean"]
        mats[metric] = grid
    return world, method, lambs, rhos, mats


def rho_trends(rows: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(λ, Spearman rank correlation of mean R²(h → z) with ρ) for each λ of a λ × ρ grid."""
    from scipy.stats import spearmanr

    cells = grid_cells(rows)
    if cells is None:
        return []
    _, _, lambs, rhos, mats = cells
    out = []
    for lam, r2 in zip(lambs, mats["r2_h_to_z"]):
        ok = np.isfinite(r2)
        if ok.sum() >= 3:
            out.append((lam, float(spearmanr(np.asarray(rhos)[ok], r2[ok]).statistic)))
    return out


def _order(value: Any) -> tuple[int, Any]:
    """Sort key: numbers by value, then everything else by its text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, value)
    return (1, json.dumps(value))


def _reacher_table(rows: list[dict[str, Any]], pm: Callable[[Any, str], str]) -> list[str]:
    """The paper's Table 2 layout: OU pairs by ρ, trajectory pairs by stride, per λ."""
    lines: list[str] = []
    ou = sorted((r for r in rows if r.get("mode", "ou") == "ou"),
                key=lambda r: (r.get("lamb", 0), r.get("rho", 0)))
    traj = sorted((r for r in rows if r.get("mode") == "trajectory"),
                  key=lambda r: (r.get("lamb", 0), r.get("stride", 0)))
    if ou:
        lines += ["| λ | OU ρ | seeds | R²(z→h) | R²(h→z) | orthogonality error |",
                  "|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r.get('lamb')} | {r.get('rho')} | {r['n_seeds']} | {pm(r, 'r2_z_to_h')} | "
                  f"{pm(r, 'r2_h_to_z')} | {pm(r, 'orthogonality_error')} |" for r in ou]
    if traj:
        lines += ["", "| λ | stride δ | ρ₀ | ρ₁ | seeds | R²(z→h) | R²(h→z₀) | R²(h→z₁) |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r.get('lamb')} | {r.get('stride')} | {r.get('rho_0_mean', float('nan')):.3f} "
                  f"| {r.get('rho_1_mean', float('nan')):.3f} | {r['n_seeds']} | "
                  f"{pm(r, 'r2_z_to_h')} | {pm(r, 'r2_h_to_z0')} | {pm(r, 'r2_h_to_z1')} |"
                  for r in traj]
    return lines


def write_tables(rows: list[dict[str, Any]], out_dir: str | Path) -> dict[str, Path]:
    """summary.csv (every configuration) and summary.md (the paper's Table 1 layout when the
    runs vary the dimension: N, raw-mixing R², then R²(h → z) per method)."""
    import csv
    import io

    from .io import atomic_write

    out_dir = Path(out_dir)
    cols = sorted({k for r in rows for k in r}, key=lambda k: (k.endswith(("_mean", "_std")), k))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    w.writerows(rows)
    text_csv = buf.getvalue()
    atomic_write(out_dir / "summary.csv", lambda tmp: Path(tmp).write_text(text_csv))

    def pm(row: dict[str, Any] | None, m: str) -> str:
        if row is None or f"{m}_mean" not in row:
            return "—"
        return f"{row[f'{m}_mean']:.6f} ± {row[f'{m}_std']:.1e}"

    lines = []
    methods = sorted({r["method"] for r in rows},
                     key=lambda m: ({"SIGReg": 0, "VICReg": 1}.get(m, 2), m))
    if all(r.get("world") == "reacher" for r in rows):
        lines += _reacher_table(rows, pm)
    elif len({r.get("dim", 2) for r in rows}) > 1:
        lines += ["| N | mixing R²(x→z) | " + " | ".join(f"{m} R²(h→z)" for m in methods) + " |",
                  "|---:|---:|" + "---:|" * len(methods)]
        for dim in sorted({r.get("dim", 2) for r in rows}):
            at = [r for r in rows if r.get("dim", 2) == dim]
            by = {r["method"]: r for r in at}
            lines.append(f"| {dim} | {pm(at[0], 'mixing_r2_x_to_z')} | "
                         + " | ".join(pm(by.get(m), "r2_h_to_z") for m in methods) + " |")
    else:
        varying = [k for k in sorted({k for r in rows for k in r})
                   if not k.endswith(("_mean", "_std")) and k not in ("n_seeds",)
                   and len({json.dumps(r.get(k)) for r in rows}) > 1]
        lines += ["| " + " | ".join(varying + ["seeds", "R²(h→z)", "orthogonality error",
                                               "mixing R²(x→z)"]) + " |",
                  "|" + "---|" * (len(varying) + 4)]
        for r in sorted(rows, key=lambda r: [_order(r.get(k)) for k in varying]):
            lines.append("| " + " | ".join([str(r.get(k)) for k in varying] + [
                str(r["n_seeds"]), pm(r, "r2_h_to_z"), pm(r, "orthogonality_error"),
                pm(r, "mixing_r2_x_to_z")]) + " |")
    trends = rho_trends(rows)
    if trends:
        lines += ["", "R²(h→z) against ρ at each λ (Spearman rank correlation; +1 = rising "
                  "monotonically):", "", "| λ | Spearman(R², ρ) |", "|---:|---:|"]
        lines += [f"| {lam:g} | {rs:+.2f} |" for lam, rs in trends]
    text_md = "\n".join(lines) + "\n"
    atomic_write(out_dir / "summary.md", lambda tmp: Path(tmp).write_text(text_md))
    return {"csv": out_dir / "summary.csv", "markdown": out_dir / "summary.md"}
