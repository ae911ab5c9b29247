"""An audit you can look at: ``--plot FILE.png`` (the figures as one PNG) and ``--html
FILE.html`` (one self-contained page: the verdict and gates, the figures inline as base64
PNG, the metric table with each metric's meaning from the catalogue; no network, no scripts).

Every number on the page is the report's (``--json``'s): each value cell carries the JSON
value in ``data-value`` and shows it as the console table does (:func:`~idaudit.evaluations.report.fmt`).
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

from idaudit.core.atomic import atomic_write
from idaudit.core.errors import IdauditError
from idaudit.core.jsontext import jsonable
from idaudit.core.outputs import check_outputs
from idaudit.evaluations.figures import (
    MATPLOTLIB_EXTRA,
    MAX_DRAWN,
    Drawn,
    audit_figure,
    have_matplotlib,
    new_figure,
    png_bytes,
    section_figure,
    sections,
)
from idaudit.evaluations.report import (
    NO_GATE_NOTE,
    VERDICTS,
    fmt,
    gated_of,
    notes,
    side_by_side_rows,
    side_cell,
    threshold_text,
    xml_text,
)
from idaudit.maths.catalogue import BY_KEY, catalogue

__all__ = ["PAGE_DPI", "check_views", "write_views"]

VIEW_FLAGS = (("plot", "--plot"), ("html", "--html"))
PAGE_DPI = 120


def views_given(req: Any) -> list[tuple[Any, str]]:
    """(path, flag) of the views an audit request asks for."""
    return [(getattr(req, name), flag) for name, flag in VIEW_FLAGS
            if getattr(req, name) is not None]


def check_views(req: Any, inputs: list[tuple[Any, str]]) -> None:
    """Before any work: matplotlib is there, and ``--plot``/``--html`` are writable and none
    of ``inputs`` (every file the audit reads)."""
    given = views_given(req)
    if not given:
        return
    if not have_matplotlib():
        verb = "need" if len(given) > 1 else "needs"
        raise IdauditError(f"{' and '.join(f for _, f in given)} {verb} {MATPLOTLIB_EXTRA}")
    check_outputs(given, inputs, remove_stale=True)


def write_views(report: Any, drawn: list[Drawn], plot: str | Path | None,
                page: str | Path | None) -> None:
    """Write the figures as one PNG to ``plot`` and the page to ``page`` (each where given),
    atomically."""
    if plot is not None:
        fig = audit_figure(drawn) or _reason_figure(report)
        data = png_bytes(fig)
        atomic_write(plot, lambda tmp: Path(tmp).write_bytes(data))
    if page is not None:
        text = audit_html(report, drawn)
        atomic_write(page, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def _reason_figure(report: Any) -> Any:
    """What ``--plot`` draws where there is nothing to draw: the verdict and its reason."""
    fig, ax = new_figure(figsize=(6, 1.2))
    ax.set_axis_off()
    ax.text(0.01, 0.5, f"{VERDICTS[report.verdict][1]}: {report.reason or 'nothing to draw'}",
            va="center", fontsize=9, wrap=True)
    return fig


# ---- the page ---------------------------------------------------------------------------

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1400px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: .2em; }
.verdict { display: inline-block; padding: .15em .6em; border-radius: .3em; color: #fff; }
.verdict-pass { background: #1a7f37; } .verdict-fail { background: #cf222e; }
.verdict-inconclusive { background: #bf8700; } .verdict-ungated { background: #0969da; }
.source { color: #555; font-size: .95em; }
table { border-collapse: collapse; margin: .6em 0 1.2em; font-size: .9em; }
th, td { border-bottom: 1px solid #ddd; padding: .3em .7em; text-align: left;
         vertical-align: top; }
td.value, th.value { text-align: right; font-variant-numeric: tabular-nums;
                     white-space: nowrap; }
td.meaning { color: #555; max-width: 46em; }
tr.failed td { color: #cf222e; font-weight: 600; }
.pass { color: #1a7f37; font-weight: 600; } .fail { color: #cf222e; font-weight: 600; }
figure { margin: .5em 0 1.5em; } figure img { max-width: 100%; height: auto; }
.note { background: #f6f8fa; border-left: 3px solid #999; padding: .4em .8em;
        margin: .4em 0; }
code { font-size: .95em; }
"""


def _e(text: Any) -> str:
    """``text`` as HTML text or an attribute's value: escaped, with no character the page
    could not hold (control characters, lone surrogates: :func:`xml_text`).

    Args:
        text: what to show (``str()`` of anything else).

    Returns:
        The escaped text.
    """
    return html.escape(xml_text(text), quote=True)


