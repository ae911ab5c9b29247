"""Audit any encoder: reduce it to arrays (z, h, h′, ρ), compute the metrics, apply a gate.

Every route ends in :class:`AuditInputs` before a metric is computed: an idaudit checkpoint,
plain safetensors weights with a ``module:factory`` architecture, TorchScript or torch.export
programs, or precomputed arrays (``.npz`` / ``.safetensors`` holding ``z``, ``h`` and
optionally ``h_prime`` and ``rho``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .errors import EXIT_GATE_FAILED, EXIT_INCONCLUSIVE, EXIT_OK, IdauditError
from .metrics import audit_metrics

# Every numeric or boolean key audit_metrics can report; a gate may name any of them.
KNOWN_METRICS = {
    "r2_h_to_z", "r2_z_to_h", "r2_h_to_z_heldout", "r2_z_to_h_heldout", "mcc",
    "orthogonality_error", "procrustes_mse", "whitening_error", "whitening_floor",
    "whitening_error_corrected", "effective_rank", "total_variance_h", "alignment_gap", "D",
    "bound", "bound_holds", "bound_corrected", "bound_corrected_holds", "bound_trivial",
    "bound_vacuous", "bound_floor", "bound_floor_dominated", "mixing_r2_x_to_z", "r2_h_to_sincos",
    "principal_angle_max_deg", "gaussianity_statistic", "gaussianity_p_value", "n_samples",
    "latent_dim", "embed_dim",
}


@dataclass
class AuditInputs:
    """What every route reduces to."""

    z: torch.Tensor
    h: torch.Tensor
    h_prime: torch.Tensor | None = None
    rho: float | None = None
    x: torch.Tensor | None = None
    circular: tuple[int, ...] = ()
    source: str = "arrays"
    world: dict[str, Any] | None = None
    test_rows: torch.Tensor | None = None  # a fixed held-out split (pixel worlds: eval images)


@dataclass
class Threshold:
    metric: str
    op: str  # "min" or "max"
    value: float
    actual: float | None = None
    passed: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "op": self.op, "value": self.value,
                "actual": self.actual, "passed": self.passed}


@dataclass
class AuditReport:
    metrics: dict[str, Any]
    thresholds: list[Threshold] = field(default_factory=list)
    verdict: str = "pass"  # pass | fail | inconclusive
    reason: str | None = None
    source: str = ""
    world: dict[str, Any] | None = None

    @property
    def exit_code(self) -> int:
        return {"pass": EXIT_OK, "fail": EXIT_GATE_FAILED}.get(self.verdict, EXIT_INCONCLUSIVE)

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "reason": self.reason, "source": self.source,
                "world": self.world, "metrics": self.metrics,
                "gate": [t.to_dict() for t in self.thresholds]}


# ---- thresholds -------------------------------------------------------------------------


def parse_threshold(text: str, op: str) -> Threshold:
    """``KEY=VALUE`` → Threshold (unknown metric names are an input error)."""
    key, sep, value = text.partition("=")
    if not sep:
        raise IdauditError(f"--{op} expects METRIC=VALUE, got {text!r}")
    return make_threshold(key.strip(), op, value.strip())


def make_threshold(key: str, op: str, value: Any) -> Threshold:
    if key not in KNOWN_METRICS:
        raise IdauditError(f"unknown metric {key!r} in the gate; valid: "
                           f"{', '.join(sorted(KNOWN_METRICS))}")
    if op not in ("min", "max"):
        raise IdauditError(f"gate operator must be min or max, got {op!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise IdauditError(f"gate value for {key} must be a number, got {value!r}") from None
    if math.isnan(v):
        raise IdauditError(f"gate value for {key} is NaN")
    return Threshold(key, op, v)


def load_gate_file(path: str | Path) -> list[Threshold]:
    """A TOML gate: ``[min]`` and ``[max]`` tables of ``metric = value``."""
    from .io import load_toml

    data = load_toml(path, "gate")
    extra = set(data) - {"min", "max"}
    if extra:
        raise IdauditError(f"gate file {path}: unknown tables {sorted(extra)}; use [min] and [max]")
    out = []
    for op in ("min", "max"):
        table = data.get(op, {})
        if not isinstance(table, dict):
            raise IdauditError(f"gate file {path}: [{op}] must be a table of metric = value")
        out += [make_threshold(k, op, v) for k, v in table.items()]
    return out


def evaluate_gate(metrics: dict[str, Any], thresholds: list[Threshold]) -> list[Threshold]:
    for t in thresholds:
        if t.metric not in metrics or metrics[t.metric] is None:
            raise IdauditError(f"metric {t.metric!r} is not available for these inputs"
                               + (" (it needs h′ and ρ)" if t.metric in
                                  {"alignment_gap", "D", "bound", "bound_holds"} else ""))
        actual = float(metrics[t.metric])
        t.actual = actual
        t.passed = bool(actual >= t.value) if t.op == "min" else bool(actual <= t.value)
    return thresholds


# ---- checks -----------------------------------------------------------------------------


def inconclusive_reason(inp: AuditInputs) -> str | None:
    """Why no verdict can be given (NaN/Inf, collapse, too few samples), or None."""
    for name, arr in (("z", inp.z), ("h", inp.h), ("h_prime", inp.h_prime)):
        if arr is not None and not bool(torch.isfinite(arr).all()):
            return f"{name} contains NaN or Inf values"
    n_rows, n, m = inp.h.shape[0], inp.z.shape[1], inp.h.shape[1]
    h = inp.h.double()
    var = float(h.var(0, unbiased=False).sum()) if n_rows > 1 else 0.0
    scale = float(h.square().mean()) * m
    if var <= 1e-12 * max(scale, 1e-30) or var == 0.0:
        return "the embedding collapsed: h has (near-)zero variance, every input maps to one point"
    need = 2 * (n + m) + 10
    if n_rows < need:
        return (f"too few samples: {n_rows} rows for a {n}-dimensional latent and a "
                f"{m}-dimensional embedding (need at least {need} for held-out fits)")
    return None


def check_shapes(inp: AuditInputs) -> AuditInputs:
    """Shape and type checks that are input errors (exit 2), not inconclusive audits."""
    z, h = inp.z, inp.h
    if z.ndim == 1:
        z = z[:, None]
    if h.ndim == 1:
        h = h[:, None]
    if z.ndim != 2 or h.ndim != 2:
        raise IdauditError(f"z and h must be 2-D arrays (samples × dims), got {tuple(inp.z.shape)}"
                           f" and {tuple(inp.h.shape)}")
    if z.shape[0] != h.shape[0]:
        raise IdauditError(f"z has {z.shape[0]} rows but h has {h.shape[0]}")
    hp = inp.h_prime
    if hp is not None:
        hp = hp[:, None] if hp.ndim == 1 else hp
        if hp.shape != h.shape:
            raise IdauditError(f"h_prime has shape {tuple(hp.shape)} but h has {tuple(h.shape)}")
    if inp.rho is not None and not (0.0 < inp.rho < 1.0):
        raise IdauditError(f"rho must lie strictly between 0 and 1, got {inp.rho}")
    for i in inp.circular:
        if not 0 <= i < z.shape[1]:
            raise IdauditError(f"circular latent index {i} is out of range for {z.shape[1]} latents")
    inp.z, inp.h, inp.h_prime = z, h, hp
    return inp


# ---- the audit --------------------------------------------------------------------------


def audit_inputs(inp: AuditInputs, thresholds: list[Threshold] | None = None, *,
                 bootstrap: int = 0, test_fraction: float = 0.5, seed: int = 0,
                 gauss_sims: int = 50) -> AuditReport:
    """Metrics and verdict for arrays already reduced to (z, h, h′, ρ)."""
    inp = check_shapes(inp)
    thresholds = list(thresholds or [])
    reason = inconclusive_reason(inp)
    if reason is not None:
        return AuditReport(metrics={"n_samples": int(inp.h.shape[0]),
                                    "latent_dim": int(inp.z.shape[1]),
                                    "embed_dim": int(inp.h.shape[1])},
                           thresholds=thresholds, verdict="inconclusive", reason=reason,
                           source=inp.source, world=inp.world)
    if not 0.0 < test_fraction < 1.0:
        raise IdauditError(f"--test-fraction must lie in (0, 1), got {test_fraction}")
    metrics = audit_metrics(inp.z, inp.h, inp.h_prime, inp.rho, inp.x, circular=inp.circular,
                            test_fraction=test_fraction, seed=seed, bootstrap=bootstrap,
                            gauss_sims=gauss_sims, test_rows=inp.test_rows)
    evaluate_gate(metrics, thresholds)
    failed = [t for t in thresholds if not t.passed]
    return AuditReport(metrics=metrics, thresholds=thresholds,
                       verdict="fail" if failed else "pass", source=inp.source, world=inp.world)


def audit(z: Any = None, h: Any = None, h_prime: Any = None, rho: float | None = None, *,
          encoder: Any = None, world: Any = None, x: Any = None, circular: tuple[int, ...] = (),
          n_eval: int = 10_000, seed: int = 0, bootstrap: int = 0, test_fraction: float = 0.5,
          gate: dict[str, dict[str, float]] | None = None, gauss_sims: int = 50) -> AuditReport:
    """Audit arrays (``z``, ``h``, optional ``h_prime``, ``rho``) or an ``encoder`` on a ``world``.

    ``world`` is a :class:`~idaudit.worlds.World`, a WorldSpec or a world name; ``gate`` is
    ``{"min": {metric: value}, "max": {...}}``. Returns an :class:`AuditReport` whose
    ``to_dict()`` is the JSON that ``idaudit audit --json`` writes.
    """
    thresholds = [make_threshold(k, op, v) for op in ("min", "max")
                  for k, v in (gate or {}).get(op, {}).items()]
    if encoder is not None:
        from .worlds import World, WorldSpec, build_world, make_spec

        if world is None:
            raise IdauditError("auditing an encoder needs a world")
        if isinstance(world, str):
            world = build_world(make_spec(world))
        elif isinstance(world, WorldSpec):
            world = build_world(world)
        elif not isinstance(world, World):
            raise IdauditError(f"world must be a World, WorldSpec or name, got {type(world)}")
        inp = arrays_from_world(as_embed_fn(encoder), world, n_eval, seed, source="encoder")
    else:
        if z is None or h is None:
            raise IdauditError("audit needs either z and h arrays or an encoder and a world")
        inp = AuditInputs(z=_tensor(z, "z"), h=_tensor(h, "h"),
                          h_prime=None if h_prime is None else _tensor(h_prime, "h_prime"),
                          rho=None if rho is None else float(rho),
                          x=None if x is None else _tensor(x, "x"), circular=tuple(circular))
    return audit_inputs(inp, thresholds, bootstrap=bootstrap, test_fraction=test_fraction,
                        seed=seed, gauss_sims=gauss_sims)


def _tensor(a: Any, name: str) -> torch.Tensor:
    try:
        t = a.detach().cpu() if isinstance(a, torch.Tensor) else torch.as_tensor(np.asarray(a))
    except (TypeError, ValueError, RuntimeError) as exc:
        raise IdauditError(f"{name} is not a numeric array ({exc})") from None
    if not (t.is_floating_point() or t.dtype in (torch.int32, torch.int64)):
        raise IdauditError(f"{name} must hold numbers, got dtype {t.dtype}")
    return t if t.is_floating_point() else t.double()


# ---- encoders and worlds → arrays -------------------------------------------------------


def as_embed_fn(encoder: Any):
    """Wrap an nn.Module / callable as x ↦ h (eval mode, no grad, chunked, CPU float32)."""
    def embed_fn(x: torch.Tensor) -> torch.Tensor:
        if isinstance(encoder, torch.nn.Module):
            try:
                encoder.eval()
            except NotImplementedError:  # torch.export modules keep their exported mode
                pass
        outs = []
        with torch.no_grad():
            for i in range(0, x.shape[0], 8192):
                chunk = x[i:i + 8192]
                try:
                    y = encoder(chunk)
                except Exception as exc:  # a user's encoder can raise anything
                    raise IdauditError(
                        f"the encoder failed on inputs of shape {tuple(chunk.shape)}: "
                        f"{_error_line(exc)}") from None
                if isinstance(y, (tuple, list)):
                    y = y[0]
                if not isinstance(y, torch.Tensor) or y.ndim < 1 or y.shape[0] != chunk.shape[0]:
                    shape = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
                    raise IdauditError(f"the encoder returned {shape} for a batch of "
                                       f"{chunk.shape[0]}; expected (batch, embed_dim)")
                outs.append(y.reshape(y.shape[0], -1).float().cpu())
        return torch.cat(outs)

    return embed_fn


def _error_line(exc: BaseException) -> str:
    """The informative line of an exception (TorchScript puts it last, after a preamble)."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    if "TorchScript interpreter" in lines[0] and len(lines) > 1:
        return lines[-1]
    return lines[0]


