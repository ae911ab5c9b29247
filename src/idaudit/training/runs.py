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
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from idaudit.core.defaults import DATA_ROOT, TRAIN_DEFAULTS
from idaudit.core.errors import IdauditError
from idaudit.core.jsontext import write_json
from idaudit.core.outputs import check_outputs
from idaudit.core.requests import TrainRequest, unknown_options
from idaudit.core.version import __version__
from idaudit.maths.losses import OBJECTIVES
from idaudit.models.checkpoint import save_checkpoint
from idaudit.models.encoders import ENCODERS, embed
from idaudit.training import TrainConfig, estimate_seconds, train
from idaudit.training.collapse import collapse_reason
from idaudit.training.loop import vector_encoder_refused
from idaudit.worlds import KINDS, World, WorldKind, WorldSpec, build_world, make_spec, world_name

TRAIN_OPTIONS = frozenset(f.name for f in dataclasses.fields(TrainConfig))
WORLD_OPTIONS = frozenset().union(*(KINDS.get(n).options for n in KINDS.builtin()),
                                  *(k.options for k in KINDS.family_objects()))
RUN_OPTIONS = frozenset({"world", "recipe"}) | TRAIN_OPTIONS | WORLD_OPTIONS
log = logging.getLogger("idaudit.training")
EMBEDDING_SAMPLE = 1500  # (z, h) rows kept for the 2D embedding figure


#: where a resolved value came from, in the order the chain looks: the option as given, the
#: recipe, the world's own default, the global default (TrainConfig and DEFAULTS)
GIVEN, DEFAULT = "given", "default"
_DATASET_KEYS = {"data_seed": "seed"}  # world option → its field in a dataset spec


@dataclass
class ResolvedRun:
    """What a run trains: the world's spec (before any rendering), the resolved config, and
    for every option the value it resolved to and where that came from (``sources``:
    ``{option: (value, source)}``, source one of ``given``, ``recipe NAME``, ``world NAME``,
    ``default``, or what forced it, e.g. ``objective infonce``)."""

    options: dict[str, Any]
    world: WorldSpec
    train: TrainConfig
    recipe: str | None = None
    recipe_note: str | None = None
    sources: dict[str, tuple[Any, str]] = field(default_factory=dict)
    device: str | None = None  # the device the recipe was chosen for
    id_basis: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def id(self) -> str:
        """``WORLD-OBJECTIVE-HASH`` of the configuration the user's options resolve to without
        any device (a recipe left to the device counts as ``auto``) and the idaudit version:
        the same options give the same id on every machine. The dataset's location is not
        part of it."""
        blob = json.dumps({**self.id_basis, "version": __version__}, sort_keys=True, default=str)
        digest = hashlib.sha1(blob.encode()).hexdigest()[:12]
        return f"{self.world.name}-{self.train.objective}-{digest}"

    def config_lines(self) -> list[str]:
        """``option = value  (source)``, one line per option (``idaudit train --show-config``)."""
        width = max((len(k) for k in self.sources), default=0)
        lines = [f"world{' ' * max(0, width - 5)} = {self.world.name}  "
                 f"({self.sources.get('world', (None, DEFAULT))[1]})"]
        if self.recipe is not None:
            lines.append(f"{'recipe'.ljust(width)} = {self.recipe}  "
                         f"({self.sources['recipe'][1]})")
        for key, (value, source) in self.sources.items():
            if key not in ("world", "recipe"):
                shown = "none" if value is None else json.dumps(value) if isinstance(
                    value, dict) else str(value)
                lines.append(f"{key.ljust(width)} = {shown}  ({source})")
        return lines


#: options added after run ids existed, left out of the id at their default so that a run's id
#: stays what it was
_ID_UNCHANGED: dict[str, tuple[Any, ...]] = {"form": ("paper", None), "n_views": (2,),
                                             "projector": (None,)}


def _id_basis(spec: WorldSpec, cfg: TrainConfig, recipe: str | None) -> dict[str, Any]:
    world = spec.to_dict()
    world["extra"] = {k: v for k, v in world["extra"].items() if k != "data"}
    train = {k: v for k, v in cfg.to_dict().items()
             if k != "device" and not (k in _ID_UNCHANGED and v in _ID_UNCHANGED[k])}
    # worlds without recipes keep the ids they had before recipes were part of the id
    return {"world": world, "train": train, **({"recipe": recipe} if recipe else {})}


