"""Gate another project's tests on identifiability in one line.

    from idaudit.testing import assert_identifiable

    def test_encoder_recovers_the_latents():
        assert_identifiable(z, h, min_r2=0.95, max_orthogonality_error=0.1)

A failure raises ``AssertionError`` whose message is the audit's Markdown table, so pytest
shows every metric and which threshold failed.

It also holds the **conformance checks** every registered world, objective, metric group
and file format passes — idaudit's own and plugins' alike (scikit-learn's
``parametrize_with_checks`` is the model)::

    from idaudit.testing import parametrize_with_checks

    @parametrize_with_checks()
    def test_conformance(check):
        check()

:func:`check_world`, :func:`check_objective`, :func:`check_metric` and :func:`check_format`
each take a registered name and raise ``AssertionError`` saying what does not hold.
"""

from __future__ import annotations

import functools
import json
import math
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from idaudit.core.errors import IdauditError
from idaudit.core.registered import FORMATS, METRICS, OBJECTIVES, WORLDS
from idaudit.evaluations.audit import AuditReport, audit

__all__ = ["assert_identifiable", "check_format", "check_metric", "check_objective",
           "check_world", "checks", "parametrize_with_checks"]


def assert_identifiable(z: Any, h: Any, h_prime: Any = None, rho: float | None = None, *,
                        min_r2: float | None = 0.9,
                        max_orthogonality_error: float | None = None,
                        gate: dict[str, dict[str, float]] | None = None,
                        allow_inconclusive: bool = False, **kwargs: Any) -> AuditReport:
    """Assert that embeddings ``h`` recover latents ``z`` up to a rotation.

    Passes when held-out R²(h → z) ≥ ``min_r2`` and, if given, the orthogonality error of
    the fitted map ≤ ``max_orthogonality_error`` (plus any ``gate`` of other metrics). An
    inconclusive audit (collapsed embedding, NaN/Inf, too few rows) fails unless
    ``allow_inconclusive``. Extra keyword arguments go to :func:`idaudit.audit`.
    Returns the report. At least one threshold is needed: an assertion that checks nothing
    is refused (``ValueError``).
    """
    __tracebackhide__ = True  # pytest shows the caller's line and the table, not idaudit's frames
    if min_r2 is None and max_orthogonality_error is None and not gate:
        raise IdauditError("assert_identifiable needs a threshold (min_r2, "
                           "max_orthogonality_error or gate): without one nothing is checked")
    report = audit(z, h, h_prime, rho, min_r2=min_r2,
                   max_orthogonality_error=max_orthogonality_error, gate=gate,
                   gauss_sims=kwargs.pop("gauss_sims", 0), **kwargs)
    if report.passed or (allow_inconclusive and report.verdict == "inconclusive"):
        return report
    what = ", ".join(f"{t.metric} = {t.actual:.4g} (needs {'≥' if t.op == 'min' else '≤'} "
                     f"{t.value:g})" for t in report.failed) or report.reason or report.verdict
    raise AssertionError(f"embedding is not identifiable: {what}\n\n{report.markdown()}")


# ---- conformance -----------------------------------------------------------------------


def _finite(value: Any, what: str) -> None:
    array = np.asarray(value.detach().cpu() if hasattr(value, "detach") else value, dtype=float)
    assert np.isfinite(array).all(), f"{what} is not finite"


