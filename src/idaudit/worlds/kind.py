"""A world's kind: what the CLI and orchestration ask about a world, apart from its data.

A :class:`~idaudit.worlds.base.World` is the data process only (evaluation set, plan set,
training views). Its :class:`WorldKind` holds the rest: the world options it takes, how a spec
is made from them, checked when read from a file and built into the World, how
``idaudit world`` writes the data and a sweep renders them first, the training defaults, the
recipes and the paper's encoder. :data:`KINDS` maps every world name to its kind; nothing
outside ``idaudit.worlds`` branches on a world's name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from idaudit.core.errors import IdauditError, latent_indices
from idaudit.core.limits import check
from idaudit.core.registered import WORLDS
from idaudit.worlds.base import EvalSet, World
from idaudit.worlds.spec import WorldSpec, check_type

__all__ = ["KINDS", "Recipe", "WorldKind", "accept_kind", "not_writable"]


@dataclass(frozen=True)
class Recipe:
    """A named set of run options (world and training) filled in where the user gave none.

    ``dataset`` options describe data to render; they are skipped when ``--data`` names data
    that exist already (the data say what they are). ``note`` says why the recipe exists; the
    line announcing a run is built from the resolved values (:func:`idaudit.training.runs.recipe_note`).
    """

    options: dict[str, Any]
    dataset: frozenset[str]
    note: str


def not_writable(name: str) -> IdauditError:
    """The refusal of ``idaudit world`` for a world whose pairs are not written as a dataset."""
    return IdauditError(f"world {name!r} cannot be written as a dataset")


class WorldKind(ABC):
    """The questions the CLI, ``run`` and sweeps ask of a kind of world (one instance per
    kind, registered in :data:`KINDS` under every world name it serves)."""

    #: the World subclass :meth:`from_spec` builds
    world: ClassVar[type[World]]
    #: world options (CLI names with underscores) this kind accepts
    options: ClassVar[frozenset[str]]
    #: train options that do not apply to worlds of this kind
    refuses: ClassVar[frozenset[str]] = frozenset()
    #: whether :meth:`write` makes a directory (else one file)
    writes_directory: ClassVar[bool] = False
    #: for a world read from ``--data`` alone (named by what the file holds, not chosen):
    #: what that file is, as the refusal of an unknown world explains the name; "" otherwise
    data_note: ClassVar[str] = ""

    @abstractmethod
    def make_spec(self, name: str, options: dict[str, Any]) -> WorldSpec:
        """Validate the given world options (only those the user set) and fill defaults."""

    def check_spec(self, spec: WorldSpec) -> WorldSpec:
        """Validate a spec read from a file (types and ranges); return it."""
        if not (isinstance(spec.dim, int) and not isinstance(spec.dim, bool) and spec.dim >= 1):
            raise IdauditError(f"dim must be a positive integer, got {spec.dim!r}")
        check_type(spec.rho, "number", "rho")
        check("rho", spec.rho, "rho")
        check_type(spec.extra, "object", "extra")
        if "circular" in spec.extra:
            what = f"world {spec.name!r}: extra.circular"
            latent_indices(check_type(spec.extra["circular"], "list", what), what)
        return spec

    def from_spec(self, spec: WorldSpec, base_dir: Path | None = None) -> World:
        """Rebuild the world (``base_dir``: where relative dataset paths are resolved); by
        default ``world(spec)``, for worlds that need no files."""
        return self.world(spec)  # type: ignore[call-arg]

    def example_options(self, directory: Path) -> dict[str, Any]:
        """World options that make a small example of this world (its conformance check,
        :func:`idaudit.testing.check_world`): none for a world that needs no files; a world
        that reads data writes a small example of it under ``directory`` and names it."""
        return {}

    def files(self, spec: WorldSpec, base_dir: Path | None = None, *,
              cache_dir: str | Path | None = None, data_root: Path | None = None
              ) -> list[Path]:
        """The files and directories a world of ``spec`` reads or fills: its stored data,
        found as :meth:`from_spec` finds it (relative to ``base_dir`` first), else where
        :meth:`prepare` renders it under ``data_root`` or :meth:`evaluation_set` caches it
        under ``cache_dir``; none by default (a world that reads no files). No output may be
        one of them or lie inside one."""
        return []

    def built(self, world: World | WorldSpec) -> World:
        """``world`` itself, or the world its spec describes."""
        return world if isinstance(world, World) else self.from_spec(world)

    def write(self, spec: WorldSpec, out: Path, pairs: int, seed: int, workers: int | None,
              progress: bool = False) -> str:
        """``idaudit world``: write this world's pairs to ``out``; return a one-line summary."""
        raise not_writable(spec.name)

    @property
    def writes(self) -> bool:
        """Whether ``idaudit world`` can write this kind's pairs (it overrides :meth:`write`)."""
        return type(self).write is not WorldKind.write

    def prepare(self, spec: WorldSpec, data_root: Path, workers: int | None = None,
                progress: bool = False) -> WorldSpec:
        """Make whatever the world needs on disk under ``data_root`` (sweeps render first)."""
        if workers is not None:
            raise IdauditError(f"--workers does not apply to world {spec.name!r} (nothing to "
                               "render)")
        return spec

    def evaluation_set(self, spec: WorldSpec, n: int | None, seed: int,
                       cache_dir: str | Path | None = None, progress: bool = False
                       ) -> EvalSet | None:
        """An evaluation set for an encoder brought from elsewhere, made without building the
        world (its training data), where this kind can; None: build the world and ask it."""
        return None

    def probe_input(self, spec: WorldSpec, rows: int, base_dir: Path | None = None
                    ) -> Any | None:
        """``rows`` inputs shaped as this kind's evaluation set for ``spec``, made without
        rendering or reading that set, on which an encoder is tried before the set is made (a
        refusal that depends only on the options or the output's shape then costs a forward
        pass of ``rows`` inputs); None: it is tried on the set's first rows, the set made
        first (cheap for vector worlds)."""
        return None

    def evaluation_rows(self, spec: WorldSpec, n: int | None, base_dir: Path | None = None
                        ) -> int | None:
        """How many rows the evaluation set of ``spec`` for ``--n-eval`` ``n`` will hold, known
        without making it (the rows-versus-width check then comes right after the probe,
        before the set is rendered); None: checked once the set is made, before it is
        embedded."""
        return None

    @abstractmethod
    def default_encoder(self, world: World | WorldSpec) -> tuple[str, dict[str, Any]]:
        """The paper's encoder for ``world`` (a World or its spec): (registry name, kwargs)."""

    def train_defaults(self) -> dict[str, Any]:
        """Training options whose default differs on this kind of world."""
        return {}

    def data_exists(self, data: str | Path) -> bool:
        """Whether ``data`` names data that exist already (so recipes do not describe it)."""
        return Path(data).exists()

    def recipes(self) -> dict[str, Recipe]:
        """Named run configurations (``--recipe``); empty where the kind has none."""
        return {}


#: every world name → its kind: the registry of :mod:`idaudit.core.registered` (idaudit's own
#: worlds declared there; plugins' through the ``idaudit.worlds`` entry points)
KINDS = WORLDS


def accept_kind(name: str, obj: Any) -> WorldKind:
    """What a plugin's ``idaudit.worlds`` entry point names, as a kind: a :class:`WorldKind`
    instance, or a subclass (made with no arguments)."""
    if isinstance(obj, type) and issubclass(obj, WorldKind):
        obj = obj()
    if not isinstance(obj, WorldKind):
        raise TypeError(f"got {type(obj).__name__}, not an idaudit.worlds.kind.WorldKind")
    if not (isinstance(getattr(obj, "world", None), type) and issubclass(obj.world, World)):
        raise TypeError("its `world` is not a subclass of idaudit.worlds.base.World")
    return obj
