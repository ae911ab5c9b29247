"""Reports of one evaluation: rich tables, Markdown and JUnit for audits, consistency and plans
(a sweep's tables over many runs are :mod:`idaudit.experiments.aggregate`)."""

from __future__ import annotations

import re
from typing import Any

from rich.markup import escape
from rich.table import Table

from idaudit.core.errors import one_line, printable
from idaudit.maths.catalogue import BY_KEY, NEEDS, catalogue, table_rows

__all__ = ["METRICS_DOC", "NO_GATE_NOTE", "VERDICTS", "audit_junit", "audit_markdown", "audit_table",
           "bound_note", "catalogue_table", "ceiling_note", "comparability_notes", "consistency_table",
           "few_rows_warning", "fmt",
           "gated_of", "markdown_text",
           "metrics_table", "notes", "plan_table", "side_by_side_markdown", "side_by_side_rows",
           "side_by_side_table", "side_cell", "threshold_text", "verdict_lines", "xml_text"]

#: characters XML 1.0 forbids in a document (C0 controls but tab, line feed and carriage
#: return; lone surrogates; U+FFFE, U+FFFF)
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(text: Any) -> str:
    """``text`` as XML 1.0 allows it (and UTF-8 can encode it): control characters, lone
    surrogates (an undecodable byte of a file name) and U+FFFE/U+FFFF shown as
    ``\\xNN``/``\\uNNNN`` (:func:`~idaudit.core.errors.printable`); ``& < >`` and quotes
    are left to the XML writer, which escapes them.

    Args:
        text: what to write into an attribute or an element (``str()`` of anything else).

    Returns:
        The text with no character a well-formed XML 1.0 document may not hold.
    """
    return _NOT_XML.sub(lambda m: ascii(m.group())[1:-1], printable(str(text)))


#: what Markdown reads as markup inside a line: backslash escapes, code spans, emphasis and
#: strikethrough, links and images, table cells, headings, maths; each is written escaped
_MARKDOWN_PUNCTUATION = re.compile(r"[\\`*\[\]|#~$]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
_MARKDOWN_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def markdown_text(text: Any) -> str:
    """``text`` (a name, a reason: anything a file or a program chose) as literal Markdown on
    one line: every run of white space (line breaks too) one space, control characters and
    lone surrogates shown as ``\\xNN``/``\\uNNNN`` (:func:`xml_text`), the characters
    Markdown reads as markup backslash-escaped and ``& < >`` as entities, so it can neither
    end a table cell, open a heading, a link or a code span, nor hold raw HTML.

    Args:
        text: what to show (``str()`` of anything else).

    Returns:
        The text as one line of Markdown that renders as the text itself.
    """
    line = xml_text(" ".join(str(text).split()))
    line = _MARKDOWN_PUNCTUATION.sub(lambda m: "\\" + m.group(), line)
    return "".join(_MARKDOWN_ENTITIES.get(c, c) for c in line)


def fmt(v: Any) -> str:
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, float) for x in v):
        return f"[{fmt(v[0])}, {fmt(v[1])}]"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        if v != v:
            return "nan"
        return f"{v:.6f}" if abs(v) < 1e4 else f"{v:.4g}"
    if v is None:
        return "—"
    return str(v)


def metrics_table(metrics: dict[str, Any], title: str = "identifiability") -> Table:
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("meaning", style="dim")
    for key, label in table_rows("train"):
        if key in metrics:
            table.add_row(label, fmt(metrics[key]), BY_KEY[key].meaning)
    return table


def catalogue_table() -> Table:
    """The metric catalogue (``idaudit metrics``): key, label, which way is better, what it
    needs, what it means."""
    entries = catalogue()
    table = Table(title=f"idaudit metrics · {len(entries)}")
    table.add_column("key", no_wrap=True)
    table.add_column("label", ratio=2)
    table.add_column("better", no_wrap=True)
    table.add_column("needs", no_wrap=True)
    table.add_column("meaning", style="dim", ratio=3)
    for m in entries:
        table.add_row(m.key, escape(m.label.strip()), m.direction or "—",
                      " ".join(n for n in NEEDS if n in m.needs) or "—", escape(m.meaning))
    return table


