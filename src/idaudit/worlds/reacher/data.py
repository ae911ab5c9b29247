"""On-disk Reacher datasets: OU pairs or controller-trajectory pairs of joint angles + images.

A dataset is a directory::

    meta.json          format, format_version, the spec, status, normalisation statistics
    train-00000.npz    z, z_prime (angles, radians), x, x_prime (uint8 N×S×S×3), per chunk
    eval-00000.npz     z, x: the shared evaluation set (Gaussian angles); in OU datasets also
                       z_prime, x_prime: one OU step from each z (:func:`eval_partners`)

Datasets written before the evaluation partners existed (and trajectory datasets, which have
no single ρ) hold only z, x in their eval chunks; they load with no evaluation partners.

Chunks are written atomically, so a killed render resumes where it stopped: rerunning the same
command renders only the chunks that do not exist yet.
"""

from __future__ import annotations

import math
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from idaudit.core.atomic import atomic_write
from idaudit.core.defaults import WORLD_DEFAULTS
from idaudit.core.errors import IdauditError, check_seed, first_line
from idaudit.core.jsontext import MAX_TEXT_INPUT, write_json
from idaudit.core.limits import LIMITS, check
from idaudit.core.memory import check_memory
from idaudit.core.progress import ProgressBar
from idaudit.maths.ceilings import angle_posterior_mean, wrap_angle
from idaudit.worlds.spec import check_fields, check_numbers, check_type

__all__ = ["EVAL_SEED", "FORMAT", "FORMAT_VERSION", "ReacherData", "ReacherSpec", "build_dataset",
           "eval_angles", "eval_partners", "load_dataset", "ou_angles", "r2_ceilings", "read_chunk",
           "read_meta", "trajectory_angles"]

FORMAT = "idaudit-reacher"
FORMAT_VERSION = 1
CHUNK = 1000
EVAL_SEED = 20_260_525  # the evaluation set is shared by every condition
# rendered image sizes (px), datasets and evaluation sets alike
MIN_SIZE, MAX_SIZE = int(LIMITS["image_size"].low), int(LIMITS["image_size"].high)


FIELD_TYPES = {"mode": "string", "rho": "number", "stride": "integer", "pairs": "integer",
               "n_eval": "integer", "seed": "integer", "image_size": "integer"}
FLAGS = {"seed": "--data-seed", "mode": "mode"}  # the other fields: --name


@dataclass(frozen=True)
class ReacherSpec:
    """``mode`` ou: z ~ N(0, I₂), z′ = ρz + √(1−ρ²)η; trajectory: (θ_t, θ_{t+stride})."""

    mode: str = "ou"
    rho: float = WORLD_DEFAULTS["rho"]
    stride: int = WORLD_DEFAULTS["stride"]
    pairs: int = 100_000  # the paper's; recipes and --pairs choose a run's
    n_eval: int = WORLD_DEFAULTS["n_eval"]
    seed: int = WORLD_DEFAULTS["data_seed"]
    image_size: int = WORLD_DEFAULTS["image_size"]

    def validate(self) -> ReacherSpec:
        for name, kind in FIELD_TYPES.items():
            check_type(getattr(self, name), kind, FLAGS.get(name, "--" + name.replace("_", "-")))
        check_seed(self.seed, "--data-seed")
        check("image_size", self.image_size)
        if self.mode not in ("ou", "trajectory"):
            raise IdauditError(f"unknown Reacher mode {self.mode!r}; valid: ou, trajectory")
        if self.mode == "ou":
            check("rho", self.rho)
        check("stride", self.stride)
        check("pairs", self.pairs)
        check("n_eval", self.n_eval)
        return self

    @classmethod
    def from_dict(cls, d: Any, what: str) -> ReacherSpec:
        """A spec read from a file (``what``: e.g. "…/meta.json: spec"): an object of known,
        typed fields (a missing one takes its default, as in datasets written before it
        existed), validated."""
        check_fields(d, what, set(FIELD_TYPES))
        for name, value in d.items():
            check_type(value, FIELD_TYPES[name], f"{what}.{name}")
        return cls(**d).validate()

    def images(self) -> int:
        """Images the dataset holds: both views of each pair and the evaluation images (with
        their partners in OU datasets)."""
        return 2 * self.pairs + self.n_eval * (2 if self.mode == "ou" else 1)

    def default_dir(self, root: str | Path = "data") -> Path:
        tag = f"ou-rho{self.rho:g}" if self.mode == "ou" else f"traj-stride{self.stride}"
        size = "" if self.image_size == 64 else f"-px{self.image_size}"
        return Path(root) / f"reacher-{tag}-n{self.pairs}-s{self.seed}{size}"


