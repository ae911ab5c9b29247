"""A sweep's results as tables: the run records read back, averaged over seeds (mean ± std) and
written as CSV and Markdown in the paper's layouts."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from idaudit.core.defaults import WORLD
from idaudit.core.errors import IdauditError
from idaudit.evaluations.report import markdown_text
from idaudit.maths.catalogue import entries
from idaudit.training.collapse import COLLAPSE_VARIANCE, record_collapsed

__all__ = ["REPORT_METRICS", "TABLES", "aggregate", "grid_cells", "load_results", "method_label",
           "record_paths", "rho_trends", "SWEEP_FILE", "sweep_suite", "write_tables"]

# the metrics the sweep tables average over seeds (their columns)
REPORT_METRICS = tuple(m.key for m in entries("sweep"))


def _scalars(metrics: dict[str, Any]) -> dict[str, Any]:
    """The run's metrics plus, for 2D latents, R²(h → z_i) per latent as r2_h_to_z0/1."""
    per_dim = metrics.get("r2_h_to_z_per_dim") or []
    extra = {f"r2_h_to_z{i}": v for i, v in enumerate(per_dim)} if len(per_dim) == 2 else {}
    return {**metrics, **extra}


#: the tables :func:`write_tables` writes in a sweep's directory
TABLES = {"csv": "summary.csv", "markdown": "summary.md"}


def record_paths(out_dir: str | Path) -> list[Path]:
    """A sweep's run records, finished and failed (``DIR/runs/*.json``), by name."""
    return sorted((Path(out_dir) / "runs").glob("*.json"))