def plan_table(result: dict[str, Any]) -> Table:
    table = Table(title="latent straight-line planning")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    rows = [
        ("pairs × waypoints", f"{result['pairs']} × {result['waypoints']}"),
        ("cost ratio median", fmt(result["cost_ratio_median"])),
        ("cost ratio IQR", f"{fmt(result['cost_ratio_q25'])} – {fmt(result['cost_ratio_q75'])}"),
        ("cost ratio max", fmt(result["cost_ratio_max"])),
    ]
    if result.get("lqr_applicable"):
        rows += [
            ("LQR value rel. error (median)", fmt(result["lqr_value_rel_error_median"])),
            ("LQR value rel. error (max)", fmt(result["lqr_value_rel_error_max"])),
            ("LQR action rel. error", fmt(result["lqr_action_rel_error"])),
        ]
    else:
        rows.append(("LQR", result.get("lqr_note", "not applicable")))
    for r in rows:
        table.add_row(*r)
    return table


# verdict → (style, label, Markdown icon): every report's one source for how a verdict reads
VERDICTS = {
    "pass": ("green", "PASS", "✅"),
    "fail": ("red", "FAIL", "❌"),
    "inconclusive": ("yellow", "INCONCLUSIVE", "⚠️"),
    "ungated": ("cyan", "NO GATE", "ℹ️"),
}
NO_GATE_NOTE = ("no gate: no threshold was given, so nothing was checked (a report only; "
                "add --min-r2, --min/--max or --gate to gate on it)")


def verdict_markup(verdict: str) -> str:
    """The verdict as rich markup for a table title ("NO GATE (report only)" when ungated)."""
    style, label, _ = VERDICTS[verdict]
    suffix = " (report only)" if verdict == "ungated" else ""
    return f"[{style}]{label}{suffix}[/{style}]"


def threshold_text(t) -> str:
    """A threshold as the tables write it: ``≥ 0.9``, ``≤ 0.05``."""
    return f"{'≥' if t.op == 'min' else '≤'} {t.value:g}"


#: where every metric's meaning is written out (``--keys``, ``idaudit metrics`` and an audit's
#: first lines point to it)
METRICS_DOC = "docs/metrics.md"

#: what an ungated audit's first line quotes: the metrics --min-r2 and
#: --max-orthogonality-error gate
HEADLINE = ("r2_h_to_z_heldout", "orthogonality_error")


def short(v: float) -> str:
    """A number as an audit's first lines show it: three decimals (0.982), three significant
    digits where that would hide it (0.00123, 1.2e+04)."""
    return f"{v:.3f}" if 0.01 <= abs(v) < 1000 else f"{v:.3g}"


def _ceiling(metrics: dict[str, Any], key: str) -> str:
    """`` (ceiling C)`` after an R²(h → z) whose world caps it, else ""."""
    ceiling = metrics.get("r2_h_to_z_ceiling")
    return f" (ceiling {short(ceiling)})" if ceiling is not None and key in FLOOR_OF else ""


def gated_of(metrics: dict[str, Any]) -> str:
    """`` (worst of 3)`` / `` (median of 3)`` after the value a several-target report gates
    (:func:`~idaudit.evaluations.audit.combine_reports`), else ""."""
    runs, reduce = metrics.get("n_runs"), metrics.get("reduce")
    several = reduce is not None and isinstance(runs, int) and runs > 1
    return f" ({reduce} of {runs})" if several else ""


def verdict_lines(report) -> list[str]:
    """What the verdict rests on, in words, before the full table: each gated metric's value
    against its threshold (of several targets, the value gated: the worst or the median),
    R²(h → z)'s ceiling where the world has one; then where the metrics' meanings are
    written. An ungated audit quotes the metrics --min-r2 and --max-orthogonality-error
    gate; an inconclusive one its reason."""
    m = report.metrics
    runs, which = m.get("n_runs"), gated_of(m)

    def label(key: str) -> str:
        return BY_KEY[key].label if key in BY_KEY else key

    if report.verdict == "inconclusive":
        first = f"verdict: inconclusive — {one_line(report.reason)}"
    elif report.verdict == "ungated":  # several targets: every number is their median
        which = f" (median of {runs})" if which else ""
        shown = [f"{label(k)} {short(m[k])}{which}{_ceiling(m, k)}"
                 for k in HEADLINE if isinstance(m.get(k), float)]
        first = "verdict: no gate — nothing was checked (a report only)" + \
            (f"; {', '.join(shown)}" if shown else "")
    else:
        signs = {("min", True): "≥", ("min", False): "<", ("max", True): "≤",
                 ("max", False): ">"}
        first = f"verdict: {report.verdict} — " + "; ".join(
            f"{label(t.metric)} {short(t.actual)}{which} {signs[t.op, bool(t.passed)]} "
            f"{t.value:g}{_ceiling(m, t.metric)}" for t in report.thresholds)
    warned = few_rows_warning(m) if report.verdict != "inconclusive" else None
    return [first, *([warned] if warned else []),
            *(f"note: {n}" for n in comparability_notes(m)),
            f"what each metric means: {METRICS_DOC} (idaudit metrics)"]


