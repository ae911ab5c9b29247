"""The one training loop, for every world: draw views, encode both, step the objective.

Synthetic worlds draw fresh views every step; dataset-backed worlds go over their stored
pairs epoch by epoch. The objective comes from the registry (LeJEPA, whitening, VICReg, InfoNCE) on
every world; the numbers logged at the end are :func:`idaudit.maths.metrics.audit_metrics` on the
world's evaluation set, the same function and set ``idaudit audit`` uses.
"""

from __future__ import annotations

import copy
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from idaudit.core.defaults import FLOOR_DRAWS
from idaudit.core.errors import IdauditError
from idaudit.core.progress import ProgressBar
from idaudit.maths.losses import objective_for, objective_needs_directions, random_directions, sigma_for
from idaudit.maths.metrics import audit_metrics, identifiability_metrics
from idaudit.models.encoders import ENCODERS, build_encoder, embed, pick_device
from idaudit.training.config import TrainConfig, projector_widths
from idaudit.training.schedule import SCHEDULES
from idaudit.worlds import KINDS, EvalSet, World
from idaudit.worlds.base import PairSource

__all__ = ["Stepper", "TrainResult", "estimate_seconds", "resolve_config", "train", "vector_encoder_refused"]


def eval_metrics(encoder: nn.Module, ev: EvalSet, seed: int, full: bool = True
                 ) -> dict[str, Any]:
    """Metrics of ``encoder`` on an evaluation set: the audit's (``full``, Gaussianity without
    simulations; the ceiling where the set knows its angles' law, the uninformative floor) or
    its in-sample core (the training curve)."""
    h = embed(encoder, ev.x)
    hp = embed(encoder, ev.x_prime) if ev.x_prime is not None and ev.rho is not None else None
    if not full:
        return identifiability_metrics(ev.z, h, hp, ev.rho, circular=ev.circular,
                                       test_rows=ev.test_rows, seed=seed, z_white=ev.z_white)
    return audit_metrics(ev.z, h, hp, ev.rho, ev.baseline, circular=ev.circular,
                         test_rows=ev.test_rows, seed=seed, gauss_sims=0,
                         angle_sigma=ev.angle_sigma if ev.circular else None,
                         floor_draws=FLOOR_DRAWS, z_white=ev.z_white)


def make_optimizer(params, lr: float, weight_decay: float):
    try:
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    except (RuntimeError, TypeError):  # fused not available for this device/dtype
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


class Stepper:
    """One training step: a batch of all views from ``source``, the objective (on the
    projector's output when the encoder has one), one AdamW step (gradients clipped when
    ``cfg.clip`` is set); returns the loss as a 0-d tensor (no host sync). ``cfg`` must be
    resolved."""

    def __init__(self, source: PairSource, encoder: nn.Module, cfg: TrainConfig, total: int,
                 sigma: float, gen: torch.Generator, device: torch.device) -> None:
        self.source, self.encoder, self.cfg, self.total = source, encoder, cfg, total
        self.sigma, self.gen, self.device = sigma, gen, device
        self.objective = objective_for(cfg.objective, cfg.form)
        self.forward = getattr(encoder, "project", encoder)
        self.needs_dirs = objective_needs_directions(cfg.objective)
        self.schedule = SCHEDULES[cfg.schedule]
        self.opt = make_optimizer(encoder.parameters(), cfg.lr, cfg.weight_decay)

    def step(self, it: int) -> torch.Tensor:
        cfg = self.cfg
        lr = self.schedule(it, self.total, cfg.lr, self.source.steps_per_epoch)
        for group in self.opt.param_groups:
            group["lr"] = lr
        x = self.source.batch()
        views = self.source.n_views
        h = self.forward(x).reshape(views, x.shape[0] // views, -1)
        dirs = (random_directions(h.shape[-1], cfg.n_slices, self.gen, self.device)
                if self.needs_dirs else None)
        loss, _ = self.objective(h, cfg.lamb, self.sigma, dirs)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.clip is not None:
            torch.nn.utils.clip_grad_norm_(self.encoder.parameters(), cfg.clip)
        self.opt.step()
        return loss.detach()


@dataclass
class TrainResult:
    encoder: nn.Module
    encoder_name: str
    encoder_kwargs: dict[str, Any]
    config: TrainConfig
    metrics: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)
    best_init: int = 0
    seconds: float = 0.0
    steps_per_second: float = 0.0
    device: str = "cpu"
    steps: int = 0
    encoder_note: str = ""


def _init_seed(seed: int, init: int) -> int:
    return 1_000_003 * seed + 7919 * init + 17


def _sizes_from_world(name: str, default: str, kwargs: dict[str, Any], world: World
                      ) -> dict[str, Any]:
    """The sizes a registered encoder ``name`` other than the world's ``default`` takes from
    the world: a vector encoder (one with ``sized_for``) its input and output widths from a
    world whose own encoder is one too; refused, naming what to pass, where the world's
    observations are not vectors."""
    cls, own = ENCODERS.get(name), ENCODERS.get(default)
    if not hasattr(cls, "sized_for"):
        return {}
    if not hasattr(own, "vector_widths"):
        raise vector_encoder_refused(name, world.name, "no vectors")
    return cls.sized_for(*own.vector_widths(kwargs))