def arrays_from_world(embed_fn, world, n_eval: int, seed: int, source: str) -> AuditInputs:
    """Evaluation pairs of a world (the same set ``train`` uses for that seed) → arrays."""
    from .train.loop import make_eval_set

    ev = make_eval_set(world, n_eval, seed)
    return AuditInputs(z=ev.z, h=embed_fn(ev.x), h_prime=embed_fn(ev.x_prime), rho=world.rho,
                       x=ev.x, source=source, world=world.spec.to_dict(),
                       circular=tuple(world.spec.extra.get("circular", ())))


def arrays_from_dataset(embed_fn, path: str | Path, source: str) -> AuditInputs:
    """Pairs written by ``idaudit world`` → arrays."""
    from .worlds.dataset import load_pairs

    spec, t = load_pairs(path)
    return AuditInputs(z=t["z"], h=embed_fn(t["x"]), h_prime=embed_fn(t["x_prime"]),
                       rho=spec.rho, x=t["x"], source=source, world=spec.to_dict(),
                       circular=tuple(spec.extra.get("circular", ())))


def arrays_from_reacher(encoder: torch.nn.Module, dataset: str | Path, source: str,
                        n_fit: int = 10_000, data=None) -> AuditInputs:
    """Pixel world: fit on (up to) ``n_fit`` training images, score on the shared eval images.

    Both joints are angles, so the sin/cos diagnostic is on. The alignment gap needs pairs
    whose correlation is one known ρ, which only OU datasets have; it is left out here.
    """
    from .train.pixels import embed_images
    from .worlds.reacher_data import load_dataset

    data = data if data is not None else load_dataset(dataset)  # reuse one already loaded
    k = min(n_fit, len(data.z))
    h_fit = embed_images(encoder, data.x[:k], torch.device("cpu"))
    h_ev = embed_images(encoder, data.x_eval, torch.device("cpu"))
    z = torch.from_numpy(np.concatenate([data.z[:k], data.z_eval]))
    return AuditInputs(z=z, h=torch.cat([h_fit, h_ev]), circular=(0, 1), source=source,
                       world={"name": "reacher", **data.meta["spec"]},
                       test_rows=torch.arange(k, k + len(data.z_eval)))


