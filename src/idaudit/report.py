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
