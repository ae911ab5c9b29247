"""A recording read: observations and true states, as pairs or as episodes, into the pairs a
recorded world (:mod:`idaudit.worlds.recorded`) evaluates, plans and trains on.

From a file (:func:`read_recording`: ``.npz``, a folder of ``.npy`` files, safetensors or HDF5
through :mod:`idaudit.core.arrayfiles`; episodes delimited by an ``episode`` array or, as
stable-worldmodel's datasets do, by ``ep_offset`` and ``ep_len``) or from arrays in memory;
observations stay where they are (memory-mapped, lazy) and are read row by row
(:class:`Rows`); the channel's ρ per latent is estimated from the pairs
(:func:`estimate_rho`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from idaudit.core.errors import IdauditError, require
from idaudit.core.limits import check

__all__ = ["EVAL_FRACTION", "KEY_DEFAULTS", "KEY_OPTIONS", "MIN_PAIRS", "OFFSETS", "Recording",
           "Rows", "episodes_recording", "estimate_rho", "pairs_recording", "read_recording"]

#: the share of episodes (pairs, frames) held out for evaluation
EVAL_FRACTION = 0.2
#: the fewest pairs each part (training, evaluation) must hold
MIN_PAIRS = 10
#: the names the arrays are read under, unless options say otherwise
KEY_DEFAULTS = {"observations": "x", "latents": "z", "episodes": "episode"}
#: the world options that name arrays (each a flag: --observations, --latents, --episodes)
KEY_OPTIONS = tuple(KEY_DEFAULTS)


# ---- ρ -----------------------------------------------------------------------------------

def _circular_mean(a: np.ndarray) -> np.ndarray:
    return np.arctan2(np.sin(a).mean(0), np.cos(a).mean(0))


def estimate_rho(z: np.ndarray, z_prime: np.ndarray, angles: tuple[int, ...] = ()
                 ) -> np.ndarray:
    """Each latent's correlation between z and z′, estimated from the pairs.

    Args:
        z, z_prime: the pairs' states, rows × N.
        angles: latents that are angles (radians): their circular correlation
            Σ sin(a − ā) sin(b − b̄) / √(Σ sin²(a − ā) Σ sin²(b − b̄)), ā the circular mean.

    Returns:
        ρ̂_j per latent: the Pearson correlation of z_j and z′_j (unbiased to O(1/n): for an OU
        channel z′ = ρz + √(1−ρ²)η its bias is about −ρ(1−ρ²)/(2n) and its standard error
        (1−ρ²)/√n); NaN where a latent does not vary.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> z = rng.standard_normal((20000, 2))
        >>> zp = 0.9 * z + np.sqrt(1 - 0.81) * rng.standard_normal(z.shape)
        >>> np.round(estimate_rho(z, zp), 2).tolist()
        [0.9, 0.9]
    """
    z, zp = np.asarray(z, dtype=np.float64), np.asarray(z_prime, dtype=np.float64)
    a, b = z - z.mean(0), zp - zp.mean(0)
    for j in angles:
        a[:, j] = np.sin(z[:, j] - _circular_mean(z[:, [j]])[0])
        b[:, j] = np.sin(zp[:, j] - _circular_mean(zp[:, [j]])[0])
    with np.errstate(invalid="ignore", divide="ignore"):
        return (a * b).sum(0) / np.sqrt((a * a).sum(0) * (b * b).sum(0))


# ---- the recording -----------------------------------------------------------------------

class Rows:
    """Rows of an array-like (a numpy array, memory map or HDF5 dataset) picked by ``rows``
    (ascending), read only when indexed; vectors come back as float32, images as uint8."""

    def __init__(self, base: Any, rows: np.ndarray) -> None:
        self.base, self.rows = base, rows
        self.shape = (len(rows), *tuple(base.shape[1:]))
        self.images = str(base.dtype) == "uint8" and len(base.shape) == 4

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: Any) -> np.ndarray:
        picked = self.rows[i]
        if np.ndim(picked) == 0:
            return self._cast(np.asarray(self.base[int(picked)]))
        order = np.argsort(picked, kind="stable")  # HDF5 wants ascending, distinct rows
        uniq, inverse = np.unique(picked[order], return_inverse=True)
        got = np.asarray(self.base[uniq])[inverse]
        out = np.empty_like(got)
        out[order] = got
        return self._cast(out)

    def _cast(self, a: np.ndarray) -> np.ndarray:
        return a if self.images else a.astype(np.float32, copy=False)

    def take(self, rows: np.ndarray) -> Any:
        """These rows read: a uint8 image array, or a float32 tensor of vectors."""
        a = self[np.asarray(rows)]
        return a if self.images else torch.from_numpy(np.ascontiguousarray(a))


@dataclass
class Recording:
    """A recording as pairs: observations of each pair's first and second view (``first``,
    ``second``: :class:`Rows`), their states, and each pair's episode (``group``)."""

    first: Rows
    second: Rows
    z: np.ndarray
    z_prime: np.ndarray
    group: np.ndarray
    form: str  # "pairs" or "episodes"

    def split(self) -> tuple[np.ndarray, np.ndarray]:
        """(training pairs, evaluation pairs): the last :data:`EVAL_FRACTION` of the groups
        held out; a single episode is cut in time, pairs that cross the cut dropped."""
        groups = np.unique(self.group)
        n = len(self.z)
        if len(groups) >= 2:
            held = groups[len(groups) - max(1, round(EVAL_FRACTION * len(groups))):]
            test = np.isin(self.group, held)
            train, evaluation = np.flatnonzero(~test), np.flatnonzero(test)
        else:
            cut = self.first.rows.min() + (1 - EVAL_FRACTION) * (
                self.second.rows.max() + 1 - self.first.rows.min())
            train = np.flatnonzero(self.second.rows < cut)
            evaluation = np.flatnonzero(self.first.rows >= cut)
        for part, rows in (("training", train), ("evaluation", evaluation)):
            if len(rows) < MIN_PAIRS:
                raise IdauditError(f"the recording's {part} part holds {len(rows)} pairs (of "
                                   f"{n}); it needs at least {MIN_PAIRS}: record more "
                                   "(or more episodes)")
        return train, evaluation