# ---- latent angles ----------------------------------------------------------------------


def ou_angles(spec: ReacherSpec) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(spec.seed)
    z = rng.standard_normal((spec.pairs, 2))
    zp = spec.rho * z + math.sqrt(1 - spec.rho**2) * rng.standard_normal((spec.pairs, 2))
    return z, zp


def eval_angles(n: int, seed: int = EVAL_SEED) -> np.ndarray:
    """The evaluation angles z ~ N(0, I₂): the first n rows of one stream per seed (a larger
    set starts with a smaller one)."""
    return np.random.default_rng(seed).standard_normal((n, 2))


def eval_partners(z: np.ndarray, rho: float, seed: int = EVAL_SEED) -> np.ndarray:
    """One OU step from each evaluation angle: z′ = ρz + √(1−ρ²)η, η ~ N(0, I₂) drawn from
    its own stream (seed sequence [seed, 1]), so z stays that of :func:`eval_angles`."""
    eta = np.random.default_rng([seed, 1]).standard_normal(np.shape(z))
    return rho * np.asarray(z) + math.sqrt(1 - rho**2) * eta


def r2_ceilings(z_fit: np.ndarray, z_test: np.ndarray) -> dict[str, list[float]]:
    """Held-out R²(→ z), per joint, of two predictors of N(0, I) angles that see them only
    mod 2π, fitted on ``z_fit`` and scored on ``z_test`` by the audit itself
    (:func:`~idaudit.maths.metrics.audit_metrics`): ``wrapped`` (an embedding linear in the
    wrapped angles) and ``bayes`` (:func:`~idaudit.maths.ceilings.angle_posterior_mean`, the
    most any encoder of the images can reach in expectation)."""
    from idaudit.maths.metrics import audit_metrics

    z = np.concatenate([np.asarray(z_fit), np.asarray(z_test)])
    rows = np.arange(len(z_fit), len(z))
    return {name: audit_metrics(z, f(z), test_rows=rows, core=True)["r2_h_to_z_heldout_per_dim"]
            for name, f in (("wrapped", wrap_angle), ("bayes", angle_posterior_mean))}


def controller_episodes(n_episodes: int, steps: int, seed: int) -> np.ndarray:
    """Joint angles (episodes, steps, 2) of a goal-reaching PD controller driven by the physics
    (:func:`idaudit.worlds.reacher.render.controller_episodes`), simulated in a render worker so that
    dm_control and its GL display stay out of this process."""
    from idaudit.worlds.reacher.render import RenderPool, simulate_controller

    with RenderPool(1) as pool:
        return pool.call(simulate_controller, n_episodes, steps, seed)


def trajectory_angles(spec: ReacherSpec) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """Pairs (θ_t, θ_{t+stride}), 10 per episode of 201 steps, and per-joint autocorrelations."""
    per_episode = 10
    steps = 201
    if spec.stride >= steps:
        raise IdauditError(f"--stride must be < {steps}, got {spec.stride}")
    episodes = math.ceil(spec.pairs / per_episode)
    traj = controller_episodes(episodes, steps, spec.seed)
    rng = np.random.default_rng(spec.seed + 1)
    starts = rng.integers(0, steps - spec.stride, size=(episodes, per_episode))
    ep = np.repeat(np.arange(episodes), per_episode)
    t0 = starts.reshape(-1)
    z = traj[ep, t0][: spec.pairs]
    zp = traj[ep, t0 + spec.stride][: spec.pairs]
    rho = {f"rho_{j}": float(np.corrcoef(z[:, j], zp[:, j])[0, 1]) for j in range(2)}
    return z, zp, rho


