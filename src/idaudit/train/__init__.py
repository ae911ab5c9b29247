"""Training: configuration, schedule and the loop."""

from .config import TrainConfig
from .loop import TrainResult, train
from .schedule import constant_then_cosine

__all__ = ["TrainConfig", "TrainResult", "constant_then_cosine", "train"]
