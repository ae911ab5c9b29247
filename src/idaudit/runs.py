"""One run: options → (world spec, train config) → trained encoder → :class:`RunRecord`.

``idaudit train``, ``idaudit demo`` and every sweep run call :func:`run`. Options are the
CLI's names with underscores (``world``, ``rho``, ``steps``, ``data`` …); ``None`` means
"not given", so each world's defaults apply and options that do not apply are refused. A
run's id hashes the resolved configuration and the idaudit version, so a changed default
never silently reuses an old result.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ._version import __version__
from .checkpoint import save_checkpoint
from .encoders import embed
from .errors import IdauditError
from .io import check_outputs, write_json
from .train import TrainConfig, estimate_seconds, train
from .worlds import KINDS, World, WorldSpec, build_world, make_spec, world_name

TRAIN_OPTIONS = frozenset(f.name for f in dataclasses.fields(TrainConfig))
WORLD_OPTIONS = frozenset().union(*(KINDS.get(n).options for n in KINDS.names()))
RUN_OPTIONS = frozenset({"world", "recipe"}) | TRAIN_OPTIONS | WORLD_OPTIONS
EMBEDDING_SAMPLE = 1500  # (z, h) rows kept for the 2D embedding figure


@dataclass
class ResolvedRun:
    """What a run trains: the world's spec (before any rendering) and the resolved config."""

    options: dict[str, Any]
    world: WorldSpec
    train: TrainConfig
    recipe: str | None = None
    recipe_note: str | None = None

    @property
    def id(self) -> str:
        """``WORLD-OBJECTIVE-HASH`` of the resolved config and the idaudit version (the
        device and the dataset's location are not part of it)."""
        world = self.world.to_dict()
        world["extra"] = {k: v for k, v in world["extra"].items() if k != "data"}
        cfg = {k: v for k, v in self.train.to_dict().items() if k != "device"}
        blob = json.dumps({"world": world, "train": cfg, "version": __version__},
                          sort_keys=True, default=str)
        digest = hashlib.sha1(blob.encode()).hexdigest()[:12]
        return f"{self.world.name}-{self.train.objective}-{digest}"


def resolve(options: dict[str, Any]) -> ResolvedRun:
    """Split options between the world and training, validate both, fill every default."""
    given = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(given) - RUN_OPTIONS)
    if unknown:
        raise IdauditError(f"unknown run option(s) {', '.join(unknown)}; valid: "
                           f"{', '.join(sorted(RUN_OPTIONS))}")
    name = world_name(given.pop("world", None), given)
    kind = KINDS.get(name)
    recipe, note = apply_recipe(kind, name, given)
    world_opts = {k: v for k, v in given.items() if k in kind.options}
    rest = {k: v for k, v in given.items() if k not in kind.options}
    stray = sorted(set(rest) - TRAIN_OPTIONS)
    if stray:
        raise IdauditError(f"{', '.join('--' + s.replace('_', '-') for s in stray)} does not "
                           f"apply to world {name!r}")
    spec = make_spec(name, **world_opts)
    cfg = TrainConfig(**rest).resolved(kind.refuses, kind.train_defaults(), name)
    return ResolvedRun(options=dict(options), world=spec, train=cfg, recipe=recipe,
                       recipe_note=note)


def apply_recipe(kind: type[World], name: str, given: dict[str, Any]
                 ) -> tuple[str | None, str | None]:
    """Fill ``given`` (in place) from the world's recipe: the one named by ``recipe``, else
    ``paper`` on CUDA and ``cpu`` elsewhere. Returns (recipe, its one-line note)."""
    recipes = kind.recipes()
    chosen = given.pop("recipe", None)
    if not recipes:
        if chosen is not None:
            raise IdauditError(f"--recipe does not apply to world {name!r} (it has no recipes)")
        return None, None
    if chosen is None:
        from .encoders import pick_device

        chosen = "paper" if pick_device(str(given.get("device", "auto"))).type == "cuda" \
            else "cpu"
    if not isinstance(chosen, str) or chosen not in recipes:
        raise IdauditError(f"unknown recipe {chosen!r} for world {name!r}; valid: "
                           f"{', '.join(recipes)}")
    recipe = recipes[chosen]
    has_data = given.get("data") is not None and kind.data_exists(given["data"])
    own_encoder = "encoder" in given or "encoder_kwargs" in given
    for key, value in recipe.options.items():
        if (key in recipe.dataset and has_data) or (key.startswith("encoder") and own_encoder):
            continue
        given.setdefault(key, value)
    return chosen, recipe.note


