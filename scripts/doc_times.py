"""Every time the docs state, measured by one script and checked against that measurement.

    python scripts/doc_times.py --list            # the timed commands and the claims
    python scripts/doc_times.py --only demo       # run one measurement, record it
    python scripts/doc_times.py --check           # check each doc claim against the record

Each timed command is declared once in ``MEASUREMENTS`` (a key, the exact command, and where a
full command is too long to run routinely a smaller variant, labelled as such); ``--only KEY``
runs it in an empty temporary directory (``IDAUDIT_CACHE`` pointed at an empty temporary
directory too) and records in ``docs/data/doc_times.json`` its wall seconds, its CPU seconds
(the children's user + system time from ``resource.getrusage(RUSAGE_CHILDREN)``: the command
and every worker process it waited for), the load average at start and end (the machine may
be shared: wall is then an upper bound, CPU seconds are the robust figure), the git commit,
the date, the torch version and the core count. The record is written atomically (a
temporary file renamed over it) under a lock, so two measurements may run at once.

Each time the docs state to a reader is declared once in ``CLAIMS``: the file, an exact
phrase with ``{…}`` fields for its numbers, the measurement the numbers come from and the
rounding allowed. ``--check`` (and tests/test_doc_times.py, through ``check``) finds each
phrase, parses its numbers and fails if one disagrees with the record beyond the rounding;
it also fails where a file other than docs/reacher.md states the card's line's time. It runs
nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import fcntl
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "data" / "doc_times.json"


@dataclass(frozen=True)
class Measurement:
    """One timed command.

    Args:
        key: the name ``--only`` takes and the record's key.
        command: the exact ``idaudit`` command line the docs time (without ``idaudit``).
        runs: the command actually run (without ``idaudit``); empty when it is ``command``.
        note: what the measurement stands for, in particular how a variant relates to the
            full command (say "variant" plainly).
        empty_cache: point ``IDAUDIT_CACHE`` at an empty temporary directory.
    """

    key: str
    command: tuple[str, ...]
    runs: tuple[str, ...] = ()
    note: str = ""
    empty_cache: bool = True

    @property
    def argv(self) -> tuple[str, ...]:
        """The arguments actually run after ``idaudit``."""
        return self.runs or self.command

    @property
    def is_variant(self) -> bool:
        """Whether what runs is a smaller variant of the documented command."""
        return bool(self.runs) and self.runs != self.command


SWEEP_GRID_RUNS = 63  # `idaudit sweep grid --seeds 1 --list` lists 63 runs

MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement("demo", ("demo",), note="`idaudit demo` in an empty directory"),
    Measurement(
        "seed_training",
        ("train", "--world", "spiral", "--rho", "0.95", "--steps", "6000", "--seed", "0",
         "--out", "s0.safetensors"),
        note="the README's training line (its first command)",
    ),
    Measurement(
        "card",
        ("train", "--world", "reacher", "--rho", "0.95"),
        note="the card's line from an empty cache (renders, then trains)",
    ),
    Measurement(
        "sweep_grid_run",
        ("sweep", "grid", "--seeds", "1", "--steps", "4000"),
        runs=("train", "--world", "spiral", "--rho", "0.95", "--objective", "lejepa",
              "--lamb", "1e-3", "--steps", "4000", "--seed", "1337"),
        note=("VARIANT: one 4000-step spiral training, the basis of an ESTIMATE for the "
              f"sweep's {SWEEP_GRID_RUNS} runs (per-run figure × {SWEEP_GRID_RUNS}); the "
              "sweep itself was not timed"),
    ),
)

BY_KEY = {m.key: m for m in MEASUREMENTS}


@dataclass(frozen=True)
class Claim:
    """One time the docs state to a reader.

    Args:
        path: the file, relative to the repository root.
        phrase: the exact phrase (whitespace runs count as one space), with ``{name}``
            fields where its numbers stand.
        key: the measurement the numbers come from.
        fields: for each field, ``(figure, tolerance, format)``: the recorded figure it
            states (a name in ``FIGURES``), the largest allowed difference in the figure's
            unit (the rounding the phrase uses) and the format that writes it.
        optional: a missing phrase is reported, not failed.
    """

    path: str
    phrase: str
    key: str
    fields: dict[str, tuple[str, float, str]] = field(default_factory=dict)
    optional: bool = False


# figure name -> how it is computed from one record
FIGURES = {
    "wall_s": lambda r: r["wall_s"],
    "wall_min": lambda r: r["wall_s"] / 60,
    "cpu_s": lambda r: r["cpu_s"],
    "cpu_min": lambda r: r["cpu_s"] / 60,
    # the sweep estimate: the per-run figure × the sweep's runs (an estimate, not a measurement)
    "est_cpu_h": lambda r: r["cpu_s"] * SWEEP_GRID_RUNS / 3600,
    "est_wall_h": lambda r: r["wall_s"] * SWEEP_GRID_RUNS / 3600,
    "runs": lambda r: SWEEP_GRID_RUNS,
}

WALL_MIN = ("wall_min", 0.05, "{:.1f}")   # minutes, one decimal
CPU_MIN = ("cpu_min", 0.05, "{:.1f}")     # CPU-minutes, one decimal
CPU_S10 = ("cpu_s", 5.0, "{:.0f}")        # CPU seconds to the nearest 10 (written rounded)

CLAIMS: tuple[Claim, ...] = (
    Claim("docs/reacher.md",
          "from an empty cache took {wall} min wall and {cpu} CPU-min", "card",
          {"wall": WALL_MIN, "cpu": CPU_MIN}),
    Claim("src/idaudit/cli/demo.py",
          "measured at {cpu} CPU-s ({wall} min wall on 2 cores)", "demo",
          {"cpu": CPU_S10, "wall": WALL_MIN}),
    Claim("docs/sweeps.md",
          "one 4000-step spiral training took {cpu} CPU-s ({wall} s wall)", "sweep_grid_run",
          {"cpu": CPU_S10, "wall": ("wall_s", 5.0, "{:.0f}")}),
    Claim("docs/sweeps.md",
          "the {runs} runs are estimated at ≈ {cpu} CPU-hours", "sweep_grid_run",
          {"runs": ("runs", 0, "{:d}"), "cpu": ("est_cpu_h", 0.05, "{:.1f}")}),
    Claim("README.md",
          "the demo takes about {wall} min wall ({cpu} CPU-s) on 2 cores", "demo",
          {"wall": WALL_MIN, "cpu": CPU_S10}),
    Claim("README.md",
          "the training line takes about {wall} min wall ({cpu} CPU-s)", "seed_training",
          {"wall": WALL_MIN, "cpu": CPU_S10}),
    Claim("docs/commands.md", "three seeds, ≈ {cpu} CPU-s each", "seed_training",
          {"cpu": CPU_S10}),
)

# Phrases that stated a time no measurement backs (or the card's time outside
# docs/reacher.md): each must be gone.
STALE: tuple[tuple[str, str], ...] = (
    ("src/idaudit/cli/demo.py", "about a minute on 2 CPU cores"),
    ("pyproject.toml", "9 min of work"),
    ("docs/page.md", "13 minutes"),
    ("docs/page.md", "under a minute"),
    ("docs/reacher.md", "trains in 8.3 min"),
    ("README.md", "about a minute and a half"),
    ("README.md", "≈ 1 min each"),
    ("docs/commands.md", "≈ 1 min each"),
    ("README.md", "about 5 minutes on 2 cores"),
)

# The card's line's time is stated in docs/reacher.md only: in every other doc a sentence
# that names the card's line (or run) must not carry a time.
CARD_HOME = "docs/reacher.md"
CARD_WORDS = re.compile(r"card'?s (own )?(line|run)|the card\b", re.I)
A_TIME = re.compile(r"\d+(\.\d+)?\s*(min\b|minutes?\b|s wall|CPU-s|CPU-min|h\b|hours?\b)"
                    r"|\b(a|half an?) (minute|hour)\b", re.I)


def _flat(text: str) -> str:
    """Whitespace runs as one space (a phrase may wrap across lines)."""
    return re.sub(r"\s+", " ", text)


def _pattern(phrase: str) -> re.Pattern[str]:
    """A phrase's regular expression: its text literal, each field a number."""
    parts = re.split(r"\{(\w+)\}", _flat(phrase))
    rx = ""
    for i, part in enumerate(parts):
        rx += re.escape(part) if i % 2 == 0 else rf"(?P<{part}>\d[\d ]*(?:\.\d+)?)"
    return re.compile(rx)