def audit_checkpoint(path: str | Path, n_eval: int | None = None,
                     seed: int | None = None) -> dict[str, Any]:
    """In-sample metrics of an idaudit checkpoint on its own world's evaluation set.

    The evaluation set is the one ``train`` used (same size and seed) unless overridden, so
    the contract keys equal those it logged.
    """
    from .checkpoint import load_checkpoint
    from .metrics import identifiability_metrics, linear_r2
    from .train.loop import embed, make_eval_set
    from .worlds import build_world

    ck = load_checkpoint(path)
    world = build_world(ck.world)
    n_eval = int(n_eval or ck.train.get("n_eval", 10_000))
    seed = int(ck.train.get("seed", 0) if seed is None else seed)
    ev = make_eval_set(world, n_eval, seed)
    h = embed(ck.encoder, ev.x, torch.device("cpu"))
    hp = embed(ck.encoder, ev.x_prime, torch.device("cpu"))
    metrics = identifiability_metrics(ev.z, h, hp, world.rho)
    metrics["mixing_r2_x_to_z"] = linear_r2(ev.x, ev.z)
    return {"checkpoint": str(path), "world": ck.world.to_dict(),
            "encoder": {"name": ck.encoder_name, "kwargs": ck.encoder_kwargs},
            "eval": {"n": n_eval, "seed": seed}, "metrics": metrics}
