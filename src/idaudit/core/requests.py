"""One typed request per command: every option ``idaudit COMMAND`` takes, under its name
(dashes → underscores), with its default.

The CLI builds a request from its flags and reads its defaults and help from here; Python
callers build one directly or through the keyword functions (``idaudit.audit``, ``plan``,
``train``, ``consistency``, ``world``, ``sweep``); one function per command takes it
(``run_audit``, ``run_consistency``, ``run_plan``, ``run_train``, ``write_world``,
``run_sweep_request``) and validates it the same way for both. ``None`` means "not given":
options resolved through a chain (world and train options) are filled by the resolver
(:mod:`idaudit.core.defaults` holds their global defaults), so that it can say where each value
came from. The parts a request is composed of (``LoadOptions``, ``WorldChoice``,
``EncoderOptions``, ``GateOptions``) and :class:`~idaudit.core.request_parts.Composed`, which
builds a request from flat options, are in :mod:`idaudit.core.request_parts`. This module
imports nothing heavy: the CLI reads it before any command runs.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields, make_dataclass
from pathlib import Path
from typing import Any

from idaudit.core import command_options as _commands
from idaudit.core import options as _options
from idaudit.core.errors import IdauditError, index_list
from idaudit.core.request_parts import (
    Composed,
    EncoderOptions,
    GateOptions,
    WorldChoice,
    _part,
    option_paths,
)

#: each command's own options by name: a field's default is its option's (core/options.py)
_AUDIT, _CONSISTENCY, _PLAN, _WRITE, _SWEEP = (_options.by_name(g) for g in (
    _commands.AUDIT, _commands.CONSISTENCY, _commands.PLAN, _commands.WRITE, _commands.SWEEP))

__all__ = ["AuditRequest", "ConsistencyRequest", "EmbedRequest", "LIBRARY_ONLY", "PlanRequest",
           "SweepRequest", "TrainRequest", "WorldRequest", "default", "flat_options", "unknown_options"]


@dataclass
class AuditRequest(Composed):
    """Every option of an audit (:func:`idaudit.evaluations.audit.run_audit`).

    Inputs: ``targets`` (files the CLI takes: checkpoints, TorchScript, .pt2, weights with
    ``arch``, array files; or ``nn.Module``/callable encoders), or the arrays ``z``, ``h``
    (``h_prime`` with their ``rho``, ``x``). Where an encoder is embedded: ``encoder`` (its
    load options, the world and its options — a world's ``rho`` among them — or ``data``),
    on ``n_eval`` inputs from ``seed``. The gate: ``gate`` (``min_r2``,
    ``max_orthogonality_error``, ``min``/``max``, a gate table or file). Several targets are
    gated together on the worst run's value (``reduce="worst"``) or the median.
    ``bootstrap`` resamples for confidence intervals, ``test_fraction`` the held-out share
    (None: 0.5, or the rows a world fixes), ``circular`` the latent indices that are angles
    (``angle_sigma``: their law N(0, σ²) where no world says it, for R²'s ceiling),
    ``gauss_sims`` simulated data sets for the Gaussianity p-value (0: its asymptotic law),
    ``floor_draws`` shuffles of z against h for the uninformative floor (None:
    :data:`~idaudit.core.defaults.FLOOR_DRAWS`, 0: none), ``label_free`` ignores z.
    ``plot`` (a PNG of the figures) and ``html`` (a self-contained page: verdict, gates,
    figures, every metric with its meaning) are written where given (the ``plot`` extra).
    :meth:`from_options` builds one from flat options.
    """

    targets: list[Any] = field(default_factory=list)
    z: Any = None
    h: Any = None
    h_prime: Any = None
    rho: float | None = None  # the arrays' ρ; a world's is encoder.world.rho
    x: Any = None
    encoder: EncoderOptions = field(default_factory=EncoderOptions)
    gate: GateOptions = field(default_factory=GateOptions)
    n_eval: int | None = None
    seed: int | None = None
    reduce: str = _AUDIT["reduce"].default
    bootstrap: int = _AUDIT["bootstrap"].default
    test_fraction: float | None = None
    circular: str | tuple[int, ...] | list[int] = ()
    angle_sigma: float | None = None
    gauss_sims: int = _AUDIT["gauss_sims"].default
    floor_draws: int | None = None
    label_free: bool = _AUDIT["label_free"].default
    plot: str | Path | None = None
    html: str | Path | None = None

    @classmethod
    def from_options(cls, **options: Any) -> AuditRequest:
        """As :meth:`Composed.from_options`; ``rho`` is the arrays' with arrays (``z``,
        ``h``), else the world's."""
        if "rho" in options and options.get("z") is None and options.get("h") is None:
            world = options.pop("rho")
            req = super().from_options(**options)
            req.encoder.world.rho = world
            return req
        return super().from_options(**options)

    def circular_indices(self) -> tuple[int, ...]:
        return index_list(self.circular, "--circular")


@dataclass
class ConsistencyRequest(Composed):
    """Every option of ``idaudit consistency`` (:func:`idaudit.evaluations.consistency.run_consistency`):
    ``targets`` (two or more runs: files the CLI takes — arrays with h, ``.npy``, or any
    encoder form audit takes — arrays, or ``nn.Module``/callable encoders), where encoders are
    embedded (``encoder``, on ``n_eval`` inputs from ``seed``), the held-out share, and the
    gate (``min_r2`` on ``consistency_r2``, ``max_orthogonality_error`` on
    ``consistency_orthogonality_error``, ``min``/``max``, ``gate``)."""

    targets: list[Any] = field(default_factory=list)
    encoder: EncoderOptions = field(default_factory=EncoderOptions)
    gate: GateOptions = field(default_factory=GateOptions)
    n_eval: int | None = None
    seed: int | None = None
    test_fraction: float = _CONSISTENCY["test_fraction"].default


@dataclass
class PlanRequest(Composed):
    """Every option of ``idaudit plan`` (:func:`idaudit.evaluations.plan.run_plan`).

    ``target``: an encoder (``nn.Module``/callable, or a path to anything ``audit`` reads) or
    an array file with a gallery of ``z`` and ``h``; or the arrays ``z``, ``h`` themselves,
    whose rows are then the starts and goals. ``pairs`` start/goal pairs, ``waypoints``
    segments per plan, a k-NN decoder of ``k`` neighbours on a ``gallery`` of latents (None:
    the world's default), ``seed`` of the starts and goals (and the gallery). Where encoders
    are embedded: ``encoder``, as for audit (the gallery's size is ``gallery``).
    """

    target: Any = None
    z: Any = None
    h: Any = None
    encoder: EncoderOptions = field(default_factory=EncoderOptions)
    seed: int | None = _PLAN["seed"].default
    pairs: int = _PLAN["pairs"].default
    waypoints: int = _PLAN["waypoints"].default
    gallery: int | None = None
    k: int = _PLAN["k"].default


@dataclass
class EmbedRequest(Composed):
    """Every option of ``idaudit embed`` (:func:`idaudit.evaluations.pipeline.run_embed`):
    ``target`` an encoder in any form audit takes (a path, or an ``nn.Module``/callable),
    embedded where ``encoder`` says on ``n_eval`` inputs from ``seed``, and ``out`` the
    ``.npz`` to write (``z``, ``h``, ``h_prime`` and ``rho`` where the world has pairs,
    ``circular``, ``test_rows`` where it fixes them)."""

    target: Any = None
    out: str | Path | None = None
    encoder: EncoderOptions = field(default_factory=EncoderOptions)
    n_eval: int | None = None
    seed: int | None = None


class _TrainRequestMethods:
    def options(self) -> dict[str, Any]:
        """The run options given (every field but ``out``, ``workers``, ``data_root``),
        ``data`` as a string."""
        given = {f.name: getattr(self, f.name) for f in fields(self)  # type: ignore[arg-type]
                 if f.name not in _NOT_RUN_OPTIONS}
        if given["data"] is not None:
            given["data"] = str(given["data"])
        return {k: v for k, v in given.items() if v is not None}


#: how a request holds an option of each kind (the command line's text becomes this)
_REQUEST_TYPES = {"json": "dict[str, Any] | None", "path": "str | Path | None",
                  "directory": "str | Path | None",
                  "number-or-rule": "float | str | None"}


def request_fields(base: type, options: tuple[Any, ...], *extra: tuple[str, str]
                   ) -> list[tuple[str, str, Any]]:
    """The dataclass fields a request takes from option declarations
    (:mod:`idaudit.core.options`) that ``base`` does not hold already, then ``extra``
    ``(name, annotation)`` fields; each defaults to None ("not given")."""
    have = {f.name for f in fields(base)}
    made = [(o.name, _REQUEST_TYPES.get(o.kind, o.annotation), field(default=None))
            for o in options if o.name not in have]
    return made + [(name, annotation, field(default=None)) for name, annotation in extra]


TrainRequest = make_dataclass(
    "TrainRequest", request_fields(WorldChoice, (*_options.WORLD, *_options.TRAIN),
                                   ("mode", "str | None"), ("out", "str | Path | None")),
    bases=(_TrainRequestMethods, WorldChoice))
TrainRequest.__module__ = __name__
TrainRequest.__doc__ = """Every option of ``idaudit train`` (``run_train``); ``None`` means
"not given" (the resolver fills it and says where from). World options (``world`` …
``data``) and train options (``objective`` … ``encoder_kwargs``) are resolved together;
``out`` is the checkpoint to write, ``workers`` the render processes of a Reacher dataset,
``data_root`` where datasets are rendered unless ``data`` names the place. The fields are
made from the declarations of :mod:`idaudit.core.options`."""


_NOT_RUN_OPTIONS = frozenset({"out", "workers", "data_root"})


@dataclass
class WorldRequest(WorldChoice):
    """Every option of ``idaudit world`` (:func:`idaudit.worlds.write.write_world`): the world
    (``world``) and its options (None: the world's defaults), ``pairs`` positive pairs from
    ``seed``, written to ``out`` (a file, or a directory for Reacher) with ``workers`` render
    processes (None: one per core)."""

    trajectory: bool | None = None
    n_eval: int | None = None
    out: str | Path | None = None
    pairs: int = _WRITE["pairs"].default
    seed: int = _WRITE["seed"].default
    workers: int | None = None

    _WORLD_OPTIONS = (*WorldChoice._WORLD_OPTIONS, "trajectory", "n_eval")


@dataclass
class SweepRequest:
    """Every option of ``idaudit sweep`` (:func:`idaudit.experiments.sweep.run_sweep_request`): the
    ``suite`` (a name or a TOML file), ``out`` the results directory, what to keep
    (``seeds``: the first N; ``steps``: a cap; ``dims``, ``objectives``; ``only``:
    ``{option: [values]}`` or ``["OPTION=V1,V2", …]``), ``set`` (``{option: value}`` or
    ``["OPTION=VALUE", …]``, on every run), ``workers`` parallel runs (None: cores, or one
    per GPU; under Ray the most runs in flight), the ``executor`` (local | ray), Ray's
    ``address``, the ``runtime_env`` file every Ray task runs in, and what each Ray task
    asks for (``cpus_per_run``, default 1; ``gpus_per_run``, default 0, a GPU run following
    the GPU recipe; ``memory_per_run`` in GiB), ``checkpoints`` to keep each trained
    encoder."""

    suite: str | Path = ""
    out: str | Path = _SWEEP["out"].default
    seeds: int | None = None
    steps: int | None = None
    dims: str | list[int] | None = None
    objectives: str | list[str] | None = None
    only: dict[str, list[Any]] | list[str] = field(default_factory=list)
    set: dict[str, Any] | list[str] = field(default_factory=list)
    workers: int | None = None
    executor: str = _SWEEP["executor"].default
    address: str | None = None
    runtime_env: str | Path | None = None
    cpus_per_run: float | None = None
    gpus_per_run: float | None = None
    memory_per_run: float | None = None
    checkpoints: bool = _SWEEP["checkpoints"].default


#: the options of a request that no command has a flag for, each with the reason (every other
#: option is a flag of its command, under its name with dashes: tests/test_requests.py checks
#: both ways, docs/architecture.md lists these)
LIBRARY_ONLY: dict[str, str] = {
    "z": "arrays in memory; the command line reads them from an array file given as a target",
    "h": "arrays in memory; the command line reads them from an array file given as a target",
    "h_prime": "arrays in memory; the command line reads them from an array file given as a "
               "target",
    "x": "arrays in memory; the command line reads them from an array file given as a target",
    "progress": "the command line always shows its bar while evaluation images render (on "
                "stderr); Python chooses",
    "mode": "the same option as --trajectory/--ou (mode='trajectory' is trajectory=True), the "
            "name a Reacher dataset's spec and the sweep suites use",
}


def flat_options(obj: Any) -> dict[str, Any]:
    """The options of a request (or a part) under their flat names, as the CLI's flags and
    :meth:`~idaudit.core.request_parts.Composed.from_options` name them, each read at its first
    place (:func:`~idaudit.core.request_parts.option_paths`)."""
    out = {}
    for name, paths in option_paths(type(obj)).items():
        value = obj
        for step in paths[0]:
            value = getattr(value, step)
        out[name] = value
    return out


def _field_default(cls: type, name: str) -> Any:
    f = next(f for f in fields(cls) if f.name == name)
    if f.default_factory is not MISSING:
        return f.default_factory()
    return f.default


def _part_class(cls: type, name: str) -> type:
    part = _part(next(f for f in fields(cls) if f.name == name))
    assert part is not None, name
    return part


def default(request: type, name: str) -> Any:
    """The default of option ``name`` in ``request`` (what the CLI shows and uses), wherever
    in its parts the option lies."""
    paths = option_paths(request)
    if name not in paths:
        raise KeyError(f"{request.__name__} has no option {name!r}")
    cls = request
    path = paths[name][0]
    for part in path[:-1]:
        cls = _part_class(cls, part)
    return _field_default(cls, path[-1])


def unknown_options(request: type, given: dict[str, Any], what: str,
                    positional: tuple[str, ...] = ()) -> None:
    """Refuse keyword options that ``request`` does not have (``positional``: fields the
    keyword function takes under another name), naming them."""
    names = set(option_paths(request)) - set(positional)
    unknown = sorted(set(given) - names)
    if unknown:
        raise IdauditError(f"{what}() got unknown options: {', '.join(unknown)}")
