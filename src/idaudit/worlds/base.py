"""The World interface: a world's data process, the questions train, audit and plan ask.

Every world answers them alike: synthetic worlds (sources × OU channel × mixing, generated
online) and dataset-backed worlds (a pairs file written by ``idaudit world``, a rendered
Reacher dataset). What the CLI and orchestration need besides (options, specs, writing,
rendering, training defaults, recipes, the paper's encoder) is the world's kind, registered
in :data:`idaudit.worlds.kind.KINDS`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import torch

from idaudit.core.errors import IdauditError
from idaudit.worlds.spec import WorldSpec

__all__ = ["EpochPairs", "EvalSet", "PairSource", "Pairs", "PlanSet", "World", "split_views", "stored_pairs",
           "two_views"]


@dataclass
class EvalSet:
    """The evaluation set train and audit share.

    ``x`` is the observation of ``z`` and ``x_prime`` that of each row's partner z′ (a tensor,
    or a uint8 image array); ``rho`` is the channel's correlation when the pairs follow one
    known ρ (else None); ``test_rows`` fixes the held-out rows (None: a seeded random split);
    ``baseline`` is x as a flat float tensor for the raw-mixing R²(x → z) (None where x is not
    a small vector). ``angle_sigma``: the evaluation angles (``circular``) are drawn
    N(0, σ²) and observed mod 2π, so the audit can say what R² the world allows.
    ``z_white``: the world draws z white (Cov = I, synthetic sources and Reacher's OU
    angles), so the audit compares h with z as it is; else (a recording) with z whitened on
    the evaluation rows.
    """

    z: torch.Tensor
    x: Any
    x_prime: Any | None = None
    rho: float | None = None
    test_rows: torch.Tensor | None = None
    circular: tuple[int, ...] = ()
    baseline: torch.Tensor | None = None
    angle_sigma: float | None = None  # the circular latents' law N(0, σ²) where it is known
    z_white: bool = False  # z's law is white (Cov = I): the audit uses it as it is


@dataclass
class PlanSet:
    """A planning problem: a gallery (z, x) for the k-NN decoder and start/goal pairs."""

    gallery_z: torch.Tensor
    gallery_x: Any
    start_z: torch.Tensor
    start_x: Any
    goal_z: torch.Tensor
    goal_x: Any
    z_white: bool = False  # z's law is white (the world draws it so): the LQR reads z as it is


class Pairs(NamedTuple):
    """Positive pairs with their latents: observations ``x`` of ``z`` and ``x_prime`` of each
    row's partner ``z_prime`` (one channel step away), row for row."""

    x: Any
    x_prime: Any
    z: torch.Tensor
    z_prime: torch.Tensor


class PairSource(Protocol):
    """Training views: ``batch()`` returns the ``n_views`` views of one batch stacked, shape
    (n_views·b, …); :func:`split_views` gives them back one by one."""

    steps_per_epoch: int | None
    n_views: int
    gen: torch.Generator  # the run's generator (slice directions are drawn from it too)

    def batch(self) -> torch.Tensor: ...


class EpochPairs:
    """Views from stored pairs (x, x′): a fresh seeded permutation each epoch, ``n // b``
    batches per epoch (the last partial batch is dropped). Works on tensors and on uint8
    image arrays alike; rows are gathered in sorted order (friendlier to memory)."""

    n_views = 2

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


def split_views(stacked: torch.Tensor, n_views: int) -> tuple[torch.Tensor, ...]:
    """The ``n_views`` views of a :meth:`PairSource.batch`, each of shape (b, …)."""
    if n_views < 1 or stacked.shape[0] % n_views:
        raise IdauditError(f"a batch of {stacked.shape[0]} rows does not split into {n_views} "
                           "views")
    return tuple(stacked.chunk(n_views))


def stored_pairs(pairs: Pairs, n: int | None, seed: int | None, what: str) -> Pairs:
    """The first ``n`` of the pairs ``what`` holds (None: all); a seed does not apply."""
    if seed is not None:
        raise IdauditError(f"seed does not apply: {what} holds fixed pairs")
    total = len(pairs.z)
    if n is None:
        return pairs
    if not isinstance(n, int) or not 1 <= n <= total:
        raise IdauditError(f"n must be between 1 and {total} ({what} holds {total} pairs), "
                           f"got {n!r}")
    return Pairs(*(a[:n] for a in pairs))


def two_views(n_views: int, what: str) -> None:
    """Refuse more than two views where ``what`` holds only pairs (x, x′)."""
    if n_views != 2:
        raise IdauditError(f"--n-views {n_views} needs fresh latents; {what} has only its "
                           "(x, x′) pairs (two views)")


class World(ABC):
    """A world's data process: what train, audit and plan ask of it.

    Only :meth:`eval_set`, :meth:`plan_set` and :meth:`pair_source` must be written; the rest
    reads :attr:`spec`. How a spec is made, checked, built and written, the training defaults
    and the paper's encoder are its kind's (:class:`~idaudit.worlds.kind.WorldKind`).
    """

    spec: WorldSpec

    @property
    def name(self) -> str:
        """The world's registered name (``spiral``, ``reacher`` …)."""
        return self.spec.name

    @property
    def latent_dim(self) -> int:
        """N, the number of latents (columns of z)."""
        return self.spec.dim

    @property
    def rho(self) -> float | None:
        """The channel's correlation when all dimensions share one known ρ."""
        return self.spec.rho

    @property
    def rho_per_dim(self) -> list[float]:
        """Each latent's correlation between z and z′ (one ρ repeated where there is one)."""
        return [float(self.spec.rho)] * self.latent_dim

    @property
    def circular(self) -> tuple[int, ...]:
        """Latent indices that are angles."""
        return tuple(self.spec.extra.get("circular", ()))

    @property
    def latent_labels(self) -> tuple[str, ...]:
        """A label per latent for tables and figures (z₁, z₂, … unless the world names them)."""
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
        """x = g(z) for any latents z (worlds with a mixing map; others refuse)."""
        raise IdauditError(f"world {self.name!r} has no observation map for arbitrary latents")

    @abstractmethod
    def pair_source(self, views: str, batch: int, gen: torch.Generator, device: torch.device,
                    n_views: int = 2) -> PairSource:
        """Training views, however this world makes them (online or from disk); ``n_views``
        views of each row (stored pairs have two: :func:`two_views` refuses more).

        ``views``: ``"anchor"`` (synthetic worlds: every view one channel step from a shared
        latent, so two views correlate with ρ²) or ``"pair"`` (the pairs (z, z′) themselves,
        correlation ρ; the only scheme of stored pairs). Its ``batch()`` stacks the views;
        :func:`split_views` separates them. For pairs with their latents, see :meth:`pairs`.
        """

    def pairs(self, n: int | None = None, seed: int | None = None) -> Pairs:
        """``n`` positive pairs (x, x′, z, z′) drawn from ``seed`` — fresh draws where the world
        generates them, the stored pairs (``n`` of them, None: all; no ``seed``) where it reads
        them from disk."""
        raise IdauditError(f"world {self.name!r} does not give its pairs")

    def view_correlation(self, views: str) -> float | None:
        """Correlation of the two training views (ρ² for anchor views, ρ for pairs)."""
        if self.rho is None:
            return None
        return self.rho**2 if views == "anchor" else self.rho

    def spec_for(self, base_dir: Path | None) -> WorldSpec:
        """The spec to store in a file under ``base_dir``: dataset paths made relative to
        it (the built world knows where it found its data)."""
        return self.spec