def _shown(value: Any) -> str:
    """A value as the console table writes it; a list as its items so written."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return fmt(value)


def _value_cell(key: str, value: Any, passed: bool | None = None) -> str:
    """A value as the console shows it, the JSON value in ``data-value``; ``passed``: marked
    as passing or failing its gate."""
    data = json.dumps(jsonable(value))
    mark = {True: " pass", False: " fail", None: ""}[passed]
    return (f'<td class="value{mark}" data-key="{_e(key)}" data-value="{_e(data)}">'
            f"{_e(_shown(value))}</td>")


def _label(key: str) -> str:
    m = BY_KEY.get(key)
    return m.label.strip() if m is not None else key


def _gates(report: Any) -> list[str]:
    if not report.thresholds:
        return [f'<p class="note">{_e(NO_GATE_NOTE)}</p>']
    which = _e(gated_of(report.metrics))
    out = ['<table class="gates"><tr><th>gated metric</th><th>key</th><th>threshold</th>'
           f'<th class="value">value{which}</th><th>result</th></tr>']
    for t in report.thresholds:
        result = "—" if t.passed is None else ('<span class="pass">pass</span>' if t.passed
                                               else '<span class="fail">FAIL</span>')
        value = t.actual if t.actual is not None else report.metrics.get(t.metric)
        row = ' class="failed"' if t.passed is False else ""
        out.append(f"<tr{row}><td>{_e(_label(t.metric))}</td><td><code>{_e(t.metric)}</code>"
                   f"</td><td>{_e(threshold_text(t))}</td>"
                   f"{_value_cell(t.metric, value)}<td>{result}</td></tr>")
    out.append("</table>")
    return out


def _ordered_keys(metrics: dict[str, Any]) -> list[str]:
    """The metrics' keys in catalogue order, any others after them."""
    known = [m.key for m in catalogue() if m.key in metrics]
    return known + [k for k in metrics if k not in BY_KEY]


def _metric_table(report: Any) -> list[str]:
    gated = {t.metric for t in report.thresholds}
    out = ['<table class="metrics"><tr><th>metric</th><th>key</th><th class="value">value</th>'
           "<th>meaning</th></tr>"]
    for key in _ordered_keys(report.metrics):
        m = BY_KEY.get(key)
        mark = " ◆" if key in gated else ""
        out.append(f"<tr><td>{_e(_label(key))}{mark}</td><td><code>{_e(key)}</code></td>"
                   f"{_value_cell(key, report.metrics[key])}"
                   f'<td class="meaning">{_e(m.meaning if m else "")}</td></tr>')
    out.append("</table>")
    if gated:
        out.append("<p>◆ gated</p>")
    return out


def _runs_table(report: Any) -> list[str]:
    """Several targets: the console's "each target" table (the same rows,
    :func:`~idaudit.evaluations.report.side_by_side_rows`), each value on a gated row marked
    as passing or failing the gate on its own."""
    runs = report.runs or []
    head = "".join(f'<th class="value">{_e(r["source"])}</th>' for r in runs)
    out = ['<table class="runs"><tr><th>metric</th><th>key</th>' + head + "<th>gate</th></tr>"]
    for label, key, values, t in side_by_side_rows(report):
        cells = "".join('<td class="value">—</td>' if v is None
                        else _value_cell(key, v, side_cell(v, t)[1]) for v in values)
        out.append(f"<tr><td>{_e(label.strip())}</td><td><code>{_e(key)}</code></td>{cells}"
                   f"<td>{_e(threshold_text(t)) if t else ''}</td></tr>")
    out.append("</table>")
    return out


def _figures(drawn: list[Drawn]) -> list[str]:
    out = []
    if len(drawn) > MAX_DRAWN:
        out.append(f'<p class="note" id="drawn">The figures show the first {MAX_DRAWN} of '
                   f"{len(drawn)} targets; the tables hold every one.</p>")
    for section, targets in sections(drawn):
        data = base64.b64encode(png_bytes(section_figure(section, targets), dpi=PAGE_DPI)
                                ).decode("ascii")
        out.append(f'<h2>{_e(section.title)}</h2><figure id="{section.name}">'
                   f'<img alt="{_e(section.title)}" src="data:image/png;base64,{data}">'
                   "</figure>")
    return out


def audit_html(report: Any, drawn: list[Drawn]) -> str:
    """The page: verdict, reason, gates, notes, figures, the runs side by side (several
    targets), and every metric with its meaning."""
    _, label, _ = VERDICTS[report.verdict]
    world = (report.world or {}).get("name")
    title = f"idaudit audit · {label}"
    body = [f'<h1>idaudit audit · <span class="verdict verdict-{report.verdict}" '
            f'id="verdict">{_e(label)}</span></h1>',
            f'<p class="source">{_e(report.source)}'
            + (f" · world <code>{_e(world)}</code>" if world else "") + "</p>"]
    if report.reason:
        body.append(f'<p class="note" id="reason">{_e(report.reason)}</p>')
    body += ["<h2>gates</h2>", *_gates(report)]
    body += [f'<p class="note">{_e(n)}.</p>' for n in notes(report.metrics, report.thresholds)]
    body += _figures(drawn)
    if report.runs:
        body += ["<h2>each target</h2>", *_runs_table(report)]
    several = " (the median over the targets; a gated one, the value the gate took)"
    body += ["<h2>metrics" + (several if report.runs else "") + "</h2>",
             *_metric_table(report)]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")