def check_world(name: str, directory: str | Path | None = None, rows: int = 64) -> None:
    """What every world does: its spec survives JSON and :func:`validate_spec`; the same seed
    gives the same evaluation set and pairs; rows, latents and observations agree in number
    and are finite; its default encoder takes its observations.

    Args:
        name: a registered world (idaudit's or a plugin's).
        directory: where a world that reads files writes its example data
            (``WorldKind.example_options``); a temporary directory by default.
        rows: the evaluation set's size.

    Example:
        >>> check_world("spiral")
    """
    from idaudit.models.encoders import build_encoder, embed
    from idaudit.worlds import WorldSpec, build_world, make_spec, validate_spec

    kind = WORLDS.get(name)
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(directory or tmp)
        spec = make_spec(name, **kind.example_options(where))
        again = WorldSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
        assert validate_spec(again) == spec, f"world {name!r}: its spec does not survive JSON"
        world = build_world(spec, where)
        assert world.latent_dim == spec.dim, f"world {name!r}: latent_dim ≠ spec.dim"
        n = None if "n_eval" in kind.refuses else rows  # its data fix the evaluation set
        first, second = world.eval_set(n, seed=0), world.eval_set(n, seed=0)
        rows = rows if n is not None else len(first.z)
        assert tuple(first.z.shape) == (rows, spec.dim), \
            f"world {name!r}: eval_set z is {tuple(first.z.shape)}, not ({rows}, {spec.dim})"
        assert len(first.x) == rows, f"world {name!r}: eval_set x has {len(first.x)} rows"
        assert np.array_equal(np.asarray(first.z), np.asarray(second.z)) and \
            np.array_equal(np.asarray(first.x), np.asarray(second.x)), \
            f"world {name!r}: the same seed gave another evaluation set"
        _finite(first.z, f"world {name!r}: eval_set z")
        _finite(first.x, f"world {name!r}: eval_set x")
        encoder, kwargs = kind.default_encoder(spec)
        h = embed(build_encoder(encoder, kwargs), first.x)
        assert h.shape[0] == rows, f"world {name!r}: its encoder gave {h.shape[0]} rows"
        _finite(h, f"world {name!r}: its default encoder's output")


def check_objective(name: str, dim: int = 4, batch: int = 128) -> None:
    """What every objective does: a finite scalar loss with finite gradients and scalar
    parts, the same on the same inputs, and lower on aligned Gaussian views than on views
    collapsed to (nearly) one point — a self-supervised objective must penalise collapse.

    Args:
        name: a registered objective.
        dim: the embedding's width.
        batch: rows per view.

    Example:
        >>> check_objective("lejepa")
    """
    import torch

    from idaudit.maths.losses import random_directions

    objective = OBJECTIVES.get(name)
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(batch, dim, generator=gen)
    aligned = torch.stack([z, z + 0.1 * torch.randn(batch, dim, generator=gen)])
    point = 1e-3 * torch.randn(batch, dim, generator=gen)
    collapsed = torch.stack([point, point + 1e-4 * torch.randn(batch, dim, generator=gen)])
    lamb = 0.5 if objective.takes_lamb else None
    directions = random_directions(dim, 64, gen) if objective.directions else None

    def loss(h: Any) -> tuple[Any, dict[str, Any]]:
        return objective(h, lamb, 1.0, directions)

    h = aligned.clone().requires_grad_(True)
    value, parts = loss(h)
    assert isinstance(value, torch.Tensor) and value.dim() == 0, \
        f"objective {name!r}: the loss is not a scalar tensor"
    _finite(value, f"objective {name!r}: the loss")
    value.backward()
    assert h.grad is not None, f"objective {name!r}: the loss does not depend on h"
    _finite(h.grad, f"objective {name!r}: the gradient")
    assert isinstance(parts, dict) and all(
        torch.as_tensor(v).dim() == 0 for v in parts.values()), \
        f"objective {name!r}: its parts are not a dict of scalars"
    again, _ = loss(aligned)
    assert again.item() == value.item(), f"objective {name!r}: not the same on the same views"
    worse, _ = loss(collapsed)
    assert worse.item() > value.item(), \
        (f"objective {name!r}: collapsed views score {worse.item():.4g}, no worse than aligned "
         f"ones ({value.item():.4g})")


