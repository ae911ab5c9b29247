"""The limits of numeric options, declared once: :data:`LIMITS` names each option's
:class:`Limit`, and :func:`check` is the one test every command, request and file reader
applies (as scikit-learn's ``validate_params`` declares a parameter's constraints beside it).

A refusal is one line naming the flag, the limit and the value, e.g. "--n-eval must be an
integer ≥ 10, got 5" or "--rho must lie strictly between 0 and 1, got 1.5" (exit 2).

The sizes an array brought to an audit may declare are here too (:data:`ARRAY_ELEMENTS`,
:func:`check_elements`, :func:`check_view`): the file readers check them from headers and
pickles before anything is read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from idaudit.core.errors import IdauditError

__all__ = ["ARRAY_ELEMENTS", "LIMITS", "check", "check_elements", "check_runs", "check_sweep_size",
           "check_view"]


@dataclass(frozen=True)
class Limit:
    """What a numeric option may be: an ``integer`` (bools refused) or any finite ``number``,
    at least ``low`` and at most ``high`` (None: unbounded), ends excluded where ``open``;
    ``unit`` follows the interval in messages ("pixels")."""

    integer: bool
    low: float | None = None
    high: float | None = None
    open: bool = False
    unit: str = ""

    def holds(self, value: Any) -> bool:
        if isinstance(value, bool):
            return False
        if self.integer and not isinstance(value, (int, np.integer)):
            return False
        if not isinstance(value, (int, float, np.integer, np.floating)) or \
                not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.open else value <= self.high)

    def text(self) -> str:
        """The limit in words: "an integer ≥ 10", "a number of seconds > 0", "lie in [2, 64]",
        "lie strictly between 0 and 1"."""
        unit = f" {self.unit}" if self.unit else ""
        if self.high is None:  # "a number of seconds > 0"
            noun = ("an integer" if self.integer else "a number") + (f" of{unit}" if unit else "")
            return f"{noun} {'>' if self.open else '≥'} {self.low:g}"
        if self.open:
            return f"lie strictly between {self.low:g} and {self.high:g}{unit}"
        return f"lie in [{self.low:g}, {self.high:g}]{unit}"


#: every limited option, by its request field's name
LIMITS: dict[str, Limit] = {
    "n_eval": Limit(True, 10),
    "bootstrap": Limit(True, 0),
    "gauss_sims": Limit(True, 0),
    "floor_draws": Limit(True, 0, 100_000),
    "test_fraction": Limit(False, 0, 1, open=True),
    "rho": Limit(False, 0, 1, open=True),
    "lamb": Limit(False, 0, 1),
    "pairs": Limit(True, 1),
    "waypoints": Limit(True, 1),
    "k": Limit(True, 1),
    "gallery": Limit(True, 5),
    "n_views": Limit(True, 2, 64),
    "image_size": Limit(True, 16, 512, unit="pixels"),
    "frames": Limit(True, 2),  # a stable-worldmodel world's frames collected
    "episode_steps": Limit(True, 2, 100_000),  # a stable-worldmodel world's steps per episode
    "runs": Limit(True, 2),  # consistency: how many runs are compared
    "sweep_runs": Limit(True, 1, 10_000),  # the runs one sweep takes (its grid, counted)
    "angle_sigma": Limit(False, 0, None, open=True),  # σ of the angles' law N(0, σ²)
    "time_limit": Limit(False, 0, None, open=True, unit="seconds"),  # a caged program's life
    # sweep: what to keep (--seeds; --steps is "steps"), runs in flight and a Ray task's
    # resources (--cpus-per-run, --gpus-per-run, --memory-per-run)
    "seeds": Limit(True, 1),
    "sweep_workers": Limit(True, 1),
    "per_run": Limit(False, 0),
    # world and train options (idaudit.core.options names each option's limit)
    "alpha": Limit(False, 0, None, open=True),
    "layers": Limit(True, 1),
    "stride": Limit(True, 1),
    "steps": Limit(True, 1),
    "epochs": Limit(True, 1),
    "inits": Limit(True, 1),
    "n_slices": Limit(True, 1),
    "batch": Limit(True, 2),
    "eval_every": Limit(True, 0),
    "lr": Limit(False, 0, None, open=True),
    "clip": Limit(False, 0, None, open=True),
    "weight_decay": Limit(False, 0),
}


def check(name: str, value: Any, flag: str | None = None, what: str = "") -> Any:
    """``value`` when it lies within ``LIMITS[name]``; else one line naming ``flag`` (default
    ``--name``), the limit and the value (``what`` follows the limit, e.g. " for an
    evaluation set")."""
    limit = LIMITS[name]
    if not limit.holds(value):
        flag = flag or "--" + name.replace("_", "-")
        verb = "be" if limit.high is None else ""
        shown = value if isinstance(value, (int, float, np.integer, np.floating)) \
            and not isinstance(value, bool) else repr(value)
        raise IdauditError(f"{flag} must {verb + ' ' if verb else ''}{limit.text()}{what}, "
                           f"got {shown}")
    return value


def check_runs(count: int) -> None:
    """Consistency compares at least two runs."""
    if not LIMITS["runs"].holds(count):
        raise IdauditError(f"consistency needs at least two runs, got {count}")


#: the most elements one array brought to an audit may declare (z, h, h′, x … from a file or
#: from Python): every check and metric passes over each element, several times over, and the
#: audit's float64 copy of 2³² elements alone is 32 GiB
ARRAY_ELEMENTS = 2**32


def check_elements(shape: tuple[int, ...], what: str) -> int:
    """The number of elements of an array declaring ``shape``, or a one-line refusal (exit 2)
    beyond :data:`ARRAY_ELEMENTS`; ``what`` names the array ("a.npz: array 'h'")."""
    n = math.prod(shape)
    if n > ARRAY_ELEMENTS:
        raise IdauditError(f"{what} declares shape {tuple(shape)}: {n} elements, more than the "
                           f"{ARRAY_ELEMENTS} (2³²) an array brought to an audit may hold")
    return n


def check_view(shape: tuple[int, ...], strides: tuple[int, ...] | None, storage: int,
               what: str) -> None:
    """Refuse (exit 2, one line) an array that declares more elements than the ``storage``
    elements it views: zero or overlapping ``strides`` repeat its elements (an expanded or
    ``as_strided`` tensor), so its shape says nothing of the data it holds."""
    n = math.prod(shape)
    if n > storage:
        laid = f", strides {tuple(strides)}" if strides is not None else ""
        raise IdauditError(f"{what} declares shape {tuple(shape)} ({n} elements{laid}) over a "
                           f"storage of {storage} element{'s' * (storage != 1)}: zero or "
                           "overlapping strides repeat its elements; idaudit reads only arrays "
                           "that hold every element they declare")


def check_sweep_size(count: int, where: str, shape: str = "") -> None:
    """A sweep takes at most ``LIMITS["sweep_runs"].high`` runs: ``count`` (a grid's product
    of lengths, counted before it is expanded; ``shape`` says it, " (1000 × 1000)") beyond
    it is one line naming both."""
    from idaudit.core.defaults import default_text

    high = int(LIMITS["sweep_runs"].high)
    if count > high:
        raise IdauditError(f"{where} makes {default_text(count)} runs{shape}, more than one "
                           f"sweep takes ({default_text(high)}); keep fewer values, or split "
                           "it into several suites")
