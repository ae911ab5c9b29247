"""stable-worldmodel's environments as worlds: ``--world swm:ENV_ID``.

``swm:ReacherDMControl-v0`` is the gymnasium environment ``swm/ReacherDMControl-v0`` of
stable-worldmodel. Its episodes are collected with stable-worldmodel's own ``swm.World`` under
a seeded ``swm.policy.RandomPolicy`` into its ``folder`` format (``lance`` fails with
dm_control's EGL context, which is bound to the thread that made it), once per (environment,
frames, steps per episode, seed, image side, stable-worldmodel version), under idaudit's cache
(``$IDAUDIT_CACHE``, else ``~/.cache/idaudit``: ``swm/<key>``), written to a temporary folder
and renamed into place; later runs read that folder. The world is then a recorded world
(:mod:`idaudit.worlds.recorded`) in the episodes form: frames ``pixels``, true states the
column :data:`ENVS` names for the environment, pairs ``--stride`` steps apart inside an
episode, the last fifth of the episodes held out.

The options: ``frames`` (frames collected, in episodes of ``episode_steps``), ``data_seed``
(the collection's seed: environment resets and the random policy), ``image_size`` (the
frames' side), ``stride`` and ``rho`` (as a recorded world's).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import shutil
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from idaudit.core.defaults import WORLD_DEFAULTS
from idaudit.core.errors import IdauditError, first_line, require
from idaudit.core.limits import check
from idaudit.worlds.recorded import RecordedKind, RecordedWorld, recording_spec
from idaudit.worlds.recordings import KEY_OPTIONS, read_recording
from idaudit.worlds.spec import WorldSpec, check_fields, check_type

__all__ = ["ENVS", "PREFIX", "SWM_KIND", "Collection", "SwmEnv", "SwmKind", "cache_dir",
           "collect"]

#: the world names of this kind: ``swm:`` + a stable-worldmodel environment id (without swm/)
PREFIX = "swm:"
#: what to install where stable-worldmodel is missing
INSTALL = "pip install stable-worldmodel"
#: the refusal where stable-worldmodel is missing
_MISSING = f"world {PREFIX}…: stable-worldmodel is not installed ({INSTALL})"
#: the collection format (``folder``: no hdf5plugin needed; ``lance`` fails under EGL)
FORMAT = "folder"
#: the cache's format: changed when what is written under a key changes
CACHE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class SwmEnv:
    """What idaudit needs to know of an environment: the collected column holding its true
    state (``latents``), which of those latents are angles in radians, and what they are."""

    latents: str
    angles: tuple[int, ...]
    means: str


#: the environments known, each declared once (docs/swm.md lists them with measured times)
ENVS: dict[str, SwmEnv] = {
    "ReacherDMControl-v0": SwmEnv("qpos", (0, 1), "shoulder and wrist joint angles (rad)"),
    "CartpoleDMControl-v0": SwmEnv("qpos", (1,), "cart position, pole angle (rad)"),
    "TwoRoom-v1": SwmEnv("state", (), "the agent's x, y (pixels)"),
}


@dataclasses.dataclass(frozen=True)
class Collection:
    """One collection of episodes: what its cache key holds."""

    env: str
    episodes: int
    steps: int
    seed: int
    image_size: int
    version: str

    def key(self) -> str:
        """The cache folder's name: the parameters, readable, then a hash of everything."""
        text = json.dumps({**dataclasses.asdict(self), "format": FORMAT,
                           "cache_version": CACHE_VERSION}, sort_keys=True)
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        return (f"{self.env}-e{self.episodes}-t{self.steps}-s{self.seed}-px{self.image_size}-"
                f"swm{self.version}-{digest}")


