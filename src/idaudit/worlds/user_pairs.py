"""Any world's positive pairs for a training loop of one's own: tensors and a torch Dataset.

``world_pairs("spiral", n=10_000)`` gives (x, x′, z, z′) as tensors; ``WorldPairs`` is the same
as a ``torch.utils.data.Dataset`` whose ``set_epoch(e)`` draws fresh OU pairs for worlds that
generate them (synthetic worlds) and leaves stored pairs (a pairs file, a rendered Reacher
dataset) as they are. Train on them with any objective, then audit the encoder on the same
world with ``idaudit.audit(encoder=net, world=...)``: its evaluation set is drawn apart from
these pairs (another stream of the same law).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from idaudit.core.errors import IdauditError
from idaudit.worlds.base import Pairs, World
from idaudit.worlds.spec import WorldSpec
from idaudit.worlds.synthetic import SyntheticWorld

__all__ = ["WorldPairs", "world_pairs"]


def _world(world: World | WorldSpec | str | None, options: dict[str, Any]) -> World:
    from idaudit.worlds import as_world, make_spec

    if world is None or isinstance(world, str):
        return as_world(make_spec(world, **options))
    if options:
        raise IdauditError(f"{', '.join(sorted(options))}: world options go with a world "
                           "name, not with a built world or spec")
    return as_world(world)


def world_pairs(world: World | WorldSpec | str | None = None, n: int | None = None,
                seed: int | None = None, **options: Any) -> Pairs:
    """``n`` positive pairs (x, x′, z, z′) of ``world`` as tensors (:meth:`World.pairs`).

    ``world``: a name with its options as ``idaudit world`` takes them (``rho=0.9``,
    ``data="reacher-dir"`` …; None: the world that reads ``data``, else the default world,
    spiral), a :class:`WorldSpec` or a built :class:`World`. Synthetic worlds
    draw fresh pairs from ``seed`` (default 0); stored pairs are returned as stored.
    """
    return _world(world, options).pairs(n, seed)


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of epoch ``epoch``'s draws: distinct (seed, epoch) give unrelated streams."""
    state = np.random.SeedSequence([seed, epoch]).generate_state(2, dtype=np.uint32)
    return int(state[0]) << 31 | int(state[1]) >> 1


class WorldPairs(Dataset):
    """A world's pairs as a map-style Dataset: item i is (x_i, x′_i, z_i, z′_i).

    Epoch 0 holds :func:`world_pairs` (world, n, seed). For worlds that generate pairs,
    ``set_epoch(e)`` redraws all ``n`` pairs from :func:`epoch_seed` (seed, e) for e ≥ 1 —
    fresh OU draws each epoch, reproducible — as
    ``DistributedSampler.set_epoch`` is called; :attr:`fresh` says whether it does. Stored
    pairs (pairs file, Reacher images) stay the same: ``set_epoch`` leaves them be.
    """

    def __init__(self, world: World | WorldSpec | str | None = None, n: int | None = None,
                 seed: int | None = None, **options: Any) -> None:
        self.world = _world(world, options)
        self.n = n
        self.seed = seed
        self.fresh = isinstance(self.world, SyntheticWorld)
        self.epoch = 0
        self.pairs = self.world.pairs(n, seed)  # epoch 0: world_pairs(world, n, seed)

    def _seed_of(self, epoch: int) -> int | None:
        seed = 0 if self.seed is None else self.seed
        return seed if epoch == 0 else epoch_seed(seed, epoch)

    def set_epoch(self, epoch: int) -> None:
        """Draw epoch ``epoch``'s pairs (worlds that generate them; stored pairs stay)."""
        if self.fresh and epoch != self.epoch:
            self.pairs = self.world.pairs(self.n, self._seed_of(epoch))
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.pairs.z)

    def __getitem__(self, i: int) -> tuple[Any, Any, torch.Tensor, torch.Tensor]:
        return tuple(a[i] for a in self.pairs)  # type: ignore[return-value]
