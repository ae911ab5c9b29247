"""One typed request per command: every option ``idaudit COMMAND`` takes, under its name
(dashes → underscores), with its default.

The CLI builds a request from its flags and reads its defaults and help from here; Python
callers build one directly or through the keyword functions (``idaudit.audit``, ``plan``,
``train``, ``consistency``, ``world``, ``sweep``); one function per command takes it
(``run_audit``, ``run_consistency``, ``run_plan``, ``run_train``, ``write_world``,
``run_sweep_request``) and validates it the same way for both. ``None`` means "not given":
options resolved through a chain (world and train options) are filled by the resolver
(:mod:`idaudit.core.defaults` holds their global defaults), so that it can say where each value
came from. This module imports nothing heavy: the CLI reads it before any command runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields, make_dataclass
from pathlib import Path
from typing import Any

from idaudit.core import options as _options
from idaudit.core.defaults import TEST_FRACTION
from idaudit.core.errors import IdauditError


def encoder_forms() -> str:
    """What a target may be: :data:`idaudit.core.registered.ENCODER_FORMS` (the help lines of
    idaudit's own file formats), then the plugin file formats installed (``idaudit.formats``
    entry points, by name: nothing is imported).

    Returns:
        One line, for ``--help`` and the error for a file no format reads.

    Example:
        >>> encoder_forms().startswith("an idaudit checkpoint")
        True
    """
    from idaudit.core.registered import ENCODER_FORMS, FORMATS

    return ENCODER_FORMS + "".join(f"; a {name} file ({FORMATS.help(name)})"
                                   for name in sorted(FORMATS.plugins()))


#: how token outputs (batch, tokens, dim) become one embedding per input: the first (CLS)
#: token, the mean over tokens, or all of them flattened
POOLS = ("cls", "mean", "none")


@dataclass
class LoadOptions:
    """How an encoder file is opened and which of its outputs is the embedding.

    ``arch`` (``module.path:factory`` or ``timm:NAME``) and ``arch_kwargs``: the network plain
    weights belong to; ``trust_pickle`` (``--trust-code``): unpickle whole modules and objects
    of the user's classes (runs code from the file), and where no cage can be built run
    programs from files in this process; ``key``: the entry of a torch.save dict holding the
    weights (dots nest: ``state_dict``, ``target_encoder``); ``prefix``: keep the keys under
    it and strip it (``model.backbone.``); ``pool``: ``cls`` | ``mean`` | ``none`` for token
    outputs (batch, tokens, dim); ``output``: a field of the output (``last_hidden_state``,
    ``pooler_output``, ``emb``) or an element (an integer) of a tuple; ``embed``: how the
    model is called, ``function(model, inputs) → (batch, m)``, the function itself (Python)
    or its name ``module:function``; in an audit, several by name (``{"backbone": f,
    "projector": g}``: one target each, side by side); ``weights``: the weights file of a
    LeWM directory that holds several (``weights_epoch_2.pt``), by name.
    """

    arch: str | None = None
    arch_kwargs: dict[str, Any] | None = None
    trust_pickle: bool = False
    key: str | None = None
    prefix: str | None = None
    pool: str | None = None
    output: str | int | None = None
    embed: str | Callable[[Any, Any], Any] | dict[str, Any] | None = None
    weights: str | None = None
    time_limit: float | None = None

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Refuse (one line naming the flag) a value of the wrong type or form; an integer
        ``output`` given as text ("0") becomes an int."""
        for name, flag in (("arch", "--arch"), ("key", "--key"), ("prefix", "--prefix"),
                           ("weights", "--weights")):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise IdauditError(f"{flag} must be a non-empty text, got {value!r}")
        if self.arch is not None and (":" not in self.arch or self.arch.endswith(":")
                                      or self.arch.startswith(":")):
            raise IdauditError("--arch must look like module.path:factory or timm:NAME, got "
                               f"{self.arch!r}")
        if self.arch_kwargs is not None and not isinstance(self.arch_kwargs, dict):
            raise IdauditError(f"--arch-kwargs must be an object, got {self.arch_kwargs!r}")
        if self.arch_kwargs and self.arch is None:
            raise IdauditError("--arch-kwargs goes with --arch (the factory it is passed to)")
        if not isinstance(self.trust_pickle, bool):
            raise IdauditError(f"--trust-code must be True or False, got {self.trust_pickle!r}")
        if self.key is not None and "" in self.key.split("."):
            raise IdauditError(f"--key must be names joined by dots (state_dict, "
                               f"model.encoder), got {self.key!r}")
        if self.pool is not None and self.pool not in POOLS:
            raise IdauditError(f"--pool must be one of {', '.join(POOLS)}, got {self.pool!r}")
        if isinstance(self.output, str) and re.fullmatch(r"-?[0-9]+", self.output.strip()):
            self.output = int(self.output)
        if isinstance(self.output, bool) or not (
                self.output is None or isinstance(self.output, int)
                or (isinstance(self.output, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*",
                                                                  self.output))):
            raise IdauditError("--output must be a field name (last_hidden_state, emb) or an "
                               f"index of a tuple (0), got {self.output!r}")
        if self.weights is not None and (Path(self.weights).name != self.weights or "\\" in
                                         self.weights or self.weights in (".", "..")):
            raise IdauditError("--weights names a file of the LeWM directory (weights_epoch_2.pt), "
                               f"not a path, got {self.weights!r}")
        if self.time_limit is not None and (
                isinstance(self.time_limit, bool) or not isinstance(self.time_limit, (int, float))
                or not 0 < self.time_limit < float("inf")):
            raise IdauditError(f"--time-limit must be a number of seconds > 0, got "
                               f"{self.time_limit!r}")
        if isinstance(self.embed, dict):
            if not self.embed:
                raise IdauditError("--embed as a dict names one function or more (name → "
                                   "function, one target each), got none")
            for name, fn in self.embed.items():
                if not isinstance(name, str) or not name.strip():
                    raise IdauditError(f"--embed's names must be non-empty texts, got {name!r}")
                _check_embed(fn, f"--embed[{name!r}]")
        elif self.embed is not None:
            _check_embed(self.embed, "--embed")

    def chooses_embedding(self) -> bool:
        return self.pool is not None or self.output is not None or self.embed is not None

    def refuse(self, names: tuple[str, ...], what: str) -> None:
        """A one-line error if an option in ``names`` is given for ``what``."""
        given = [f"--{n.replace('_', '-')}" for n in names  # `is`: output=0 is given
                 if getattr(self, n) is not None and getattr(self, n) is not False]
        if given:
            raise IdauditError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not "
                               f"apply to {what}")

    def refuse_all(self, what: str) -> None:
        """A one-line error if any option is given for ``what`` (arrays given as they are: no
        file is opened, no encoder called)."""
        self.refuse(tuple(f.name for f in fields(self)), what)

    def refuse_for_arrays(self, path: Path) -> None:
        if self.arch is not None:
            raise IdauditError(f"--arch goes with plain weights, not arrays ({path} holds "
                               "arrays)")
        self.refuse(("arch_kwargs", "prefix", "pool", "output", "embed", "time_limit"),
                    f"arrays ({path} holds arrays: they are audited as they are)")