def recipe_for(device: str) -> str:
    """The recipe a run on ``device`` (``cpu``, ``cuda``, ``cuda:1`` …) follows when none is
    named: the paper's on CUDA, the CPU one elsewhere."""
    return "paper" if str(device).startswith("cuda") else "cpu"


def resolve(options: dict[str, Any], device: str | None = None) -> ResolvedRun:
    """Split options between the world and training, validate both, fill every default.

    One chain, for every caller (``train``, ``demo``, sweeps, the run id): the option as
    given → the recipe → the world's default → the global default, each value's source kept
    in :attr:`ResolvedRun.sources`. ``device`` is the device the run will train on; it only
    chooses the recipe where none is named (``paper`` on CUDA, ``cpu`` elsewhere). Nothing
    here probes the machine: without ``device``, the options' own device counts when it names
    one, else ``cpu``. The run id never depends on it.
    """
    given = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(given) - RUN_OPTIONS)
    if unknown:
        raise IdauditError(f"unknown run option(s) {', '.join(unknown)}; valid: "
                           f"{', '.join(sorted(RUN_OPTIONS))}")
    name = world_name(given.pop("world", None), given)
    _refuse_slices_without_sigreg(given)
    kind = KINDS.get(name)
    if device is None:
        asked = str(given.get("device", "auto"))
        device = "cpu" if asked == "auto" else asked
    named = given.get("recipe")
    spec, cfg, filled, recipe = _resolve_chain(kind, name, given, device)
    sources = _sources(kind, name, given, filled, recipe, spec, cfg)
    sources["world"] = (name, GIVEN if options.get("world") is not None else DEFAULT)
    if recipe is not None:
        sources["recipe"] = (recipe, GIVEN if named is not None else f"device {device}")
    if recipe is not None and named is None:  # the id: the recipe left to the device
        id_spec, id_cfg, _, _ = _resolve_chain(kind, name, given, None)
        basis = _id_basis(id_spec, id_cfg, "auto")
    else:
        basis = _id_basis(spec, cfg, recipe)
    return ResolvedRun(options=dict(options), world=spec, train=cfg, recipe=recipe,
                       recipe_note=recipe_note(kind, recipe, spec, cfg, device),
                       sources=sources, device=device, id_basis=basis)


def _refuse_unused_data_root(resolved: ResolvedRun) -> None:
    """``data_root`` is where a world with data on disk renders it: refused where ``data``
    names the place, or the world renders nothing."""
    name = resolved.world.name
    if resolved.options.get("data") is not None:
        raise IdauditError("--data-root does not apply with --data (the dataset is at --data)")
    if not KINDS.get(name).files(resolved.world, data_root=Path(DATA_ROOT)):
        raise IdauditError(f"--data-root does not apply to world {name!r} (it renders no "
                           "dataset)")


def _refuse_slices_without_sigreg(given: dict[str, Any]) -> None:
    """``n_slices`` counts SIGReg's random directions: only the lejepa objective draws them."""
    objective = given.get("objective", TRAIN_DEFAULTS["objective"])
    if "n_slices" in given and objective != "lejepa":
        raise IdauditError(f"--n-slices does not apply to --objective {objective} (it counts "
                           "the random directions of SIGReg, the lejepa objective's "
                           "regulariser)")


def _resolve_chain(kind: WorldKind, name: str, given: dict[str, Any], device: str | None
                   ) -> tuple[WorldSpec, TrainConfig, dict[str, Any], str | None]:
    """(world spec, train config, the options the recipe filled, the recipe); ``device``
    None applies no recipe unless one is named."""
    opts = dict(given)
    chosen = opts.pop("recipe", None)
    filled: dict[str, Any] = {}
    recipe = None
    if chosen is not None or device is not None:
        recipe, filled = apply_recipe(kind, name, opts, chosen, device)
    opts.update(filled)
    world_opts = {k: v for k, v in opts.items() if k in kind.options}
    rest = {k: v for k, v in opts.items() if k not in kind.options}
    stray = sorted(set(rest) - TRAIN_OPTIONS)
    if stray:
        raise IdauditError(f"{', '.join('--' + s.replace('_', '-') for s in stray)} does not "
                           f"apply to world {name!r}")
    spec = make_spec(name, **world_opts)
    cfg = TrainConfig(**rest).resolved(kind.refuses, kind.train_defaults(), name)
    return spec, cfg, filled, recipe


