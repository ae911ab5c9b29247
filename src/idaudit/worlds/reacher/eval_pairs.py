"""Reacher evaluation pairs rendered natively at any image size, cached on disk.

For encoders that expect another input size than a dataset's (ViTs at 224 or 256 px): ``n``
OU pairs — z ~ N(0, I₂) and z′ = ρz + √(1−ρ²)η, η ~ N(0, I₂) (:func:`eval_angles`,
:func:`eval_partners`; with the default seed z is every Reacher dataset's evaluation z) — both
rendered at S × S, S in [16, 512], with no training set. The cache lives under the cache root
(a given directory, else ``$IDAUDIT_CACHE``, else ``~/.cache/idaudit``) in
``reacher-eval/<key>``::

    meta.json          format, format_version, the spec, the renderer, the chunks (rows, sha256)
    pairs-00000.npz    z, z_prime (angles, radians), x, x_prime (uint8 k×S×S×3)

The key names ρ, S, n and the seed and ends in a hash of them and of the renderer (MuJoCo and
dm_control versions, GL backend, settings: :func:`idaudit.worlds.reacher.render.render_settings`). The
directory is written in a private temporary directory beside it and renamed into place, so it
is complete or absent; a cache that fails any check (unreadable, truncated or altered chunks,
other angles, shapes or renderer) is rendered again, with a one-line note on stderr.

The manifest only shows that the files are the ones it lists, and whoever can write the
directory can rewrite both. Rendering is deterministic, so a cache that passes those checks is
also compared, byte for byte, with a fresh render of a few frames (:func:`_spot_frames`: at
least one of every chunk, of both views, drawn from ``secrets``, so nobody knows in advance
which) in one render worker; when any differs the whole set is rendered again, with the note.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import secrets
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from idaudit.core.atomic import make_temp_dir
from idaudit.core.defaults import WORLD_DEFAULTS
from idaudit.core.errors import IdauditError, check_seed, first_line, printable
from idaudit.core.jsontext import MAX_TEXT_INPUT
from idaudit.core.limits import check
from idaudit.core.memory import check_memory
from idaudit.core.progress import ProgressBar
from idaudit.worlds.base import EvalSet
from idaudit.worlds.reacher.data import EVAL_SEED, eval_angles, eval_partners, read_chunk
from idaudit.worlds.spec import check_type

__all__ = ["ReacherEvalSpec", "cache_key", "cache_root", "eval_pairs", "reacher_eval_set"]

FORMAT = "idaudit-reacher-eval"
FORMAT_VERSION = 1
CACHE_ENV = "IDAUDIT_CACHE"
CHUNK_BYTES = 1 << 27  # images of one view per chunk file: at most 128 MiB (and 1000 rows)
RENDER_CHUNK = 64  # frames per render job sent to a worker
POOL_MIN_FRAMES = 2000  # fewer frames render faster in one worker than several start (≈ 4 s)
SPOT_FRAMES = 4  # frames re-rendered to check a cache: one per chunk and at least this many,
SPOT_MAX = 16  # but no more than this many (unless there are more chunks)
VIEWS = ("x", "x_prime")
_CHUNK_NAME = re.compile(r"pairs-\d{5}\.npz")


@dataclass(frozen=True)
class ReacherEvalSpec:
    """What fixes an evaluation set's pixels besides the renderer: ρ, S, n and the seed."""

    rho: float = WORLD_DEFAULTS["rho"]
    image_size: int = 224
    n: int = WORLD_DEFAULTS["rendered_eval_pairs"]
    seed: int = EVAL_SEED

    def validate(self) -> ReacherEvalSpec:
        check_type(self.rho, "number", "--rho")
        check_type(self.image_size, "integer", "--image-size")
        check_type(self.n, "integer", "--n-eval")
        check_seed(self.seed, "--seed")
        check("rho", self.rho)
        check("image_size", self.image_size, what=" for an evaluation set")
        if self.n < 1:
            raise IdauditError(f"--n-eval must be ≥ 1 evaluation pair, got {self.n}")
        return self

    def chunk_rows(self) -> int:
        return max(1, min(1000, CHUNK_BYTES // (3 * self.image_size**2)))


@dataclass
class EvalPairs:
    """Rendered evaluation pairs; ``path`` is their cache directory (None: not cached),
    ``rendered`` whether this call rendered them, ``reason`` why a cache found there was not
    used (None: there was none, or it was)."""

    z: np.ndarray
    z_prime: np.ndarray
    x: np.ndarray
    x_prime: np.ndarray
    path: Path | None
    rendered: bool
    reason: str | None = None


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """Where cached renders live: ``cache_dir``, else ``$IDAUDIT_CACHE``, else
    ``~/.cache/idaudit``."""
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "idaudit"


def cache_key(spec: ReacherEvalSpec, renderer: dict[str, Any]) -> str:
    """The cache directory's name: the parameters, readable, then a hash of everything."""
    text = json.dumps({"format": FORMAT, "format_version": FORMAT_VERSION, "spec": asdict(spec),
                       "renderer": renderer}, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return f"ou-rho{spec.rho:g}-px{spec.image_size}-n{spec.n}-s{spec.seed}-{digest}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _empty_images(spec: ReacherEvalSpec) -> dict[str, np.ndarray]:
    shape = (spec.n, spec.image_size, spec.image_size, 3)
    return {"x": np.empty(shape, dtype=np.uint8), "x_prime": np.empty(shape, dtype=np.uint8)}


def _load(path: Path, spec: ReacherEvalSpec, renderer: dict[str, Any], z: np.ndarray,
          zp: np.ndarray) -> tuple[dict[str, np.ndarray] | None, str]:
    """The cached images at ``path`` (checked against the manifest, the angles z, z′ they must
    show and a fresh render of a few random frames: :func:`_spot_frames`), or (None, why they
    cannot be trusted)."""
    from idaudit.core.jsontext import parse_json_object

    meta_path = path / "meta.json"
    try:
        if not meta_path.is_file() or meta_path.stat().st_size > MAX_TEXT_INPUT:
            return None, "no readable meta.json"
        meta = parse_json_object(meta_path.read_text(), str(meta_path))
    except (OSError, UnicodeDecodeError, IdauditError) as exc:
        return None, f"meta.json unreadable ({first_line(exc)})"
    want = {"format": FORMAT, "format_version": FORMAT_VERSION, "spec": asdict(spec),
            "renderer": renderer}
    for key, value in want.items():
        if meta.get(key) != value:
            return None, f"meta.json {key} is {meta.get(key)!r}, not {value!r}"
    chunks = meta.get("chunks")
    if not isinstance(chunks, list) or not chunks or not all(
            isinstance(c, dict) and set(c) == {"name", "rows", "sha256"}
            and isinstance(c["name"], str) and _CHUNK_NAME.fullmatch(c["name"])
            and type(c["rows"]) is int and c["rows"] > 0 for c in chunks) \
            or sum(c["rows"] for c in chunks) != spec.n:
        return None, f"meta.json does not list chunks of {spec.n} rows in all"
    out = _empty_images(spec)
    i = 0
    for c in chunks:
        file, k = path / c["name"], c["rows"]
        try:
            if _sha256(file) != c["sha256"]:
                return None, f"{c['name']} is not the file that was written (sha256 differs)"
            arrays = read_chunk(file, ("z", "z_prime", "x", "x_prime"), spec.image_size)
        except (OSError, IdauditError) as exc:
            return None, f"{c['name']} unreadable ({first_line(exc)})"
        if len(arrays["z"]) != k:
            return None, f"{c['name']} holds {len(arrays['z'])} rows, not {k}"
        if not (np.array_equal(arrays["z"], z[i:i + k])
                and np.array_equal(arrays["z_prime"], zp[i:i + k])):
            return None, f"the angles of {c['name']} are not this seed's"
        out["x"][i:i + k], out["x_prime"][i:i + k] = arrays["x"], arrays["x_prime"]
        i += k
    rows = [c["rows"] for c in chunks]
    frames = _spot_frames(rows)
    differ = _spot_check(spec, out, z, zp, frames)
    if differ:
        at = np.searchsorted(np.cumsum(rows), [r for _, r in differ], side="right")
        names = ", ".join(dict.fromkeys(chunks[j]["name"] for j in at))
        return None, (f"{len(differ)} of {len(frames)} frames rendered again differ from "
                      f"the cached ones in {names}, first {VIEWS[differ[0][0]]} row "
                      f"{differ[0][1]}")
    return out, ""


def _spot_frames(rows: list[int]) -> list[tuple[int, int]]:
    """The frames to re-render when checking a cache whose chunks hold ``rows`` rows: (view,
    row) pairs, view 0 for x and 1 for x′, distinct. One frame of every chunk, then random
    ones up to min(max(chunks, :data:`SPOT_FRAMES`), :data:`SPOT_MAX`, 2n), the views
    alternating from a random one; drawn from a generator seeded by ``secrets``, so nobody can
    know them in advance."""
    rng = np.random.default_rng(secrets.randbits(128))
    ends = np.cumsum(rows)
    n = int(ends[-1])
    count = min(max(len(rows), SPOT_FRAMES), SPOT_MAX, 2 * n)
    view = int(rng.integers(2))
    chosen = []
    for start, k in zip(ends - rows, rows):
        chosen.append((view, int(start + rng.integers(k))))
        view ^= 1
    while len(chosen) < count:  # alternating views: each gets at most ⌈count/2⌉ ≤ n frames
        frame = (view, int(rng.integers(n)))
        if frame not in chosen:
            chosen.append(frame)
            view ^= 1
    return sorted(chosen)


def _spot_check(spec: ReacherEvalSpec, images: dict[str, np.ndarray], z: np.ndarray,
                zp: np.ndarray, frames: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Render ``frames`` ((view, row) pairs) in one worker and compare them byte for byte with
    ``images``: the frames that differ (empty when all are equal)."""
    from idaudit.worlds.reacher.render import RenderPool

    angles = np.stack([(z, zp)[v][r] for v, r in frames])
    with RenderPool(1, chunk=len(frames), size=spec.image_size) as pool:
        fresh = pool.render(angles)
    return [(v, r) for (v, r), frame in zip(frames, fresh)
            if not np.array_equal(images[VIEWS[v]][r], frame)]


def _render(spec: ReacherEvalSpec, z: np.ndarray, zp: np.ndarray, into: Path,
            workers: int | None, progress: bool) -> tuple[dict[str, np.ndarray], list[dict]]:
    """Render the pairs chunk by chunk, writing ``pairs-*.npz`` into ``into``."""
    from idaudit.worlds.reacher.render import RenderPool

    rows = spec.chunk_rows()
    starts = range(0, spec.n, rows)
    if workers is None:
        workers = 1 if 2 * spec.n < POOL_MIN_FRAMES else os.cpu_count() or 1
    workers = max(1, min(workers, math.ceil(2 * spec.n / RENDER_CHUNK)))
    out = _empty_images(spec)
    chunks = []
    bar = ProgressBar(progress, 2 * spec.n, f"render {spec.image_size} px")
    batches = [np.concatenate([z[i:i + rows], zp[i:i + rows]]) for i in starts]
    with RenderPool(workers, chunk=RENDER_CHUNK, size=spec.image_size) as pool, bar:
        for i, images in zip(starts, pool.imap_batches(batches)):
            k = len(images) // 2
            name = f"pairs-{i // rows:05d}.npz"
            with open(into / name, "wb") as f:
                np.savez_compressed(f, z=z[i:i + k], z_prime=zp[i:i + k], x=images[:k],
                                    x_prime=images[k:])
            chunks.append({"name": name, "rows": k, "sha256": _sha256(into / name)})
            out["x"][i:i + k], out["x_prime"][i:i + k] = images[:k], images[k:]
            bar.advance(len(images))
    return out, chunks


def _publish(tmp: Path, final: Path) -> bool:
    """Rename ``tmp`` onto ``final``, moving a stale ``final`` aside first; False when another
    process put one there meanwhile (then ``tmp`` is left for the caller to remove)."""
    try:
        os.rename(tmp, final)
        return True
    except OSError:
        if not os.path.lexists(final):
            raise
    aside = make_temp_dir(final)
    try:
        os.rename(final, aside / "stale")
        os.rename(tmp, final)
        return True
    except OSError:
        return False
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def eval_pairs(spec: ReacherEvalSpec, cache_dir: str | Path | None = None,
               workers: int | None = None, progress: bool = False,
               cache: bool = True) -> EvalPairs:
    """The evaluation pairs of ``spec``: read from the cache when a valid copy is there, else
    rendered (``workers`` processes; None: one below 2 000 frames, else one per CPU)
    and cached (``cache`` False: rendered, never cached)."""
    from idaudit.worlds.reacher.render import render_settings

    spec = spec.validate()
    frame = 3 * spec.image_size**2
    check_memory(2 * spec.n * frame, f"an evaluation set of {spec.n} Reacher pairs at "
                 f"{spec.image_size}×{spec.image_size} px", bound="at least ")
    renderer = render_settings()
    z = eval_angles(spec.n, spec.seed)
    zp = eval_partners(z, spec.rho, spec.seed)
    root = cache_root(cache_dir) / "reacher-eval"
    final = root / cache_key(spec, renderer)
    reason = None
    if cache and os.path.lexists(final):
        found, reason = _load(final, spec, renderer, z, zp)
        if found is not None:
            return EvalPairs(z, zp, found["x"], found["x_prime"], final, rendered=False)
        sys.stderr.write(printable(f"note: the cached evaluation set {final} is not usable "
                                   f"({reason}); rendering it again") + "\n")
    try:
        tmp = make_temp_dir(final) if cache else Path(tempfile.mkdtemp(suffix=".tmp"))
    except OSError as exc:
        raise IdauditError(f"cannot write the evaluation cache under {root} "
                           f"({exc.strerror or first_line(exc)}); set ${CACHE_ENV} or give "
                           "another cache directory") from None
    try:
        images, chunks = _render(spec, z, zp, tmp, workers, progress)
        if not cache:
            return EvalPairs(z, zp, images["x"], images["x_prime"], None, True, reason)
        meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "spec": asdict(spec),
                "renderer": renderer, "chunks": chunks}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        published = _publish(tmp, final)
    except OSError as exc:
        raise IdauditError(f"cannot write the evaluation cache {final} "
                           f"({exc.strerror or first_line(exc)}); set ${CACHE_ENV} or give "
                           "another cache directory") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return EvalPairs(z, zp, images["x"], images["x_prime"], final if published else None, True,
                     reason)


def reacher_eval_set(rho: float = WORLD_DEFAULTS["rho"], image_size: int = 224,
                     n: int = WORLD_DEFAULTS["rendered_eval_pairs"],
                     seed: int = EVAL_SEED, cache_dir: str | Path | None = None,
                     workers: int | None = None, progress: bool = False) -> EvalSet:
    """An evaluation set of ``n`` Reacher OU pairs at ``image_size`` px (see the module):
    x, x′ uint8 (n, S, S, 3), ρ for the label-free signals, a seeded random split (no training
    images: the linear maps are fitted on part of these)."""
    pairs = eval_pairs(ReacherEvalSpec(rho, image_size, n, seed), cache_dir, workers, progress)
    return EvalSet(z=torch.from_numpy(pairs.z), x=pairs.x, x_prime=pairs.x_prime, rho=rho,
                   circular=(0, 1), angle_sigma=1.0, z_white=True)  # eval_angles: N(0, I₂)