# ---- the directory ----------------------------------------------------------------------


def _meta_path(root: Path) -> Path:
    return root / "meta.json"


META_FIELDS = {"format", "format_version", "spec", "status", "channel_mean", "channel_std",
               "rho_0", "rho_1"}


def read_meta(root: str | Path) -> dict[str, Any]:
    """A dataset's meta.json, checked as a checkpoint's metadata is: a JSON object of known
    fields, each of its type and range (a partly rendered dataset has no channel statistics
    yet; trajectory datasets carry their per-joint ρ₀, ρ₁). Any problem is one line, exit 2."""
    from idaudit.core.jsontext import parse_json_object

    root = Path(root)
    path = _meta_path(root)
    if not path.exists():
        raise IdauditError(f"{root} is not a Reacher dataset (no meta.json)")
    if not path.is_file():
        raise IdauditError(f"{path} is not a regular file")
    try:
        if path.stat().st_size > MAX_TEXT_INPUT:
            raise IdauditError(f"{path} is larger than 1 MiB; not a Reacher dataset's meta.json")
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise IdauditError(f"cannot read {path} ({first_line(exc)})") from None
    meta = parse_json_object(text, str(path))
    if meta.get("format") != FORMAT:
        raise IdauditError(f"{root} holds a {meta.get('format')!r} dataset, not a Reacher one")
    version = meta.get("format_version")
    if version != FORMAT_VERSION or isinstance(version, bool):
        raise IdauditError(f"{root} has dataset format version {version!r}; this idaudit "
                           f"reads version {FORMAT_VERSION}")
    check_fields(meta, str(path), META_FIELDS, ("spec", "status"))
    spec = ReacherSpec.from_dict(meta["spec"], f"{path}: spec")
    if meta["status"] not in ("rendering", "complete"):
        raise IdauditError(f"{path}: status must be 'rendering' or 'complete', got "
                           f"{meta['status']!r}")
    stats = ("channel_mean", "channel_std") if meta["status"] == "complete" else ()
    joints = ("rho_0", "rho_1") if spec.mode == "trajectory" else ()
    check_fields(meta, str(path), META_FIELDS, (*stats, *joints))
    for key in ("channel_mean", "channel_std"):
        if key in meta:
            values = check_numbers(meta[key], f"{path}: {key}", 3)
            if key == "channel_std" and min(values) <= 0:
                raise IdauditError(f"{path}: channel_std must be positive, got {values}")
    for key in ("rho_0", "rho_1"):
        if key in meta:
            check_type(meta[key], "number", f"{path}: {key}")
            if not -1.0 <= meta[key] <= 1.0:
                raise IdauditError(f"{path}: {key} must be a correlation in [-1, 1], got "
                                   f"{meta[key]!r}")
    return meta


def _write_chunk(path: Path, **arrays: np.ndarray) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **arrays)

    atomic_write(path, write)


