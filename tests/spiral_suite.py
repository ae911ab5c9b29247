"""The small 2D sweep suite the Ray tests and the cluster benchmark run: spiral runs of
``steps`` steps, one per seed, written as a suite file."""

from __future__ import annotations

from pathlib import Path

SUITE = """
[fixed]
world = "spiral"
steps = {steps}
eval_every = {steps}
n_eval = {n_eval}
[grid]
seed = {seeds}
"""


def write_suite(path: Path, steps: int, seeds: str, n_eval: int = 300) -> Path:
    """Write the suite to ``path`` (``seeds``: a TOML list such as ``"[0, 1]"``)."""
    path.write_text(SUITE.format(steps=steps, seeds=seeds, n_eval=n_eval))
    return path