def audit_table(report, keys: bool = False) -> Table:
    """The audit as a table; gated rows show their threshold, failing rows in red; ``keys``
    adds each metric's key (what ``--min``/``--max`` and gate files name)."""
    table = Table(title=f"audit · {escape(report.source)} · {verdict_markup(report.verdict)}")
    table.add_column("metric")
    if keys:
        table.add_column("key", style="dim", no_wrap=True)
    table.add_column("value", justify="right")
    table.add_column("gate", justify="right")
    table.add_column("", justify="center")
    gates = {t.metric: t for t in report.thresholds}
    shown = set()
    rows = table_rows("audit")
    rows += [(t.metric, t.metric) for t in report.thresholds if t.metric not in dict(rows)]
    for key, label in rows:
        if key not in report.metrics or key in shown:
            continue
        shown.add(key)
        t = gates.get(key)
        mark, style = "", None
        if t is not None and t.passed is not None:
            mark = "[green]pass[/green]" if t.passed else "[red]FAIL[/red]"
            style = None if t.passed else "red"
        cells = [label, *([key] if keys else []), fmt(report.metrics[key]),
                 threshold_text(t) if t else "", mark]
        table.add_row(*cells, style=style)
    warned = few_rows_warning(report.metrics)  # the first lines say it already
    table.caption = "\n".join(n for n in notes(report.metrics, report.thresholds)
                              if n != warned) or None
    return table


def side_by_side_rows(report, keys: list[str] | None = None
                      ) -> list[tuple[str, str, list[Any], Any]]:
    """(label, key, each target's value, its threshold or None) of the metrics ``keys`` (None:
    the audit table's rows and every gated metric) that some target of a several-target
    report has, in the table's order."""
    runs = report.runs or []
    gates = {t.metric: t for t in report.thresholds}
    wanted = keys if keys is not None else \
        [k for k, _ in table_rows("audit")] + [t.metric for t in report.thresholds]
    rows, seen = [], set()
    for key in wanted:
        values = [r["metrics"].get(key) for r in runs]
        if key in seen or all(v is None for v in values):
            continue
        seen.add(key)
        rows.append((BY_KEY[key].label if key in BY_KEY else key, key, values, gates.get(key)))
    return rows


def side_cell(value: Any, t: Any) -> tuple[str, bool | None]:
    """A target's value and, on a gated row, whether it alone passes the threshold."""
    if t is None or not isinstance(value, (int, float)):
        return fmt(value), None
    ok = value >= t.value if t.op == "min" else value <= t.value
    return f"{fmt(value)} {'pass' if ok else 'FAIL'}", bool(ok)


def side_by_side_table(report, keys: bool = False) -> Table:
    """Several targets (seeds; a model's backbone and projector) side by side: a column each,
    a gated row marking each target against its threshold (the verdict gates the worst or
    the median: the first table)."""
    table = Table(title="each target")
    table.add_column("metric")
    if keys:
        table.add_column("key", style="dim", no_wrap=True)
    for run in report.runs or []:
        table.add_column(escape(run["source"]), justify="right")
    table.add_column("gate", justify="right")
    for label, key, values, t in side_by_side_rows(report):
        cells = [side_cell(v, t) for v in values]
        table.add_row(label, *([key] if keys else []),
                      *(text if ok is not False else f"[red]{text}[/red]" for text, ok in cells),
                      threshold_text(t) if t else "")
    return table


def side_by_side_markdown(report, keys: list[str] | None = None) -> str:
    """:func:`side_by_side_table` as Markdown (``keys``: these metrics only); each target's
    name one escaped cell (:func:`markdown_text`)."""
    runs = report.runs or []
    lines = ["| metric | " + " | ".join(markdown_text(r["source"]) for r in runs) + " | gate |",
             "|---|" + "---:|" * len(runs) + "---:|"]
    for label, key, values, t in side_by_side_rows(report, keys):
        cells = [side_cell(v, t)[0] for v in values]
        lines.append(f"| {label} `{key}` | " + " | ".join(cells) +
                     f" | {threshold_text(t) if t else ''} |")
    return "\n".join(lines) + "\n"