def load_results(out_dir: str | Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The finished and the failed run records of a sweep (``DIR/runs/*.json`` and
    ``*.failed.json``).

    A record that is not one the sweep writes — a symbolic link (never followed) or anything
    else but a regular file, not a JSON object, no ``run`` or ``metrics`` object, a metric,
    run option or duration the tables use that is not a finite number (:func:`check_record`),
    an embedding sample that is not rows of numbers — is refused (exit 2, one line naming the
    file), not skipped: the tables would silently leave a run out while looking complete, and
    the sweep itself skips a run whose record exists. Delete the file and rerun the sweep:
    it redoes that run.

    Args:
        out_dir: the sweep's directory (``--out`` of ``idaudit sweep``).

    Returns:
        (the finished runs' records, the failed runs' records), each by file name.
    """
    from idaudit.core.jsontext import parse_json_object
    from idaudit.core.storage import is_uri, open_store

    store = open_store(str(out_dir), "the sweep") if is_uri(str(out_dir)) else None
    if store is None:
        runs_dir = Path(out_dir) / "runs"
        if not runs_dir.is_dir():
            raise IdauditError(f"{out_dir} has no runs/ directory (run `idaudit sweep` first)")
        paths: list[Any] = record_paths(out_dir)
    else:
        paths = [store.join("runs", n) for n in store.listdir("runs") if n.endswith(".json")]
        if not paths:
            raise IdauditError(f"{out_dir} has no run records under runs/ (run `idaudit "
                               "sweep` first)")
    ok, failed = [], []
    for path in paths:
        is_failed = str(path).endswith(".failed.json")
        try:
            text = _read_record(path) if store is None else _read_stored(store, path)
            path = path if store is None else store.shown(path)
            rec = parse_json_object(text, str(path))
            if not is_failed:
                check_record(rec, str(path))
        except IdauditError as exc:
            raise IdauditError(f"{exc} — not a run record of `idaudit sweep`; delete it and "
                               "rerun the sweep to redo that run") from None
        (failed if is_failed else ok).append(rec)
    return ok, failed


def _read_stored(store: Any, key: str) -> str:
    """The text of the run record ``key`` in the remote ``store`` (an object store has no
    symbolic links to refuse)."""
    try:
        return store.read_text(key)
    except (OSError, UnicodeDecodeError) as exc:
        raise IdauditError(f"cannot read {store.shown(key)} ({exc})") from None


def _read_record(path: Path) -> str:
    """The text of the run record at ``path``, read without following a symbolic link (one
    there is refused: it would put another file's numbers, or a file outside the sweep, in
    the tables) and only from a regular file.

    Args:
        path: a file under the sweep's ``runs/``.

    Returns:
        The record's text.
    """
    try:
        st = path.lstat()
    except OSError as exc:
        raise IdauditError(f"cannot read {path} ({exc.strerror or exc})") from None
    if stat.S_ISLNK(st.st_mode):
        raise IdauditError(f"{path} is a symbolic link (records are never followed)")
    if not stat.S_ISREG(st.st_mode):
        raise IdauditError(f"{path} is not a regular file")
    try:  # O_NOFOLLOW: a link put there since the check is refused as well
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with open(fd) as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise IdauditError(f"cannot read {path} ({exc})") from None


RECORD_NUMBERS = ("lamb", "rho", "alpha", "dim", "stride", "seed", "sigma")  # run options

#: the largest magnitude a number of a record may have: the tables' means and standard
#: deviations over seeds (squares of differences, summed) stay finite below it
RECORD_MAGNITUDE = 1e150


def record_number(value: Any, what: str, *, least: float | None = None) -> Any:
    """``value`` if it is None or a finite number of magnitude at most
    :data:`RECORD_MAGNITUDE` (and ≥ ``least`` when given), else a one-line error naming
    ``what``: NaN, ±Infinity or 1e308 in a record would make the tables print ``inf`` or
    ``nan`` minutes and means as if they were results.

    Args:
        value: the value read from a record.
        what: the record and the field, as the error names them.
        least: the smallest value allowed (0 for a duration), or None.

    Returns:
        ``value`` itself.
    """
    from idaudit.worlds.spec import check_type, shown

    check_type(value, "number", what, optional=True)
    if value is not None and not abs(value) <= RECORD_MAGNITUDE:  # NaN compares False too
        raise IdauditError(f"{what} must be a finite number of magnitude at most "
                           f"{RECORD_MAGNITUDE:g}, got {shown(value)}")
    if value is not None and least is not None and value < least:
        raise IdauditError(f"{what} must be ≥ {least:g}, got {shown(value)}")
    return value


def check_record(rec: dict[str, Any], where: str) -> None:
    """What the tables and figures read of a finished run's record: ``run`` and ``metrics``
    objects, finite numbers (or null) where numbers are read (:func:`record_number`: run
    options, metrics, the training ``seconds``), an embedding sample of finite numeric rows.

    Args:
        rec: the record, parsed.
        where: the record's file, as errors name it.
    """
    from idaudit.worlds.spec import check_fields, check_type

    check_fields(rec, where, set(rec), ("run", "metrics"))
    run, metrics = (check_type(rec[k], "object", f"{where}: {k}") for k in ("run", "metrics"))
    for key in RECORD_NUMBERS:
        if key in run and not (key == "sigma" and isinstance(run[key], str)):
            record_number(run[key], f"{where}: run option {key}")
    for key in REPORT_METRICS:
        record_number(metrics.get(key), f"{where}: metric {key}")
    per_dim = check_type(metrics.get("r2_h_to_z_per_dim"), "list",
                         f"{where}: metric r2_h_to_z_per_dim", optional=True) or []
    for v in per_dim:
        record_number(v, f"{where}: metric r2_h_to_z_per_dim")
    record_number(rec.get("seconds"), f"{where}: seconds", least=0.0)
    sample = check_type(rec.get("embedding_sample"), "object", f"{where}: embedding_sample",
                        optional=True)
    if sample is not None:
        check_fields(sample, f"{where}: embedding_sample", {"z", "h"}, ("z", "h"))
        try:
            z, h = (np.asarray(sample[k], dtype=np.float64) for k in ("z", "h"))
        except (TypeError, ValueError):
            z = h = np.zeros(0)
        if z.ndim != 2 or h.ndim != 2 or len(z) != len(h) or min(z.shape[1:] + h.shape[1:],
                                                                 default=0) < 2 \
                or not (np.isfinite(z).all() and np.isfinite(h).all()):
            raise IdauditError(f"{where}: embedding_sample must hold z and h as rows of at "
                               "least two finite numbers each, as many of one as of the other")


def method_label(run: dict[str, Any]) -> str:
    """SIGReg / whitening / VICReg / InfoNCE (σ=…): a run's objective as tables name it. The
    paper's tables call its whitening form λ‖Cov − I‖² + (1 − λ)·A (``whiten``) "VICReg";
    here that name is Bardes et al.'s objective (``vicreg``)."""
    obj = run.get("objective", "lejepa")
    if obj == "infonce":
        return f"InfoNCE (σ={run.get('sigma', 1.0)})"
    return METHOD_LABELS.get(obj, obj)


#: objective → its name in tables, in the order tables list them
METHOD_LABELS = {"lejepa": "SIGReg", "whiten": "whitening (the paper's VICReg)",
                 "vicreg": "VICReg"}


def method_order(label: str) -> tuple[int, str]:
    """Sort key of a method's table label: METHOD_LABELS' order, then the rest by name."""
    return list(METHOD_LABELS.values()).index(label) if label in METHOD_LABELS.values() else 9, label


def aggregate(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and std over seeds of each configuration (all options but the seed); a
    configuration with collapsed runs (:func:`~idaudit.training.collapse.record_collapsed`)
    says how many (``n_collapsed``)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        key = json.dumps({k: v for k, v in rec["run"].items() if k != "seed"}, sort_keys=True)
        groups.setdefault(key, []).append(rec)
    rows = []
    for key, recs in groups.items():
        row: dict[str, Any] = {**json.loads(key), "method": method_label(recs[0]["run"]),
                               "n_seeds": len(recs)}
        collapsed = sum(record_collapsed(r) for r in recs)
        if collapsed:
            row["n_collapsed"] = collapsed
        scalars = [_scalars(r["metrics"]) for r in recs]
        for m in REPORT_METRICS:
            vals = [x[m] for x in scalars if x.get(m) is not None]
            if vals:
                row[f"{m}_mean"] = float(np.mean(vals))
                row[f"{m}_std"] = float(np.std(vals))
        secs = [float(r["seconds"]) for r in recs if isinstance(r.get("seconds"), int | float)]
        if secs:
            row["minutes_mean"] = float(np.mean(secs)) / 60.0
            row["minutes_std"] = float(np.std(secs)) / 60.0
        rows.append(row)
    return rows


def grid_cells(rows: list[dict[str, Any]]) -> tuple[str, str, list[float], list[float],
                                          dict[str, np.ndarray]] | None:
    """(world, method, λs, ρs, {metric: λ × ρ matrix of means}) of the world and method with
    the most λ, ρ cells; None when λ and ρ do not both vary."""
    rows = [r for r in rows if r.get("lamb") is not None and r.get("rho") is not None
            and "r2_h_to_z_mean" in r]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r.get("world", WORLD), r["method"]), []).append(r)
    if not groups:
        return None
    (world, method), rows = max(groups.items(), key=lambda kv: len(kv[1]))
    lambs = sorted({r["lamb"] for r in rows})
    rhos = sorted({r["rho"] for r in rows})
    if len(lambs) < 2 or len(rhos) < 2:
        return None
    mats = {}
    for metric in ("r2_h_to_z", "orthogonality_error"):
        grid = np.full((len(lambs), len(rhos)), np.nan)
        for r in rows:
            if f"{metric}_mean" in r:
                grid[lambs.index(r["lamb"]), rhos.index(r["rho"])] = r[f"{metric}_mean"]
        mats[metric] = grid
    return world, method, lambs, rhos, mats


def rho_trends(rows: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(λ, Spearman rank correlation of mean R²(h → z) with ρ) for each λ of a λ × ρ grid."""
    from scipy.stats import spearmanr

    cells = grid_cells(rows)
    if cells is None:
        return []
    _, _, lambs, rhos, mats = cells
    out = []
    for lam, r2 in zip(lambs, mats["r2_h_to_z"]):
        ok = np.isfinite(r2)
        if ok.sum() >= 3:
            out.append((lam, float(spearmanr(np.asarray(rhos)[ok], r2[ok]).statistic)))
    return out


def _order(value: Any) -> tuple[int, Any]:
    """Sort key: numbers by value, then everything else by its text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, value)
    return (1, json.dumps(value))


def _ou_trajectory_table(rows: list[dict[str, Any]], pm: Callable[[Any, str], str]) -> list[str]:
    """The paper's Table 2 layout: OU pairs by ρ, trajectory pairs by stride, per λ."""
    lines: list[str] = []
    ou = sorted((r for r in rows if r.get("mode", "ou") == "ou" and not r.get("trajectory")),
                key=lambda r: (r.get("lamb", 0), r.get("rho", 0)))
    traj = sorted((r for r in rows if r.get("mode") == "trajectory" or r.get("trajectory")),
                  key=lambda r: (r.get("lamb", 0), r.get("stride", 0)))
    if ou:
        lines += ["| λ | OU ρ | seeds | R²(z→h) | R²(h→z) | orthogonality error |",
                  "|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r.get('lamb')} | {r.get('rho')} | {r['n_seeds']} | {pm(r, 'r2_z_to_h')} | "
                  f"{pm(r, 'r2_h_to_z')} | {pm(r, 'orthogonality_error')} |" for r in ou]
    if traj:
        lines += ["", "| λ | stride δ | ρ₀ | ρ₁ | seeds | R²(z→h) | R²(h→z₀) | R²(h→z₁) |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r.get('lamb')} | {r.get('stride')} | {r.get('rho_0_mean', float('nan')):.3f} "
                  f"| {r.get('rho_1_mean', float('nan')):.3f} | {r['n_seeds']} | "
                  f"{pm(r, 'r2_z_to_h')} | {pm(r, 'r2_h_to_z0')} | {pm(r, 'r2_h_to_z1')} |"
                  for r in traj]
    return lines


def best_lambda(rows: list[dict[str, Any]], condition: Callable[[dict[str, Any]], Any]
                ) -> dict[Any, dict[str, Any]]:
    """For each condition (``condition(row)``), the row of the λ with the highest mean held-out
    R²(h → z) (in-sample where a row has no held-out value): the paper's best λ per condition."""
    best: dict[Any, dict[str, Any]] = {}
    for r in rows:
        score = r.get("r2_h_to_z_heldout_mean", r.get("r2_h_to_z_mean"))
        if score is None:
            continue
        key = condition(r)
        held = best.get(key)
        if held is None or score > held.get("r2_h_to_z_heldout_mean",
                                            held.get("r2_h_to_z_mean", -np.inf)):
            best[key] = r
    return best


def _paper_side_by_side(rows: list[dict[str, Any]]) -> list[str]:
    """idaudit's Reacher rows beside the paper's Table 2 and the ceiling: the best λ of each
    OU ρ and each trajectory stride (mean over seeds), the paper's mean ± std."""
    from idaudit.experiments.paper import OU_TABLE_2, TRAJECTORY_TABLE_2

    def num(r: dict[str, Any], m: str, fmt: str = ".3f") -> str:
        v = r.get(f"{m}_mean")
        return "—" if v is None else format(v, fmt)

    def paper(ref: dict[str, tuple[float, float]] | None, m: str) -> str:
        if ref is None:
            return "—"
        mean, sd = ref[m]
        return f"{mean:.2f} ± {sd:.0e}" if sd else f"{mean:.3f}"

    ou = best_lambda([r for r in rows if r.get("mode", "ou") == "ou" and r.get("rho")],
                     lambda r: r["rho"])
    traj = best_lambda([r for r in rows if r.get("mode") == "trajectory"],
                       lambda r: r.get("stride"))
    lines: list[str] = []
    if ou:
        lines += ["", "Beside the paper's Table 2 (the best λ of each condition among those run; "
                  "the ceiling: what R²(h → z) held-out can reach on this evaluation set):", "",
                  "| OU ρ | best λ | seeds | R²(h→z) held-out | R²(h→z) in-sample | paper R²(h→z) "
                  "| ceiling |", "|---:|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {rho} | {r.get('lamb')} | {r['n_seeds']} | {num(r, 'r2_h_to_z_heldout')} | "
                  f"{num(r, 'r2_h_to_z')} | {paper(OU_TABLE_2.get(rho), 'r2_h_to_z')} | "
                  f"{num(r, 'r2_h_to_z_ceiling')} |" for rho, r in sorted(ou.items())]
    if traj:
        lines += ["", "| stride δ | best λ | seeds | ρ₀, ρ₁ | paper ρ₀, ρ₁ | R²(h→z₀), R²(h→z₁) "
                  "| paper | R²(z→h) | paper | ceiling |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for stride, r in sorted(traj.items()):
            ref = TRAJECTORY_TABLE_2.get(stride)
            lines.append(
                f"| {stride} | {r.get('lamb')} | {r['n_seeds']} | {num(r, 'rho_0')}, "
                f"{num(r, 'rho_1')} | {paper(ref, 'rho_0')}, {paper(ref, 'rho_1')} | "
                f"{num(r, 'r2_h_to_z0')}, {num(r, 'r2_h_to_z1')} | {paper(ref, 'r2_h_to_z0')}, "
                f"{paper(ref, 'r2_h_to_z1')} | {num(r, 'r2_z_to_h')} | {paper(ref, 'r2_z_to_h')} "
                f"| {num(r, 'r2_h_to_z_ceiling')} |")
    return lines


def _paper_table_1(rows: list[dict[str, Any]]) -> list[str]:
    """Coupling rows beside the paper's Table 1: per N and method, the seeds run, R²(h → z)
    (mean over seeds), the paper's mean ± std, and the training minutes per run."""
    from idaudit.experiments.paper import TABLE_1, TABLE_1_RUNS

    rows = [r for r in rows if r.get("dim") in TABLE_1
            and all(r.get(k) == v for k, v in TABLE_1_RUNS.items())]
    if not rows:
        return []

    def paper_key(r: dict[str, Any]) -> str | None:
        obj = r.get("objective", "lejepa")
        if obj == "infonce":  # the paper's InfoNCE is σ = 1
            return "infonce" if str(r.get("sigma", 1.0)) in ("1", "1.0") else None
        return obj if obj in ("lejepa", "whiten") else None

    def ref(n: int, key: str | None) -> str:
        if key is None:
            return "—"
        mean, sd = TABLE_1[n][key]
        return f"{mean:.6f} ± {sd:.1e}"

    lines = ["", "Beside the paper's Table 1 (its mean ± std over 5 seeds; InfoNCE there is σ = 1):",
             "", "| N | method | seeds | R²(h→z) | paper R²(h→z) | mixing R²(x→z) | paper mixing "
             "| minutes per run |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: (r["dim"], *method_order(r["method"]))):
        n = r["dim"]
        mins = f"{r['minutes_mean']:.1f}" if "minutes_mean" in r else "—"
        lines.append(f"| {n} | {markdown_text(r['method'])} | {r['n_seeds']} | "
                     f"{r.get('r2_h_to_z_mean', float('nan')):.6f} | {ref(n, paper_key(r))} | "
                     f"{r.get('mixing_r2_x_to_z_mean', float('nan')):.3f} | "
                     f"{TABLE_1[n]['mixing'][0]:.3f} | {mins} |")
    return lines


def runs_per_node(records: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: per Ray node (records that name one), its runs and their training
    minutes (total and per run); none for a local sweep."""
    nodes: dict[str, list[float]] = {}
    for rec in records:
        node = rec.get("node")
        if isinstance(node, dict):
            key = markdown_text(f"{node.get('host')} ({node.get('ip')})")
            nodes.setdefault(key, []).append(float(rec.get("seconds") or 0.0))
    if not nodes:
        return []
    lines = ["", "Runs per node (Ray):", "", "| node | runs | minutes | minutes per run |",
             "|---|---:|---:|---:|"]
    for key, secs in sorted(nodes.items()):
        lines.append(f"| {key} | {len(secs)} | {sum(secs) / 60:.2f} | "
                     f"{sum(secs) / 60 / len(secs):.2f} |")
    return lines


#: what a spreadsheet reads as the start of a formula (or of a cell it splits off) in a text
#: cell: such a cell is written with a leading ' (as OWASP advises against CSV injection)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """``value`` as a cell of summary.csv: numbers as they are (a negative number stays a
    number), text — a run option or a method read from a record — prefixed with ``'`` where
    a spreadsheet would take it for a formula (:data:`FORMULA_STARTS`).

    Args:
        value: a value of an aggregated row (or a column's name).

    Returns:
        The number itself, or the text the CSV writer writes.
    """
    if value is None or isinstance(value, (int, float)):  # bool is an int: True/False
        return value
    text = str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


#: what ``idaudit sweep`` writes beside ``runs/``: the suite it ran (summary.md's title)
SWEEP_FILE = "sweep.json"

# run options summary.md's heading names by a symbol
_SYMBOLS = {"lamb": "λ", "rho": "ρ", "sigma": "σ", "alpha": "α", "dim": "N"}


def sweep_suite(out_dir: str | Path) -> str | None:
    """The suite a sweep's directory was made by (``DIR/sweep.json``), or None where the
    directory has no such file (made before idaudit wrote one) or it names none."""
    from idaudit.core.storage import is_uri, open_store

    try:
        if is_uri(str(out_dir)):
            suite = json.loads(open_store(str(out_dir)).read_text(SWEEP_FILE)).get("suite")
        else:
            suite = json.loads((Path(out_dir) / SWEEP_FILE).read_text()).get("suite")
    except (OSError, ValueError, AttributeError, IdauditError):
        return None
    return suite if isinstance(suite, str) else None


def _heading(rows: list[dict[str, Any]], suite: str | None) -> list[str]:
    """summary.md's title (the suite), the options every run shares, and the seeds."""
    title = f"# idaudit sweep: suite {markdown_text(suite)}" if suite else \
        f"# idaudit sweep ({SWEEP_FILE} names no suite)"
    fixed = [k for k in sorted({k for r in rows for k in r})
             if not k.endswith(("_mean", "_std")) and k not in ("n_seeds", "n_collapsed")
             and all(k in r for r in rows) and len({json.dumps(r[k]) for r in rows}) == 1]
    shared = ", ".join(f"{_SYMBOLS.get(k, markdown_text(k))} = {markdown_text(rows[0][k])}"
                       for k in fixed)
    seeds = sorted({r["n_seeds"] for r in rows})
    if seeds == [1]:
        per = "1 seed per configuration, so no ± (one seed has no spread)"
    else:
        span = str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}–{seeds[-1]}"
        per = (f"{span} seeds per configuration: mean ± std over seeds (a configuration "
               "of one seed shows no ±)")
    return [title, "", f"Fixed in every run: {shared or '—'}. {per}.", ""]


def write_tables(rows: list[dict[str, Any]], out_dir: str | Path,
                 records: list[dict[str, Any]] | None = None,
                 suite: str | None = None) -> dict[str, Path | str]:
    """summary.csv (every configuration) and summary.md (the paper's Table 1 layout when the
    runs vary the dimension: N, raw-mixing R², then R²(h → z) per method; with ``records``
    from a Ray sweep, the runs per node). Text read from records is written inert: CSV cells
    that a spreadsheet would run as formulas prefixed (:func:`csv_cell`), Markdown cells
    escaped (:func:`~idaudit.evaluations.report.markdown_text`).

    Args:
        rows: :func:`aggregate`'s rows.
        out_dir: the sweep's directory, where the tables go.
        records: the finished runs' records (for the runs per Ray node), or None.
        suite: the suite the sweep ran (:func:`sweep_suite`), summary.md's title.

    Returns:
        {"csv": summary.csv, "markdown": summary.md}, the paths written (for a sweep in
        object storage, their URIs).
    """
    import csv
    import io

    from idaudit.core.storage import is_uri, open_store

    store = open_store(str(out_dir) if is_uri(str(out_dir)) else Path(out_dir), "the sweep")
    cols = sorted({k for r in rows for k in r}, key=lambda k: (k.endswith(("_mean", "_std")), k))
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow([csv_cell(c) for c in cols])
    w.writerows([csv_cell(r.get(c, "")) for c in cols] for r in rows)
    text_csv = buf.getvalue()
    store.write_text(TABLES["csv"], text_csv)
    text_md = "\n".join(_heading(rows, suite) + _summary_lines(rows)
                        + runs_per_node(records or [])) + "\n"
    store.write_text(TABLES["markdown"], text_md)
    if store.is_local:
        return {kind: Path(store.root) / name for kind, name in TABLES.items()}
    return {kind: store.shown(name) for kind, name in TABLES.items()}


def _summary_lines(rows: list[dict[str, Any]]) -> list[str]:
    """summary.md's tables, in the layout the runs call for; then R²(h → z) against ρ per λ."""
    def pm(row: dict[str, Any] | None, m: str) -> str:
        if row is None or f"{m}_mean" not in row:
            return "—"
        if row.get("n_seeds") == 1:  # one seed: no spread to show
            return f"{row[f'{m}_mean']:.6f}"
        return f"{row[f'{m}_mean']:.6f} ± {row[f'{m}_std']:.1e}"

    lines = []
    methods = sorted({r["method"] for r in rows}, key=method_order)
    if all(("mode" in r or "trajectory" in r) for r in rows):  # OU vs trajectory pairs
        lines += _ou_trajectory_table(rows, pm) + _paper_side_by_side(rows)
    elif len({r.get("dim", 2) for r in rows}) > 1:
        lines += ["| N | mixing R²(x→z) | " + " | ".join(f"{markdown_text(m)} R²(h→z)"
                                                       for m in methods) + " |",
                  "|---:|---:|" + "---:|" * len(methods)]
        for dim in sorted({r.get("dim", 2) for r in rows}):
            at = [r for r in rows if r.get("dim", 2) == dim]
            by = {r["method"]: r for r in at}
            lines.append(f"| {dim} | {pm(at[0], 'mixing_r2_x_to_z')} | "
                         + " | ".join(pm(by.get(m), "r2_h_to_z") for m in methods) + " |")
        lines += _paper_table_1(rows)
    else:
        varying = [k for k in sorted({k for r in rows for k in r})
                   if not k.endswith(("_mean", "_std")) and k not in ("n_seeds", "n_collapsed")
                   and len({json.dumps(r.get(k)) for r in rows}) > 1]
        lines += ["| " + " | ".join([markdown_text(k) for k in varying] + [
                      "seeds", "R²(h→z)", "orthogonality error", "mixing R²(x→z)"]) + " |",
                  "|" + "---|" * (len(varying) + 4)]
        for r in sorted(rows, key=lambda r: [_order(r.get(k)) for k in varying]):
            lines.append("| " + " | ".join([markdown_text(r.get(k)) for k in varying] + [
                str(r["n_seeds"]), pm(r, "r2_h_to_z"), pm(r, "orthogonality_error"),
                pm(r, "mixing_r2_x_to_z")]) + " |")
    trends = rho_trends(rows)
    if trends:
        lines += ["", "R²(h→z) against ρ at each λ (Spearman rank correlation; +1 = rising "
                  "monotonically):", "", "| λ | Spearman(R², ρ) |", "|---:|---:|"]
        lines += [f"| {lam:g} | {rs:+.2f} |" for lam, rs in trends]
    collapsed = sum(r.get("n_collapsed", 0) for r in rows)
    if collapsed:
        total = sum(r["n_seeds"] for r in rows)
        lines += ["", f"{collapsed} of {total} runs collapsed (tr Cov(h) ≤ {COLLAPSE_VARIANCE:g}·m: "
                  "every input near one point): their R² is in the means above, and they are "
                  "counted apart from Theorem 3's bound (figures/bound.png), not under or above "
                  "it; summary.csv's n_collapsed says where."]
    return lines
