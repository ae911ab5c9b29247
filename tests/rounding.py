"""How far another CPU's kernels move the numbers a short training prints, by simulation.

A training run's numbers are not a property of the code alone: oneDNN and OpenBLAS pick other
kernels on other CPUs (AVX2 or AVX-512, another cache size), each sums in another order, and
the last-bit differences that makes grow over the steps. Two machines of one kind have printed
R² 0.837303 and 0.832161 for the same 200 steps of docs/integrations.md's example.

The simulation gives each example's printed numbers the spread that such differences cause:
it runs the example as written, several times, each time with every torch module's output
multiplied by 1 + u·2⁻²³ (u uniform in [−1, 1], from its own seed) — the size of one float32
rounding, in every layer, as another CPU's kernels round each layer's sums. It also runs the
short trainings whose numbers tests hold to a threshold (:data:`MARGINS`).

Run as a script it writes ``docs/data/rounding-spread.json``: for each example the SHA-256 of
its code as the doc writes it, the printed numbers of every run and their standard deviation
σ. The tests' tolerance is derived from them (:func:`tolerances`): 4·√2·σ (two machines'
numbers differ by N(0, 2σ²): four of its standard deviations), never less than one unit of
the last printed digit; a number the code itself writes (a gate) is compared exactly. For
each threshold, how many σ the number lies from it. The tests compare the numbers they print
with the doc's within that tolerance, and check that the record was made from the code the
doc holds now::

    python tests/rounding.py --runs 12        # ≈ 10 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import math
import os
import re
import runpy
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "data" / "rounding-spread.json"
#: one float32 rounding, relative: what each optimiser step's parameters are perturbed by
ROUNDING = 2.0**-23
#: the tolerance in σ of one machine's numbers: 4 standard deviations of two machines' difference
SIGMAS = 4 * math.sqrt(2)
NUMBER = re.compile(r"-?\d+\.\d+")


@dataclass(frozen=True)
class Example:
    """A doc's Python block that trains and prints, and the text block the doc shows after it.

    Args:
        doc: the page, relative to the project root.
        first_line: the block's first line, which names it on the page.
    """

    doc: str
    first_line: str

    def code(self) -> str:
        """The block as the doc writes it."""
        return self._blocks()[0]

    def shown(self) -> str:
        """The text block the doc shows after the code: what it prints (its lines, each
        ended by a newline)."""
        return self._blocks()[1].rstrip("\n") + "\n"

    def _blocks(self) -> tuple[str, str]:
        text = (ROOT / self.doc).read_text(encoding="utf-8")
        for m in re.finditer(r"```python\n(.*?)```", text, flags=re.S):
            if m.group(1).startswith(self.first_line):
                shown = re.search(r"```text\n(.*?)```", text[m.end():], flags=re.S)
                assert shown, f"{self.doc}: no text block after {self.first_line!r}"
                return m.group(1), shown.group(1)
        raise AssertionError(f"{self.doc} has no Python block starting {self.first_line!r}")

    def sha256(self) -> str:
        return hashlib.sha256(self.code().encode()).hexdigest()


EXAMPLES = {
    "integrations": Example("docs/integrations.md", "import idaudit\nimport torch\nfrom torch"),
    "user-loop": Example("docs/user-loop.md", "import idaudit\nimport torch\n\ntorch.manual"),
    "lightning": Example("docs/lightning.md", "import lightning as L"),
}


def template(text: str) -> tuple[str, list[float]]:
    """(the text with each decimal number replaced by ``{}``, those numbers).

    Example:
        >>> template("R² 0.832161 pass, 256 wide")
        ('R² {} pass, 256 wide', [0.832161])
    """
    return NUMBER.sub("{}", text), [float(v) for v in NUMBER.findall(text)]


def printed_lines(example: Example, workdir: Path) -> str:
    """Run the example's code as a script in ``workdir``; the last lines it printed, as many
    as the doc shows."""
    script = workdir / "example.py"
    script.write_text(example.code())
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(str(script), run_name="__main__")
    finally:
        os.chdir(cwd)
    want = len(example.shown().splitlines())
    return "\n".join(out.getvalue().rstrip("\n").splitlines()[-want:]) + "\n"


@contextlib.contextmanager
def rounding_noise(seed: int, relative: float = ROUNDING) -> Iterator[None]:
    """Within the block, every torch module's floating-point output (a Linear, a GELU, a
    whole network; the worlds' mixings too) is multiplied by 1 + u·``relative``, u uniform in
    [−1, 1] element by element, drawn from a generator of its own seeded with ``seed`` (the
    example's own random streams are left alone): each layer's result rounded once more, as
    another CPU's kernels, which sum in another order, round it. Backward passes see the
    perturbed activations.

    Args:
        seed: the noise's seed; the same seed, the same perturbations.
        relative: the size of one perturbation, relative to the value.

    Example:
        >>> import torch
        >>> layer = torch.nn.Identity()
        >>> with rounding_noise(0, relative=1e-3):
        ...     y = layer(torch.ones(4))
        >>> bool(((y - 1).abs() <= 1e-3).all() and (y != 1).any())
        True
    """
    import torch
    from torch.nn.modules.module import register_module_forward_hook

    gen = torch.Generator().manual_seed(seed)

    def perturb(module, inputs, output):
        if isinstance(output, torch.Tensor) and output.is_floating_point():
            u = torch.rand(output.shape, generator=gen, dtype=torch.float64) * 2 - 1
            return output * (1 + relative * u).to(device=output.device, dtype=output.dtype)
        return None

    handle = register_module_forward_hook(perturb)
    try:
        yield
    finally:
        handle.remove()


def digit_unit(text: str) -> float:
    """One unit of a printed number's last digit: 0.001 for "0.956"."""
    return 10.0 ** -len(text.split(".")[1])


def tolerances(values: list[list[float]], shown: str, code: str) -> list[float]:
    """Each printed number's tolerance from its runs' values: 0 for a number the example's
    code writes (a gate, a threshold), else 4·√2·σ and at least one unit of the last digit
    the doc shows (a number the simulation never moved may still round the other way).

    Example:
        >>> tolerances([[0.8, 0.95], [0.8, 0.95]], "0.8 0.95", "gate=0.8")
        [0.0, 0.01]
    """
    written = set(NUMBER.findall(code))
    return [0.0 if t in written else max(SIGMAS * s, digit_unit(t))
            for s, t in zip(spread(values), NUMBER.findall(shown))]


def spread(values: list[list[float]]) -> list[float]:
    """Each column's standard deviation over the runs (rows); exactly 0 where every run
    printed the same number (numpy's sum would leave 1e-16 there).

    Example:
        >>> spread([[0.8, 1.0], [0.8, 1.2], [0.8, 1.1]])
        [0.0, 0.09999999999999998]
    """
    import numpy as np

    arr = np.asarray(values, dtype=float)
    same = (arr == arr[0]).all(axis=0)
    return [0.0 if s else float(v) for s, v in zip(same, arr.std(axis=0, ddof=1))]


def record() -> dict:
    """The stored simulation (docs/data/rounding-spread.json)."""
    return json.loads(RECORD.read_text(encoding="utf-8"))


def simulate(name: str, runs: int) -> dict:
    """Run example ``name`` once as written and ``runs`` times under :func:`rounding_noise`
    (seeds 1 … runs); its record."""

    example = EXAMPLES[name]
    shape, _ = template(example.shown())
    values, texts = [], []
    for seed in range(runs + 1):
        with tempfile.TemporaryDirectory() as tmp:
            noise = rounding_noise(seed) if seed else contextlib.nullcontext()
            with noise:
                text = printed_lines(example, Path(tmp))
        got_shape, numbers = template(text)
        if got_shape != shape:
            raise SystemExit(f"{name}: run {seed} printed\n{text}\nnot the doc's shape\n{shape}")
        values.append(numbers)
        texts.append(text)
        print(f"{name}: run {seed}/{runs}: {text.strip()}", file=sys.stderr, flush=True)
    perturbed = values[1:]
    return {"doc": example.doc, "code_sha256": example.sha256(), "relative_noise": ROUNDING,
            "runs": runs, "as_written": values[0], "perturbed": perturbed,
            "sigma": spread(perturbed),
            "printed_as_written": texts[0]}


def _cli(workdir: Path, *args: str) -> None:
    """``idaudit ARGS`` in this process (the noise reaches it), in ``workdir``; exit 0 or 1."""
    from typer.testing import CliRunner

    from idaudit.cli import app

    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        res = CliRunner().invoke(app, list(args))
    finally:
        os.chdir(cwd)
    if res.exit_code not in (0, 1):
        raise SystemExit(f"idaudit {' '.join(args)}: exit {res.exit_code}\n{res.output}")


def _metrics(workdir: Path, *args: str) -> dict:
    """The metrics of ``idaudit audit|consistency ARGS --json``."""
    _cli(workdir, *args, "--json", "m.json")
    return json.loads((workdir / "m.json").read_text())["metrics"]


SPIRAL = ("--world", "spiral", "--rho", "0.95", "--objective", "lejepa", "--lamb", "1e-3")


def _demo(w: Path) -> dict:
    _cli(w, "demo", "--steps", "800", "--out", "d")
    plan = json.loads((w / "d" / "plan.json").read_text())
    return {"r2_h_to_z_heldout": json.loads((w / "d" / "audit.json").read_text())["metrics"][
        "r2_h_to_z_heldout"], "cost_ratio_median": plan["cost_ratio_median"]}


def _spiral_300(w: Path) -> dict:
    _cli(w, "train", *SPIRAL, "--steps", "300", "--seed", "1337", "--n-eval", "2000",
         "--out", "s.safetensors", "--quiet")
    return {"r2_h_to_z_heldout": _metrics(w, "audit", "s.safetensors")["r2_h_to_z_heldout"]}


def _readme_600(w: Path) -> dict:
    for seed in range(3):
        _cli(w, "train", *SPIRAL, "--steps", "600", "--seed", str(seed), "--out",
             f"s{seed}.safetensors", "--quiet")
    worst = min(_metrics(w, "audit", f"s{seed}.safetensors")["r2_h_to_z_heldout"]
                for seed in range(3))
    _cli(w, "embed", "s0.safetensors", "--out", "e.npz")
    return {"r2_h_to_z_heldout, worst of 3": worst,
            "consistency_r2": _metrics(w, "consistency", "s0.safetensors", "s1.safetensors")[
                "consistency_r2"],
            "canonical_spread": _metrics(w, "audit", "e.npz", "--label-free")[
                "canonical_spread"]}


def _vicreg_400(w: Path) -> dict:
    _cli(w, "train", "--world", "banana", "--objective", "vicreg", "--steps", "400", "--seed",
         "0", "--eval-every", "400", "--n-eval", "2000", "--quiet", "--out", "v.safetensors")
    return {"r2_h_to_z": _metrics(w, "audit", "v.safetensors")["r2_h_to_z"]}


@dataclass(frozen=True)
class Margin:
    """A test's training run and the bounds the test holds its numbers to.

    Args:
        tests: the tests that hold them there.
        run: the run, in a working directory; its numbers by name.
        bounds: for each number, (low, high), None where open.
    """

    tests: str
    run: Callable[[Path], dict]
    bounds: dict[str, tuple[float | None, float | None]]


MARGINS = {
    "demo-800": Margin("tests/test_cli.py::test_demo_runs_the_whole_loop_and_gates", _demo,
                       {"r2_h_to_z_heldout": (0.95, None), "cost_ratio_median": (0.8, 1.2)}),
    "spiral-300-seed-1337": Margin(
        "tests/test_action.py (ckpt, the 0.9 gate and < 0.999), tests/test_action_workflow.py, "
        "tests/test_cli.py (ckpt)", _spiral_300, {"r2_h_to_z_heldout": (0.9, 0.999)}),
    "readme-600": Margin(
        "tests/test_doc_shell.py (docs/commands.md's block, --steps 600: three gates under bash -e)",
        _readme_600, {"r2_h_to_z_heldout, worst of 3": (0.95, None),
                      "consistency_r2": (0.95, None), "canonical_spread": (None, 0.05)}),
    "vicreg-banana-400": Margin("tests/test_vicreg.py::test_a_short_run_beats_the_raw_mixing",
                                _vicreg_400, {"r2_h_to_z": (0.95, None)}),
}


def margin_in_sigmas(value: float, sigma: float,
                     bounds: tuple[float | None, float | None]) -> float:
    """How many σ ``value`` lies inside ``bounds`` (negative: outside).

    Example:
        >>> margin_in_sigmas(0.977, 0.001, (0.95, None))
        27.0...
    """
    low, high = bounds
    room = min(value - low if low is not None else math.inf,
               high - value if high is not None else math.inf)
    return room / sigma if sigma > 0 else math.inf


def simulate_margin(name: str, runs: int) -> dict:
    """Run margin ``name`` once as written and ``runs`` times under :func:`rounding_noise`."""

    case = MARGINS[name]
    values = []
    for seed in range(runs + 1):
        with tempfile.TemporaryDirectory() as tmp:
            with rounding_noise(seed) if seed else contextlib.nullcontext():
                values.append(case.run(Path(tmp)))
        print(f"{name}: run {seed}/{runs}: {values[-1]}", file=sys.stderr, flush=True)
    out = {"tests": case.tests, "relative_noise": ROUNDING, "runs": runs, "numbers": {}}
    for key, bounds in case.bounds.items():
        perturbed = [v[key] for v in values[1:]]
        sigma = spread([[v] for v in perturbed])[0]
        out["numbers"][key] = {
            "bounds": list(bounds), "as_written": values[0][key], "perturbed": perturbed,
            "sigma": sigma, "margin_in_sigmas": margin_in_sigmas(values[0][key], sigma, bounds)}
    return out


def main(argv: list[str] | None = None) -> None:
    """Simulate the examples (all, or those named) and write their records.

    Args:
        argv: ``--runs K`` and example names; the command line when None.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*",
                        help=f"of {', '.join([*EXAMPLES, *MARGINS])} (default: all)")
    parser.add_argument("--runs", type=int, default=12, help="perturbed runs per example")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(EXAMPLES) - set(MARGINS))
    if unknown:
        parser.error(f"no example named {', '.join(unknown)}")
    import idaudit  # noqa: F401 - before torch, as the idaudit command does

    kept = record() if RECORD.exists() else {}
    for name in args.names or [*EXAMPLES, *MARGINS]:
        kept[name] = simulate(name, args.runs) if name in EXAMPLES else simulate_margin(
            name, args.runs)
        tmp = RECORD.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(kept, indent=1) + "\n", encoding="utf-8")
        tmp.replace(RECORD)


if __name__ == "__main__":
    main()


def check_printed(name: str, printed: str) -> None:
    """Assert that ``printed`` is what example ``name``'s doc shows: the same text where no
    number is, each number within its simulated tolerance (exactly, where no training touches
    it), from a record made of the code the doc holds now.

    Args:
        name: the example, a key of :data:`EXAMPLES`.
        printed: the lines the example printed (as many as the doc shows).
    """
    example = EXAMPLES[name]
    rec = record()[name]
    assert rec["code_sha256"] == example.sha256(), (
        f"{example.doc}'s example is not the code its simulation ran: "
        f"run python tests/rounding.py {name}")
    shape, want = template(example.shown())
    printed = printed.rstrip("\n") + "\n"  # its lines, as shown() gives the doc's
    got_shape, got = template(printed)
    assert got_shape == shape, f"printed\n{printed}\nthe doc shows\n{example.shown()}"
    tolerance = tolerances(rec["perturbed"], example.shown(), example.code())
    assert len(got) == len(want) == len(tolerance)
    off = [f"number {i}: printed {g}, the doc {w}, tolerance {t:.3g}"
           for i, (g, w, t) in enumerate(zip(got, want, tolerance)) if abs(g - w) > t]
    assert not off, "; ".join(off)
