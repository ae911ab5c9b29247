"""Render reports as rich tables (the JSON form is the dict itself)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

METRIC_ROWS = [
    ("r2_h_to_z", "R²(h → z)", "linear recovery of the latents from the embedding"),
    ("r2_z_to_h", "R²(z → h)", "how linear the embedding is in the latents"),
    ("orthogonality_error", "orthogonality error", "‖Q̂ᵀQ̂ − I‖_F/√n of the fitted map z → h"),
    ("procrustes_mse", "Procrustes MSE", "min over rotations of E‖h − Qz‖²"),
    ("whitening_error", "ε", "‖Cov(h) − I‖_F"),
    ("alignment_gap", "δ", "E‖h(z′) − h(z)‖² − 2(1−ρ) tr Cov(h), floored at 0"),
    ("D", "D", "δ / (2ρ(1−ρ))"),
    ("bound", "bound", "D + (ε + D)² (Theorem 3)"),
    ("bound_holds", "bound holds", "Procrustes MSE ≤ bound"),
    ("mixing_r2_x_to_z", "R²(x → z)", "raw-mixing baseline"),
]


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
    for key, label, meaning in METRIC_ROWS:
        if key in metrics:
            table.add_row(label, fmt(metrics[key]), meaning)
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


AUDIT_ROWS = [
    ("r2_h_to_z_heldout", "R²(h → z), held-out"),
    ("r2_h_to_z_heldout_ci", "  bootstrap interval"),
    ("r2_z_to_h_heldout", "R²(z → h), held-out"),
    ("r2_h_to_z", "R²(h → z), in-sample"),
    ("mcc", "MCC"),
    ("orthogonality_error", "orthogonality error"),
    ("procrustes_mse", "Procrustes MSE"),
    ("whitening_error", "ε = ‖Cov(h) − I‖_F"),
    ("whitening_floor", "ε floor √(m(m+1)/n)"),
    ("whitening_error_corrected", "ε, floor-corrected"),
    ("alignment_gap", "δ"),
    ("D", "D = δ/(2ρ(1−ρ))"),
    ("bound", "bound D + (ε+D)²"),
    ("bound_holds", "bound holds"),
    ("bound_corrected", "bound, floor-corrected"),
    ("effective_rank", "effective rank of h"),
    ("principal_angle_max_deg", "largest principal angle (°)"),
    ("r2_h_to_sincos", "R²(h → sin/cos of angles)"),
    ("gaussianity_statistic", "sliced Epps–Pulley statistic"),
    ("gaussianity_p_value", "Gaussianity p-value"),
    ("mixing_r2_x_to_z", "R²(x → z) raw mixing"),
    ("n_samples", "samples"),
    ("latent_dim", "latent dimension n"),
    ("embed_dim", "embedding dimension m"),
]


def _threshold_text(t) -> str:
    return f"{'≥' if t.op == 'min' else '≤'} {t.value:g}"


def audit_table(report) -> Table:
    """The audit as a table; gated rows show their threshold, failing rows in red."""
    verdict_style = {"pass": "green", "fail": "red", "inconclusive": "yellow"}[report.verdict]
    table = Table(title=f"audit · {report.source} · [{verdict_style}]{report.verdict.upper()}"
                        f"[/{verdict_style}]")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("gate", justify="right")
    table.add_column("", justify="center")
    gates = {t.metric: t for t in report.thresholds}
    shown = set()
    rows = [(k, label) for k, label in AUDIT_ROWS] + [
        (t.metric, t.metric) for t in report.thresholds
        if t.metric not in {k for k, _ in AUDIT_ROWS}]
    for key, label in rows:
        if key not in report.metrics or key in shown:
            continue
        shown.add(key)
        t = gates.get(key)
        mark, style = "", None
        if t is not None and t.passed is not None:
            mark = "[green]pass[/green]" if t.passed else "[red]FAIL[/red]"
            style = None if t.passed else "red"
        table.add_row(label, fmt(report.metrics[key]), _threshold_text(t) if t else "", mark,
                      style=style)
    table.caption = bound_note(report.metrics)
    return table


def bound_note(metrics: dict[str, Any]) -> str | None:
    """A sentence when the Theorem 3 bound says nothing useful for these arrays."""
    if metrics.get("bound_vacuous"):
        return ("the bound is vacuous: it exceeds E‖z − z̄‖², the error of a constant embedding")
    if metrics.get("bound_floor_dominated"):
        return ("the bound is dominated by the finite-sample floor of ε (√(m(m+1)/n)): a perfect "
                "encoder would get nearly the same bound; see bound_corrected")
    return None


def audit_markdown(report) -> str:
    """A Markdown summary (for a CI job summary)."""
    icon = {"pass": "✅", "fail": "❌", "inconclusive": "⚠️"}[report.verdict]
    lines = [f"## idaudit · {icon} {report.verdict}", ""]
    if report.reason:
        lines += [f"> {report.reason}", ""]
    lines += ["| metric | value | gate | result |", "|---|---:|---:|---|"]
    gates = {t.metric: t for t in report.thresholds}
    keys = [k for k, _ in AUDIT_ROWS] + [t.metric for t in report.thresholds]
    seen = set()
    for key in keys:
        if key in seen or key not in report.metrics:
            continue
        seen.add(key)
        t = gates.get(key)
        res = "" if t is None or t.passed is None else ("pass" if t.passed else "**FAIL**")
        lines.append(f"| `{key}` | {fmt(report.metrics[key])} | "
                     f"{_threshold_text(t) if t else ''} | {res} |")
    note = bound_note(report.metrics)
    if note:
        lines += ["", f"Note: {note}."]
    return "\n".join(lines) + "\n"


def audit_junit(report) -> str:
    """JUnit XML: one testcase per threshold (an inconclusive audit is one error)."""
    from xml.etree import ElementTree as ET

    n_cases = 1 if report.verdict == "inconclusive" else len(report.thresholds)
    suite = ET.Element("testsuite", name="idaudit", tests=str(n_cases))
    failures = errors = 0
    if report.verdict == "inconclusive":
        case = ET.SubElement(suite, "testcase", classname="idaudit", name="audit")
        ET.SubElement(case, "error", message=report.reason or "inconclusive").text = report.reason
        errors = 1
    else:
        for t in report.thresholds:
            case = ET.SubElement(suite, "testcase", classname="idaudit.gate",
                                 name=f"{t.metric} {_threshold_text(t)}")
            if not t.passed:
                failures += 1
                ET.SubElement(case, "failure",
                              message=f"{t.metric} = {fmt(t.actual)}, required "
                                      f"{_threshold_text(t)}")
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
