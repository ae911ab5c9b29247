"""File I/O: atomic writes (a temporary file beside the target, then a rename), output checks
made before long work, JSON/TOML helpers and safetensors metadata."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import IdauditError

MAX_TEXT_INPUT = 1 << 20  # gate and suite files larger than 1 MiB are refused
CHECKPOINT_FORMAT = "idaudit-checkpoint"  # safetensors metadata "format" of a checkpoint
PAIRS_FORMAT = "idaudit-world"  # … of a pairs file written by `idaudit world`


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_temporaries(path: Path) -> None:
    """Remove ``.NAME.PID.*.tmp`` files a killed writer of ``path`` left behind (only those
    whose process is gone, so a concurrent writer is never disturbed)."""
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        parts = tmp.name[len(path.name) + 2:].split(".")
        if parts and parts[0].isdigit() and not _alive(int(parts[0])):
            try:
                tmp.unlink()
            except OSError:
                pass


def atomic_write(path: str | Path, write: Callable[[str], None]) -> Path:
    """Call ``write(tmp_path)`` then rename onto ``path``; nothing half-written is left.

    The file gets the user's usual mode (0666 minus the umask), and temporaries that a killed
    earlier writer left beside ``path`` are removed first.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        clean_stale_temporaries(path)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp",
                                   dir=path.parent)
    except OSError as exc:  # a place that became unwritable after the check
        raise IdauditError(f"cannot write {path} ({exc.strerror or exc})") from None
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _can_create_in(directory: Path) -> bool:
    """Whether a file can really be created in ``directory`` (os.access says yes to root on a
    read-only mount or in /proc): create and remove a probe."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".idaudit-probe.", dir=directory)
    except OSError:
        return False
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass
    return True


def check_writable(path: str | Path | None, flag: str, *, directory: bool = False,
                   remove_stale: bool = False) -> Path | None:
    """Make sure ``path`` can be written before any long work starts (one-line error naming
    ``flag`` otherwise). ``directory``: the path is an output folder. ``remove_stale``: delete
    an existing file there, so a run that ends in an error leaves no report of an earlier
    run behind."""
    if path is None:
        return None
    if str(path).strip() == "" or (not directory and str(path).strip() == "."):
        raise IdauditError(f"{flag}: the path is empty (give a file name)")
    path = Path(path)
    if directory:
        if path.exists() and not path.is_dir():
            raise IdauditError(f"{flag} {path}: exists and is not a directory")
        target_dir = path
    else:
        if path.is_dir():
            raise IdauditError(f"{flag} {path}: is a directory, not a file")
        if path.exists() and not path.is_file():
            raise IdauditError(f"{flag} {path}: is not a regular file")
        target_dir = path.parent
    for parent in [target_dir, *target_dir.parents]:
        if parent.exists():
            if not parent.is_dir():
                raise IdauditError(f"{flag} {path}: {parent} is a file, not a directory")
            if not _can_create_in(parent):
                raise IdauditError(f"{flag} {path}: {parent} is not writable")
            break
    if remove_stale and not directory and path.is_file():
        try:
            path.unlink()
        except OSError as exc:
            raise IdauditError(f"{flag} {path}: cannot replace it ({exc.strerror})") from None
    return path


def jsonable(obj: Any) -> Any:
    """Replace NaN/Inf with None and tensors/numpy scalars with Python numbers."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):
        return jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json(path: str | Path, data: Any) -> Path:
    text = json.dumps(jsonable(data), indent=2, sort_keys=False, allow_nan=False) + "\n"

    def write(tmp: str) -> None:
        Path(tmp).write_text(text)

    return atomic_write(path, write)


def load_toml(path: str | Path, kind: str) -> dict[str, Any]:
    """Parse a TOML file; a missing or malformed file is a one-line input error naming ``kind``."""
    import tomllib

    path = Path(path)
    if not path.exists():
        raise IdauditError(f"{kind} file not found: {path}")
    if not path.is_file():
        raise IdauditError(f"{kind} file {path} is not a regular file")
    if path.stat().st_size > MAX_TEXT_INPUT:
        raise IdauditError(f"{kind} file {path} is larger than 1 MiB; not a {kind} file")
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise IdauditError(f"{kind} file {path} is not valid TOML ({exc})") from None


def read_metadata(path: str | Path) -> dict[str, str]:
    """The raw metadata dict of a safetensors file (errors are one-line, exit 2)."""
    from safetensors import safe_open

    path = Path(path)
    if not path.exists():
        raise IdauditError(f"not found: {path}")
    if path.is_dir():
        raise IdauditError(f"path is a directory: {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            return dict(f.metadata() or {})
    except Exception as exc:  # safetensors raises several types for corrupt headers
        raise IdauditError(f"not a readable safetensors file: {path} ({first_line(exc)})") \
            from None


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().split()[0]
    except (OSError, IndexError):
        return None
    return int(text) if text.isdigit() else None


def available_memory() -> int | None:
    """Bytes this process can still allocate, or None if unknown: the smallest of the
    machine's available memory (``MemAvailable``), the cgroup's headroom (``memory.max`` −
    ``memory.current``) and the address-space limit's headroom (``ulimit -v`` − ``VmSize``)."""
    import resource

    limits = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                limits.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    cg_max, cg_cur = _read_int("/sys/fs/cgroup/memory.max"), _read_int(
        "/sys/fs/cgroup/memory.current")
    if cg_max is not None and cg_cur is not None:
        limits.append(max(cg_max - cg_cur, 0))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        used = 0
        try:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmSize:"):
                    used = int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        limits.append(max(soft - used, 0))
    return min(limits) if limits else None


def check_fits_in_memory(nbytes: int, what: str) -> None:
    """Refuse (exit 2, before reading) data that would not fit in the memory left."""
    free = available_memory()
    if free is not None and nbytes > free:
        raise IdauditError(f"{what} needs {nbytes / 2**30:.1f} GiB of memory to read, but only "
                           f"{free / 2**30:.1f} GiB is available")
