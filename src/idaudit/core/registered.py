"""What can be registered — worlds, objectives, metric groups, file formats — and idaudit's own.

Each registry here is the one place its names live. Built-in worlds and objectives are
declared as lazy placeholders (``module:object`` and a line of help), so the command line
lists them, with plugins' names, without importing numpy or torch. Other packages add
entries through the entry-point groups of :data:`idaudit.core.registry.GROUPS`:

=====================  ================================================================
group                  the entry point names …
=====================  ================================================================
``idaudit.worlds``     a :class:`~idaudit.worlds.kind.WorldKind` (instance or class)
``idaudit.objectives`` an :class:`Objective`, or a bare ``loss(h, lamb, sigma, directions)``
``idaudit.metrics``    a :class:`~idaudit.maths.metrics.MetricGroup` with its ``metrics``
``idaudit.formats``    a :class:`FileFormat`
=====================  ================================================================

Example:
    >>> "spiral" in WORLDS and "lejepa" in OBJECTIVES
    True
    >>> OBJECTIVES.help("infonce")
    'InfoNCE with a Gaussian kernel of width σ (--sigma)'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from idaudit.core.registry import Registry, load_target


def _lazily(target: str) -> Callable[[str, Any], Any]:
    """An ``accept`` that lives in a higher layer, imported when first needed."""
    def accept(name: str, obj: Any) -> Any:
        return load_target(target, "idaudit's own check")(name, obj)

    return accept


# ---- worlds ----------------------------------------------------------------------------
WORLDS: Registry[Any] = Registry("world", "idaudit.worlds",
                                 _lazily("idaudit.worlds.kind:accept_kind"))
for _name, _help in (("spiral", "2-D, a spiral mixing"), ("banana", "2-D, a banana mixing"),
                     ("sinusoid", "2-D, a sinusoidal mixing"),
                     ("nvp", "2-D RealNVP coupling"), ("coupling", "any even --dim")):
    WORLDS.add_lazy(_name, "idaudit.worlds.synthetic:SYNTHETIC", _help)
WORLDS.add_lazy("reacher", "idaudit.worlds.reacher.kind:REACHER_KIND", "MuJoCo pixels")
WORLDS.add_lazy("pairs", "idaudit.worlds.dataset:PAIRS_KIND",
                "a pairs file from `idaudit world` (--data)")


# ---- objectives ------------------------------------------------------------------------
@dataclass(frozen=True)
class Objective:
    """A training objective: ``loss(h, lamb, sigma, directions) → (loss, parts)``, ``h`` the
    views' embeddings (views × batch × m), ``parts`` named scalar terms for the log.

    Args:
        loss: the function.
        two_views: defined on exactly two views (``--n-views`` above 2 is refused).
        takes_lamb: has a regulariser weight λ (else ``--lamb`` is refused).
        directions: needs the random slicing directions of SIGReg each step.

    Example:
        >>> Objective(lambda h, lamb, sigma, directions: (h, {}))(1.0, 0.5, 1.0, None)
        (1.0, {})
    """

    loss: Callable[..., tuple[Any, dict[str, Any]]]
    two_views: bool = False
    takes_lamb: bool = True
    directions: bool = False

    def __call__(self, h: Any, lamb: float | None, sigma: float, directions: Any) -> Any:
        return self.loss(h, lamb, sigma, directions)


def _objective(name: str, obj: Any) -> Objective:
    if isinstance(obj, Objective):
        return obj
    if callable(obj):
        return Objective(obj)
    raise TypeError(f"got {type(obj).__name__}, not an Objective or a function")


OBJECTIVES: Registry[Objective] = Registry("objective", "idaudit.objectives", _objective)
for _name, _help in (("lejepa", "λ·SIGReg + (1−λ)·alignment"),
                     ("whiten", "λ·‖Cov−I‖² + (1−λ)·alignment, VICReg-style"),
                     ("vicreg", "VICReg as its authors define it, weights 25/25/1"),
                     ("infonce", "InfoNCE with a Gaussian kernel of width σ (--sigma)")):
    OBJECTIVES.add_lazy(_name, f"idaudit.maths.losses:{_name.upper()}", _help)


# ---- metric groups ---------------------------------------------------------------------
#: the audit's metric groups: idaudit's own register when idaudit.maths.metrics is imported
#: (their order is the report's); plugins' come after them
METRICS: Registry[Any] = Registry("metric group", "idaudit.metrics",
                                  _lazily("idaudit.maths.metrics:accept_group"))


# ---- file formats ----------------------------------------------------------------------
@dataclass(frozen=True)
class FileFormat:
    """A kind of file ``idaudit audit``/``consistency``/``embed`` reads, from another package.

    A plugin format is tried on files no built-in format recognises from their bytes (so a
    plugin cannot take over ``.npz`` or a checkpoint). Its ``open`` is the package's own
    code; what it does with the file's bytes is its ``trust`` row.

    Args:
        description: what the file is, as ``--help`` and errors list it.
        sniff: ``sniff(path, head) → bool``, ``head`` the file's first 64 bytes.
        open: ``open(path, embedding) →`` a mapping of arrays (``z``, ``h`` [, ``h_prime``,
            ``rho``, ``x``]); with ``embedding`` (consistency, embed) it may give ``h`` alone.
        trust: (untrusted: what reading does, trusted: what ``--trust-code`` adds).
        example: ``example(path)`` writes a small valid file (the conformance check's).

    Example:
        >>> f = FileFormat("rows", lambda p, head: head.startswith(b"#rows"),
        ...                lambda p, embedding: {}, ("text only", "nothing"))
        >>> f.sniff(None, b"#rows 1 2")
        True
    """

    description: str
    sniff: Callable[[Path, bytes], bool]
    open: Callable[[Path, bool], Any]
    trust: tuple[str, str]
    example: Callable[[Path], None] | None = None


def _format(name: str, obj: Any) -> FileFormat:
    if not isinstance(obj, FileFormat):
        raise TypeError(f"got {type(obj).__name__}, not an idaudit.core.registered.FileFormat")
    return obj


FORMATS: Registry[FileFormat] = Registry("file format", "idaudit.formats", _format)

def choices(registry: Registry[Any]) -> str:
    """A registry's names with their help, as ``--help`` lists them: idaudit's own in their
    order, then plugins' (which package adds each). Nothing is imported.

    Args:
        registry: e.g. :data:`WORLDS`.

    Returns:
        ``"name (help) | name (help) …"``.

    Example:
        >>> choices(OBJECTIVES).split(" | ")[0]
        'lejepa (λ·SIGReg + (1−λ)·alignment)'
    """
    return " | ".join(f"{n} ({registry.help(n)})" if registry.help(n) else n
                      for n in registry.ordered())


#: the registries plugins add to, by entry-point group
BY_GROUP = {"idaudit.worlds": WORLDS, "idaudit.objectives": OBJECTIVES,
            "idaudit.metrics": METRICS, "idaudit.formats": FORMATS}

__all__ = ["BY_GROUP", "choices", "FORMATS", "METRICS", "OBJECTIVES", "WORLDS", "FileFormat", "Objective"]