def build_dataset(root: str | Path, spec: ReacherSpec, workers: int | None = None,
                  progress: bool = False) -> Path:
    """Render ``spec`` into ``root`` (resuming if it was interrupted); return ``root``."""
    from idaudit.worlds.reacher.render import RenderPool, require_renderer

    spec = spec.validate()
    root = Path(root)
    # the angles of every pair (z, z′ and the generator's draws) are made at once
    check_memory(64 * spec.pairs + 32 * spec.n_eval,
                 f"rendering {spec.pairs} Reacher pairs and {spec.n_eval} evaluation images")
    if _meta_path(root).exists():
        meta = read_meta(root)
        if ReacherSpec(**meta["spec"]) != spec:
            raise IdauditError(f"{root} holds a different Reacher dataset ({meta['spec']}); "
                               "choose another --out")
        if meta.get("status") == "complete":
            return root
    elif root.exists() and any(root.iterdir()):
        raise IdauditError(f"{root} exists and is not a Reacher dataset; choose another --out")
    require_renderer()  # the packages and a GL backend, before anything is written
    root.mkdir(parents=True, exist_ok=True)
    extra: dict[str, Any] = {}
    if spec.mode == "ou":
        z, zp = ou_angles(spec)
    else:
        z, zp, extra = trajectory_angles(spec)
    write_json(_meta_path(root), {"format": FORMAT, "format_version": FORMAT_VERSION,
                                  "spec": asdict(spec), "status": "rendering", **extra})
    ze = eval_angles(spec.n_eval)
    zep = eval_partners(ze, spec.rho) if spec.mode == "ou" else None
    jobs = [(f"train-{i // CHUNK:05d}.npz", z[i:i + CHUNK], zp[i:i + CHUNK])
            for i in range(0, len(z), CHUNK)]
    jobs += [(f"eval-{i // CHUNK:05d}.npz", ze[i:i + CHUNK],
              None if zep is None else zep[i:i + CHUNK]) for i in range(0, len(ze), CHUNK)]
    todo = [j for j in jobs if not (root / j[0]).exists()]
    frames = sum(len(a) * (1 if b is None else 2) for _, a, b in todo)
    bar = ProgressBar(progress, frames, "render")
    batches = [a if b is None else np.concatenate([a, b]) for _, a, b in todo]
    hist = np.zeros((3, 256), dtype=np.int64)  # per-channel pixel histograms of train x
    for name, _, _ in jobs:
        if name.startswith("train") and (root / name).exists():
            hist += _histograms(read_chunk(root / name, ("z", "z_prime", "x", "x_prime"),
                                           spec)["x"])
    with RenderPool(workers, size=spec.image_size) as pool, bar:  # the pool starts first
        for (name, a, b), images in zip(todo, pool.imap_batches(batches)):
            if b is None:
                _write_chunk(root / name, z=a, x=images)
            else:
                _write_chunk(root / name, z=a, z_prime=b, x=images[: len(a)],
                             x_prime=images[len(a):])
                if name.startswith("train"):
                    hist += _histograms(images[: len(a)])
            bar.advance(len(images))
    stats = _stats_from_histograms(hist)
    meta = read_meta(root)
    meta.update(status="complete", channel_mean=stats[0], channel_std=stats[1])
    write_json(_meta_path(root), meta)
    return root


def _histograms(x: np.ndarray) -> np.ndarray:
    """Per-channel counts of each uint8 value in images (N, H, W, 3)."""
    return np.stack([np.bincount(x[..., c].ravel(), minlength=256) for c in range(3)])


def _stats_from_histograms(hist: np.ndarray) -> tuple[list[float], list[float]]:
    """Exact per-channel mean and std of x/255 from the value histograms."""
    v = np.arange(256, dtype=np.float64) / 255.0
    n = hist.sum(1).clip(min=1)
    mean = (hist * v).sum(1) / n
    var = (hist * v**2).sum(1) / n - mean**2
    return mean.tolist(), np.sqrt(np.maximum(var, 1e-12)).tolist()


@dataclass
class ReacherData:
    """A loaded dataset; ``z_prime_eval``/``x_prime_eval`` are the evaluation images' OU
    partners (None in trajectory datasets and in datasets written before they existed)."""

    meta: dict[str, Any]
    z: np.ndarray
    z_prime: np.ndarray
    x: np.ndarray
    x_prime: np.ndarray
    z_eval: np.ndarray
    x_eval: np.ndarray
    z_prime_eval: np.ndarray | None = None
    x_prime_eval: np.ndarray | None = None

    @property
    def mean(self) -> np.ndarray:
        return np.asarray(self.meta["channel_mean"], dtype=np.float32)

    @property
    def std(self) -> np.ndarray:
        return np.asarray(self.meta["channel_std"], dtype=np.float32)


