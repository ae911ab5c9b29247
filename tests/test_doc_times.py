"""scripts/doc_times.py's check: every time the docs state agrees with docs/data/doc_times.json,
and the card's line's time is stated in docs/reacher.md only. Nothing here runs a measurement."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("doc_times", ROOT / "scripts" / "doc_times.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["doc_times"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


doc_times = _script()


def test_the_docs_agree_with_the_measurements():
    failures, _ = doc_times.check()
    assert not failures, "\n".join(failures)


def test_every_measurement_is_recorded_with_its_conditions():
    data = doc_times.load()
    for m in doc_times.MEASUREMENTS:
        rec = data[m.key]
        assert rec["command"] == "idaudit " + " ".join(m.command)
        assert rec["variant"] == m.is_variant
        for name in ("wall_s", "cpu_s", "loadavg_start", "loadavg_end", "commit", "date",
                     "torch", "cores"):
            assert name in rec, (m.key, name)
        assert rec["cpu_s"] > 0 and rec["wall_s"] > 0


def _copy(tmp_path: Path) -> Path:
    """The files the check reads, copied into a scratch tree."""
    for path in {c.path for c in doc_times.CLAIMS} | {p for p, _ in doc_times.STALE}:
        if (ROOT / path).exists():
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / path, tmp_path / path)
    for sub in ("docs", "src/idaudit/cli"):
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
    for f in (ROOT / "docs").glob("*.md"):
        shutil.copy(f, tmp_path / "docs" / f.name)
    for f in (ROOT / "src" / "idaudit" / "cli").glob("*.py"):
        shutil.copy(f, tmp_path / "src" / "idaudit" / "cli" / f.name)
    (tmp_path / "docs" / "data").mkdir(exist_ok=True)
    shutil.copy(doc_times.RECORD, tmp_path / "docs" / "data" / "doc_times.json")
    return tmp_path


def test_a_figure_off_by_more_than_its_rounding_fails(tmp_path):
    root = _copy(tmp_path)
    record = root / "docs" / "data" / "doc_times.json"
    data = json.loads(record.read_text())
    data["card"]["cpu_s"] += 600  # ten CPU-minutes more than docs/reacher.md says
    record.write_text(json.dumps(data))
    failures, _ = doc_times.check(root)
    assert any("docs/reacher.md" in f and "cpu" in f for f in failures), failures


def test_the_card_s_time_elsewhere_fails(tmp_path):
    root = _copy(tmp_path)
    page = root / "docs" / "page.md"
    page.write_text(page.read_text() + "\nThe card's line takes 9 minutes here.\n")
    failures, _ = doc_times.check(root)
    assert any("docs/page.md" in f and "card" in f for f in failures), failures


def test_a_stale_phrase_fails_in_every_file(tmp_path):
    root = _copy(tmp_path)
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n# ≈ 9 min of work\n")
    readme = root / "README.md"
    readme.write_text(readme.read_text() + "\nabout a minute and a half\n")
    failures, _ = doc_times.check(root)
    assert any(f.startswith("pyproject.toml") for f in failures), failures
    assert any(f.startswith("README.md") and "minute and a half" in f for f in failures)


def test_a_phrase_parses_its_numbers():
    rx = doc_times._pattern("took {wall} min wall and {cpu} CPU-min")
    hit = rx.search("the line from an empty cache took 21.5 min wall and  36.0\nCPU-min.")
    assert hit is None  # whitespace is flattened in the text, not here
    hit = rx.search(doc_times._flat("took 21.5 min wall and  36.0\nCPU-min."))
    assert hit and float(hit["wall"]) == 21.5 and float(hit["cpu"]) == 36.0
