"""The World interface: the questions train, audit, plan and sweep ask of every world.

Two kinds sit behind it: synthetic worlds (sources × OU channel × mixing, generated online)
and dataset-backed worlds (a pairs file written by ``idaudit world``, a rendered Reacher
dataset). Each kind registers in :data:`KINDS` under every world name it serves; nothing
outside ``idaudit.worlds`` branches on a world's name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import torch

from ..errors import IdauditError
from ..registry import Registry
from .spec import WorldSpec, check_type


@dataclass
class EvalSet:
    """The evaluation set train and audit share.

    ``x`` is the observation of ``z`` and ``x_prime`` that of each row's partner z′ (a tensor,
    or a uint8 image array); ``rho`` is the channel's correlation when the pairs follow one
    known ρ (else None); ``test_rows`` fixes the held-out rows (None: a seeded random split);
    ``baseline`` is x as a flat float tensor for the raw-mixing R²(x → z) (None where x is not
    a small vector).
    """

    z: torch.Tensor
    x: Any
    x_prime: Any | None = None
    rho: float | None = None
    test_rows: torch.Tensor | None = None
    circular: tuple[int, ...] = ()
    baseline: torch.Tensor | None = None


@dataclass
class PlanSet:
    """A planning problem: a gallery (z, x) for the k-NN decoder and start/goal pairs."""

    gallery_z: torch.Tensor
    gallery_x: Any
    start_z: torch.Tensor
    start_x: Any
    goal_z: torch.Tensor
    goal_x: Any


class PairSource(Protocol):
    """Training views: ``batch()`` returns both views of one batch stacked, shape (2b, …)."""

    steps_per_epoch: int | None
    gen: torch.Generator  # the run's generator (slice directions are drawn from it too)

    def batch(self) -> torch.Tensor: ...


class EpochPairs:
    """Views from stored pairs (x, x′): a fresh seeded permutation each epoch, ``n // b``
    batches per epoch (the last partial batch is dropped). Works on tensors and on uint8
    image arrays alike; rows are gathered in sorted order (friendlier to memory)."""

    def __init__(self, x: Any, x_prime: Any, b: int, gen: torch.Generator,
                 device: torch.device) -> None:
        self.x, self.x_prime, self.gen, self.device = x, x_prime, gen, device
        self.n = len(x)
        self.b = min(b, self.n)
        self.steps_per_epoch = max(1, self.n // self.b)
        self._perm: torch.Tensor | None = None
        self._i = 0

    def batch(self) -> torch.Tensor:
        if self._perm is None or self._i == self.steps_per_epoch:
            self._perm, self._i = torch.randperm(self.n, generator=self.gen), 0
        idx, _ = self._perm[self._i * self.b:(self._i + 1) * self.b].sort()
        self._i += 1
        if isinstance(self.x, torch.Tensor):
            views = torch.cat([self.x[idx], self.x_prime[idx]])
        else:
            import numpy as np

            i = idx.numpy()
            views = torch.from_numpy(np.concatenate([self.x[i], self.x_prime[i]]))
        return views.to(self.device, non_blocking=True)


@dataclass(frozen=True)
class Recipe:
    """A named set of run options (world and training) filled in where the user gave none.

    ``dataset`` options describe data to render; they are skipped when ``--data`` names data
    that exist already (the data say what they are). ``note`` says why the recipe exists; the
    line announcing a run is built from the resolved values (:func:`idaudit.runs.recipe_note`).
    """

    options: dict[str, Any]
    dataset: frozenset[str]
    note: str


class World(ABC):
    """What every world answers: the questions train, audit, plan and sweep ask of it."""

    #: world options (CLI names with underscores) this kind accepts
    options: ClassVar[frozenset[str]]
    #: train options that do not apply to worlds of this kind
    refuses: ClassVar[frozenset[str]] = frozenset()
    #: whether ``write`` makes a directory (else one file)
    writes_directory: ClassVar[bool] = False

    spec: WorldSpec

    @classmethod
    @abstractmethod
    def make_spec(cls, name: str, options: dict[str, Any]) -> WorldSpec:
        """Validate the given world options (only those the user set) and fill defaults."""

    @classmethod
    def check_spec(cls, spec: WorldSpec) -> WorldSpec:
        """Validate a spec read from a file (types and ranges); return it."""
        import math

        from ..errors import latent_indices

        if not (isinstance(spec.dim, int) and not isinstance(spec.dim, bool) and spec.dim >= 1):
            raise IdauditError(f"dim must be a positive integer, got {spec.dim!r}")
        check_type(spec.rho, "number", "rho")
        if not (math.isfinite(spec.rho) and 0.0 < spec.rho < 1.0):
            raise IdauditError(f"rho must lie strictly between 0 and 1, got {spec.rho!r}")
        check_type(spec.extra, "object", "extra")
        if "circular" in spec.extra:
            what = f"world {spec.name!r}: extra.circular"
            latent_indices(check_type(spec.extra["circular"], "list", what), what)
        return spec

    @classmethod
    @abstractmethod
    def from_spec(cls, spec: WorldSpec, base_dir: Path | None = None) -> World:
        """Rebuild the world (``base_dir``: where relative dataset paths are resolved)."""

    @classmethod
    def write(cls, spec: WorldSpec, out: Path, pairs: int, seed: int, workers: int | None,
              progress: bool) -> str:
        """``idaudit world``: write this world's pairs to ``out``; return a one-line summary."""
        raise IdauditError(f"world {spec.name!r} cannot be written as a dataset")

    @classmethod
    def prepare(cls, spec: WorldSpec, data_root: Path, workers: int | None = None,
                progress: bool = False) -> WorldSpec:
        """Make whatever the world needs on disk under ``data_root`` (sweeps render first)."""
        if workers is not None:
            raise IdauditError(f"--workers does not apply to world {spec.name!r} (nothing to "
                               "render)")
        return spec

    # ---- the questions ---------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def latent_dim(self) -> int:
        return self.spec.dim

    @property
    def rho(self) -> float | None:
        """The channel's correlation when all dimensions share one known ρ."""
        return self.spec.rho

    @property
    def rho_per_dim(self) -> list[float]:
        return [float(self.spec.rho)] * self.latent_dim

    @property
    def circular(self) -> tuple[int, ...]:
        """Latent indices that are angles."""
        return tuple(self.spec.extra.get("circular", ()))

    @property
    def latent_labels(self) -> tuple[str, ...]:
        return tuple(f"z{chr(0x2080 + i + 1)}" if i < 9 else f"z{i + 1}"
                     for i in range(self.latent_dim))

    @abstractmethod
    def eval_set(self, n: int | None, seed: int) -> EvalSet:
        """The one evaluation set train and audit share for ``(n, seed)``."""

    @abstractmethod
    def plan_set(self, pairs: int, gallery: int | None, seed: int) -> PlanSet:
        """A gallery (``gallery`` latents; None: the world's default) and ``pairs`` start/goal
        pairs for planning."""

    def observe(self, z: torch.Tensor) -> torch.Tensor:
        raise IdauditError(f"world {self.name!r} has no observation map for arbitrary latents")

    @abstractmethod
    def pair_source(self, views: str, batch: int, gen: torch.Generator, device: torch.device
                    ) -> PairSource:
        """Training views, however this world makes them (online or from disk)."""

    @abstractmethod
    def default_encoder(self) -> tuple[str, dict[str, Any]]:
        """The paper's encoder for this world: (registry name, kwargs)."""

    @classmethod
    def train_defaults(cls) -> dict[str, Any]:
        """Training options whose default differs on this world."""
        return {}

    @classmethod
    def data_exists(cls, data: str | Path) -> bool:
        """Whether ``data`` names data that exist already (so recipes do not describe it)."""
        return Path(data).exists()

    @classmethod
    def recipes(cls) -> dict[str, Recipe]:
        """Named run configurations (``--recipe``); empty where the world has none."""
        return {}

    def view_correlation(self, views: str) -> float | None:
        """Correlation of the two training views (ρ² for anchor views, ρ for pairs)."""
        if self.rho is None:
            return None
        return self.rho**2 if views == "anchor" else self.rho

    def spec_for(self, base_dir: Path | None) -> WorldSpec:
        """The spec to store in a file under ``base_dir`` (dataset paths made relative)."""
        return self.spec


KINDS: Registry[type[World]] = Registry("world")