def notes(metrics: dict[str, Any], thresholds: Any = ()) -> list[str]:
    """The sentences a report adds under its table: which numbers are comparable (z's
    units, h's whitening), what the world allows, what an uninformative encoder reaches
    (and each R² gate it could pass), what the bound says."""
    return [n for n in (few_rows_warning(metrics), *comparability_notes(metrics),
                        ceiling_note(metrics),
                        floor_note(metrics), *floor_warnings(metrics, thresholds),
                        bound_note(metrics)) if n]


#: how far a latent's covariance may sit from the identity, in units of its floor (what white
#: latents of this size show by chance), before the report says so
LATENT_COV_FLOORS = 3.0
#: ε, floor-corrected, per √m, above which h is called not whitened
NOT_WHITE = 0.5


def comparability_notes(metrics: dict[str, Any]) -> list[str]:
    """What the first lines of a report say about which numbers compare with what: latents
    whose covariance is far from the identity (their units: the rotation metrics then read z
    standardised on the rows), and an h that is not whitened (the rotation metrics then measure
    that, not recovery)."""
    out = []
    cov, floor = metrics.get("latent_cov_error"), metrics.get("latent_cov_floor")
    if cov is not None and floor is not None and cov > LATENT_COV_FLOORS * floor:
        how = ("compare h with z standardised on these rows (each latent scaled to unit "
               "variance), so z's units do not matter"
               if metrics.get("latents_standardized") else
               "compare h with z as it is (its world draws it white)")
        out.append(f"Cov(z) is far from the identity (‖Cov(z) − I‖_F = {cov:.3g}; white "
                   f"latents of this size show {floor:.2g}): Procrustes MSE, the orthogonality "
                   f"error and 'bound holds' {how}; R² and MCC never depend on z's units")
    eps, m = metrics.get("whitening_error_corrected"), metrics.get("embed_dim")
    if eps is not None and m and eps > NOT_WHITE * m**0.5:
        out.append(f"h is not whitened (ε = {metrics['whitening_error']:.3g}, floor-corrected "
                   f"{eps:.3g}): the orthogonality error and Procrustes MSE measure how far h "
                   "is from a rotation of white latents, which a non-white h cannot be however "
                   "well it recovers z; compare such encoders by R², and read the bound as loose")
    return out


#: the R² keys a gate may name, with the key of the band top an uninformative encoder reaches
FLOOR_OF = {"r2_h_to_z_heldout": "r2_h_to_z_heldout_floor_high",
            "r2_h_to_z_heldout_ci_low": "r2_h_to_z_heldout_floor_high",
            "r2_h_to_z": "r2_h_to_z_floor_high"}


def floor_note(metrics: dict[str, Any]) -> str | None:
    """What an encoder of this width that knows nothing of z scores on these rows, in words."""
    held, ins = metrics.get("r2_h_to_z_heldout_floor_band"), metrics.get("r2_h_to_z_floor_band")
    if not held or not ins:
        return None
    return (f"an uninformative encoder of width {metrics['embed_dim']} scores held-out "
            f"R²(h → z) {held[0]:.3g} to {held[1]:.3g} and in-sample {ins[0]:.3g} to "
            f"{ins[1]:.3g} on these {metrics['n_samples']} rows (the band of "
            f"{metrics['floor_draws']} shuffles of h against z)")


def floor_warnings(metrics: dict[str, Any], thresholds: Any) -> list[str]:
    """A warning for each ``--min`` gate on an R² that an uninformative encoder of this width
    could pass (its threshold at or below the top of that encoder's band), and for each that
    the raw observations pass (at or below the raw mixing's R²(x → z))."""
    out = []
    for t in thresholds:
        top = metrics.get(FLOOR_OF.get(t.metric, ""))
        if t.op == "min" and top is not None and t.value <= top:
            out.append(f"warning: the gate {t.metric} ≥ {t.value:g} lies within reach of an "
                       f"uninformative encoder of this width (its band reaches {top:.3g}): "
                       "passing it says little; use more rows or a narrower embedding")
        raw = metrics.get("mixing_r2_x_to_z")
        if t.op == "min" and t.metric in FLOOR_OF and raw is not None and t.value <= raw:
            out.append(f"warning: the raw observations already pass the gate {t.metric} ≥ "
                       f"{t.value:g}: a linear read-out of x reaches R²(x → z) {raw:.3g} on "
                       "this world, with nothing learned; gate above it")
    return out