def apply_recipe(kind: WorldKind, name: str, given: dict[str, Any], chosen: str | None,
                 device: str | None) -> tuple[str | None, dict[str, Any]]:
    """The world's recipe — the one named ``chosen``, else the one for ``device``
    (:func:`recipe_for`) — and the options it fills where ``given`` has none (dataset
    options are left to data that exist, encoder options to an encoder given)."""
    recipes = kind.recipes()
    if not recipes:
        if chosen is not None:
            raise IdauditError(f"--recipe does not apply to world {name!r} (it has no recipes)")
        return None, {}
    if chosen is None:
        chosen = recipe_for(device or "cpu")
    if not isinstance(chosen, str) or chosen not in recipes:
        raise IdauditError(f"unknown recipe {chosen!r} for world {name!r}; valid: "
                           f"{', '.join(recipes)}")
    recipe = recipes[chosen]
    has_data = given.get("data") is not None and kind.data_exists(given["data"])
    own_encoder = "encoder" in given or "encoder_kwargs" in given
    filled = {}
    for key, value in recipe.options.items():
        if (key in recipe.dataset and has_data) or (key.startswith("encoder") and own_encoder):
            continue
        if key not in given:
            filled[key] = value
    return chosen, filled


def _world_value(spec: WorldSpec, key: str) -> tuple[bool, Any]:
    d = spec.to_dict()
    dataset = d["extra"].get("dataset") or {}
    if key in d and key != "extra":
        return True, d[key]
    if key in d["extra"]:
        return True, d["extra"][key]
    key = _DATASET_KEYS.get(key, key)
    if key in dataset:
        return True, dataset[key]
    return False, None


def _sources(kind: WorldKind, name: str, given: dict[str, Any], filled: dict[str, Any],
             recipe: str | None, spec: WorldSpec, cfg: TrainConfig) -> dict[str, tuple[Any, str]]:
    """Each option's resolved value and where it came from."""
    from idaudit.training.config import DEFAULTS

    def source(key: str) -> str:
        if key in given:
            return GIVEN
        if key in filled:
            return f"recipe {recipe}"
        return DEFAULT

    out: dict[str, tuple[Any, str]] = {}
    for key in sorted(kind.options):
        found, value = _world_value(spec, key)
        if key == "data" or not found:
            if key in given:
                out[key] = (given[key], GIVEN)
            continue
        out[key] = (value, source(key) if key in given or key in filled else f"world {name}")
    world_defaults = kind.train_defaults()
    for f in dataclasses.fields(TrainConfig):
        key, value = f.name, getattr(cfg, f.name)
        if key in kind.refuses:
            continue
        src = source(key)
        if src == DEFAULT and key in world_defaults:
            src = f"world {name}"
        if src == DEFAULT and key.startswith("encoder") and value is None:
            src = f"world {name}: its own encoder"
        forced = ((key == "lamb" and not OBJECTIVES.get(cfg.objective).takes_lamb)
                  or (key == "sigma" and cfg.objective != "infonce"))
        if forced and key not in given:
            src = f"objective {cfg.objective}"
        if key == "lamb" and key not in given and key not in filled and \
                OBJECTIVES.get(cfg.objective).default_lamb is not None:
            src = f"objective {cfg.objective}"
        if key == "lamb" and cfg.form == "official" and key not in given:
            src = "form official"
        if key == "steps" and cfg.epochs is not None and value is None:
            src = "counted from epochs"
        if src == DEFAULT and key not in DEFAULTS and f.default is dataclasses.MISSING:
            continue
        out[key] = (value, src)
    return out


