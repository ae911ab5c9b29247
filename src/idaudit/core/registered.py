"""What can be registered — worlds, objectives, metric groups, file formats — and idaudit's own.

Each registry here is the one place its names live. Built-in worlds and objectives are
declared as lazy placeholders (``module:object`` and a line of help), so the command line
lists them, with plugins' names, without importing numpy or torch. Other packages add
entries through the entry-point groups of :data:`BY_GROUP`:

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
WORLDS.add_lazy("pairs", "idaudit.worlds.dataset:PAIRS_KIND",
                "a pairs file from `idaudit world` (--data)")
WORLDS.add_lazy("reacher", "idaudit.worlds.reacher.kind:REACHER_KIND", "MuJoCo pixels")
WORLDS.add_lazy("recorded", "idaudit.worlds.recorded:RECORDED_KIND",
                "your own world: --data FILE of recorded pairs or episodes (frames x, states z)")
WORLDS.add_family("swm:", "idaudit.worlds.swm:SWM_KIND",
                  "swm:ENV_ID, a stable-worldmodel environment's episodes collected and cached, "
                  "e.g. swm:ReacherDMControl-v0 (docs/swm.md)")


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
        default_lamb: its own λ where none is given (before a world's default, which is
            LeJEPA's); None: the world's or the global default.

    Example:
        >>> Objective(lambda h, lamb, sigma, directions: (h, {}))(1.0, 0.5, 1.0, None)
        (1.0, {})
    """

    loss: Callable[..., tuple[Any, dict[str, Any]]]
    two_views: bool = False
    takes_lamb: bool = True
    directions: bool = False
    default_lamb: float | None = None

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
                                  _lazily("idaudit.maths.catalogue:accept_group"))


# ---- file formats ----------------------------------------------------------------------
@dataclass(frozen=True)
class FileFormat:
    """A kind of file ``idaudit audit``/``consistency``/``embed`` reads: idaudit's own
    (declared next to their openers in :mod:`idaudit.loading.opened`, registered below) and
    other packages'. Dispatch, the trust table (:func:`idaudit.loading.trust.policy`) and
    the list of encoder forms (:data:`ENCODER_FORMS`) are read from these objects.

    A plugin format is tried on files no built-in format recognises from their bytes (so a
    plugin cannot take over ``.npz`` or a checkpoint). Its ``open`` is the package's own
    code; what it does with the file's bytes is its ``trust`` row. The fields after
    ``example`` are idaudit's own formats' (a plugin format that sets them is refused).

    Args:
        description: what the file is, as ``--help`` and errors list it.
        sniff: ``sniff(path, head) → bool``, ``head`` the file's first 64 bytes.
        open: ``open(path, embedding) →`` a mapping of arrays (``z``, ``h`` [, ``h_prime``,
            ``rho``, ``x``]); with ``embedding`` (consistency, embed) it may give ``h`` alone.
        trust: (untrusted: what reading does, trusted: what ``--trust-code`` adds).
        example: ``example(path)`` writes a small valid file (the conformance check's).
        takes_options: ``open(path, options, embedding)``, ``options`` the
            :class:`~idaudit.core.request_parts.LoadOptions` (built-in formats; they may give an
            encoder, a ``LoadedEncoder``, as well as arrays).
        program: what makes a file of this format a program — code that runs when it is
            loaded or called, so it runs in the cage (:mod:`idaudit.loading.programs`) —, or
            None for data.
        trust_row: the row of the trust table it belongs to (formats that share one share
            their ``trust`` texts); None: a row of its own, named after the format.

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
    takes_options: bool = False
    program: str | None = None
    trust_row: str | None = None


def _format(name: str, obj: Any) -> FileFormat:
    if not isinstance(obj, FileFormat):
        raise TypeError(f"got {type(obj).__name__}, not an idaudit.core.registered.FileFormat")
    if name not in FORMATS.builtin() and (obj.takes_options or obj.program or obj.trust_row):
        raise TypeError("takes_options, program and trust_row are idaudit's own formats' "
                        "fields (a plugin's open is open(path, embedding) on data)")
    return obj


FORMATS: Registry[FileFormat] = Registry("file format", "idaudit.formats", _format)
#: idaudit's own formats, in the order a file's bytes are tried against them (the first
#: whose sniff claims it wins: .npz before the other zips, TorchScript before torch.export,
#: both before a torch.save zip; safetensors before a pickle), each with the line that
#: :data:`ENCODER_FORMS` says it in; the objects are in idaudit.loading.opened
for _name, _help in (
        ("safetensors", "an idaudit checkpoint, weights with --arch, or arrays holding z, h "
                        "[, h_prime, rho] (.safetensors)"),
        ("npz", "arrays holding z, h [, h_prime, rho] (.npz)"),
        ("npy", "an embedding h alone (.npy, for consistency)"),
        ("torchscript", "TorchScript"),
        ("export", "torch.export .pt2"),
        ("pickle", "a torch.save .pt/.pth/.pth.tar/.ckpt read with weights_only: weights with "
                   "--arch, or a dict of arrays"),
        ("hf_dir", "a Hugging Face model directory"),
        ("lewm_dir", "a stable-worldmodel (LeWM) model directory")):
    FORMATS.add_lazy(_name, f"idaudit.loading.opened:{_name.upper()}", _help)

#: every form a target may take that idaudit reads itself (what ``audit``, ``embed``, ``plan``
#: and ``consistency`` read; their help and the error for a file that is none of them say it
#: in these words, then plugins' formats): the help lines of the built-in formats
ENCODER_FORMS = "; ".join(FORMATS.help(name) for name in FORMATS.builtin())

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
                      for n in registry.ordered()) + \
        "".join(f" | {registry.help(p)}" for p in registry.families())


#: the registries plugins add to, by entry-point group
BY_GROUP = {"idaudit.worlds": WORLDS, "idaudit.objectives": OBJECTIVES,
            "idaudit.metrics": METRICS, "idaudit.formats": FORMATS}

__all__ = ["BY_GROUP", "choices", "ENCODER_FORMS", "FORMATS", "METRICS", "OBJECTIVES", "WORLDS",
           "FileFormat", "Objective"]