#: fit rows per column of h below which the held-out R² is read with a warning: an
#: uninformative encoder then scores below −0.11 and an encoder of population R² r about
#: r − 0.11·(1 − r) (Stein; scripts/few_fit_rows.py, docs/metrics.md "How many rows")
FIT_ROWS_PER_COLUMN = 10


def few_rows_warning(metrics: dict[str, Any]) -> str | None:
    """A warning where the held-out fits had fewer than :data:`FIT_ROWS_PER_COLUMN`·m rows:
    the held-out R² then reads low by about −F·(1 − R²), F what an uninformative encoder
    scores (the mean of the audit's shuffles of h against z where it drew them, else Stein's
    Gaussian value, :func:`~idaudit.maths.floors.heldout_floor_mean`), and a low or negative
    value says more about the rows than the encoder."""
    n_fit, m = metrics.get("n_train"), metrics.get("embed_dim")
    if not isinstance(n_fit, int) or not isinstance(m, int) or metrics.get("label_free") \
            or n_fit >= FIT_ROWS_PER_COLUMN * m or "r2_h_to_z_heldout" not in metrics:
        return None
    from idaudit.maths.floors import heldout_floor_mean

    n_test = metrics.get("n_test") or n_fit
    shuffled = metrics.get("r2_h_to_z_heldout_floor_mean")  # this h's own, where drawn
    floor = shuffled if isinstance(shuffled, float) else \
        heldout_floor_mean(n_fit, max(int(n_test), 2), m) if n_fit > m + 2 else None
    who = "h shuffled against z" if isinstance(shuffled, float) else "an uninformative encoder"
    said = "" if floor is None or floor >= 0 else (
        f": held-out R² reads low by ≈ {-floor:.3g}·(1 − true R²), {who} scores ≈ {floor:.3g}")
    return (f"warning: {n_fit} fit rows for a {m}-wide h (under {FIT_ROWS_PER_COLUMN}·m = "
            f"{FIT_ROWS_PER_COLUMN * m}){said}; a low value says little, a pass stands — use "
            f"≥ {2 * FIT_ROWS_PER_COLUMN}·m = {2 * FIT_ROWS_PER_COLUMN * m} rows (--n-eval; "
            "docs/metrics.md, How many rows)")


def ceiling_note(metrics: dict[str, Any]) -> str | None:
    """The held-out R²(h → z) in words beside its ceiling, where the world hides part of a
    latent (angles seen mod 2π)."""
    if metrics.get("r2_h_to_z_ceiling") is None or metrics.get("r2_h_to_z_heldout") is None:
        return None
    share, held = metrics.get("r2_h_to_z_of_ceiling"), metrics["r2_h_to_z_heldout"]
    # a negative R² is worse than predicting the mean: it is no share of anything
    part = "below 0: no share of the ceiling," if held < 0 or share is None or share < 0 \
        else f"{100 * share:.1f} % of the ceiling:"
    text = (f"held-out R²(h → z) {short(held)} of a possible "
            f"{metrics['r2_h_to_z_ceiling']:.3f} ({part} the best "
            "guess from angles seen mod 2π)")
    if metrics.get("r2_h_to_z_heldout_unwrapped") is not None:
        text += (f"; {metrics['r2_h_to_z_heldout_unwrapped']:.3f} on the "
                 f"{metrics['unwrapped_test_rows']} test rows whose angles need no wrapping")
    return text


def bound_note(metrics: dict[str, Any]) -> str | None:
    """A sentence when the Theorem 3 bound says nothing useful for these arrays."""
    if metrics.get("bound_vacuous"):
        return ("the bound is vacuous: it exceeds E‖z − z̄‖², the error of a constant embedding")
    if metrics.get("bound_floor_dominated"):
        return ("the bound is dominated by the finite-sample floor of ε (√(m(m+1)/(n−1))): a perfect "
                "encoder would get nearly the same bound")
    return None


