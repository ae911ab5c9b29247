"""What a user of the package expects beside the code: the license the metadata declares,
how to cite it, a changelog, type information, an API reference that lists the public names,
and a built wheel that installs and runs on its own.

The first tests read files (milliseconds). The last, marked ``package`` (skipped by the
default run; CI's packaging stage runs ``pytest -n 0 -m package``), installs the built wheel
— not the checkout, not editable — into a fresh venv with the pinned CPU torch and runs the
demo there, shortened to 1 000 training steps (its held-out R² ≈ 0.977 still passes its own
gate, 0.95; the full 6 000-step demo is README set-up command 1's job). The wheel is
``$IDAUDIT_WHEEL`` where CI built it already, else built here with ``python -m build``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "idaudit"  # this checkout's files, whichever idaudit is installed
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
__version__ = re.search(r'^__version__ = "([^"]+)"',
                        (PACKAGE / "core" / "version.py").read_text(), re.M).group(1)
sys.path.insert(0, str(ROOT / "scripts"))
from public_stub import public_table  # noqa: E402

PUBLIC = sorted(public_table((PACKAGE / "__init__.py").read_text()))  # idaudit.__all__


def test_license_file_is_the_declared_mit_license():
    assert PYPROJECT["project"]["license"] == "MIT"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert "Permission is hereby granted, free of charge" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS"' in text


def test_citation_cites_this_software_and_the_paper():
    yaml = pytest.importorskip("yaml")
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0"
    assert cff["type"] == "software" and cff["license"] == "MIT"
    assert cff["version"] == __version__  # kept with the package's version
    for key in ("message", "title", "authors"):  # the schema's required keys
        assert cff[key]
    paper = cff["preferred-citation"]
    assert paper["title"] == "When Does LeJEPA Learn a World Model?"
    assert paper["year"] == 2026
    assert [(a["given-names"], a["family-names"]) for a in paper["authors"]] == [
        ("David", "Klindt"), ("Yann", "LeCun"), ("Randall", "Balestriero")]


def test_changelog_has_the_declared_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n")
    assert "## [Unreleased]" in text
    assert re.search(rf"^## \[{re.escape(__version__)}\]", text, re.M)


def test_package_is_typed():
    assert (PACKAGE / "py.typed").is_file()
    assert PYPROJECT["tool"]["setuptools"]["package-data"]["idaudit"] == ["py.typed", "*.pyi"]


def test_api_page_lists_every_public_name():
    """docs/api.md is the one table's (scripts/api_page.py --check), and names each public
    name where it is defined."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "api_page.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    page = (ROOT / "docs" / "api.md").read_text()
    headings = set(re.findall(r'heading: "idaudit\.(\w+)"', page))
    assert headings == set(PUBLIC) - {"__version__"}
    mkdocs = (ROOT / "mkdocs.yml").read_text()
    assert "mkdocstrings" in mkdocs and "docs_dir: docs" in mkdocs
    docs_extra = PYPROJECT["project"]["optional-dependencies"]["docs"]
    assert any(d.startswith("mkdocstrings[python]") for d in docs_extra)
    assert not any("mkdocs" in d for d in PYPROJECT["project"]["optional-dependencies"]["dev"])


def _wheel(tmp_path: Path) -> Path:
    given = os.environ.get("IDAUDIT_WHEEL")
    if given:
        return Path(given)
    pytest.importorskip("build", reason="python -m build needs the 'build' package")
    subprocess.run([sys.executable, "-m", "build", "--wheel", "-o", str(tmp_path / "dist"),
                    str(ROOT)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("idaudit-*.whl")
    return wheel


@pytest.mark.package
def test_built_wheel_installs_and_runs_the_demo(tmp_path):
    wheel = _wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    for member in ("idaudit/py.typed", "idaudit/__init__.pyi",
                   f"idaudit-{__version__}.dist-info/licenses/LICENSE"):
        assert member in names, f"{wheel.name} lacks {member}"
    assert not any(n.startswith(("tests/", "scripts/")) for n in names)

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    # the pinned CPU torch beside the wheel (unpinned, pip would pick a multi-GB CUDA build)
    subprocess.run([str(bin_dir / "pip"), "install", "-q", "torch==2.13.0", str(wheel)],
                   check=True)
    work = tmp_path / "work"  # outside the checkout: nothing of src/ on the import path
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(args, cwd=work, env=env, capture_output=True, text=True)

    where = run(str(bin_dir / "python"), "-c",
                "import idaudit, json; print(json.dumps([idaudit.__file__, idaudit.__version__]))")
    assert where.returncode == 0, where.stderr
    file, version = json.loads(where.stdout)
    assert version == __version__
    assert str(env_dir) in file and "site-packages" in file  # the wheel's copy, not src/

    shown = run(str(bin_dir / "idaudit"), "--version")
    assert shown.returncode == 0 and __version__ in shown.stdout, shown.stdout + shown.stderr

    demo = run(str(bin_dir / "idaudit"), "demo", "--steps", "1000", "--out", "demo-out")
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    report = json.loads((work / "demo-out" / "audit.json").read_text())
    assert report["verdict"] == "pass"
    assert (work / "demo-out" / "plan.json").is_file()
