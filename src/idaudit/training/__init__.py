"""Training: configuration, schedules and the one loop every world trains through."""

from .config import TrainConfig
from .loop import TrainResult, estimate_seconds, resolve_config, train
from .schedule import SCHEDULES, constant_then_cosine

__all__ = ["SCHEDULES", "TrainConfig", "TrainResult", "constant_then_cosine", "estimate_seconds",
           "resolve_config", "train"]
