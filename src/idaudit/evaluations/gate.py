"""Gates: thresholds on metric keys (``--min``/``--max`` pairs, a TOML gate file, the shorthand
flags), checked against the catalogue's keys, and the thresholds a set of metrics fails.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from idaudit.core.errors import IdauditError
from idaudit.core.request_parts import GateOptions
from idaudit.maths.catalogue import BY_KEY, gate_keys, missing_need

__all__ = ["KNOWN_METRICS", "Threshold", "collect_thresholds", "directed_thresholds", "evaluate_gate",
           "make_threshold"]

# Every key an audit (with or without z) reports as one number or flag: a gate may name any.
KNOWN_METRICS = gate_keys("audit", "label_free")


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


# ---- thresholds -------------------------------------------------------------------------


def parse_threshold(text: str, op: str, known: Collection[str] = KNOWN_METRICS) -> Threshold:
    """``KEY=VALUE`` → Threshold (metric names outside ``known`` are an input error)."""
    key, sep, value = text.partition("=")
    if not sep:
        raise IdauditError(f"--{op} expects METRIC=VALUE, got {text!r}")
    try:
        number = float(value.strip())
    except ValueError:
        raise IdauditError(f"--{op} {key.strip()}: the value must be a number, got "
                           f"{value.strip()!r}") from None
    return make_threshold(key.strip(), op, number, known)


def make_threshold(key: str, op: str, value: Any, known: Collection[str] = KNOWN_METRICS) -> Threshold:
    """One threshold; ``value`` must be a number (a string such as ``"0.9"`` in a gate file or
    dictionary is refused, not read as one: a quoted value is usually a mistake)."""
    if key not in known:
        raise IdauditError(f"unknown metric {key!r} in the gate; valid: "
                           f"{', '.join(sorted(known))}")
    if op not in ("min", "max"):
        raise IdauditError(f"gate operator must be min or max, got {op!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise IdauditError(f"gate value for {key} must be a number, got {value!r} "
                           f"({type(value).__name__})")
    v = float(value)
    if math.isnan(v):
        raise IdauditError(f"gate value for {key} is NaN")
    return Threshold(key, op, v)


def table_thresholds(gate: Any, where: str = "gate",
                     known: Collection[str] = KNOWN_METRICS) -> list[Threshold]:
    """``{"min": {metric: value}, "max": {...}}`` (a TOML gate file or a dict) → thresholds."""
    if not isinstance(gate, dict):
        raise IdauditError(f"{where} must be a table with min and max tables, got "
                           f"{type(gate).__name__}")
    extra = set(gate) - {"min", "max"}
    if extra:
        raise IdauditError(f"{where}: unknown tables {sorted(extra)}; use [min] and [max]")
    out = []
    for op in ("min", "max"):
        table = gate.get(op, {})
        if not isinstance(table, dict):
            raise IdauditError(f"{where}: [{op}] must be a table of metric = value")
        out += [make_threshold(k, op, v, known) for k, v in table.items()]
    return out


def directed_thresholds(gate: Any, where: str = "gate",
                        known: Collection[str] = KNOWN_METRICS) -> list[Threshold]:
    """``{metric: value}``, each a minimum or a maximum as the catalogue says which way the
    metric is better (higher: value ≥ threshold, lower: ≤); or the table form
    ``{"min": {…}, "max": {…}}`` (:func:`table_thresholds`), which a metric without a better
    direction (a size, a reference value) needs."""
    if isinstance(gate, dict) and gate and set(gate) <= {"min", "max"}:
        return table_thresholds(gate, where, known)
    if not isinstance(gate, dict):
        raise IdauditError(f"{where} must be a dict of metric: value, got {type(gate).__name__}")
    out = []
    for key, value in gate.items():
        direction = BY_KEY[key].direction if key in known and key in BY_KEY else None
        if key in known and direction is None:
            raise IdauditError(f"{where}: {key} is neither better higher nor lower; give it "
                               f"as {{'min': {{{key!r}: …}}}} or {{'max': …}}")
        out.append(make_threshold(key, "min" if direction == "higher" else "max", value, known))
    return out


def load_gate_file(path: str | Path, known: Collection[str] = KNOWN_METRICS) -> list[Threshold]:
    """A TOML gate: ``[min]`` and ``[max]`` tables of ``metric = value``."""
    from idaudit.core.tomlfiles import load_toml

    return table_thresholds(load_toml(path, "gate"), f"gate file {path}", known)


def evaluate_gate(metrics: dict[str, Any], thresholds: list[Threshold]) -> list[Threshold]:
    """Each threshold's actual value and pass/fail; a gated metric these inputs do not give is
    an input error naming what it needs (from the catalogue)."""
    for t in thresholds:
        if t.metric not in metrics or metrics[t.metric] is None:
            need = missing_need(t.metric, bool(metrics.get("label_free")))
            raise IdauditError(f"metric {t.metric!r} is not available for these inputs{need}")
        actual = float(metrics[t.metric])
        t.actual = actual
        t.passed = bool(actual >= t.value) if t.op == "min" else bool(actual <= t.value)
    return thresholds


def collect_thresholds(gate: GateOptions, known: set[str], r2_key: str, orth_key: str
                       ) -> list[Threshold]:
    """A request's thresholds (its :class:`~idaudit.core.request_parts.GateOptions`) from every way
    of giving one: ``min_r2`` (on ``r2_key``),
    ``max_orthogonality_error`` (on ``orth_key``), ``min``/``max`` (``{metric: value}`` or
    ``["METRIC=VALUE", …]``) and ``gate`` (a ``{"min": …, "max": …}`` dict or a TOML file)."""
    out = []
    if gate.min_r2 is not None:
        out.append(make_threshold(r2_key, "min", gate.min_r2, known))
    if gate.max_orthogonality_error is not None:
        out.append(make_threshold(orth_key, "max", gate.max_orthogonality_error, known))
    for op, given in (("min", gate.min), ("max", gate.max)):
        if isinstance(given, dict):
            out += [make_threshold(k, op, v, known) for k, v in given.items()]
        else:
            out += [parse_threshold(t, op, known) for t in given or []]
    if isinstance(gate.gate, (str, Path)):
        out += load_gate_file(gate.gate, known)
    elif gate.gate is not None:
        out += table_thresholds(gate.gate, known=known)
    return out