def render(claim: Claim, data: dict[str, dict]) -> str:
    """The claim's phrase with the recorded figures written in.

    Args:
        claim: the claim.
        data: the record (``load()``).

    Returns:
        The phrase as the docs should carry it.
    """
    rec = data[claim.key]
    values = {name: fmt.format(_value(fig, rec, fmt)) for name, (fig, _, fmt) in
              claim.fields.items()}
    return claim.phrase.format(**values)


def _value(figure: str, rec: dict, fmt: str) -> float:
    """A figure of one record, rounded to tens where the format writes CPU seconds whole."""
    v = FIGURES[figure](rec)
    if figure == "cpu_s" and fmt == "{:.0f}":
        v = round(v, -1)
    return int(v) if fmt == "{:d}" else v


def check(root: Path = ROOT, record_path: Path | None = None) -> tuple[list[str], list[str]]:
    """Check every declared claim against the record, running nothing.

    Args:
        root: the repository root (the claims' paths are relative to it).
        record_path: the record (None: ``docs/data/doc_times.json`` under ``root``).

    Returns:
        ``(failures, notes)``: what disagrees, is missing or is stale; and what was only
        reported (an optional claim not present yet, a measurement that is a variant).
    """
    data = load(record_path or root / "docs" / "data" / "doc_times.json")
    failures: list[str] = []
    notes: list[str] = []
    texts: dict[str, str] = {}

    def text(path: str) -> str:
        if path not in texts:
            f = root / path
            texts[path] = _flat(f.read_text(encoding="utf-8")) if f.exists() else ""
        return texts[path]

    for m in MEASUREMENTS:
        if m.key not in data:
            failures.append(f"{m.key}: not measured (scripts/doc_times.py --only {m.key})")
        elif data[m.key].get("returncode"):
            failures.append(f"{m.key}: the measured command failed "
                            f"(exit {data[m.key]['returncode']})")
    for c in CLAIMS:
        if c.key not in data:
            continue
        found = list(_pattern(c.phrase).finditer(text(c.path)))
        if not found:
            (notes if c.optional else failures).append(
                f"{c.path}: phrase not found: {render(c, data)!r}")
            continue
        for hit in found:
            for name, (fig, tol, _fmt) in c.fields.items():
                said = float(hit.group(name).replace(" ", ""))
                want = FIGURES[fig](data[c.key])
                if abs(said - want) > tol + 1e-9:
                    failures.append(f"{c.path}: {hit.group(0)!r}: {name} = {said:g}, the "
                                    f"record gives {want:.2f} (± {tol:g} allowed)")
    for path, phrase in STALE:
        if _flat(phrase) in text(path):
            failures.append(
                f"{path}: states a time no measurement backs: {phrase!r}")
    others = ["README.md", *sorted(p.relative_to(root).as_posix()
                                   for p in (root / "docs").glob("*.md")),
              *sorted(p.relative_to(root).as_posix()
                      for p in (root / "src" / "idaudit" / "cli").glob("*.py"))]
    for path in others:
        if path == CARD_HOME:
            continue
        for sentence in re.split(r"(?<=[.;:])\s|\n\s*\n", text(path)):
            if CARD_WORDS.search(sentence) and A_TIME.search(sentence):
                failures.append(
                    f"{path}: states the card's time outside {CARD_HOME}: "
                    f"{sentence.strip()[:160]!r}")
    for m in MEASUREMENTS:
        if m.is_variant:
            notes.append(f"{m.key}: a variant ({m.note})")
    return failures, notes


