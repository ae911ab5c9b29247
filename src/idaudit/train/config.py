"""Training configuration (everything a run needs besides the world)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from ..errors import require
from ..losses import OBJECTIVES, SIGMA_RULES


@dataclass
class TrainConfig:
    objective: str = "lejepa"
    lamb: float = 1e-3
    sigma: float | str = 1.0
    steps: int = 20_000
    batch: int = 256
    lr: float = 3e-3
    weight_decay: float = 1e-2
    seed: int = 0
    inits: int = 1
    eval_every: int = 500
    n_eval: int = 10_000
    n_slices: int = 256
    views: str = "anchor"
    device: str = "auto"
    encoder: str | None = None
    encoder_kwargs: dict[str, Any] | None = None

    def validate(self) -> TrainConfig:
        OBJECTIVES.get(self.objective)
        if self.encoder is not None:
            from ..encoders import ENCODERS

            ENCODERS.get(self.encoder)
        require(0.0 <= self.lamb <= 1.0 and math.isfinite(self.lamb),
                f"--lamb must lie in [0, 1], got {self.lamb}")
        if isinstance(self.sigma, str):
            require(self.sigma in SIGMA_RULES, f"--sigma must be a positive number, 'auto' or "
                    f"'sqrtn', got {self.sigma!r}")
        else:
            require(self.sigma > 0 and math.isfinite(self.sigma),
                    f"--sigma must be > 0, got {self.sigma}")
        require(self.steps >= 1, f"--steps must be ≥ 1, got {self.steps}")
        require(self.batch >= 2, f"--batch must be ≥ 2, got {self.batch}")
        require(self.lr > 0, f"--lr must be > 0, got {self.lr}")
        require(self.inits >= 1, f"--inits must be ≥ 1, got {self.inits}")
        require(self.eval_every >= 1, f"--eval-every must be ≥ 1, got {self.eval_every}")
        require(self.n_eval >= 10, f"--n-eval must be ≥ 10, got {self.n_eval}")
        require(self.views in ("anchor", "pair"),
                f"--views must be anchor or pair, got {self.views!r}")
        require(self.n_slices >= 1, f"--slices must be ≥ 1, got {self.n_slices}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})