def consistency_table(report, keys: bool = False) -> Table:
    """Every ordered pair of runs: R² of the map between them, its orthogonality error, the
    Procrustes error; gated worst values below (``keys``: each with its key)."""
    table = Table(title=f"consistency · {report.metrics.get('n_runs', 0)} runs · "
                        f"{verdict_markup(report.verdict)}")
    for col in ("from → to", "R² held-out", "orthogonality error", "Procrustes MSE"):
        table.add_column(col, justify="left" if col == "from → to" else "right")
    for p in report.metrics.get("pairs", []):
        table.add_row(escape(f"{p['from']} → {p['to']}"), fmt(p["r2"]),
                      fmt(p["orthogonality_error"]), fmt(p["procrustes_mse"]))
    gates = {t.metric: t for t in report.thresholds}
    for key, label in table_rows("consistency"):
        if key in report.metrics and BY_KEY[key].direction is not None:  # not the sizes
            t = gates.get(key)
            mark = "" if t is None or t.passed is None else (
                " [green]pass[/green]" if t.passed else " [red]FAIL[/red]")
            table.caption = (table.caption + "\n" if table.caption else "") + \
                f"{label}{f' [{key}]' if keys else ''}: {fmt(report.metrics[key])}" + \
                (f" (gate {threshold_text(t)}){mark}" if t else "")
    return table


def audit_markdown(report, table: str = "audit") -> str:
    """A Markdown summary (for a CI job summary) listing the rows of ``table`` ("audit" or
    "consistency") and every gated metric. For several runs the value column says it holds
    medians and each gated row which value it gates (``worst of 3``, ``median of 3``). A
    reason (which may quote a target's name) is one escaped line (:func:`markdown_text`)."""
    _, label, icon = VERDICTS[report.verdict]
    lines = [f"## idaudit · {icon} {label.lower()}", ""]
    if report.verdict == "ungated":
        lines += [f"> {NO_GATE_NOTE}", ""]
    if report.reason:
        lines += [f"> {markdown_text(report.reason)}", ""]
    runs, which = report.metrics.get("n_runs"), gated_of(report.metrics)
    value = f"value (median of {runs})" if which else "value"
    lines += [f"| metric | {value} | gate | result |", "|---|---:|---:|---|"]
    gates = {t.metric: t for t in report.thresholds}
    keys = [k for k, _ in table_rows(table)] + [t.metric for t in report.thresholds]
    seen = set()
    for key in keys:
        if key in seen or key not in report.metrics:
            continue
        seen.add(key)
        t = gates.get(key)
        res = "" if t is None or t.passed is None else ("pass" if t.passed else "**FAIL**")
        label = which if t is not None else ""
        lines.append(f"| `{key}` | {fmt(report.metrics[key])}{label} | "
                     f"{threshold_text(t) if t else ''} | {res} |")
    for note in notes(report.metrics, report.thresholds):
        lines += ["", f"Note: {note}."]
    return "\n".join(lines) + "\n"


def audit_junit(report) -> str:
    """JUnit XML: one testcase per threshold (an inconclusive audit is one error); every text
    in it as XML 1.0 allows (:func:`xml_text`) and escaped by the XML writer, so a name or a
    reason holding control characters, ``<`` or ``&`` leaves the file well-formed."""
    from xml.etree import ElementTree as ET

    n_cases = len(report.thresholds) if report.thresholds and report.verdict != "inconclusive" \
        else 1
    suite = ET.Element("testsuite", name="idaudit", tests=str(n_cases))
    failures = errors = skipped = 0
    if report.verdict == "ungated":  # nothing was checked: say so, never an empty green suite
        case = ET.SubElement(suite, "testcase", classname="idaudit", name="audit")
        ET.SubElement(case, "skipped", message=NO_GATE_NOTE)
        skipped = 1
    elif report.verdict == "inconclusive":
        case = ET.SubElement(suite, "testcase", classname="idaudit", name="audit")
        reason = xml_text(report.reason) if report.reason else None
        ET.SubElement(case, "error", message=reason or "inconclusive").text = reason
        errors = 1
    else:
        for t in report.thresholds:
            case = ET.SubElement(suite, "testcase", classname="idaudit.gate",
                                 name=xml_text(f"{t.metric} {threshold_text(t)}"))
            if not t.passed:
                failures += 1
                ET.SubElement(case, "failure",
                              message=xml_text(f"{t.metric} = {fmt(t.actual)}, required "
                                               f"{threshold_text(t)}"))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
