"""The global default of every option that is resolved through a chain, in one place.

Train and world options are resolved in one order (:func:`idaudit.training.runs.resolve`): the value
given, then the recipe's, then the world's own (``train_defaults`` of its kind, the fields its
spec fills), then the global default below. Help texts read these values instead of restating
them. A command's own options (``--pairs`` of ``plan``, ``--bootstrap`` of ``audit`` …) default
in their declarations (:mod:`idaudit.core.command_options`), which the command's flags and
its request dataclass's fields both read.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CAGE_SECONDS", "DATA_ROOT", "FLOOR_DRAWS", "OFFICIAL_LAMB", "TEST_FRACTION", "TRAIN_DEFAULTS",
           "NORMALIZATIONS", "VICREG", "WORLD", "WORLD_DEFAULTS", "default_text"]

#: the named normalisations ``--normalize`` takes, (mean, std) per channel of x/255, declared
#: once: the images' preparation (``loading/image_input.py``), the flag's help and its errors
#: read them (besides ``none``, x/255 only, and ``MEAN,STD``)
NORMALIZATIONS: dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "clip": ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)),
    "inception": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),  # x̂ in [−1, 1]
}

#: the world a run trains on when none is named and no --data says which
WORLD = "spiral"

#: where a run renders the dataset of a world with data on disk (Reacher) unless --data names
#: the place; sweeps keep theirs under OUT/data
DATA_ROOT = "data"

#: world options: the OU correlation, the source law, the coupling world's layers and the seed
#: of its mixing network, its latent dimension on 2D worlds, Reacher's stride, dataset seed,
#: image side and evaluation images; the evaluation set and plan gallery sizes of synthetic
#: worlds; the pairs rendered to evaluate an encoder brought from elsewhere on Reacher without
#: a dataset (4000 frames); a stable-worldmodel world's frames collected (``swm_frames``, in
#: episodes of ``episode_steps``)
WORLD_DEFAULTS: dict[str, Any] = {
    "rho": 0.95, "source": "gaussian", "dim": 2, "layers": 4, "mixing_seed": 0, "stride": 8,
    "data_seed": 0, "image_size": 64, "n_eval": 10_000, "gallery": 10_000, "rendered_eval_pairs": 2000,
    "swm_frames": 6000, "episode_steps": 100,
}

#: the share of rows an audit holds out where the world does not fix its held-out rows
TEST_FRACTION = 0.5

#: the shuffles of z against h behind an audit's uninformative floor (``--floor-draws``): the
#: fewest whose band — then their whole range — holds one more with probability ≥ 0.95 (39/41)
FLOOR_DRAWS = 40

#: seconds a program from a file may run in its cage (``--time-limit``): its whole life, load
#: and every forward together, on the wall clock and in CPU time per thread
CAGE_SECONDS = 3600.0

#: training options (the fields of :class:`~idaudit.training.config.TrainConfig`); None: none
#: unless the world has one (``epochs`` on dataset worlds, ``clip`` on Reacher, ``encoder``:
#: the world's own)
TRAIN_DEFAULTS: dict[str, Any] = {
    "objective": "lejepa", "lamb": 1e-3, "sigma": 1.0, "steps": 20_000, "epochs": None,
    "batch": 256, "lr": 3e-3, "weight_decay": 1e-2, "clip": None,
    "schedule": "constant_cosine", "seed": 0, "inits": 1, "eval_every": 500, "n_eval": 10_000,
    "n_slices": 256, "views": "anchor", "device": "auto", "encoder": None,
    "encoder_kwargs": None, "form": "paper", "n_views": 2, "projector": None,
}

#: VICReg as Bardes, Ponce & LeCun (2022) define it (``--objective vicreg``): the weights of
#: its invariance (their λ), variance (μ) and covariance (ν) terms, the standard deviation γ the
#: variance hinge asks of every dimension and the ε under its square root — the authors' values,
#: fixed (no train option changes them)
VICREG: dict[str, float] = {"invariance": 25.0, "variance": 25.0, "covariance": 1.0,
                            "gamma": 1.0, "eps": 1e-4}

#: λ of the lejepa library's form (``--form official``, A + λ·S_per-view) where none is given:
#: its minimal example's and stable-pretraining's value, on every world
OFFICIAL_LAMB = 0.02


def default_text(value: Any) -> str:
    """A default as a help text shows it: 10 000, 0.95, 1e-3."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}".replace(",", " ")
    return f"{value:g}"