def _git_commit() -> str:
    """The checked-out commit (``+dirty`` when the tree has changes), or ``unknown``."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def _torch_version() -> str:
    """The torch version the measured commands import (asked of the same interpreter)."""
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                         capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def measure(m: Measurement) -> dict[str, object]:
    """Run one measurement's command in an empty temporary directory and time it.

    Args:
        m: the measurement.

    Returns:
        The record: wall and CPU seconds, load averages, commit, date, torch version, the
        command documented and the command run, and the exit status.
    """
    with tempfile.TemporaryDirectory(prefix=f"doc_times_{m.key}_") as tmp:
        work = Path(tmp) / "work"
        cache = Path(tmp) / "cache"
        work.mkdir()
        cache.mkdir()
        env = dict(os.environ)
        if m.empty_cache:
            env["IDAUDIT_CACHE"] = str(cache)
        argv = [sys.executable, "-m", "idaudit", *m.argv]
        commit = _git_commit()  # at the start: the code that runs
        load_start = os.getloadavg()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        with open(Path(tmp) / "log", "w") as log:
            rc = subprocess.run(argv, cwd=work, env=env, stdout=log,
                                stderr=subprocess.STDOUT).returncode
        wall = time.monotonic() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        load_end = os.getloadavg()
        tail = (Path(tmp) / "log").read_text(errors="replace")[-2000:]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "command": "idaudit " + " ".join(m.command),
        "ran": "idaudit " + " ".join(m.argv),
        "variant": m.is_variant,
        "note": m.note,
        "empty_cache": m.empty_cache,
        "returncode": rc,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "user_s": round(after.ru_utime - before.ru_utime, 1),
        "sys_s": round(after.ru_stime - before.ru_stime, 1),
        "loadavg_start": [round(x, 2) for x in load_start],
        "loadavg_end": [round(x, 2) for x in load_end],
        "cores": os.cpu_count(),
        "commit": commit,
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "torch": _torch_version(),
        "mujoco_gl": os.environ.get("MUJOCO_GL", ""),
        "log_tail": tail if rc else "",
    }


@contextlib.contextmanager
def _locked(path: Path):
    """Hold an exclusive lock for ``path`` (read-modify-write of the record); the lock file
    lies in the temporary directory, not in the repository."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = Path(tempfile.gettempdir()) / f"idaudit_doc_times_{zlib.crc32(str(path).encode()):08x}.lock"
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def load(path: Path = RECORD) -> dict[str, dict]:
    """The recorded measurements.

    Args:
        path: the record file.

    Returns:
        ``{key: record}``; empty when there is no file.
    """
    if not path.exists():
        return {}
    return json.loads(path.read_text())


