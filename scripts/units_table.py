"""The rescaling table of docs/metrics.md ("Units"): one orthogonal encoder audited with its
latents recorded at scales 1, 10 and 100 — every gated metric that depends on z, and the
verdict of a gate on them — as the audit computes them (z whitened on the rows) and in z's
own units (the audit before issue 56, ``z_white=True``).

    python scripts/units_table.py          # print the table
    python scripts/units_table.py --check  # exit 1 if docs/metrics.md holds another one
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

SCALES = (1.0, 10.0, 100.0)
KEYS = ("r2_h_to_z_heldout", "r2_z_to_h_heldout", "mcc", "orthogonality_error",
        "procrustes_mse", "bound", "bound_holds")
GATE = {"min": {"r2_h_to_z_heldout": 0.9}, "max": {"orthogonality_error": 0.2}}
BEGIN, END = "<!-- units table: begin -->", "<!-- units table: end -->"


def encoder_arrays(seed: int = 0, rows: int = 4000, rho: float = 0.9):
    """White latents z₀ and their OU partners, and an orthogonal encoder of them with a
    little noise in each view: (z₀, h, h′, ρ)."""
    from scipy.stats import ortho_group

    rng = np.random.default_rng(seed)
    z0 = rng.standard_normal((rows, 3))
    zp = rho * z0 + np.sqrt(1 - rho**2) * rng.standard_normal(z0.shape)
    q = ortho_group.rvs(3, random_state=seed)
    h = z0 @ q.T + 0.1 * rng.standard_normal(z0.shape)
    hp = zp @ q.T + 0.1 * rng.standard_normal(z0.shape)
    return z0, h, hp, rho


def audits(z_white: bool) -> list[dict]:
    """The audit of the same encoder's array file at each scale of z (``z_white``: the file
    says z's law is white, so z is used in its own units, as every audit did before)."""
    import tempfile

    from idaudit.evaluations.audit import audit

    z0, h, hp, rho = encoder_arrays()
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for scale in SCALES:
            path = Path(tmp) / f"z{scale:g}.npz"
            np.savez(path, z=scale * z0, h=h, h_prime=hp, rho=rho,
                     **({"z_white": 1} if z_white else {}))
            rep = audit(str(path), gate=GATE, gauss_sims=0)
            out.append({**{k: rep.metrics[k] for k in KEYS}, "verdict": rep.verdict})
    return out


def cell(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "NO"
    return v if isinstance(v, str) else f"{v:.4g}"


def table() -> str:
    now, before = audits(False), audits(True)
    head = "| metric | " + " | ".join(f"z × {s:g}" for s in SCALES) + \
        " | in z's own units (before): " + ", ".join(f"× {s:g}" for s in SCALES) + " |"
    lines = [head, "|---|" + "---:|" * len(SCALES) + "---|"]
    for key in (*KEYS, "verdict"):
        lines.append(f"| `{key}` | " + " | ".join(cell(r[key]) for r in now) + " | " +
                     ", ".join(cell(r[key]) for r in before) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    text = table()
    if "--check" in argv:
        doc = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
        inside = doc.split(BEGIN, 1)[1].split(END, 1)[0].strip() if BEGIN in doc else ""
        if inside != text:
            print("docs/metrics.md: the units table is not current; run "
                  "python scripts/units_table.py and paste it", file=sys.stderr)
            return 1
        return 0
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
