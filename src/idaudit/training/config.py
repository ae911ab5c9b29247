"""Training configuration (everything a run needs besides the world).

Fields left ``None`` take the world's default (``train_defaults`` of its kind), then the
global defaults of :mod:`idaudit.core.defaults`; :meth:`TrainConfig.resolved` fills them and
refuses options that do not apply to the world or the objective, naming the option.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from idaudit.core.defaults import OFFICIAL_LAMB, TRAIN_DEFAULTS, VICREG
from idaudit.core.errors import IdauditError, check_seed, require
from idaudit.core.limits import LIMITS, check
from idaudit.core.options import TRAIN, kinds
from idaudit.maths.losses import OBJECTIVES, SIGMA_RULES

__all__ = ["DEFAULTS", "FIELD_TYPES", "TrainConfig", "projector_widths"]

# each field's type, as idaudit.core.options declares it (sigma, a number or the name of a
# rule, is checked apart); None means "not given" except for the REQUIRED fields
FIELD_TYPES: dict[str, str] = {}  # filled below from the declarations, once TrainConfig exists
REQUIRED = frozenset({"objective", "batch", "lr", "seed", "inits", "n_slices", "device"})
#: the defaults :meth:`TrainConfig.resolved` fills in where neither the option nor the world
#: gives a value (the REQUIRED fields take theirs as the dataclass's field defaults)
DEFAULTS: dict[str, Any] = {k: v for k, v in TRAIN_DEFAULTS.items()
                            if k not in REQUIRED | {"encoder", "encoder_kwargs"}}
_D = TRAIN_DEFAULTS


MAX_VIEWS = int(LIMITS["n_views"].high)
MAX_PROJECTOR_LAYERS, MAX_PROJECTOR_WIDTH = 8, 65_536


def projector_widths(text: str) -> list[int]:
    """``"256,256,2"`` → [256, 256, 2]: the projector's layer widths, the last its output
    dimension (a one-line error names a bad entry)."""
    parts = [p.strip() for p in str(text).split(",")]
    widths = []
    for part in parts:
        require(part.isdigit() and 1 <= int(part) <= MAX_PROJECTOR_WIDTH,
                f"--projector takes comma-separated layer widths in [1, {MAX_PROJECTOR_WIDTH}] "
                f"(the last is its output dimension), got {text!r}")
        widths.append(int(part))
    require(len(widths) <= MAX_PROJECTOR_LAYERS,
            f"--projector takes at most {MAX_PROJECTOR_LAYERS} layers, got {len(widths)}")
    return widths


@dataclass
class TrainConfig:
    objective: str = _D["objective"]
    lamb: float | None = None
    sigma: float | str | None = None
    steps: int | None = None
    epochs: int | None = None
    batch: int = _D["batch"]
    lr: float = _D["lr"]
    weight_decay: float | None = None
    clip: float | None = None
    schedule: str | None = None
    seed: int = _D["seed"]
    inits: int = _D["inits"]
    eval_every: int | None = None
    n_eval: int | None = None
    n_slices: int = _D["n_slices"]
    views: str | None = None
    device: str = _D["device"]
    encoder: str | None = None
    encoder_kwargs: dict[str, Any] | None = None
    form: str | None = None
    n_views: int | None = None
    projector: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.sigma, str) and self.sigma not in SIGMA_RULES:
            try:  # "1.0" from a command line or a TOML grid
                self.sigma = float(self.sigma)
            except ValueError:
                pass  # validate() names the problem

    def validate(self) -> TrainConfig:
        """Types, ranges and names (a one-line error naming the option); returns self."""
        from idaudit.worlds.spec import check_type

        for name, kind in FIELD_TYPES.items():  # from a suite, --set or a dict, not only typer
            check_type(getattr(self, name), kind, "--" + name.replace("_", "-"),
                       optional=name not in REQUIRED)
        if not isinstance(self.sigma, str):
            check_type(self.sigma, "number", "--sigma", optional=True)
        require(self.encoder_kwargs is None or self.encoder is not None,
                "--encoder-kwargs needs --encoder (the world's own encoder takes its own "
                "arguments)")
        OBJECTIVES.get(self.objective)
        if self.encoder is not None:
            from idaudit.models.encoders import ENCODERS

            ENCODERS.get(self.encoder)
        for option in TRAIN:  # the declared intervals and choices, one wording each
            value = getattr(self, option.name, None)
            if value is not None and option.limit is not None:
                check(option.limit, value, option.flag)
            if value is not None and isinstance(option.choices, tuple):
                require(value in option.choices, f"{option.flag} must be one of "
                        f"{', '.join(option.choices)}, got {value!r}")
        if isinstance(self.sigma, str):
            require(self.sigma in SIGMA_RULES, f"--sigma must be a positive number, 'auto' or "
                    f"'sqrtn', got {self.sigma!r}")
        elif self.sigma is not None:
            require(self.sigma > 0 and math.isfinite(self.sigma),
                    f"--sigma must be > 0, got {self.sigma}")
        check_seed(self.seed)
        if self.projector is not None:
            projector_widths(self.projector)
        self._check_memory()
        return self

    def _check_memory(self) -> None:
        """Refuse sizes that cannot fit in memory before any work (the timing estimate that
        precedes training included): the evaluation set and a batch take at least 48 bytes a
        pair (z, z′, x, x′, h, h′ of one float32 each; each world checks its own size too),
        the loss curve 8 bytes a step."""
        from idaudit.core.memory import check_memory

        for name, value, per_row, what in (
                ("n_eval", self.n_eval, 48, "an evaluation set of {} pairs"),
                ("batch", self.batch, 48, "a training batch of {} pairs"),
                ("steps", self.steps, 8, "the loss curve of {} steps")):
            if value is not None:
                check_memory(value * per_row, f"--{name.replace('_', '-')} {value}: "
                             + what.format(value), "at least ")

    def resolved(self, refuses: frozenset[str] = frozenset(),
                 world_defaults: dict[str, Any] | None = None, world: str = "") -> TrainConfig:
        """Defaults filled in (the world's first); options that do not apply refused."""
        self.validate()
        for name in sorted(refuses):
            if getattr(self, name, None) is not None:
                raise IdauditError(f"--{name.replace('_', '-')} does not apply to world "
                                   f"{world!r}" + (" (it counts --epochs over its pairs)"
                                                   if name == "steps" else "")
                                   + (" (it counts --steps; use --steps)"
                                      if name == "epochs" else ""))
        if self.objective != "infonce" and self.sigma is not None:
            raise IdauditError("--sigma only applies to --objective infonce")
        if self.objective == "infonce" and self.lamb not in (None, 0.0):
            raise IdauditError("--lamb does not apply to --objective infonce (it has no "
                               "regulariser weight)")
        if self.objective == "vicreg" and self.lamb is not None:
            raise IdauditError("--lamb does not apply to --objective vicreg (its weights are the "
                               f"authors': {VICREG['invariance']:g} invariance, "
                               f"{VICREG['variance']:g} variance, {VICREG['covariance']:g} "
                               "covariance)")
        if self.form is not None and self.objective != "lejepa":
            raise IdauditError(f"--form does not apply to --objective {self.objective} (it "
                               "chooses between the lejepa objective's forms)")
        objective = OBJECTIVES.get(self.objective)
        if not objective.takes_lamb and self.lamb is not None and \
                self.objective not in ("infonce", "vicreg"):
            raise IdauditError(f"--lamb does not apply to --objective {self.objective} (it has "
                               "no regulariser weight)")
        if objective.two_views and self.n_views not in (None, 2):
            why = "it contrasts two views" if self.objective == "infonce" else \
                "it is defined for two branches"
            raise IdauditError(f"--n-views does not apply to --objective {self.objective} "
                               f"({why})")
        out = dataclasses.replace(self)
        if out.objective == "lejepa" and out.form == "official" and out.lamb is None:
            out.lamb = OFFICIAL_LAMB  # the library's λ, before any world's default
        if out.lamb is None and objective.default_lamb is not None:
            out.lamb = objective.default_lamb  # its own λ, before a world's (LeJEPA's)
        defaults = {**DEFAULTS, **(world_defaults or {})}
        for name, value in defaults.items():
            if name in refuses:
                value = None
            if getattr(out, name) is None:
                setattr(out, name, value)
        if out.objective == "infonce":
            out.lamb = 0.0
        else:
            out.sigma = None
            if not objective.takes_lamb:
                out.lamb = None  # no λ: a world's own default does not apply either
        if out.objective != "lejepa":
            out.form = None
        if out.epochs is not None:
            out.steps = None  # counted from the data: epochs × batches per epoch
        return out.validate()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


FIELD_TYPES.update({name: kind for name, kind in kinds(TRAIN).items()
                    if name in {f.name for f in dataclasses.fields(TrainConfig)}})