def _states(a: Any, what: str) -> np.ndarray:
    from idaudit.maths.linear import to_numpy

    try:
        z = np.asarray(to_numpy(a), dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise IdauditError(f"{what} is not numeric ({exc})") from None
    z = z.reshape(-1, 1) if z.ndim == 1 else z
    require(z.ndim == 2 and len(z) > 0, f"{what} must be rows × latents, got shape {z.shape}")
    require(bool(np.isfinite(z).all()), f"{what} holds NaN or infinite values")
    return z


def _observations(a: Any, rows: int, what: str) -> Any:
    a = a.numpy() if isinstance(a, torch.Tensor) else a
    if not hasattr(a, "shape") or not hasattr(a, "dtype"):
        a = np.asarray(a)
    shape, kind = tuple(a.shape), np.dtype(a.dtype)
    require(len(shape) >= 2 and shape[0] == rows, f"{what} must hold one observation per state "
            f"({rows} rows), got shape {shape}")
    image = kind == np.uint8 and len(shape) == 4 and shape[3] == 3
    require(image or (len(shape) == 2 and kind.kind in "fiu"),
            f"{what} must be vectors (rows × D numbers) or RGB images (rows × H × W × 3, "
            f"uint8), got shape {shape} of {kind}")
    return a


def _episode_pairs(episode: Any, rows: int, stride: int, what: str
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first rows, second rows, their episode) of the pairs (t, t + δ) in each episode."""
    ep = np.asarray(episode).reshape(-1)
    require(len(ep) == rows, f"{what} must hold one episode number per frame ({rows}), got "
            f"{len(ep)}")
    require(ep.dtype.kind in "iu" or (ep.dtype.kind == "f" and bool(np.all(ep == np.round(ep)))),
            f"{what} must hold whole episode numbers")
    starts = np.flatnonzero(np.r_[True, ep[1:] != ep[:-1]])
    if len(np.unique(ep)) != len(starts):
        raise IdauditError(f"{what}: each episode's frames must be consecutive (an episode "
                           "number comes back after another one)")
    t = np.arange(rows - stride)
    same = ep[t] == ep[t + stride]
    first = t[same]
    return first, first + stride, ep[first]


def pairs_recording(x: Any, x_prime: Any, z: Any, z_prime: Any, names: tuple[str, ...]
                     ) -> Recording:
    zs = _states(z, names[2])
    zps = _states(z_prime, names[3])
    require(zps.shape == zs.shape, f"{names[3]} has shape {zps.shape}, {names[2]} {zs.shape}: "
            "they must match")
    xs = _observations(x, len(zs), names[0])
    xps = _observations(x_prime, len(zs), names[1])
    require(tuple(xps.shape) == tuple(xs.shape), f"{names[1]} has shape {tuple(xps.shape)}, "
            f"{names[0]} {tuple(xs.shape)}: they must match")
    rows = np.arange(len(zs))
    return Recording(Rows(xs, rows), Rows(xps, rows), zs, zps, rows, "pairs")


def episodes_recording(x: Any, z: Any, episode: Any, stride: int, names: tuple[str, ...]
                        ) -> Recording:
    zs = _states(z, names[1])
    xs = _observations(x, len(zs), names[0])
    check("stride", stride, "--stride")
    first, second, group = _episode_pairs(episode, len(zs), stride, names[2])
    return Recording(Rows(xs, first), Rows(xs, second), zs[first], zs[second], group,
                     "episodes")


#: episodes as stable-worldmodel's datasets delimit them: each episode's first row and length
OFFSETS = ("ep_offset", "ep_len")


def _episodes_from_offsets(offset: Any, length: Any, rows: int, what: str) -> np.ndarray:
    """Each row's episode number from episodes' first rows and lengths (rows outside every
    episode refused)."""
    start = np.asarray(offset).reshape(-1).astype(np.int64)
    size = np.asarray(length).reshape(-1).astype(np.int64)
    require(len(start) == len(size) and len(start) > 0 and bool((size > 0).all()),
            f"{what} must give each episode's first row and its length")
    order = np.argsort(start)
    start, size = start[order], size[order]
    require(start[0] == 0 and bool((start[1:] == start[:-1] + size[:-1]).all())
            and start[-1] + size[-1] == rows,
            f"{what} must cover the {rows} rows, episode after episode")
    return np.repeat(np.arange(len(start)), size)


def read_recording(path: str | Path, keys: dict[str, str], stride: int) -> Recording:
    """The recording in the file ``path``: pairs where it holds ``OBS``, ``OBS_prime``,
    ``LAT`` and ``LAT_prime`` (the names ``keys`` gives), else episodes (``OBS``, ``LAT`` and
    ``EPISODES`` — or, as stable-worldmodel writes them, ``ep_offset`` and ``ep_len`` —, pairs
    ``stride`` frames apart)."""
    from idaudit.core.arrayfiles import array_names, read_arrays

    obs, lat, eps = (keys[k] for k in KEY_OPTIONS)
    pair_names = (obs, obs + "_prime", lat, lat + "_prime")
    arrays = read_arrays(path, (*pair_names, eps, *OFFSETS))
    src = f"{path}: array"
    if all(k in arrays for k in pair_names):
        return pairs_recording(*(arrays[k] for k in pair_names),
                                tuple(f"{src} {k!r}" for k in pair_names))
    if obs in arrays and lat in arrays and eps not in arrays and \
            all(k in arrays for k in OFFSETS):
        arrays[eps] = _episodes_from_offsets(arrays[OFFSETS[0]], arrays[OFFSETS[1]],
                                             len(arrays[lat]), f"{src}s {', '.join(OFFSETS)}")
    if obs in arrays and lat in arrays and eps in arrays:
        return episodes_recording(arrays[obs], arrays[lat], arrays[eps], stride,
                                   (f"{src} {obs!r}", f"{src} {lat!r}", f"{src} {eps!r}"))
    found = ", ".join(array_names(path)) or "none"
    raise IdauditError(f"{path} holds neither pairs ({', '.join(pair_names)}) nor episodes "
                       f"({obs}, {lat}, {eps}); it holds: {found} (name yours with "
                       "--observations, --latents, --episodes)")