def chunk_keys(path: Path) -> set[str]:
    """The names of the arrays one chunk holds (its zip directory; nothing is decompressed)."""
    try:
        with zipfile.ZipFile(path) as f:
            return {n.removesuffix(".npy") for n in f.namelist()}
    except (OSError, zipfile.BadZipFile) as exc:
        raise IdauditError(f"{path}: cannot read ({first_line(exc)})") from None


def read_chunk(path: Path, keys: tuple[str, ...], spec: ReacherSpec | int
               ) -> dict[str, np.ndarray]:
    """The arrays ``keys`` of one chunk, checked: angles z (and z′) of shape (k, 2), images x
    (and x′) uint8 of shape (k, S, S, 3) with S the dataset's image size (``spec``: the
    dataset's spec, or S itself); never unpickled."""
    try:
        with np.load(path, allow_pickle=False) as f:
            missing = [k for k in keys if k not in f.files]
            if missing:
                raise IdauditError(f"{path}: lacks the arrays {missing} (found: {f.files})")
            out = {k: f[k] for k in keys}
    except IdauditError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise IdauditError(f"{path}: cannot read ({first_line(exc)})") from None
    k = len(out["z"]) if out["z"].ndim else 0
    size = spec if isinstance(spec, int) else spec.image_size
    for key, arr in out.items():
        image = key.startswith("x")
        shape, kinds = ((k, size, size, 3), "u") if image else ((k, 2), "fiu")
        if arr.shape != shape or arr.dtype.kind not in kinds or (image and arr.itemsize != 1):
            want = f"(k, {size}, {size}, 3) uint8" if image else "(k, 2) numbers"
            raise IdauditError(f"{path}: {key} has shape {arr.shape} and dtype {arr.dtype}; "
                               f"this dataset's {key} are {want}, with k = {k} as z")
    return out


def load_dataset(root: str | Path) -> ReacherData:
    root = Path(root)
    meta = read_meta(root)
    if meta.get("status") != "complete":
        raise IdauditError(f"{root} is only partly rendered; rerun the same `idaudit world "
                           "reacher` command to finish it")
    spec = ReacherSpec(**meta["spec"])
    # the chunks, then their concatenation
    check_memory(2 * spec.images() * spec.image_size**2 * 3,
                 f"loading the Reacher dataset {root} ({spec.images()} images of "
                 f"{spec.image_size}×{spec.image_size})")

    def chunks(prefix: str) -> list[Path]:
        paths = sorted(root.glob(f"{prefix}-*.npz"))
        if not paths:
            raise IdauditError(f"{root} has no {prefix}-*.npz chunks; it is not a complete "
                               "Reacher dataset (render it again with `idaudit world reacher`)")
        return paths

    def cat(prefix: str, keys: tuple[str, ...], rows: int) -> dict[str, np.ndarray]:
        paths = chunks(prefix)
        parts: dict[str, list[np.ndarray]] = {k: [] for k in keys}
        for path in paths:
            for k, arr in read_chunk(path, keys, spec).items():
                parts[k].append(arr)
        out = {k: np.concatenate(v) for k, v in parts.items()}
        if len(out["z"]) != rows:
            raise IdauditError(f"{root}: the {prefix}-*.npz chunks hold {len(out['z'])} rows, "
                               f"but meta.json says {rows}")
        return out

    tr = cat("train", ("z", "z_prime", "x", "x_prime"), spec.pairs)
    # evaluation partners only when every eval chunk has them (an older dataset has none)
    partners = spec.mode == "ou" and all({"z_prime", "x_prime"} <= chunk_keys(p)
                                         for p in chunks("eval"))
    ev = cat("eval", ("z", "x", "z_prime", "x_prime") if partners else ("z", "x"), spec.n_eval)
    return ReacherData(meta, tr["z"], tr["z_prime"], tr["x"], tr["x_prime"], ev["z"], ev["x"],
                       ev.get("z_prime"), ev.get("x_prime"))