def recipe_note(kind: WorldKind, recipe: str | None, spec: WorldSpec, cfg: TrainConfig,
                device: str | None) -> str | None:
    """The line announcing the recipe, built from what will run: the resolved image size,
    pairs, epochs and encoder (those of the data when ``data`` exists)."""
    if recipe is None:
        return None
    dataset = spec.extra.get("dataset") or {}
    parts = []
    if dataset.get("image_size"):
        parts.append(f"{dataset['image_size']}×{dataset['image_size']} images")
    encoder = cfg.encoder or "the world's encoder"
    width = (cfg.encoder_kwargs or {}).get("width")
    parts.append(f"{encoder}" + (f" (width {width})" if width is not None else ""))
    if dataset.get("pairs"):
        parts.append(f"{dataset['pairs']:,} pairs".replace(",", " ")
                     + (f" × {cfg.epochs} epochs" if cfg.epochs is not None else ""))
    why = kind.recipes()[recipe].note
    return f"recipe {recipe}: " + ", ".join(parts) + (f" — {why}" if why else "")


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
    label_free: dict[str, Any] | None = None  # idaudit.maths.labelfree signals on the eval set
    encoder: str = ""  # which encoder trained and why (one line)
    checkpoint: str | None = None
    log: str | None = None
    version: str = __version__
    #: the embedding collapsed (:mod:`idaudit.training.collapse`): its numbers are no verdict
    collapsed: bool = False
    collapse: str | None = None  # the line saying so, when it did

    def to_dict(self, history: bool = False) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if not history:
            d.pop("history")
        return d


def label_free_signals(world: World, encoder: Any, cfg: TrainConfig) -> dict[str, Any]:
    """The label-free signals (no z) of the encoder on the evaluation set training used."""
    from idaudit.maths.labelfree import label_free_metrics
    from idaudit.maths.linear import to_numpy
    from idaudit.models.encoders import embed

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
        data_root: str | Path = DATA_ROOT, workers: int | None = None, progress: bool = False,
        sample: bool = False, say: Callable[[str], None] | None = None,
        label_free: bool = False) -> RunRecord:
    """Resolve ``options``, prepare the world's data (Reacher datasets are rendered under
    ``data_root`` unless ``data`` names the place), train, and — with ``out`` — write the
    checkpoint and ``NAME.log.json`` beside it. ``say`` gets a line with the expected
    training time when the run will take more than two minutes (without ``say``, these lines
    are records of the ``idaudit.training`` logger at INFO; ``progress`` shows the training's
    progress on stderr: a bar on a terminal, plain lines with an ETA elsewhere). A run whose
    embedding collapsed (:mod:`idaudit.training.collapse`) is recorded ``collapsed`` and
    warned of (through ``say``, else the logger at WARNING); it is no error. ``label_free`` adds the
    label-free signals of the evaluation set (:mod:`idaudit.maths.labelfree`) to the record.
    ``out`` and its log are checked (never the ``data`` file, nor inside the world's data)
    and an earlier run's removed before any work, so a run that fails leaves no stale
    checkpoint to be audited."""
    if not isinstance(options, ResolvedRun):
        from idaudit.models.encoders import pick_device  # the device this run trains on chooses the recipe

        options = resolve(options, str(pick_device(str(options.get("device") or "auto"))))
    resolved = options
    if out is not None:
        out = Path(out)
        reads = [(resolved.options.get("data"), "--data")] + [
            (p, f"what world {resolved.world.name!r} reads") for p in
            KINDS.get(resolved.world.name).files(resolved.world, data_root=Path(data_root))]
        check_outputs([(out, "--out"), (log_path_for(out), "--out (its log)")], reads,
                      remove_stale=True)
    tell = say if say is not None else log.info  # the Python API: lines as log records
    if resolved.recipe_note:
        tell(resolved.recipe_note)
    _refuse_vector_encoder_on_images(resolved)
    spec = KINDS.get(resolved.world.name).prepare(resolved.world, Path(data_root), workers,
                                                  progress)
    world = build_world(spec)
    if say is not None or log.isEnabledFor(logging.INFO):
        est = estimate_seconds(world, resolved.train, resolved=True)
        if est > 120:
            took = f"{est / 60:.0f} min" if est < 5400 else f"{est / 3600:.1f} h"
            tell(f"training takes about {took} here (timed on its first steps)")
    t0 = time.perf_counter()
    result = train(world, resolved.train, progress=progress, resolved=True, say=tell)
    metrics = dict(result.metrics)
    if world.rho is None:  # no single ρ: say what the channel's per-dimension ρ were
        metrics.update({f"rho_{i}": r for i, r in enumerate(world.rho_per_dim)})
    record = RunRecord(
        id=resolved.id, options=resolved.options, world=spec.to_dict(),
        train=result.config.to_dict(), metrics=metrics, seconds=time.perf_counter() - t0,
        steps_per_second=result.steps_per_second, device=result.device, history=result.history,
        best_init=result.best_init, encoder=result.encoder_note,
        embedding_sample=(embedding_sample(world, result.encoder, result.config)
                          if sample and world.latent_dim == 2 else None),
        label_free=(label_free_signals(world, result.encoder, result.config)
                    if label_free else None))
    record.collapse = collapse_reason(metrics)
    record.collapsed = record.collapse is not None
    if record.collapse is not None:  # not an error: the run did what was asked (exit 0)
        if say is not None:
            say(f"warning: {record.collapse}")
        else:
            log.warning(record.collapse)
    if out is not None:
        stored = world.spec_for(out.parent)
        save_checkpoint(out, result.encoder, result.encoder_name, result.encoder_kwargs, stored,
                        result.config.to_dict(), metrics)
        record.checkpoint, record.log = str(out), str(log_path_for(out))
        record.world = stored.to_dict()
        write_json(log_path_for(out), record.to_dict(history=True))
    return record


