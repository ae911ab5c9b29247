"""What a metric is and how metrics are computed together: :class:`Metric` (a catalogue entry:
key, label, direction, needs, reports, meaning) and :class:`MetricGroup` (a compute function
over one :class:`~idaudit.maths.fit.Fit` with the entries of the keys it returns). idaudit's own
groups are in :mod:`idaudit.maths.metrics`; a plugin declares its own the same way."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from idaudit.maths.fit import Fit

__all__ = ["DIRECTIONS", "Direction", "Metric", "MetricGroup", "NEEDS", "REPORTS"]


#: what an audit must be given for a metric (``Metric.needs``): ``z`` the true latents,
#: ``h_prime`` and ``rho`` the positive pairs and their OU correlation, ``bootstrap``
#: ``--bootstrap B`` resamples, ``angle_law`` angles seen mod 2π with their law, ``floor`` the
#: shuffles of the uninformative floor (``--floor-draws``, on by default)
NEEDS = ("z", "h_prime", "rho", "bootstrap", "angle_law", "floor")
#: which reports hold a metric (``Metric.reports``): ``audit`` an audit with z (``audit_metrics``,
#: or several runs gated together), ``label_free`` a label-free audit (h, h′, ρ alone),
#: ``consistency`` the consistency check, ``train`` a row of the training table, ``sweep`` a
#: column of the sweep tables
REPORTS = ("audit", "label_free", "consistency", "train", "sweep")
DIRECTIONS = ("higher", "lower", None)

Direction = Literal["higher", "lower"] | None


@dataclass(frozen=True)
class Metric:
    """One metric: its key, console/Markdown ``label``, which way is better (None: a size,
    flag or reference value), what the audit needs to report it (:data:`NEEDS`), where it is
    reported (:data:`REPORTS`), what it means.

    ``row``: a row of the audit / consistency tables when reported there (False: in the JSON
    and gates only); ``gate``: a gate may name it (False: not a single number); ``short``:
    the training table's label where it differs from ``label``."""

    key: str
    label: str
    direction: Direction
    needs: frozenset[str]
    reports: frozenset[str]
    meaning: str
    row: bool = True
    gate: bool = True
    short: str | None = None

    @classmethod
    def of(cls, key: str, label: str, direction: Direction, needs: str, reports: str,
           meaning: str, **kw: Any) -> Metric:
        """An entry, with ``needs`` and ``reports`` as space-separated words.

        Example:
            >>> Metric.of("width", "embedding width", None, "", "audit", "columns of h").reports
            frozenset({'audit'})
        """
        return cls(key, label, direction, frozenset(needs.split()), frozenset(reports.split()),
                   meaning, **kw)

    def to_dict(self) -> dict[str, Any]:
        """The entry as JSON: needs and reports as lists in their canonical order."""
        return {"key": self.key, "label": self.label, "direction": self.direction,
                "needs": [n for n in NEEDS if n in self.needs],
                "reports": [r for r in REPORTS if r in self.reports], "meaning": self.meaning,
                "row": self.row, "gate": self.gate, "short": self.short}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Metric:
        return cls(**{**d, "needs": frozenset(d["needs"]), "reports": frozenset(d["reports"])})


@dataclass(frozen=True)
class MetricGroup:
    """Metrics computed together: their ``name``, when they apply (``applies``, given the fit)
    and the function that computes them. ``core``: kept by a training curve's audit.
    ``metrics``: the catalogue entries (:class:`Metric`) of the keys ``compute`` returns,
    declared beside it (idaudit's own groups below, and a plugin's).

    A plugin registers one under the ``idaudit.metrics`` entry-point group; its ``compute``
    reads the :class:`Fit` (``fit.z``-side and ``fit.h``-side blocks of the covariance
    ``fit.cov``, the train/test split …) and returns ``{key: value}`` for its entries.

    Example:
        >>> g = MetricGroup("width", lambda f: True, lambda f: {"width": 3}, metrics=(
        ...     Metric.of("width", "embedding width", None, "", "audit",
        ...               "how many dimensions h has"),))
        >>> [m.key for m in g.metrics]
        ['width']
    """

    name: str
    applies: Callable[[Fit], bool]
    compute: Callable[[Fit], dict[str, Any]]
    core: bool = False
    metrics: tuple[Metric, ...] = ()
