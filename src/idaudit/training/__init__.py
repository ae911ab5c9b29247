"""Training: configuration, learning-rate schedules, the one loop every world trains through, and a
run (options → world spec and train config → trained encoder → checkpoint and log).
"""

from idaudit.training.config import TrainConfig
from idaudit.training.loop import TrainResult, estimate_seconds, resolve_config, train
from idaudit.training.schedule import SCHEDULES, constant_then_cosine

__all__ = ["SCHEDULES", "TrainConfig", "TrainResult", "constant_then_cosine", "estimate_seconds",
           "resolve_config", "train"]