def _check_embed(fn: Any, flag: str) -> None:
    """An embed function: callable (Python), or named ``module:function``."""
    if callable(fn):
        return
    text = fn if isinstance(fn, str) else ""
    mod, sep, attr = text.partition(":")
    if not (sep and mod.strip() and attr.strip()):
        raise IdauditError(f"{flag} must look like module.path:function, got {fn!r}",
                           library=f"{flag[2:]} must be a function (model, x) → (batch, m) or "
                                   f"its name module.path:function, got {fn!r}")


@dataclass
class WorldChoice:
    """Which world (a name, a ``WorldSpec`` or a ``World``) and its options: ``dim``,
    ``source``, ``alpha``, ``rho``, ``layers``, ``image_size`` (None: the world's own)."""

    world: Any = None
    dim: int | None = None
    source: str | None = None
    alpha: float | None = None
    rho: float | None = None
    layers: int | None = None
    image_size: int | None = None

    def world_options(self) -> dict[str, Any]:
        """The world options given (world names: see :func:`idaudit.worlds.make_spec`)."""
        return {k: getattr(self, k) for k in self._WORLD_OPTIONS if getattr(self, k) is not None}

    _WORLD_OPTIONS = ("dim", "source", "alpha", "rho", "layers", "image_size")


@dataclass
class EncoderOptions:
    """Where and how encoders are embedded (audit, consistency, plan, embed): how a file opens
    and which output is the embedding (``load``), the world and its options (``world``), or
    stored ``data``. Images reach an idaudit checkpoint as it recorded; any other encoder gets
    float N×3×S×S in [0, 1], then ``normalize`` (``imagenet``, ``none``, ``MEAN,STD``:
    :func:`idaudit.loading.image_input.parse_normalize`; None: the model's own where its files
    say it, :func:`idaudit.loading.image_input.model_normalize`, else none). Evaluation images
    rendered for an encoder (``--world reacher`` without ``--data``) are cached under
    ``cache_dir`` (None: ``$IDAUDIT_CACHE``, else ``~/.cache/idaudit``); ``progress`` shows a
    bar while they render."""

    load: LoadOptions = field(default_factory=LoadOptions)
    world: WorldChoice = field(default_factory=WorldChoice)
    data: str | Path | None = None
    normalize: str | None = None
    cache_dir: str | Path | None = None
    progress: bool = False

    def placement_flags(self, n_eval: int | None = None, with_rho: bool = True) -> list[str]:
        """The flags given that say where an encoder is embedded (``--rho`` only
        ``with_rho``): none of them applies to arrays, which are evaluated as they are."""
        given = [f for f, v in (("--world", self.world.world), ("--data", self.data),
                                ("--n-eval", n_eval), ("--normalize", self.normalize),
                                ("--cache-dir", self.cache_dir)) if v is not None]
        return given + [f"--{k.replace('_', '-')}" for k in self.world.world_options()
                        if with_rho or k != "rho"]


