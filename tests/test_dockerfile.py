"""docker/Dockerfile, the node image docs/sweeps.md describes for KubeRay, read against the
project: it is not built here (no container engine on the test machines), so what can be
checked without one is checked — each file it copies exists, the extras it installs are
pyproject.toml's, its Python is one pyproject admits, its torch is the README's, and MuJoCo is
told to use EGL."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "docker" / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, its arguments) per instruction, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _args() -> dict[str, str]:
    return dict(rest.split("=", 1) for word, rest in _instructions() if word == "ARG")


def test_every_file_it_copies_is_in_the_repository() -> None:
    copies = [shlex.split(rest)[:-1] for word, rest in _instructions() if word == "COPY"]
    assert copies, "the image copies idaudit's source"
    for sources in copies:
        for src in sources:
            assert (ROOT / src).exists(), src


def test_the_extras_it_installs_are_pyprojects_and_include_a_sweep_nodes() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runs = " ".join(rest for word, rest in _instructions() if word == "RUN")
    extras = re.findall(r"/opt/idaudit\[([a-z0-9_,-]+)\]", runs)
    assert len(extras) == 1, runs
    wanted = set(extras[0].split(","))
    assert wanted <= set(project["optional-dependencies"]), wanted
    assert {"reacher", "ray", "s3"} <= wanted


def test_its_python_is_one_pyproject_admits_and_its_torch_the_readmes() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = next(rest for word, rest in _instructions() if word == "FROM")
    version = re.match(r"python:(\d+\.\d+)", base)
    assert version, base
    assert SpecifierSet(project["requires-python"]).contains(version.group(1) + ".0")
    readme_torch = re.search(r"pip install (torch==[\d.]+)", (ROOT / "README.md").read_text())
    assert readme_torch and _args()["TORCH"] == readme_torch.group(1)


def test_mujoco_renders_through_egl_and_the_gl_libraries_are_installed() -> None:
    env = " ".join(rest for word, rest in _instructions() if word == "ENV")
    assert "MUJOCO_GL=egl" in env.split()
    runs = " ".join(rest for word, rest in _instructions() if word == "RUN")
    assert {"libegl1", "libgl1", "libegl-mesa0", "libgl1-mesa-dri"} <= set(runs.split())
