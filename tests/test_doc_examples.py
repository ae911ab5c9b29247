"""Every shell, Python and workflow example in README.md and docs/: which test runs it as
written, or why none does (issue 40), and the install it needs (issue 57). A new example fails
here until it is listed.

Each block is preceded by a line ``Needs: … `idaudit[EXTRAS]` …`` (or `` `idaudit` `` for the
base install): :func:`needs` reads it, and every test that runs a block runs it in a process
that sees exactly that install (:func:`doc_env`, tests/installs.py), so a block that uses an
extra it does not state fails.

``EXAMPLES`` maps (file, the block's first line) to the test that runs it, or to ``"not run:
…"`` with the reason. Listed tests must exist and read that file; the blocks run here are
the README's Python ones. The shell blocks and the action's workflow run under the
``examples`` marker (``pytest -m examples``; CI's stage 2d), not in the default run.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

import installs
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```(bash|python|yaml|sh)\n(.*?)^```", re.M | re.S)
NEEDS = re.compile(r"^Needs: (.+)$")
INSTALL = re.compile(r"`idaudit(?:\[([a-z0-9,]+)\])?`")

SHRUNK = "tests/test_doc_shell.py::test_the_shell_examples_run_shrunk"  # run as written, sizes shrunk
NEEDS_PROJECT = ("not run: imports the reader's own project (`src.models…`, `myproject`); "
                 "tests/test_integrations.py checks its flags and that each file it names is "
                 "made above it, and runs each route with a stand-in network")
EXAMPLES: dict[tuple[str, str], str] = {
    ("README.md", "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 -e . "
                  "&& idaudit demo"): ".ci/run (stage 1, a fresh venv, word for word)",
    ("README.md", "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 -e "
                  "\".[dev,reacher]\" && pytest -q"): ".ci/run (stage 2, a fresh venv)",
    ("README.md", "idaudit train --world spiral --rho 0.95 --steps 6000 --seed 0 --out "
                  "s0.safetensors"): f"{SHRUNK} (600 steps)",
    ("README.md", "import idaudit"): "tests/test_doc_examples.py::test_the_readme_python_runs",
    ("docs/commands.md", "idaudit world spiral --rho 0.95 --pairs 10000 --out pairs.safetensors"):
        f"{SHRUNK} (600 steps, a 2-run grid, 300 Reacher pairs)",
    ("docs/commands.md", "idaudit audit jepa.pth.tar --key target_encoder --arch "
                         "myproject:vit_small"): NEEDS_PROJECT,
    ("docs/commands.md", "import idaudit"):
        "tests/test_doc_examples.py::test_the_readme_python_runs",
    ("docs/ci.md", "name: identifiability#1"):
        "tests/test_action_workflow.py::test_the_documented_workflow_runs_through_the_action",
    ("docs/ci.md", "IDAUDIT_TARGETS=\"ckpt/jepa.pth.tar\" IDAUDIT_MIN_R2=0.9 \\"):
        "not run: the same script and inputs as the workflow above (tests/test_action.py runs "
        "the script this way on spiral checkpoints)",
    ("docs/ci.md", "name: identifiability#2"):
        "not run: the same audit written out as steps; it installs `$IDAUDIT_SPEC`, which the "
        "reader sets",
    ("docs/ci.md", "import idaudit"): "not run: needs the reader's arrays z, h, h′ and encoder.pt",
    ("docs/ci.md", "from idaudit.testing import assert_identifiable"):
        "tests/test_doc_examples.py::test_the_readme_python_runs (the same lines, given z, h)",
    ("docs/integrations.md", "pip install 'idaudit[vision,reacher]'"):
        "not run: installs extras (.ci/run stage 3 installs the unpinned ones)",
    ("docs/integrations.md", "import idaudit"):
        "tests/test_python_encoders.py::test_the_lejepa_style_example_runs_as_it_says",
    ("docs/integrations.md", "- name: Headless GL for MuJoCo"):
        "not run: an apt step of a GitHub workflow (this machine has the libraries)",
    ("docs/swm.md", "pip install stable-worldmodel"):
        "not run: as written it installs, collects 6 000 frames and trains 20 epochs; "
        "tests/test_swm_worlds.py runs `train --world swm:ReacherDMControl-v0` and the audit of "
        "its checkpoint on 120 frames (.ci/run stage 3)",
    ("docs/swm.md", 'spec = idaudit.make_spec("swm:ReacherDMControl-v0", frames=6000, '
                    'episode_steps=100)'):
        "not run: needs the reader's encoder; tests/test_swm_worlds.py does make_spec and "
        "audit(encoder=, world=spec) on 120 frames",
    ("docs/swm.md", "idaudit audit enc.pt2 --data /abs/reacher_folder"):
        "not run: needs the reader's folder and encoder; tests/test_swm_worlds.py reads a folder "
        "World.collect wrote and checks it against stable-worldmodel's own reader",
    ("docs/lightning.md", "pip install 'idaudit[lightning]'"):
        "not run: installs an extra the dev extra already brings",
    ("docs/lightning.md", "import lightning as L"):
        "tests/test_lightning_monitor.py::test_the_guide_s_example_runs_as_it_says",
    ("docs/lightning.md", "# encoders.py"):
        "tests/test_lightning_monitor.py::test_the_documented_command_gives_the_monitor_s_numbers",
    ("docs/lightning.md", "import shlex"):
        "tests/test_lightning_monitor.py::test_the_documented_command_gives_the_monitor_s_numbers",
    ("docs/lightning.md", "idaudit audit ckpt/last.ckpt --key state_dict --prefix net. --arch "
                          "encoders:network --world spiral --n-eval 1024 --seed 0"):
        "tests/test_lightning_monitor.py::test_the_documented_command_gives_the_monitor_s_numbers "
        "(with --json added)",
    ("docs/objective-forms.md", "idaudit train --world spiral"): f"{SHRUNK} (200 steps)",
    ("docs/reacher.md", "idaudit train --world reacher --rho 0.95#1"):
        f"{SHRUNK} (300 pairs, 1 epoch, 1 000 evaluation images)",
    ("docs/reacher.md", "idaudit train --world reacher --rho 0.95#2"):
        "not run: the card twice, an earlier record (scripts/doc_times.py times the card); the "
        "card's line runs shrunk in the block above and as .ci/run stage 3's short card line",
    ("docs/page.md", "idaudit train --world spiral --steps 800 --out s.safetensors"):
        f"{SHRUNK} (as written: nothing to shrink)",
    ("docs/reacher.md", "idaudit train --world reacher --recipe paper --rho 0.95 --epochs 12"):
        "not run: the paper's recipe takes hours on a CPU",
    ("docs/reacher.md", "idaudit sweep reacher --out sw --seeds 1 --only lamb=5e-3,1e-2"):
        "not run: 28 Reacher trainings (hours on a CPU)",
    ("docs/reacher.md", "idaudit sweep reacher --out sw --checkpoints --only lamb=5e-3"):
        "not run: Reacher trainings (tests/test_ray_cluster.py runs a small one with "
        "--checkpoints)",
    ("docs/sweeps.md", "idaudit sweep grid --seeds 1 --steps 4000 --out sweeps/grid"):
        f"{SHRUNK} (each suite cut to one or two 100-step runs; my_grid.toml is the TOML block "
        "of the same page)",
    ("docs/metrics.md", "import numpy as np"):
        "tests/test_functional_metrics.py::test_the_docs_example_runs",
    ("docs/own-world.md", "import numpy as np"):
        "tests/test_recorded.py::test_the_guide_runs_as_written",
    ("docs/own-world.md", "idaudit train --data mydot.npz --epochs 2 --out mydot.safetensors"):
        "tests/test_recorded.py::test_the_guide_runs_as_written (on the file the Python block "
        "wrote)",
    ("docs/user-loop.md", "import idaudit"):
        "tests/test_user_pairs.py::test_the_loop_in_the_docs_runs_on_public_names_and_beats_the_mixing",
}
# docs/integrations.md's worked examples, one per project family
INTEGRATION_HEADS = ("python - <<'EOF'", "from src.models.vision_transformer import",
                     "import torch", "def encode_fn(model, x):", "python -c \"import torch, "
                     "myproject", "idaudit embed vit-hf", "idaudit audit jepa-latest.pth.tar")


def blocks() -> list[tuple[str, str, str]]:
    """(file, key, code) of every shell, Python and YAML block, keyed by its first line
    (``#k`` after it where several blocks of one file share a first line)."""
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            code = m.group(2)
            first = re.sub(r"\s+#.*$", "", code.strip().splitlines()[0]).rstrip()
            out.append((path.relative_to(ROOT).as_posix(), first, code))
    counts = Counter((name, first) for name, first, _ in out)
    index: Counter = Counter()
    keyed = []
    for name, first, code in out:
        index[(name, first)] += 1
        key = first if counts[(name, first)] == 1 else f"{first}#{index[(name, first)]}"
        keyed.append((name, key, code))
    return keyed


def status(name: str, key: str) -> str | None:
    for (file, head), said in EXAMPLES.items():
        if file == name and (key == head or (key.startswith(head) and "#" not in head)):
            return said
    if name == "docs/integrations.md" and key.split("#")[0].startswith(INTEGRATION_HEADS):
        return NEEDS_PROJECT
    return None


def needs_line(name: str, key: str) -> str | None:
    """The ``Needs:`` line right above block ``key`` of ``name`` (None where there is none)."""
    text = (ROOT / name).read_text(encoding="utf-8")
    code = next(c for n, k, c in blocks() if n == name and k == key)
    fence = re.search(r"^```\w+\n" + re.escape(code) + "^```", text, re.M)
    above = [ln for ln in text[:fence.start()].splitlines() if ln.strip()]
    found = NEEDS.match(above[-1]) if above else None
    return found.group(1) if found else None


def needs(name: str, key: str) -> frozenset[str]:
    """The extras block ``key`` of ``name`` states it needs (empty: the base install).

    Example:
        >>> sorted(needs("docs/page.md", "idaudit train --world spiral --steps 800 --out s.safetensors"))
        ['plot']
    """
    line = needs_line(name, key)
    assert line is not None, f"{name}: the block {key!r} has no 'Needs:' line above it"
    found = INSTALL.search(line)
    assert found, f"{name}: {key!r}'s Needs line names no `idaudit` or `idaudit[EXTRAS]`: {line}"
    return frozenset(e for e in (found.group(1) or "").split(",") if e)


def doc_env(name: str, key: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment that runs block ``key`` of ``name`` on exactly the install it states."""
    return installs.env_for(needs(name, key), base)


def run_python(name: str, key: str, cwd: Path, *, before: str = "", after: str = "",
               timeout: float = 900) -> subprocess.CompletedProcess:
    """Run Python block ``key`` of ``name`` as written in a fresh interpreter on the install it
    states, in ``cwd``; ``before`` and ``after`` run around it in the same scope (a test's
    inputs and what it reads back). A non-zero exit fails with the block's stderr."""
    code = next(c for n, k, c in blocks() if n == name and k == key)
    (cwd / "_block.py").write_text(f"{before}\n{code}\n{after}\n")
    done = subprocess.run([sys.executable, "_block.py"], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=doc_env(name, key))
    assert done.returncode == 0, f"{name} {key!r}:\n{done.stderr[-3000:]}"
    return done


def test_every_block_states_the_install_it_needs():
    """Every block has a Needs line naming idaudit's extras that exist; a block that installs
    idaudit itself installs the extras its line states."""
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"])
    for name, key, code in blocks():
        stated = needs(name, key)
        assert stated <= extras, (name, key, stated - extras)
        installed = re.search(r"pip install [^\n]*?(?:-e \"?\.|'?idaudit)(?:\[([a-z0-9,]+)\])?",
                              code)
        if installed:
            assert frozenset(filter(None, (installed.group(1) or "").split(","))) <= stated, (
                name, key)


def test_a_block_that_uses_an_extra_it_does_not_state_fails(tmp_path):
    """The install a block states is enforced: on the base install `--plot` is refused (the
    plot extra's matplotlib cannot be imported), and with the plot extra it draws."""
    base = installs.env_for(())
    probe = "import importlib.util as u; print(u.find_spec('matplotlib') is None, " \
            "u.find_spec('numpy') is None)"
    done = subprocess.run([sys.executable, "-c", probe], env=base, capture_output=True,
                          text=True, check=True)
    assert done.stdout.split() == ["True", "False"]
    train = subprocess.run([sys.executable, "-m", "idaudit", "train", "--world", "spiral",
                            "--steps", "50", "--out", "s.safetensors", "-q"], cwd=tmp_path,
                           env=base, capture_output=True, text=True)
    assert train.returncode == 0, train.stderr
    refused = subprocess.run([sys.executable, "-m", "idaudit", "audit", "s.safetensors", "--plot",
                              "a.png"], cwd=tmp_path, env=base, capture_output=True, text=True)
    assert refused.returncode == 2 and "needs matplotlib" in refused.stderr, refused.stderr
    drawn = subprocess.run([sys.executable, "-m", "idaudit", "audit", "s.safetensors", "--plot",
                            "a.png"], cwd=tmp_path, env=installs.env_for({"plot"}),
                           capture_output=True, text=True)
    assert drawn.returncode == 0 and (tmp_path / "a.png").stat().st_size > 1000, drawn.stderr


def test_every_test_that_runs_a_block_runs_it_on_its_install():
    """A test named in EXAMPLES runs its block through doc_env / run_python (or, for the
    action's workflow, a fresh venv the workflow installs)."""
    for (name, key), said in EXAMPLES.items():
        if said.startswith("not run: ") or said.startswith(".ci/run"):
            continue
        file, test = said.split(" ")[0].split("::")
        source = (ROOT / file).read_text()
        body = re.search(rf"^def {re.escape(test)}\(.*?(?=^def |\Z)", source, re.M | re.S).group(0)
        line = needs_line(name, next(k for n, k, _ in blocks() if n == name
                                     and (k == key or k.startswith(key))))
        assert "doc_env(" in body or "run_python(" in body or "GitHub runner" in line, (
            f"{said} runs {name} {key!r} without the install its Needs line states")


def test_every_example_is_run_or_says_why_not():
    found = blocks()
    assert len(found) >= 40
    missing = [(name, key) for name, key, _ in found if status(name, key) is None]
    assert not missing, f"examples with no test and no reason: {missing}"
    for name, key, _ in found:
        said = status(name, key)
        if said.startswith("not run: "):
            assert len(said) > 30, (name, key)
            continue
        where = said.split(" ")[0]
        if where == ".ci/run":
            text = (ROOT / ".ci" / "run").read_text()
            assert "readme_commands.py" in text
            continue
        file, test = where.split("::")
        source = (ROOT / file).read_text()
        assert re.search(rf"^def {re.escape(test)}\(", source, re.M), said
        assert Path(name).name in source or Path(name).stem in source, (file, name)
    # every listed example still exists (a renamed or removed one is taken off the list)
    keys = {(name, key) for name, key, _ in found}
    stale = [k for k in EXAMPLES if not any(n == k[0] and (key == k[1] or key.startswith(k[1]))
                                            for n, key in keys)]
    assert not stale, stale


def test_the_readme_python_runs(tmp_path):
    """README.md's and docs/commands.md's Python blocks as written, each in its own interpreter
    on the base install it states; docs/ci.md's pytest lines the same way, given arrays z, h of
    an orthogonal encoder (it passes) and of noise (it fails), which it names but cannot make."""
    done = run_python("README.md", "import idaudit", tmp_path)
    verdict, r2, ratio = done.stdout.split()[-3:]
    assert verdict in ("pass", "fail") and float(r2) > 0.5 and 0.8 < float(ratio) < 1.3
    assert (tmp_path / "s.safetensors").exists()
    done = run_python("docs/commands.md", "import idaudit", tmp_path, after=(
        "import json; print(json.dumps({'verdict': report.verdict, "
        "'r2': report.metrics['r2_h_to_z_heldout'], 'ratio': plans.cost_ratio_median}))"))
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["r2"] > 0.5 and 0.8 < got["ratio"] < 1.3
    rng = np.random.default_rng(0)
    z = rng.standard_normal((2000, 2))
    q = np.linalg.qr(rng.standard_normal((2, 2)))[0]
    for h, passes in ((z @ q, True), (rng.standard_normal((2000, 2)), False)):
        np.savez(tmp_path / "zh.npz", z=z, h=h)
        done = run_python("docs/ci.md", "from idaudit.testing import assert_identifiable",
                          tmp_path, before="import numpy as np\nz, h = (np.load('zh.npz')[k] "
                          "for k in 'zh')", after=(
                              "try:\n    test_encoder_is_identifiable()\n"
                              "except AssertionError:\n    print('raised')\nelse:\n"
                              "    print('passed')"))
        assert done.stdout.split()[-1] == ("passed" if passes else "raised")