@dataclass
class RunRecord:
    """The outcome of one run, as the sweep writes it and ``train`` prints it."""

    id: str
    options: dict[str, Any]
    world: dict[str, Any]
    train: dict[str, Any]
    metrics: dict[str, Any]
    seconds: float
    steps_per_second: float
    device: str
    history: list[dict[str, Any]] = field(default_factory=list)
    best_init: int = 0
    embedding_sample: dict[str, list[list[float]]] | None = None
    label_free: dict[str, Any] | None = None  # idaudit.labelfree signals on the eval set
    checkpoint: str | None = None
    log: str | None = None
    version: str = __version__

    def to_dict(self, history: bool = False) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if not history:
            d.pop("history")
        return d


def label_free_signals(world: World, encoder: Any, cfg: TrainConfig) -> dict[str, Any]:
    """The label-free signals (no z) of the encoder on the evaluation set training used."""
    from .encoders import embed
    from .labelfree import label_free_metrics
    from .metrics import to_numpy

    ev = world.eval_set(cfg.n_eval, cfg.seed)
    h = to_numpy(embed(encoder, ev.x))
    hp = to_numpy(embed(encoder, ev.x_prime)) if ev.x_prime is not None else None
    return label_free_metrics(h, hp, ev.rho, seed=cfg.seed)


def embedding_sample(world: World, encoder: Any, cfg: TrainConfig,
                     n: int = EMBEDDING_SAMPLE) -> dict[str, list[list[float]]]:
    """The first ``n`` held-out evaluation latents z and their embeddings h (2D figures)."""
    ev = world.eval_set(cfg.n_eval, cfg.seed)
    rows = (ev.test_rows[:n].numpy() if ev.test_rows is not None
            else np.arange(min(n, len(ev.z))))
    h = embed(encoder, ev.x[rows])
    return {"z": ev.z[rows].double().tolist(), "h": h.double().tolist()}


def log_path_for(checkpoint: Path) -> Path:
    return checkpoint.with_name(checkpoint.name.removesuffix(".safetensors") + ".log.json")


def run(options: dict[str, Any] | ResolvedRun, out: str | Path | None = None, *,
        data_root: str | Path = "data", workers: int | None = None, progress: bool = False,
        sample: bool = False, say: Callable[[str], None] | None = None,
        label_free: bool = False) -> RunRecord:
    """Resolve ``options``, prepare the world's data (Reacher datasets are rendered under
    ``data_root`` unless ``data`` names the place), train, and — with ``out`` — write the
    checkpoint and ``NAME.log.json`` beside it. ``say`` gets a line with the expected
    training time when the run will take more than two minutes. ``label_free`` adds the
    label-free signals of the evaluation set (:mod:`idaudit.labelfree`) to the record.
    ``out`` and its log are checked (never the ``data`` file) and an earlier run's removed
    before any work, so a run that fails leaves no stale checkpoint to be audited."""
    resolved = options if isinstance(options, ResolvedRun) else resolve(options)
    if out is not None:
        out = Path(out)
        check_outputs([(out, "out"), (log_path_for(out), "out (its log)")],
                      [(resolved.options.get("data"), "data")], remove_stale=True)
    if say is not None and resolved.recipe_note:
        say(resolved.recipe_note)
    spec = KINDS.get(resolved.world.name).prepare(resolved.world, Path(data_root), workers,
                                                  progress)
    world = build_world(spec)
    if say is not None:
        est = estimate_seconds(world, resolved.train)
        if est > 120:
            took = f"{est / 60:.0f} min" if est < 5400 else f"{est / 3600:.1f} h"
            say(f"training takes about {took} here (timed on its first steps)")
    t0 = time.perf_counter()
    result = train(world, resolved.train, progress=progress)
    metrics = dict(result.metrics)
    if world.rho is None:  # no single ρ: say what the channel's per-dimension ρ were
        metrics.update({f"rho_{i}": r for i, r in enumerate(world.rho_per_dim)})
    record = RunRecord(
        id=resolved.id, options=resolved.options, world=spec.to_dict(),
        train=result.config.to_dict(), metrics=metrics, seconds=time.perf_counter() - t0,
        steps_per_second=result.steps_per_second, device=result.device, history=result.history,
        best_init=result.best_init,
        embedding_sample=(embedding_sample(world, result.encoder, result.config)
                          if sample and world.latent_dim == 2 else None),
        label_free=(label_free_signals(world, result.encoder, result.config)
                    if label_free else None))
    if out is not None:
        stored = world.spec_for(out.parent)
        save_checkpoint(out, result.encoder, result.encoder_name, result.encoder_kwargs, stored,
                        result.config.to_dict(), metrics)
        record.checkpoint, record.log = str(out), str(log_path_for(out))
        record.world = stored.to_dict()
        write_json(log_path_for(out), record.to_dict(history=True))
    return record


__all__ = ["RUN_OPTIONS", "ResolvedRun", "RunRecord", "resolve", "run"]