def record(key: str, entry: dict[str, object], path: Path = RECORD) -> None:
    """Write one measurement into the record, atomically (temporary file + rename).

    Args:
        key: the measurement's key.
        entry: what ``measure`` returned.
        path: the record file.
    """
    with _locked(path):
        data = load(path)
        data[key] = entry
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(dict(sorted(data.items())), fh, indent=1, ensure_ascii=False)
                fh.write("\n")
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


def main(argv: list[str] | None = None) -> int:
    """The command line.

    Args:
        argv: the arguments (None: ``sys.argv[1:]``).

    Returns:
        The exit status: 0, or 1 when a measurement failed or a claim disagrees.
    """
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", choices=sorted(BY_KEY), default=[],
                    help="run this measurement and record it (repeatable)")
    ap.add_argument("--check", action="store_true", help="check the docs against the record")
    ap.add_argument("--list", action="store_true",
                    help="list the measurements and each claim as the record writes it")
    args = ap.parse_args(argv)
    status = 0
    if args.list:
        for m in MEASUREMENTS:
            ran = f"  (runs: idaudit {' '.join(m.argv)})" if m.is_variant else ""
            print(f"{m.key}: idaudit {' '.join(m.command)}{ran}")
        data = load()
        for c in CLAIMS:
            said = render(c, data) if c.key in data else c.phrase + "  (not measured)"
            print(f"{c.path}: {said}")
    for key in args.only:
        entry = measure(BY_KEY[key])
        record(key, entry)
        print(json.dumps({key: {k: v for k, v in entry.items() if k != "log_tail"}}))
        if entry["returncode"]:
            print(entry["log_tail"], file=sys.stderr)
            status = 1
    if args.check:
        failures, notes = check()
        for line in notes:
            print(f"note: {line}")
        for line in failures:
            print(f"FAIL: {line}", file=sys.stderr)
        if failures:
            status = 1
        else:
            print(f"ok: {len(CLAIMS)} claims, {len(STALE)} stale phrases, the card's time "
                  f"only in {CARD_HOME}")
    return status


if __name__ == "__main__":
    sys.exit(main())