@dataclass
class GateOptions:
    """A gate, every way the CLI takes one: ``min_r2``, ``max_orthogonality_error``,
    ``min``/``max`` (``{metric: value}`` or ``["METRIC=VALUE", …]``) and ``gate`` (a
    ``{"min": …, "max": …}`` dict or a TOML file); :func:`idaudit.evaluations.gate.collect_thresholds`
    reads it."""

    min_r2: float | None = None
    max_orthogonality_error: float | None = None
    min: dict[str, float] | list[str] | None = None
    max: dict[str, float] | list[str] | None = None
    gate: dict[str, dict[str, float]] | str | Path | None = None


#: the parts a request is composed of, by field name: each option of a part is also an
#: option of the request (the CLI's flag, a keyword of the Python function), under its own name
_PARTS = (LoadOptions, WorldChoice, EncoderOptions, GateOptions)


def option_paths(request: type) -> dict[str, list[tuple[str, ...]]]:
    """Every option of a request class → where it lies: its own fields, and each field of a
    part (a field holding one of :data:`_PARTS`) under the part's name (``("encoder",
    "load", "arch")``). An option two places hold (``rho``: the arrays' ρ and a world's) has
    two paths."""
    out: dict[str, list[tuple[str, ...]]] = {}

    def walk(cls: type, prefix: tuple[str, ...]) -> None:
        for f in fields(cls):
            part = _part(f)
            if part is not None:
                walk(part, (*prefix, f.name))
            elif not f.name.startswith("_"):
                out.setdefault(f.name, []).append((*prefix, f.name))

    walk(request, ())
    return out


_PART_NAMES = {cls.__name__: cls for cls in _PARTS}


def _part(f: Any) -> type | None:
    """The part a dataclass field holds, or None (annotations are text in this module)."""
    return _PART_NAMES.get(f.type if isinstance(f.type, str) else getattr(f.type, "__name__", ""))


def _field_default(cls: type, name: str) -> Any:
    f = next(f for f in fields(cls) if f.name == name)
    if f.default_factory is not MISSING:
        return f.default_factory()
    return f.default


def _part_class(cls: type, name: str) -> type:
    part = _part(next(f for f in fields(cls) if f.name == name))
    assert part is not None, name
    return part