def vector_encoder_refused(name: str, world: str, gives: str) -> IdauditError:
    """The one-line refusal of a vector encoder (``--encoder mlp``) on a world that ``gives``
    something else (e.g. ``images (32, 32, 3)``)."""
    return IdauditError(f"--encoder {name} takes vectors, and world {world!r} gives {gives}: "
                        "use its own (the default) or cnn")


def _describe(name: str, kwargs: dict[str, Any]) -> str:
    sizes = ", ".join(f"{k} {v}" for k, v in kwargs.items() if isinstance(v, (int, float, str)))
    return f"{name} ({sizes})" if sizes else name


def encoder_choice(world: World, cfg: TrainConfig) -> tuple[str, dict[str, Any], str]:
    """The configured encoder (registry name, kwargs) and one line saying which it is and
    why. The world's own keeps its defaults (e.g. the dataset's pixel normalisation) under the
    arguments given; another registered encoder takes its sizes from the world
    (:func:`_sizes_from_world`) under the arguments given. With ``cfg.projector`` it is the
    backbone of a ``projected`` encoder."""
    default, defaults = KINDS.get(world.name).default_encoder(world)
    name, kwargs = default, defaults
    if not cfg.encoder:
        about = getattr(ENCODERS.get(default), "about", "")
        why = (f"world {world.name}'s own (the default: the paper's for this world"
               f"{', ' + about if about else ''}"
               f"{'; --encoder mlp for a generic network' if about else ''})")
    else:
        given = dict(cfg.encoder_kwargs or {})
        name = cfg.encoder
        if name == default:
            kwargs = {**defaults, **given}
            why = f"given by --encoder, world {world.name}'s own"
        else:
            sized = _sizes_from_world(name, default, defaults, world)
            kwargs = {**sized, **given}
            why = f"given by --encoder{f', sized from world {world.name}' if sized else ''}"
    shown = {k: v for k, v in kwargs.items() if k not in ("mean", "std")}
    note = f"encoder: {_describe(name, shown)} — {why}"
    if cfg.projector is None:
        return name, kwargs, note
    return ("projected", {"backbone": name, "backbone_kwargs": kwargs,
                          "widths": projector_widths(cfg.projector)},
            f"{note}; projector {cfg.projector} on top")


def _encoder_for(world: World, cfg: TrainConfig) -> tuple[str, dict[str, Any]]:
    """:func:`encoder_choice` without its line."""
    name, kwargs, _ = encoder_choice(world, cfg)
    return name, kwargs


def resolve_config(world: World, cfg: TrainConfig, resolved: bool = False) -> TrainConfig:
    """``cfg`` with the world's defaults filled in and inapplicable options refused; with
    ``resolved`` (a config from :func:`idaudit.training.runs.resolve`, the one resolver of a run) it
    is only validated, never resolved a second time."""
    if resolved:
        return cfg.validate()
    kind = KINDS.get(world.name)
    return cfg.resolved(kind.refuses, kind.train_defaults(), world.name)


def _sigma(world: World, cfg: TrainConfig) -> float:
    if cfg.objective != "infonce":
        return 1.0
    try:
        return sigma_for(cfg.sigma, world.latent_dim, world.view_correlation(cfg.views))
    except ValueError as exc:
        raise IdauditError(str(exc)) from None


def check_fits(encoder: nn.Module, name: str, world: World, ev: EvalSet) -> None:
    """Refuse an encoder that cannot take this world's observations (before any training)."""
    try:
        embed(encoder, ev.x[:4])
    except IdauditError as exc:
        raise IdauditError(f"encoder {name!r} does not fit world {world.name!r}: {exc}") \
            from None


def estimate_seconds(world: World, cfg: TrainConfig, probe_steps: int = 5,
                     resolved: bool = False) -> float:
    """Seconds the whole run would take here: the median of ``probe_steps`` timed steps of a
    throwaway encoder × the steps to run (the first two steps, which pay for warm-up —
    allocations, kernel selection — are not counted). ``resolved``: ``cfg`` is resolved."""
    cfg = resolve_config(world, cfg, resolved)
    device = pick_device(cfg.device)
    name, kwargs = _encoder_for(world, cfg)
    gen = torch.Generator().manual_seed(0)
    source = world.pair_source(cfg.views, cfg.batch, gen, device, cfg.n_views)
    total = cfg.steps or cfg.epochs * source.steps_per_epoch
    stepper = Stepper(source, build_encoder(name, kwargs).to(device).train(), cfg, total,
                      _sigma(world, cfg), gen, device)
    try:
        for it in range(2):
            float(stepper.step(it))
    except Exception:  # an encoder that does not fit: train() says so in one line
        return 0.0
    times = []
    for it in range(probe_steps):
        t0 = time.perf_counter()
        float(stepper.step(it))
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * total * cfg.inits