def check_metric(name: str, rows: int = 2000) -> None:
    """What every metric group does: on seeded pairs it reports each key it declares (its
    ``metrics``, idaudit's own groups as plugins'), and each number it reports is one of them
    (lists and texts beside them, as the per-latent R², need no entry), finite numbers or
    their lists, the same twice; and every metric a gate may name is the same whatever units
    z is in.

    Args:
        name: a registered metric group.
        rows: rows of the seeded data.

    Example:
        >>> check_metric("linear")
    """
    from idaudit.maths.catalogue import BY_KEY
    from idaudit.maths.metrics import make_fit

    group = METRICS.get(name)
    rng = np.random.default_rng(0)
    z = rng.standard_normal((rows, 3))  # z_0 an angle, seen mod 2π, of law N(0, 1)
    zp = 0.8 * z + 0.6 * rng.standard_normal((rows, 3))
    mix = rng.standard_normal((3, 4))  # h one wider than z: a subspace to compare
    h, hp = z @ mix + 0.1 * rng.standard_normal((rows, 4)), zp @ mix
    x = np.tanh(z) + 0.05 * rng.standard_normal((rows, 3))
    options = {"bootstrap": 20, "floor_draws": 4, "gauss_slices": 8, "circular": [0],
               "angle_sigma": 1.0}

    def compute(scale: np.ndarray) -> dict[str, Any]:
        fit = make_fit(z * scale, h, hp, 0.8, x, seed=0, **options)
        assert group.applies(fit), f"metric group {name!r} does not apply to full pairs"
        return group.compute(fit)

    once, twice = compute(np.ones(3)), compute(np.ones(3))
    assert set(once) == set(twice), f"metric group {name!r}: other keys on the same data"
    declared = {m.key for m in group.metrics}
    numbers = {k for k, v in once.items() if isinstance(v, (int, float))}
    assert declared <= set(once), (f"metric group {name!r} declares {sorted(declared - set(once))}"
                                   " and does not report them")
    unknown = sorted(numbers - declared)
    assert not unknown, f"metric group {name!r}: numbers {unknown} in none of its entries"
    assert all(k in BY_KEY for k in declared), f"metric group {name!r}: entries not catalogued"
    json.dumps(once)
    for key, value in once.items():
        if isinstance(value, (int, float)):
            assert value == twice[key] or (math.isnan(value) and math.isnan(twice[key])), \
                f"metric {key!r}: {value} then {twice[key]} on the same data"
    units = compute(np.array([1.0, 1e3, 1e-2]))  # the angle z_0 keeps its radians
    for key, value in once.items():
        m = BY_KEY.get(key)
        if m is not None and m.gate and m.direction is not None and \
                isinstance(value, float) and math.isfinite(value):
            assert math.isclose(units[key], value, rel_tol=1e-6, abs_tol=1e-9), \
                f"metric {key!r} depends on z's units: {value:.6g}, then {units[key]:.6g}"


def check_format(name: str, directory: str | Path | None = None) -> None:
    """What every file format does: it describes itself and its trust rule, its example file
    is recognised and read into z and h of the same rows (as the audit reads it), and files
    it does not write — arrays, a cut copy of its own — are not taken for it or end in one
    line (an :class:`IdauditError`), never another exception.

    idaudit's own formats are recognised by :func:`~idaudit.loading.filekinds.sniff` (a
    plugin's by :func:`~idaudit.loading.loaders.plugin_format`); one that gives an embedding
    alone (``.npy``) is read as one, its audit refused in one line; a program format, which
    declares no example (writing one takes torch.jit or torch.export, and opening it the
    cage: tests/test_cage.py), is skipped (``pytest.skip``) after its declarations.

    Args:
        name: a registered file format.
        directory: where its example file is written (a temporary directory by default).
    """
    fmt = FORMATS.get(name)
    builtin = name in FORMATS.builtin()
    assert fmt.description.strip(), f"file format {name!r} has no description"
    assert len(fmt.trust) == 2 and all(t.strip() for t in fmt.trust), \
        f"file format {name!r}: its trust row needs (untrusted, trusted) texts"
    if builtin and fmt.example is None:
        assert fmt.program, f"file format {name!r}: idaudit's data formats declare an example"
        _skip(f"file format {name!r} is a program ({fmt.program}): no example is written "
              "here (torch.jit/torch.export and the cage; tests/test_cage.py opens them)")
        return
    assert fmt.example is not None, f"file format {name!r} declares no example to check"
    with tempfile.TemporaryDirectory() as tmp:
        _check_example(name, fmt, builtin, Path(directory or tmp))