@dataclass
class Composed:
    """A request made of parts (:data:`_PARTS`), built from flat options too."""

    @classmethod
    def from_options(cls, **options: Any) -> Any:
        """The request whose options (flat, as the CLI's flags name them: ``arch``,
        ``world``, ``min_r2`` …) are ``options``: each goes to the part that holds it; an
        option two places hold goes to the first (see :meth:`AuditRequest.from_options`)."""
        paths = option_paths(cls)
        unknown = sorted(set(options) - set(paths))
        if unknown:
            raise IdauditError(f"{cls.__name__} has no option {', '.join(unknown)}")
        parts: dict[tuple[str, ...], dict[str, Any]] = {(): {}}
        for name, value in options.items():
            path = paths[name][0]
            parts.setdefault(path[:-1], {})[path[-1]] = value
        return _build(cls, (), parts)


def _build(cls: type, prefix: tuple[str, ...], parts: dict[tuple[str, ...], dict[str, Any]]
           ) -> Any:
    given = dict(parts.get(prefix, {}))
    for f in fields(cls):
        part = _part(f)
        if part is not None and any(k[:len(prefix) + 1] == (*prefix, f.name) for k in parts):
            given[f.name] = _build(part, (*prefix, f.name), parts)
    return cls(**given)


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
    reduce: str = "worst"
    bootstrap: int = 0
    test_fraction: float | None = None
    circular: str | tuple[int, ...] | list[int] = ()
    angle_sigma: float | None = None
    gauss_sims: int = 0
    floor_draws: int | None = None
    label_free: bool = False
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
        if isinstance(self.circular, str):
            try:
                return tuple(int(c) for c in self.circular.split(",") if c.strip())
            except ValueError:
                raise IdauditError("--circular expects comma-separated integers, got "
                                   f"{self.circular!r}") from None
        return tuple(self.circular)


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
    test_fraction: float = TEST_FRACTION


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
    seed: int | None = 0
    pairs: int = 100
    waypoints: int = 20
    gallery: int | None = None
    k: int = 5


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
    stride: int | None = None
    n_eval: int | None = None
    out: str | Path | None = None
    pairs: int = 10_000
    seed: int = 0
    workers: int | None = None

    _WORLD_OPTIONS = (*WorldChoice._WORLD_OPTIONS, "trajectory", "stride", "n_eval")


@dataclass
class SweepRequest:
    """Every option of ``idaudit sweep`` (:func:`idaudit.experiments.sweep.run_sweep_request`): the
    ``suite`` (a name or a TOML file), ``out`` the results directory, what to keep
    (``seeds``: the first N; ``steps``: a cap; ``dims``, ``objectives``; ``only``:
    ``{option: [values]}`` or ``["OPTION=V1,V2", …]``), ``set`` (``{option: value}`` or
    ``["OPTION=VALUE", …]``, on every run), ``workers`` parallel runs (None: cores, or one
    per GPU; under Ray the most runs in flight), the ``executor`` (local | ray), Ray's
    ``address`` and what each Ray task asks for (``cpus_per_run``, default 1; ``gpus_per_run``,
    default 0, a GPU run following the GPU recipe; ``memory_per_run`` in GiB), ``checkpoints``
    to keep each trained encoder."""

    suite: str | Path = ""
    out: str | Path = "sweeps"
    seeds: int | None = None
    steps: int | None = None
    dims: str | list[int] | None = None
    objectives: str | list[str] | None = None
    only: dict[str, list[Any]] | list[str] = field(default_factory=list)
    set: dict[str, Any] | list[str] = field(default_factory=list)
    workers: int | None = None
    executor: str = "local"
    address: str | None = None
    cpus_per_run: float | None = None
    gpus_per_run: float | None = None
    memory_per_run: float | None = None
    checkpoints: bool = False


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
    :meth:`Composed.from_options` name them, each read at its first place
    (:func:`option_paths`)."""
    out = {}
    for name, paths in option_paths(type(obj)).items():
        value = obj
        for step in paths[0]:
            value = getattr(value, step)
        out[name] = value
    return out


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