def train(world: World, cfg: TrainConfig, progress: bool = False, resolved: bool = False,
          say: Callable[[str], None] | None = None) -> TrainResult:
    """Train ``cfg.inits`` encoders on ``world``; keep the one with the lowest final loss.
    ``resolved``: ``cfg`` comes resolved (:func:`idaudit.training.runs.resolve`); ``say``
    gets the line naming the encoder (:func:`encoder_choice`) once it is known to fit."""
    cfg = resolve_config(world, cfg, resolved)
    device = pick_device(cfg.device)
    enc_name, enc_kwargs, enc_note = encoder_choice(world, cfg)
    sigma = _sigma(world, cfg)
    ev = world.eval_set(cfg.n_eval, cfg.seed)
    sources = [world.pair_source(cfg.views, cfg.batch,
                                 torch.Generator().manual_seed(_init_seed(cfg.seed, i) + 1),
                                 device, cfg.n_views) for i in range(cfg.inits)]
    with torch.random.fork_rng(devices=[]):
        check_fits(build_encoder(enc_name, enc_kwargs).to(device), enc_name, world, ev)
    if say is not None:
        say(enc_note)
    per_epoch = sources[0].steps_per_epoch
    total = cfg.steps or cfg.epochs * per_epoch
    bar = ProgressBar(progress, total * cfg.inits, "train")
    best: tuple[float, int, dict, list] | None = None
    history: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    with bar:
        for init, source in enumerate(sources):
            encoder, losses, curve = _train_init(init, source, (enc_name, enc_kwargs), cfg, total,
                                                 per_epoch, sigma, ev, device, bar)
            record = _init_record(init, losses, curve, total, per_epoch)
            history.append(record)
            final = record["final_loss"]
            if best is None or final < best[0] or not math.isfinite(best[0]):
                best = (final, init, copy.deepcopy(encoder.state_dict()), curve)
    seconds = time.perf_counter() - t0
    assert best is not None
    encoder = build_encoder(enc_name, enc_kwargs).to(device)
    encoder.load_state_dict(best[2])
    metrics = eval_metrics(encoder, ev, cfg.seed)
    metrics["final_loss"] = best[0]
    return TrainResult(encoder=encoder.cpu().eval(), encoder_name=enc_name,
                       encoder_kwargs=enc_kwargs, config=cfg, metrics=metrics, history=history,
                       best_init=best[1], seconds=seconds,
                       steps_per_second=total * cfg.inits / seconds, device=str(device),
                       steps=total, encoder_note=enc_note)


def _train_init(init: int, source: PairSource, encoder: tuple[str, dict[str, Any]],
                cfg: TrainConfig, total: int, per_epoch: int | None, sigma: float, ev: EvalSet,
                device: torch.device, bar: ProgressBar
                ) -> tuple[nn.Module, torch.Tensor, list[dict[str, Any]]]:
    """Init ``init``: the ``encoder`` (registry name, kwargs) built from its own seed and
    trained ``total`` steps on ``source``; (the encoder, its loss at every step, its curve:
    the in-sample metrics at every ``cfg.eval_every`` steps and at the end). A loss that is
    not finite where it is looked at (an evaluation, an epoch's end, the end) stops the run."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_init_seed(cfg.seed, init))
        model = build_encoder(*encoder)
    model.to(device).train()
    stepper = Stepper(source, model, cfg, total, sigma, source.gen, device)
    losses = torch.empty(total, device=device)
    curve: list[dict[str, Any]] = []
    for it in range(total):
        losses[it] = stepper.step(it)
        last = it + 1 == total
        at_eval = cfg.eval_every and (it + 1) % cfg.eval_every == 0
        at_epoch = per_epoch is not None and (it + 1) % per_epoch == 0
        if at_eval or last or at_epoch:
            loss_now = float(losses[it])
            if not math.isfinite(loss_now):
                raise IdauditError(f"training diverged at step {it + 1} (loss {loss_now})",
                                   exit_code=3)
            if at_epoch and not (at_eval or last):
                bar.show(f"init {init}  epoch {(it + 1) // per_epoch}  "
                         f"loss {loss_now:.4g}")
        if at_eval or last:
            m = eval_metrics(model, ev, cfg.seed, full=False)
            curve.append({"step": it + 1, "loss": loss_now,
                          "r2_h_to_z": m["r2_h_to_z"],
                          "orthogonality_error": m["orthogonality_error"]})
            bar.show(f"init {init}  loss {loss_now:.4g}  R² in-sample {m['r2_h_to_z']:.4f}")
        bar.advance(1)
    return model, losses, curve


def _init_record(init: int, losses: torch.Tensor, curve: list[dict[str, Any]], total: int,
                 per_epoch: int | None) -> dict[str, Any]:
    """What the training log keeps of one init: its final loss (the mean over the last
    twentieth of its steps, at least 50 of them), its curve, its loss every 10 steps and, for
    a dataset, per epoch."""
    tail = max(1, min(total, max(50, total // 20)))
    final = float(losses[-tail:].mean())
    record: dict[str, Any] = {"init": init, "final_loss": final, "curve": curve,
                              "loss_every_10": losses[::10].cpu().tolist()}
    if per_epoch is not None:
        record["epoch_loss"] = losses.view(-1, per_epoch).mean(1).cpu().tolist()
    return record
