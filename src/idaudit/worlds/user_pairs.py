"""Any world's positive pairs for a training loop of one's own: tensors and a torch Dataset.

``world_pairs("spiral", n=10_000)`` gives (x, x′, z, z′) as tensors; ``WorldPairs`` is the same
as a ``torch.utils.data.Dataset`` whose ``set_epoch(e)`` draws fresh OU pairs for worlds that
generate them (synthetic worlds) and leaves stored pairs (a pairs file, a rendered Reacher
dataset) as they are. Train on them with any objective, then audit the encoder on the same
world with ``idaudit.audit(encoder=net, world=...)``: its evaluation set is drawn apart from
these pairs (another stream of the same law).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from idaudit.core.errors import IdauditError
from idaudit.worlds.base import Pairs, World
from idaudit.worlds.spec import WorldSpec
from idaudit.worlds.synthetic import SyntheticWorld

__all__ = ["PAIR_KEYS", "PairsSampler", "WorldPairs", "epoch_seed", "world_pairs"]


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
    """A world's pairs as a map-style Dataset: item i is (x_i, x′_i, z_i, z′_i), or with
    ``as_dict`` the dict ``{"x", "x_prime", "z", "z_prime"}`` (what stable-pretraining's
    Module and the monitor's default ``latents_key="z"`` read).

    Epoch 0 holds :func:`world_pairs` (world, n, seed). For worlds that generate pairs,
    ``set_epoch(e)`` redraws all ``n`` pairs from :func:`epoch_seed` (seed, e) for e ≥ 1 —
    fresh OU draws each epoch, reproducible — as ``DistributedSampler.set_epoch`` is called;
    :attr:`fresh` says whether it does. Stored pairs (pairs file, Reacher images, a recording)
    stay the same: ``set_epoch`` leaves them be. Nobody has to call it by hand: a DataLoader
    with :meth:`sampler` gets fresh pairs each epoch (Lightning calls the sampler's
    ``set_epoch``; a plain loop's sampler moves on by itself at each new pass), and
    :class:`~idaudit.lightning.IdentifiabilityMonitor` sets the epoch of the WorldPairs it
    trains on.
    """

    def __init__(self, world: World | WorldSpec | str | None = None, n: int | None = None,
                 seed: int | None = None, *, as_dict: bool = False, **options: Any) -> None:
        self.world = _world(world, options)
        self.n = n
        self.seed = seed
        self.as_dict = bool(as_dict)
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

    def sampler(self, shuffle: bool = True) -> PairsSampler:
        """A sampler over these pairs that sets their epoch: see :class:`PairsSampler`."""
        return PairsSampler(self, shuffle)

    def __len__(self) -> int:
        return len(self.pairs.z)

    def __getitem__(self, i: int) -> Any:
        row = tuple(a[i] for a in self.pairs)
        return dict(zip(PAIR_KEYS, row, strict=True)) if self.as_dict else row


#: the keys of a WorldPairs item with ``as_dict``
PAIR_KEYS = ("x", "x_prime", "z", "z_prime")


class PairsSampler(Sampler):
    """Rows of a :class:`WorldPairs` in a seeded order, with fresh pairs each epoch.

    ``set_epoch(e)`` (Lightning calls it at every epoch, as for ``DistributedSampler``) sets
    the dataset's epoch — fresh pairs for worlds that generate them — and the order of epoch
    e. In a plain loop that never calls it, each new pass over the loader moves on to the next
    epoch by itself (in worker processes the dataset is copied when the loader starts its
    workers: call ``set_epoch`` before each epoch there, or use ``num_workers=0``).

    Example:
        >>> import torch
        >>> data = WorldPairs("spiral", n=256, seed=0)
        >>> loader = torch.utils.data.DataLoader(data, batch_size=128, sampler=data.sampler())
        >>> first = next(iter(loader))[2]
        >>> second = next(iter(loader))[2]     # a new pass: epoch 1, fresh pairs
        >>> data.epoch, bool(torch.equal(first, second))
        (1, False)
    """

    def __init__(self, data: WorldPairs, shuffle: bool = True) -> None:
        self.data, self.shuffle = data, bool(shuffle)
        self.epoch, self._told, self._passes = data.epoch, False, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self._told = int(epoch), True
        self.data.set_epoch(self.epoch)

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self) -> Iterator[int]:
        if not self._told and self._passes:  # a plain loop: the next pass is the next epoch
            self.epoch += 1
            self.data.set_epoch(self.epoch)
        self._told, self._passes = False, self._passes + 1
        n = len(self.data)
        if not self.shuffle:
            return iter(range(n))
        seed = epoch_seed(0 if self.data.seed is None else self.data.seed, self.epoch)
        return iter(torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist())