def _swm() -> Any:
    """stable-worldmodel, imported (one line naming how to install it where it is missing; its
    warnings about optional environments it cannot load, such as ALE's, silenced)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import stable_worldmodel
    except ImportError:
        raise IdauditError(_MISSING) from None
    except Exception as exc:  # noqa: BLE001 - a broken install may raise anything
        raise IdauditError(f"stable-worldmodel failed to import: {type(exc).__name__}: "
                           f"{first_line(exc)}") from None
    return stable_worldmodel


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("stable-worldmodel")
    except metadata.PackageNotFoundError:
        raise IdauditError(_MISSING) from None


def env_entry(name: str) -> tuple[str, SwmEnv]:
    """(environment id, its :data:`ENVS` entry) of the world name ``swm:ENV_ID``; an id not in
    the table refused in one line naming the known ones (and whether stable-worldmodel has it)."""
    env = name.removeprefix(PREFIX)
    if env in ENVS:
        return env, ENVS[env]
    known = ", ".join(PREFIX + e for e in ENVS)
    try:
        import gymnasium

        _swm()
        registered = f"swm/{env}" in gymnasium.registry
    except (ImportError, IdauditError):
        registered = False
    what = "a stable-worldmodel environment idaudit has no entry for (which column holds its " \
        "true state, which latents are angles)" if registered else \
        "not a stable-worldmodel environment idaudit knows"
    raise IdauditError(f"world {name!r}: swm/{env} is {what}; known: {known}")


def cache_dir() -> Path:
    """Where collections are cached: ``$IDAUDIT_CACHE/swm``, else ``~/.cache/idaudit/swm``."""
    from idaudit.worlds.reacher.eval_pairs import cache_root

    return cache_root() / "swm"


class _Counted:
    """A stable-worldmodel writer that advances a progress bar at each episode written."""

    def __init__(self, writer: Any, bar: Any) -> None:
        self.writer, self.bar = writer, bar

    def __enter__(self) -> _Counted:
        self.writer.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.writer.__exit__(*exc)

    def write_episodes(self, episodes: Any) -> None:
        def counted() -> Iterator[Any]:
            for ep in episodes:
                self.bar.advance(1)
                yield ep

        self.writer.write_episodes(counted())


def collect(c: Collection, root: Path, progress: bool = True) -> tuple[Path, bool]:
    """The folder holding collection ``c`` under ``root``, collected now where it is missing.

    Args:
        c: what to collect.
        root: the cache folder.
        progress: show a bar while episodes are collected (stderr).

    Returns:
        (the folder, whether it was collected now).
    """
    from idaudit.core.atomic import make_temp_dir
    from idaudit.core.progress import ProgressBar

    target = root / c.key()
    if (target / "collection.json").is_file():
        return target, False
    swm = _swm()
    tmp = make_temp_dir(target)  # a killed collection's temporary is removed by the next
    try:
        started = time.perf_counter()
        try:
            world = swm.World(f"swm/{c.env}", num_envs=1, image_shape=(c.image_size,) * 2,
                              max_episode_steps=c.steps)
            world.set_policy(swm.policy.RandomPolicy(seed=c.seed))
            writer = swm.data.format.get_format(FORMAT).open_writer(str(tmp / "data"))
            with ProgressBar(progress, c.episodes, f"collecting {PREFIX}{c.env}") as bar:
                world.collect(writer=_Counted(writer, bar), episodes=c.episodes, seed=c.seed,
                              progress=False)
        except IdauditError:
            raise
        except Exception as exc:  # noqa: BLE001 - an environment may raise anything
            raise IdauditError(f"collecting swm/{c.env} failed: {type(exc).__name__}: "
                               f"{first_line(exc)}") from None
        seconds = time.perf_counter() - started
        (tmp / "collection.json").write_text(json.dumps(
            {**dataclasses.asdict(c), "format": FORMAT, "seconds": round(seconds, 3)},
            indent=1) + "\n")
        with contextlib.suppress(FileNotFoundError):
            world.envs.close()
        try:
            os.rename(tmp, target)
        except OSError:  # another process collected it meanwhile: keep theirs
            if not (target / "collection.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target, True


def _collection(name: str, options: dict[str, Any]) -> Collection:
    """The collection ``options`` ask for (``frames``, in whole episodes)."""
    env, _ = env_entry(name)
    frames = options.get("frames", WORLD_DEFAULTS["swm_frames"])
    steps = options.get("episode_steps", WORLD_DEFAULTS["episode_steps"])
    seed = options.get("data_seed", WORLD_DEFAULTS["data_seed"])
    size = options.get("image_size", WORLD_DEFAULTS["image_size"])
    check("frames", frames, "--frames")
    check("episode_steps", steps, "--episode-steps")
    check("image_size", size, "--image-size")
    check_type(seed, "integer", "--data-seed")
    return Collection(env, math.ceil(frames / steps), int(steps), int(seed), int(size),
                      _version())


class SwmKind(RecordedKind):
    """The kind of ``swm:ENV_ID`` worlds: episodes collected in a stable-worldmodel
    environment, then a recorded world."""

    options: ClassVar[frozenset[str]] = frozenset({"frames", "episode_steps", "data_seed",
                                                   "image_size", "stride", "rho"})
    #: a name of this family, for tests that need one world taking its options
    example_name: ClassVar[str] = PREFIX + next(iter(ENVS))

    def _read(self, spec_name: str, c: Collection, stride: int, progress: bool = True
              ) -> tuple[Path, Any, dict[str, str]]:
        _, entry = env_entry(spec_name)
        folder, _ = collect(c, cache_dir(), progress)
        keys = {"observations": "pixels", "latents": entry.latents, "episodes": "episode"}
        return folder, read_recording(folder / "data", keys, stride), keys

    def make_spec(self, name: str, options: dict[str, Any]) -> WorldSpec:
        c = _collection(name, options)
        stride = options.get("stride", 1)
        check("stride", stride, "--stride")
        folder, rec, keys = self._read(name, c, stride)
        extra = {"data": str(folder / "data"), "label": name, "keys": keys, "stride": stride,
                 "collection": dataclasses.asdict(c)}
        spec = recording_spec(rec, {**options, "angles": ENVS[c.env].angles}, extra)
        return dataclasses.replace(spec, name=name, source=name)

    def check_spec(self, spec: WorldSpec) -> WorldSpec:
        """A spec read from a checkpoint: its collection, keys, stride and ρ̂s."""
        super(RecordedKind, self).check_spec(spec)
        what = f"world {spec.name!r}: extra"
        check_fields(spec.extra, what, {"data", "label", "keys", "stride", "form", "circular",
                                        "rho_per_dim", "collection"})
        c = check_type(spec.extra.get("collection"), "object", f"{what}.collection")
        check_fields(c, f"{what}.collection", {f.name for f in dataclasses.fields(Collection)})
        keys = check_type(spec.extra.get("keys", {}), "object", f"{what}.keys")
        check_fields(keys, f"{what}.keys", set(KEY_OPTIONS))
        check_type(spec.extra.get("stride", 1), "integer", f"{what}.stride")
        return spec

    def from_spec(self, spec: WorldSpec, base_dir: Path | None = None) -> RecordedWorld:
        """The world of a spec: its collection read from the cache (collected again, the same
        episodes, where the cache lacks it)."""
        try:
            c = Collection(**spec.extra["collection"])
        except (KeyError, TypeError) as exc:
            raise IdauditError(f"world {spec.name!r}: its spec names no collection "
                               f"({first_line(exc)})") from None
        installed = _version()
        require(c.version == installed, f"world {spec.name!r} was collected with "
                f"stable-worldmodel {c.version}; {installed} is installed (its episodes may "
                "differ): install that version")
        folder, rec, _ = self._read(spec.name, c, int(spec.extra.get("stride", 1)))
        return RecordedWorld(spec, rec, folder / "data")

    def example_options(self, directory: Path) -> dict[str, Any]:
        """A small collection: 2 episodes of 30 steps, 32 × 32."""
        return {"frames": 60, "episode_steps": 30, "image_size": 32}

    def files(self, spec: WorldSpec, base_dir: Path | None = None, **_: Any) -> list[Path]:
        c = spec.extra.get("collection")
        return [] if not isinstance(c, dict) else [cache_dir() / Collection(**c).key()]


SWM_KIND = SwmKind()  # registered as the family "swm:" in core/registered.py