def _refuse_vector_encoder_on_images(resolved: ResolvedRun) -> None:
    """``--encoder mlp`` or ``coupling`` on a world of images is refused before any render
    (the kind's probe input shows the observations' shape without making them)."""
    name = resolved.train.encoder
    if not name or not hasattr(ENCODERS.get(name), "sized_for"):
        return
    probe = KINDS.get(resolved.world.name).probe_input(resolved.world, 2)
    if probe is not None and getattr(probe, "ndim", 2) > 2:
        raise vector_encoder_refused(name, resolved.world.name,
                                     f"images {tuple(probe.shape[1:])}")


def resolve_request(req: TrainRequest, device: str | None = None) -> ResolvedRun:
    """:func:`resolve` of the request's options, for the device it will train on (by default
    the one its ``device`` picks on this machine: CUDA when present for ``auto``)."""
    if req.encoder_kwargs is not None and req.encoder is None:
        raise IdauditError("--encoder-kwargs needs --encoder")
    if device is None:
        from idaudit.models.encoders import pick_device

        device = str(pick_device(req.device or "auto"))
    resolved = resolve(req.options(), device)
    if req.data_root is not None:
        _refuse_unused_data_root(resolved)
    return resolved


def default_checkpoint_path(resolved: ResolvedRun) -> Path:
    """Where ``idaudit train`` writes without ``--out``: runs/WORLD-OBJECTIVE-sSEED.safetensors."""
    return Path("runs") / (f"{resolved.world.name}-{resolved.train.objective}-"
                           f"s{resolved.train.seed}.safetensors")


def run_train(req: TrainRequest, resolved: ResolvedRun | None = None, *,
              progress: bool = False, say: Callable[[str], None] | None = None) -> RunRecord:
    """Train what :class:`TrainRequest` ``req`` asks for (:func:`run`; ``resolved``: its
    :func:`resolve_request`, when the caller has it already). Bad input raises
    :class:`~idaudit.core.errors.IdauditError` before any work."""
    resolved = resolved if resolved is not None else resolve_request(req)
    return run(resolved, req.out, data_root=req.data_root or DATA_ROOT, workers=req.workers,
               progress=progress, say=say)


def train_encoder(request: TrainRequest | None = None, /, *, progress: bool = False,
                  **options: Any) -> RunRecord:
    """Train an encoder as ``idaudit train`` does, with its options as keywords (see
    :class:`TrainRequest`; ``out`` writes the checkpoint and its log); return the record.
    ``train_encoder(TrainRequest(...))`` (``idaudit.train``) trains a request as it is
    (:func:`run_train`), with no other option."""
    if request is not None:
        if not isinstance(request, TrainRequest):
            raise IdauditError(f"train takes a TrainRequest or options as keywords, got "
                               f"{type(request).__name__}")
        if options:
            raise IdauditError("give a TrainRequest alone, or options, not both")
        return run_train(request, progress=progress)
    unknown_options(TrainRequest, options, "train")
    return run_train(TrainRequest(**options), progress=progress)


__all__ = ["RUN_OPTIONS", "ResolvedRun", "RunRecord", "TrainRequest", "default_checkpoint_path",
           "recipe_for", "resolve", "resolve_request", "run", "run_train", "train_encoder"]
