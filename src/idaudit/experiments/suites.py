"""Sweep suites: the paper's experiments (or a user's TOML grid) as lists of run options.

Each run is a dict of ``train`` options (see :data:`idaudit.training.runs.RUN_OPTIONS`); ``shrink``
keeps part of a suite and overrides options for a quick look.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from idaudit.core.defaults import TRAIN_DEFAULTS, WORLD, WORLD_DEFAULTS
from idaudit.core.errors import IdauditError
from idaudit.core.limits import check_sweep_size
from idaudit.training.runs import RUN_OPTIONS
from idaudit.worlds import KINDS, world_name
from idaudit.worlds.spec import check_fields, check_type

__all__ = ["SUITES", "load_suite", "parse_assignments", "shrink"]

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
    """Pixel Reacher: OU pairs at each ρ and trajectory pairs at each stride, × λ × seeds
    (pairs, epochs, image size and CNN from the world's recipe: the paper's on CUDA, the CPU
    recipe elsewhere; ``--set recipe=paper`` forces the paper's)."""
    conditions = ([{"mode": "ou", "rho": rho} for rho in RHOS]
                  + [{"mode": "trajectory", "stride": s} for s in (1, 2, 4, 8, 16, 32, 64)])
    return [{"world": "reacher", **cond, "lamb": lamb, "seed": seed}
            for cond in conditions for lamb in (1e-3, 5e-3, 1e-2, 5e-2) for seed in (0, 1, 2)]


SUITES: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "2d": suite_2d, "scaling": suite_scaling, "gennorm": suite_gennorm, "grid": suite_grid,
    "reacher": suite_reacher,
}

def load_suite(name: str) -> list[dict[str, Any]]:
    """A built-in suite by name, or a TOML file: ``[fixed]`` options and ``[grid]`` lists,
    their product counted first (a sweep takes at most
    :data:`~idaudit.core.limits.LIMITS` ``["sweep_runs"]`` runs).

    The file's layout is checked here (tables, known options, non-empty lists); the values'
    types and ranges when the runs are resolved (:func:`idaudit.training.runs.resolve`), every run
    before any starts."""
    if name in SUITES:
        runs = SUITES[name]()
        check_sweep_size(len(runs), f"suite {name}")
        return runs
    path = Path(name)
    if not path.exists():
        raise IdauditError(f"unknown suite {name!r}; valid: {', '.join(SUITES)} or a .toml file")
    from idaudit.core.tomlfiles import load_toml

    where = f"suite file {path}"
    data = check_fields(load_toml(path, "suite"), where, {"fixed", "grid"})
    fixed = check_type(data.get("fixed", {}), "table", f"{where}: [fixed]")
    grid = check_type(data.get("grid", {}), "table", f"{where}: [grid]")
    check_options([*fixed, *grid], where)
    if not all(isinstance(v, list) and v for v in grid.values()):
        raise IdauditError(f"{where}: every [grid] entry must be a non-empty list")
    lengths = [len(v) for v in grid.values()]  # counted, never expanded, before the limit
    check_sweep_size(math.prod(lengths), f"{where}: its [grid]",
                     f" ({' × '.join(map(str, lengths))})" if len(lengths) > 1 else "")
    return _runs(fixed, grid)


def check_options(keys: list[str], where: str) -> None:
    """Every key is a run option that a sweep run can take (``device`` is not one: each
    worker gives its runs its own device, the CPU or one GPU)."""
    unknown = sorted(set(keys) - RUN_OPTIONS)
    if unknown:
        raise IdauditError(f"{where}: unknown run options {unknown}; valid: "
                           f"{', '.join(sorted(RUN_OPTIONS - {'device'}))}")
    if "device" in keys:
        raise IdauditError(f"{where}: device does not apply to a sweep (each worker runs on its "
                           "own device: the CPU, or one GPU per worker)")


#: what a run that does not set an option gets (for --only), from the one table of defaults
OPTION_DEFAULTS = {"dim": WORLD_DEFAULTS["dim"], "objective": TRAIN_DEFAULTS["objective"],
                   "world": WORLD, "source": WORLD_DEFAULTS["source"]}


def parse_value(text: str) -> Any:
    """``"3"`` → 3, ``"1e-3"`` → 0.001, ``"true"``/``"false"`` → True/False, anything else
    stays a string."""
    if text in ("true", "false"):
        return text == "true"
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
        if key not in RUN_OPTIONS:
            raise IdauditError(f"{what}: unknown run option {key!r}; valid: "
                               f"{', '.join(sorted(RUN_OPTIONS - {'device'}))}")
        check_options([key], what)
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
        if steps and counts_steps(r):  # dataset worlds count epochs, not steps
            r = {**r, "steps": min(steps, r.get("steps", steps))}
        out.append({**r, **(overrides or {})})
    return out


def counts_steps(run: dict[str, Any]) -> bool:
    """Whether the run's world trains for a number of steps (dataset worlds count epochs)."""
    opts = {k: v for k, v in run.items() if k != "world"}
    return "steps" not in KINDS.get(world_name(run.get("world"), opts)).refuses