def _check_example(name: str, fmt: Any, builtin: bool, where: Path) -> None:
    """:func:`check_format`'s reading of the format's example file under ``where``: it is
    its own, it reads as z and h (or, an embedding alone, as h), another format's file is
    not taken for it, and a cut copy ends in one line if in an error."""
    from idaudit.loading.arrays import Arrays
    from idaudit.loading.filekinds import _file_kind
    from idaudit.loading.loaders import open_target, plugin_format

    def kind(path: Path) -> str | None:
        return str(_file_kind(path)[1]) if builtin else plugin_format(path)

    path = where / f"example.{name}"
    fmt.example(path)
    assert kind(path) == name, f"file format {name!r}: its example is not its own"
    h = open_target(path, embedding=True)
    try:
        got = open_target(path)
    except IdauditError:
        assert builtin and not isinstance(h, Arrays), \
            f"file format {name!r}: its example is refused for an audit"
        got = Arrays(z=None, h=h)  # an embedding alone (.npy): consistency's
    else:
        assert isinstance(got, Arrays) and got.z is not None and \
            got.z.shape[0] == got.h.shape[0], \
            f"file format {name!r}: no z and h of one length"
        assert np.asarray(h).shape == got.h.shape, \
            f"file format {name!r}: its embedding is not its h"
    arrays = where / "arrays.npz"
    if name == "npz":  # another format's file: an .npy, not taken for .npz
        arrays = where / "arrays.npy"
        np.save(arrays, got.h)
    else:
        np.savez(arrays, z=got.h if got.z is None else got.z, h=got.h)
    assert (kind(arrays) != name) if builtin else plugin_format(arrays) is None, \
        f"file format {name!r} takes {arrays.name} for its own"
    cut = where / f"cut.{name}"
    cut.write_bytes(path.read_bytes()[: max(1, path.stat().st_size // 2)])
    try:
        open_target(cut)
    except IdauditError:
        pass


def _skip(reason: str) -> None:
    """Skip the rest of a check: ``pytest.skip`` under pytest (the reason shown), else
    nothing more is checked."""
    try:
        import pytest
    except ImportError:
        return
    pytest.skip(reason)


#: each registry with its check
_CHECKS: tuple[tuple[Any, Callable[..., None]], ...] = (
    (WORLDS, check_world), (OBJECTIVES, check_objective), (METRICS, check_metric),
    (FORMATS, check_format))


def checks() -> Iterator[tuple[str, Callable[[], None]]]:
    """Every conformance check of every registered entry, idaudit's and plugins': ``(id,
    check)`` with ``id`` such as ``"world:spiral"``.

    Returns:
        An iterator of (id, a function of no arguments).

    Example:
        >>> sorted(i for i, _ in checks() if i.startswith("objective:"))[:2]
        ['objective:infonce', 'objective:lejepa']
    """
    import idaudit.maths.metrics  # noqa: F401 - idaudit's own metric groups register

    for registry, check in _CHECKS:
        for name in registry.ordered():
            yield f"{registry.kind.split()[-1]}:{name}", functools.partial(check, name)


def parametrize_with_checks() -> Any:
    """A pytest decorator running :func:`checks` — one test per check, its id the entry's —
    so that a plugin package's tests check its entries as idaudit checks its own.

    Returns:
        ``pytest.mark.parametrize("check", …)``.
    """
    import pytest

    found = list(checks())
    return pytest.mark.parametrize("check", [c for _, c in found], ids=[i for i, _ in found])
