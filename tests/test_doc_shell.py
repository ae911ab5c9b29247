"""Shell examples of README.md and docs/ run as written, with only their sizes shrunk.

Each block below runs in bash (-e: any non-zero exit fails it) in an empty directory, its
commands, flags and files exactly as the doc writes them; the only changes are the
substitutions listed with it, which shrink sizes (steps, epochs, pairs, suites cut with
--only) so the block runs in seconds. A substitution that no longer matches fails the test,
so the list follows the docs. Each runs on exactly the install its Needs line states
(test_doc_examples.doc_env). tests/test_doc_examples.py lists every block with its test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_doc_examples import ROOT, blocks, doc_env

pytestmark = pytest.mark.examples  # CI stage 2d (pyproject: not in the default run)

REACHER_SMALL = "--pairs 300 --n-eval 1000 --epochs 1"
SHRUNK: dict[tuple[str, str], list[tuple[str, str]]] = {
    ("README.md", "idaudit train --world spiral --rho 0.95 --steps 6000 --seed 0 --out "
                  "s0.safetensors"): [("--steps 6000", "--steps 600")],
    ("docs/commands.md", "idaudit world spiral --rho 0.95 --pairs 10000 --out pairs.safetensors"): [
        ("--steps 6000", "--steps 600"),
        ("--epochs 50", "--epochs 1"),
        ("sweep grid --seeds 1 --steps 4000", "sweep grid --seeds 1 --steps 100 --only "
         "lamb=1e-3 --only rho=0.9,0.95"),
        ("--rho 0.95 --out r.safetensors", f"--rho 0.95 {REACHER_SMALL} --out r.safetensors"),
        ("--pairs 3000 --out data/ou", "--pairs 300 --n-eval 1000 --out data/ou"),
        ("--epochs 15 --seed 1", "--epochs 1 --seed 1"),
    ],
    ("docs/objective-forms.md", "idaudit train --world spiral"): [
        ("idaudit train --world spiral ", "idaudit train --world spiral --steps 200 "),
    ],
    ("docs/page.md", "idaudit train --world spiral --steps 800 --out s.safetensors"): [],
    ("docs/sweeps.md", "idaudit sweep grid --seeds 1 --steps 4000 --out sweeps/grid"): [
        ("--steps 4000", "--steps 100 --only lamb=1e-3 --only rho=0.95"),
        ("--dims 2,8,32,128 --seeds 1", "--dims 2 --seeds 1 --objectives lejepa --steps 100"),
        ("--only world=spiral", "--only world=spiral --only alpha=2.0 --objectives lejepa "
         "--steps 100"),
        ("--only stride=8", "--only stride=8 --only mode=ou --set pairs=300 --set epochs=1 "
         "--set n_eval=1000"),
        ("sweep my_grid.toml", "sweep my_grid.toml --steps 100 --dims 8 --seeds 1"),
    ],
    ("docs/reacher.md", "idaudit train --world reacher --rho 0.95#1"): [
        ("--rho 0.95                           # the card",
         f"--rho 0.95 {REACHER_SMALL}   # the card"),
        ("--pairs 3000 --out data/ou", "--pairs 300 --n-eval 1000 --out data/ou"),
        ("--pairs 3000 --out data/traj", "--pairs 300 --n-eval 1000 --out data/traj"),
        ("--pairs 3000 --epochs 15 --data", "--epochs 1 --data"),
    ],
}
#: files a block reads that another block of the same doc writes (the TOML of docs/sweeps.md)
GIVEN = {("docs/sweeps.md", "my_grid.toml"): "[fixed]"}


def shrunk(name: str, key: str) -> str:
    code = next(c for n, k, c in blocks() if n == name and k == key)
    for old, new in SHRUNK[(name, key)]:
        assert old in code, f"{name}: {old!r} is no longer in the block; update SHRUNK"
        code = code.replace(old, new)
    return code


def toml_block(name: str, head: str) -> str:
    text = (ROOT / name).read_text(encoding="utf-8")
    return next(m.group(1) for m in re.finditer(r"^```toml\n(.*?)^```", text, re.M | re.S)
                if m.group(1).startswith(head))


@pytest.mark.parametrize("name,key", list(SHRUNK), ids=[n for n, _ in SHRUNK])
def test_the_shell_examples_run_shrunk(name, key, tmp_path):
    code = shrunk(name, key)
    for (file, target), head in GIVEN.items():
        if file == name:
            (tmp_path / target).write_text(toml_block(name, head))
    env = {**doc_env(name, key), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"),
           "IDAUDIT_CACHE": str(tmp_path / "cache"), "COLUMNS": "200"}
    if "reacher" in code:
        pytest.importorskip("dm_control", reason="the reacher extra renders these examples")
    res = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, (res.stdout[-2000:], res.stderr[-3000:])
    # each file a line names with --out (or --html, --plot) is there afterwards
    for out in re.findall(r"--(?:out|html|plot) (\S+)", code):
        if "$" not in out:
            assert (tmp_path / out).exists(), out
