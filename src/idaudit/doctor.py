"""Environment checks: Python, the numeric stack, MuJoCo/dm_control and a working headless GL.

``run_checks()`` returns one dict per check, ``{"name", "ok", "detail", "fix"}``; ``fix`` is
``None`` when there is nothing to do. Optional pieces (CUDA, numba) are ``ok`` either way and
say so in ``detail``. The GL check renders one 64×64 Reacher frame in a *subprocess* per
backend (``MUJOCO_GL`` is read once per process by dm_control, and a broken GL library can
crash or hang the process that loads it), so this module imports no GL itself.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from typing import Any

from idaudit.worlds.reacher.render import (  # no torch: the doctor runs without it
    DM_CONTROL_VERSION,
    GL_BACKENDS,
    GL_TIMEOUT_S,
    INSTALL_HINT,
    MUJOCO_VERSION,
    last_line,
    probe_backend,
)

__all__ = ["GL_BACKENDS", "INSTALL_HINT", "probe_backend", "run_checks"]

MIN_PYTHON = (3, 11)  # pyproject.toml's requires-python: the Python CI runs
MIN_TORCH = "2.13"  # pyproject.toml's floor: the oldest torch CI runs


def _check(name: str, ok: bool, detail: str, fix: str | None = None) -> dict[str, Any]:
    return {"name": name, "ok": ok, "detail": detail, "fix": fix}


def _import(module: str) -> tuple[Any | None, str]:
    """Import ``module``; return (module or None, version or the error text)."""
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # ImportError, but broken installs raise all sorts of things
        return None, f"{type(exc).__name__}: {str(exc).strip()[:160]}"
    version = getattr(mod, "__version__", None)
    if version is None:
        try:
            from importlib.metadata import version as dist_version

            version = dist_version(module)
        except Exception:
            version = "unknown version"
    return mod, str(version)


def _import_without_gl(modules: tuple[str, ...]) -> dict[str, tuple[bool, str]]:
    """Import each module in a subprocess without ``MUJOCO_GL``: {name: (ok, version or error)};
    a module that is not installed at all: (False, "MISSING: No module named …").

    ``import mujoco`` loads the GL library named by ``MUJOCO_GL`` (and fails if it is missing),
    so the install is checked here apart from GL, which :func:`probe_backend` checks.
    """
    code = (
        "import importlib, importlib.metadata as md, sys\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        try:\n"
        "            mod = importlib.import_module(name)\n"
        "        except ModuleNotFoundError as exc:\n"
        "            if exc.name != name:\n"
        "                raise\n"
        "            print(name, 'MISSING', f'No module named {name!r}', flush=True)\n"
        "            continue\n"
        "        v = getattr(mod, '__version__', None) or md.version(name)\n"
        "        print(name, 'OK', v, flush=True)\n"
        "    except Exception as exc:\n"
        "        msg = ' '.join(f'{type(exc).__name__}: {exc}'.split())[:160]\n"
        "        print(name, 'ERR', msg, flush=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    out = {name: (False, "not checked") for name in modules}
    try:
        proc = subprocess.run([sys.executable, "-c", code, *modules], env=env,
                              capture_output=True, text=True, timeout=GL_TIMEOUT_S)
    except (subprocess.TimeoutExpired, OSError) as exc:
        return {name: (False, f"import check failed: {exc}") for name in modules}
    for line in proc.stdout.splitlines():
        name, status, rest = (line.split(" ", 2) + ["", ""])[:3]
        if name in out:
            out[name] = (status == "OK", f"MISSING: {rest}" if status == "MISSING" else rest)
    for name, (ok, info) in out.items():
        if not ok and info == "not checked":
            out[name] = (False, f"exit code {proc.returncode}: {last_line(proc.stderr)}")
    return out


def _check_gl() -> dict[str, Any]:
    """Which headless GL backend renders the Reacher (MUJOCO_GL from the environment if set)."""
    env_gl = os.environ.get("MUJOCO_GL")
    if env_gl:
        ok, info = probe_backend(env_gl)
        if ok:
            return _check("gl_backend", True, f"MUJOCO_GL={env_gl} is set and used; it works ({info})")
        others = [b for b in GL_BACKENDS if b != env_gl and probe_backend(b)[0]]
        fix = (f"unset MUJOCO_GL or export MUJOCO_GL={others[0]} (which works)" if others
               else INSTALL_HINT)
        return _check("gl_backend", False,
                      f"MUJOCO_GL={env_gl} is set and used, but rendering fails: {info}", fix)
    failures = []
    for backend in GL_BACKENDS:
        ok, info = probe_backend(backend)
        if ok:
            detail = f"MUJOCO_GL={backend} works ({info})"
            fix = None
            if failures:
                detail += "; " + "; ".join(failures)
                if backend != GL_BACKENDS[0]:  # idaudit tries GL_BACKENDS[0] when MUJOCO_GL is unset
                    fix = f"export MUJOCO_GL={backend}"
            return _check("gl_backend", True, detail, fix)
        failures.append(f"{backend} fails: {info}")
    return _check("gl_backend", False, "no headless GL backend works: " + "; ".join(failures),
                  INSTALL_HINT)


def _check_cuda(torch: Any) -> dict[str, Any]:
    """What CUDA this machine has, in ``detail``; ``ok`` either way, CUDA being optional
    (without it training runs on the CPU). ``torch``: the module, or None if not importable."""
    if torch is None:
        return _check("cuda", True, "CUDA not checked: torch is not importable")
    try:
        available = bool(torch.cuda.is_available())
        names = ([torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                 if available else [])
    except Exception as exc:  # a broken driver or runtime raises all sorts of things
        return _check("cuda", True, "CUDA not usable (" + " ".join(
            f"{type(exc).__name__}: {exc}".split())[:160] + "); training runs on the CPU")
    if not available:
        built = getattr(torch.version, "cuda", None)
        why = f"torch built for CUDA {built}, no GPU found" if built else "torch built without CUDA"
        return _check("cuda", True, f"CUDA not available ({why}); training runs on the CPU")
    return _check("cuda", True, f"CUDA available: {len(names)} GPU(s) ({', '.join(names)})")


VISION_FIX = ("install torch and torchvision of one build: pip install torch==2.14.1 "
              "torchvision==0.29.1 (the pair CI tests; the vision extra)")


#: the optional packages other projects' encoders need: (module, what for, idaudit's extra)
OTHER_PROJECTS = (("torchvision", "under timm", "vision"),
                  ("timm", "timm:NAME architectures", "vision"),
                  ("transformers", "Hugging Face directories", "vision"),
                  ("hydra", "LeWM / stable-worldmodel directories (hydra configs)", "hydra"),
                  ("lightning", "idaudit.lightning.IdentifiabilityMonitor", "lightning"),
                  ("h5py", "a recorded world in an HDF5 file (--data)", "hdf5"))


def _check_vision() -> list[dict[str, Any]]:
    """The optional stack for other projects' encoders (timm, transformers, hydra), Lightning
    for the training monitor, and the
    torchvision under timm, which must be built for this very torch: a CPU torch beside a
    CUDA torchvision fails to import ("operator torchvision::nms does not exist")."""
    import importlib.util

    checks = []
    for name, what, extra in OTHER_PROJECTS:
        if importlib.util.find_spec(name) is None:
            checks.append(_check(name, True, f"{name} not installed (optional: {what}; "
                                             f'pip install "idaudit[{extra}]")'))
            continue
        mod, info = _import(name)
        if mod is None:
            fix = VISION_FIX if extra == "vision" else \
                f'pip install --force-reinstall "idaudit[{extra}]"'
            checks.append(_check(name, False, f"{name} installed but not importable ({info})",
                                 fix))
        else:
            checks.append(_check(name, True, f"{name} {info}"))
    return checks


def _check_cage() -> dict[str, Any]:
    """Whether programs from files (TorchScript, .pt2, Hugging Face, timm, LeWM) run in the
    cage here; ``ok`` either way (without it they are refused unless --trust-code)."""
    from idaudit.loading.confine import landlock_abi, why_no_cage

    why = why_no_cage()
    if why is None:
        return _check("cage", True, f"Landlock ABI {landlock_abi()} + seccomp allow list + "
                      "no capabilities + rlimits: programs from files run confined")
    return _check("cage", True, f"not available: {why}; programs from files are refused "
                  "unless --trust-code runs them in this process",
                  None if "turned off" in why else "Linux 6.2+ with Landlock enabled, and "
                  "pip install py-landlock")


def _check_plugins() -> list[dict[str, Any]]:
    """One row per plugin (an ``idaudit.worlds``, ``idaudit.objectives``, ``idaudit.metrics``
    or ``idaudit.formats`` entry point of another package): loaded and checked as the
    registry would, ``ok`` when it is what its group holds."""
    from idaudit.core.errors import IdauditError, one_line
    from idaudit.core.registered import BY_GROUP

    checks = []
    for group, registry in BY_GROUP.items():
        try:
            found = registry.plugins()
        except IdauditError as exc:
            checks.append(_check(f"{registry.kind} plugins", False, one_line(str(exc)),
                                 "uninstall or rename one of them"))
            continue
        for name, plugin in found.items():
            try:
                entry = registry.get(name)
            except IdauditError as exc:
                checks.append(_check(f"{registry.kind} {name}", False, one_line(str(exc)),
                                     f"fix or uninstall {plugin.dist}"))
            else:  # a file format says what reading a file does (its trust row)
                trust = f"; reading a file: {one_line(entry.trust[0], 200)}" \
                    if group == "idaudit.formats" else ""
                checks.append(_check(f"{registry.kind} {name}", True,
                                     f"plugin from {plugin.origin()}{trust}"))
    return checks


def run_checks() -> list[dict[str, Any]]:
    """Run every check; each result is ``{"name", "ok", "detail", "fix"}``."""
    from idaudit.core.version import __version__

    checks: list[dict[str, Any]] = [_check("idaudit", True, f"idaudit {__version__} "
                                           f"({os.path.dirname(os.path.abspath(__file__))})")]
    py = sys.version_info
    py_ok = py[:2] >= MIN_PYTHON
    checks.append(_check("python", py_ok, f"Python {py.major}.{py.minor}.{py.micro}",
                         None if py_ok else f"idaudit needs Python >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]}"))

    torch, info = _import("torch")
    checks.append(_check("torch", torch is not None, f"torch {info}" if torch else info,
                         None if torch else f'pip install "torch>={MIN_TORCH}"'))
    checks.append(_check_cuda(torch))

    numba, info = _import("numba")
    checks.append(_check("numba", True,
                         f"numba {info}" if numba else f"numba missing (optional speed-up; {info})",
                         None if numba else 'pip install "numba>=0.59" (optional)'))

    for name, module, req in (("scikit-learn", "sklearn", "scikit-learn>=1.3"),
                              ("scipy", "scipy", "scipy>=1.10"),
                              ("safetensors", "safetensors", "safetensors>=0.4")):
        mod, info = _import(module)
        checks.append(_check(name, mod is not None, f"{name} {info}" if mod else info,
                             None if mod else f'pip install "{req}"'))

    checks += _check_vision()
    checks.append(_check_cage())
    checks += _check_plugins()

    checks += _check_reacher()
    return checks


def _check_reacher() -> list[dict[str, Any]]:
    """MuJoCo, dm_control and a headless GL backend: the optional ``reacher`` extra. Not
    installed, each is ``ok`` and says so, as the other optional extras; installed but broken
    (or GL not rendering), not ok, with the fix."""
    checks: list[dict[str, Any]] = []
    have_reacher = True
    not_installed = []
    imported = _import_without_gl(("mujoco", "dm_control"))
    for name, want in (("mujoco", MUJOCO_VERSION), ("dm_control", DM_CONTROL_VERSION)):
        ok, info = imported[name]
        if info.startswith("MISSING: "):
            have_reacher = False
            not_installed.append(name)
            checks.append(_check(name, True, f"{name} not installed (optional: the Reacher "
                                             f'world; pip install "idaudit[reacher]")'))
        elif not ok:
            have_reacher = False
            checks.append(_check(name, False, f"{name} not importable ({info})", INSTALL_HINT))
        elif info != want:
            checks.append(_check(name, True, f"{name} {info}; warning: the Reacher world is tested "
                                             f"with mujoco {MUJOCO_VERSION} and dm_control "
                                             f"{DM_CONTROL_VERSION}", INSTALL_HINT))
        else:
            checks.append(_check(name, True, f"{name} {info}"))

    if have_reacher:
        checks.append(_check_gl())
    elif len(not_installed) == 2:  # the extra is not installed: nothing is broken
        checks.append(_check("gl_backend", True, "not checked: the optional reacher extra is "
                                                 "not installed (mujoco, dm_control)"))
    else:
        checks.append(_check("gl_backend", False, "not checked: mujoco/dm_control missing",
                             INSTALL_HINT))
    return checks
