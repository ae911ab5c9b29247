"""File I/O: atomic writes (a temporary file beside the target, then a rename), output checks
made before long work, JSON/TOML helpers and safetensors metadata."""

from __future__ import annotations

import errno
import json
import math
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from idaudit.core.errors import IdauditError, first_line, printable

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
    except (OverflowError, OSError):  # not a pid this system can have
        return False
    return True


# ---- temporaries -------------------------------------------------------------------------
# atomic_write works in a private directory ``.STEM.PID.RANDOM.tmp`` beside the target and
# hands ``write`` the path ``that directory/NAME``: the file being written has the target's
# own name (so a name the file system refuses fails there exactly as it would in place), and
# whatever a writer puts beside its file (safetensors' ``save_file`` writes a ``.tmpXXXXXX``
# next to it and renames that) stays inside a directory whose name says which process owns
# it. A later writer removes such directories (and the ``.NAME.PID.RANDOM.tmp`` files of
# earlier versions) once that process is gone, and never touches a live writer's.

_STEM_BYTES = 200  # a longer target name is cut in its temporaries' names (NAME_MAX is 255)
_OWNED = re.compile(r"(\d+)\.[A-Za-z0-9_]+\.tmp")  # what follows ".STEM." in a temporary
_FOREIGN = re.compile(r"\.tmp[A-Za-z0-9]{6}")  # safetensors' (Rust tempfile's) temporaries
FOREIGN_TEMP_AGE = 3600.0  # seconds a .tmpXXXXXX must have been left alone before removal


def _stem(name: str) -> str:
    """The target name as it appears in its temporaries' names (cut to fit NAME_MAX)."""
    raw = os.fsencode(name)
    if len(raw) <= _STEM_BYTES:
        return name
    return os.fsdecode(raw[:_STEM_BYTES]) + "~"


def _temp_prefix(path: Path) -> str:
    return f".{_stem(path.name)}."


def _remove(entry: Path) -> None:
    try:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink()
    except OSError:
        pass


def remove_tree(path: str | Path) -> str | None:
    """Remove a directory tree that a program we do not trust wrote (a cage's private
    directory): where an entry resists, its directory's permissions (and its own, for a
    directory) are given back to the owner and the removal is tried again. Returns None when
    the tree is gone, else one line saying what is left and why.

    Args:
        path: the tree's root (a missing one is already gone).

    Returns:
        None, or the one line naming what could not be removed.

    Example:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp(); os.makedirs(f"{d}/locked/in"); os.chmod(f"{d}/locked", 0)
        >>> remove_tree(d) is None and not os.path.exists(d)
        True
    """
    import sys

    def unlock(_function: Callable, name: str, _exc: object) -> None:
        for entry in (os.path.dirname(name), name):  # the next pass can list and remove it
            try:
                if os.path.isdir(entry) and not os.path.islink(entry):
                    os.chmod(entry, stat.S_IRWXU)
            except OSError:
                pass

    handler = {"onexc" if sys.version_info >= (3, 12) else "onerror": unlock}
    for _ in range(64):  # each pass unlocks one more level of locked directories
        try:
            shutil.rmtree(path, **handler)
        except FileNotFoundError:
            return None
        if not os.path.lexists(path):
            return None
    left = [os.path.join(root, name) for root, dirs, files in os.walk(path)
            for name in dirs + files]
    return printable(f"could not remove {path} ({len(left)} entries left, e.g. "
                     f"{left[0] if left else path})")[:300]


def _open_by_some_process(path: Path) -> bool:
    """Whether any process this one can see holds ``path`` open (True when unknowable)."""
    proc = Path("/proc")
    if not (proc / "self" / "fd").is_dir():
        return True
    target = str(path.resolve())
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return True
    for pid in pids:
        try:
            fds = os.listdir(proc / pid / "fd")
        except OSError:  # gone, or not ours to see
            continue
        for fd in fds:
            try:
                if os.readlink(proc / pid / "fd" / fd) == target:
                    return True
            except OSError:
                continue
    return False


def _abandoned_safetensors_temp(entry: Path) -> bool:
    """A ``.tmpXXXXXX`` that safetensors' ``save_file`` left when its process was killed:
    a regular file, empty or starting like a safetensors file, untouched for an hour and
    open in no process."""
    try:
        st = entry.lstat()
        if not stat.S_ISREG(st.st_mode) or time.time() - st.st_mtime < FOREIGN_TEMP_AGE:
            return False
        with open(entry, "rb") as f:
            head = f.read(9)
    except OSError:
        return False
    if head and not (len(head) == 9 and head[8:9] == b"{"):
        return False
    return not _open_by_some_process(entry)


def clean_stale_temporaries(path: Path) -> None:
    """Remove the temporaries that killed writers of ``path`` left beside it: idaudit's own
    (``.NAME.PID.RANDOM.tmp``, files or directories) whose process is gone — matched by
    their exact prefix, so another target's are never taken for this one's — and the
    ``.tmpXXXXXX`` files safetensors leaves, once no process has them open and they have been
    untouched for an hour. A live writer's temporaries are never touched."""
    path = Path(path)
    prefix = _temp_prefix(path)
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        entry = path.parent / name
        if name.startswith(prefix):
            owned = _OWNED.fullmatch(name[len(prefix):])
            if owned and not _alive(int(owned.group(1))):
                _remove(entry)
        elif name.startswith(".tmp") and _FOREIGN.fullmatch(name) \
                and _abandoned_safetensors_temp(entry):
            _remove(entry)


def _reason(exc: BaseException) -> str | None:
    """What went wrong, from an OSError or a safetensors I/O error ("No space left on
    device"), or None when ``exc`` is not an I/O failure."""
    if isinstance(exc, OSError):
        return exc.strerror or first_line(exc)
    text = first_line(exc)
    if type(exc).__name__ == "SafetensorError":
        io_error = re.search(r"I/O error: (.*?)(?: \(os error \d+\))?$", text)
        if io_error:
            return io_error.group(1)
    return None


def make_temp_dir(path: Path) -> Path:
    """Create ``path``'s parents and its private temporary directory (see above), removing
    the temporaries killed writers left there first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temporaries(path)
    return Path(tempfile.mkdtemp(prefix=f"{_temp_prefix(path)}{os.getpid()}.", suffix=".tmp",
                                 dir=path.parent))


def atomic_write(path: str | Path, write: Callable[[str], None]) -> Path:
    """Call ``write(tmp_path)`` then rename onto ``path``; nothing half-written is left.

    ``tmp_path`` has ``path``'s name, in a private temporary directory beside it (which also
    takes in whatever ``write`` puts next to its file). The file gets the user's usual mode
    (0666 minus the umask), and temporaries that killed earlier writers left beside ``path``
    are removed first. A failure to write (a full disk, a place that became unwritable) is a
    one-line IdauditError naming ``path``.
    """
    path = Path(path)
    try:
        tmp_dir = make_temp_dir(path)
    except OSError as exc:  # a place that became unwritable after the check
        raise IdauditError(f"cannot write {path} ({exc.strerror or exc})") from None
    tmp = tmp_dir / path.name
    try:
        write(str(tmp))
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except Exception as exc:
        reason = _reason(exc)
        if reason is None:
            raise
        raise IdauditError(f"cannot write {path} ({reason})") from None
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return path


# ---- checks made before any long work -------------------------------------------------------


def _refuse(flag: str, path: Path, what: str, exc: OSError | None = None) -> IdauditError:
    detail = f" ({exc.strerror})" if exc is not None and exc.strerror else ""
    return IdauditError(f"{flag} {path}: {what}{detail}")


def _stat(path: Path, flag: str) -> os.stat_result | None:
    """``os.stat(path)``, None if nothing is there; an error naming what is wrong with the
    path (a file where a directory should be, a name too long) otherwise."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        for parent in reversed(path.parents):
            if parent.exists() and not parent.is_dir():
                raise IdauditError(f"{flag} {path}: {parent} is a file, not a directory") \
                    from None
        raise IdauditError(f"{flag} {path}: a part of the path is not a directory") from None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise _too_long(flag, path, exc) from None
        raise _refuse(flag, path, "cannot be checked", exc) from None


def _too_long(flag: str, path: Path, exc: OSError) -> IdauditError:
    longest = max(path.parts, key=lambda part: len(os.fsencode(part)))
    size = len(os.fsencode(longest))
    name_max = _pathconf(_first_existing(path.parent), "PC_NAME_MAX", 255)
    if size > name_max:
        return _refuse(flag, path, f"a name in it is {size} bytes long, more than the file "
                       f"system allows ({name_max})", exc)
    return _refuse(flag, path, f"the path is {len(os.fsencode(str(path)))} bytes long, more "
                   "than the system allows", exc)


def _first_existing(directory: Path) -> Path:
    for parent in [directory, *directory.parents]:
        try:
            if parent.exists():
                return parent
        except OSError:
            continue
    return Path(".")


def _creation_error(flag: str, path: Path, directory: Path, exc: OSError) -> IdauditError:
    if exc.errno == errno.ENAMETOOLONG:
        return _too_long(flag, path, exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return _refuse(flag, path, f"no room left in {directory}", exc)
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        return _refuse(flag, path, f"{directory} is a file, not a directory")
    return _refuse(flag, path, f"{_first_existing(directory)} is not writable", exc)


def _pathconf(directory: Path, name: str, default: int) -> int:
    """The file system's limit ``name`` (PC_NAME_MAX, PC_PATH_MAX) at ``directory``."""
    try:
        return os.pathconf(directory, name)
    except (OSError, ValueError, AttributeError):  # AttributeError: no pathconf (Windows)
        return default


def _probe(path: Path, flag: str, directory: bool) -> None:
    """Do what the write will do, in a private directory ``.NAME.PID.RANDOM.tmp`` made in
    the deepest existing parent: make the missing parents' names in it, then a file of
    ``path``'s name with one byte written, and remove all of it. Refuses, naming what failed,
    where the write would fail (a read-only place, a full disk, a name or a path too long).
    Nothing outside that private directory is made or removed, so concurrent checks and
    writes of one path never undo each other's directories."""
    target_dir = path if directory else path.parent
    name = "idaudit-probe" if directory else path.name
    missing = []
    for parent in [target_dir, *target_dir.parents]:
        if os.path.lexists(parent):
            break
        missing.append(parent)
    base = parent
    if not base.is_dir():
        raise IdauditError(f"{flag} {path}: {base} is a file, not a directory")
    first = missing[-1] if missing else target_dir / name
    # the write's longest path string: TARGET_DIR/.NAME.PID.RANDOM.tmp/NAME (see atomic_write)
    longest = target_dir / f"{_temp_prefix(target_dir / name)}{os.getpid()}.xxxxxxxx.tmp" / name
    if len(os.fsencode(str(longest))) >= _pathconf(base, "PC_PATH_MAX", 4096):
        raise _too_long(flag, path, OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG)))
    try:
        sandbox = tempfile.mkdtemp(prefix=f"{_temp_prefix(first)}{os.getpid()}.", suffix=".tmp",
                                   dir=base)
    except OSError as exc:
        raise _creation_error(flag, path, base, exc) from None
    fds = [os.open(sandbox, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for parent in reversed(missing):
            os.mkdir(parent.name, dir_fd=fds[-1])
            fds.append(os.open(parent.name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=fds[-1])
        try:
            os.write(fd, b"\0")
        finally:
            os.close(fd)
    except OSError as exc:
        raise _creation_error(flag, path, base, exc) from None
    finally:
        for fd in fds:
            os.close(fd)
        shutil.rmtree(sandbox, ignore_errors=True)


def check_writable(path: str | Path | None, flag: str, *, directory: bool = False,
                   remove_stale: bool = False) -> Path | None:
    """Make sure ``path`` can be written before any long work starts (one-line error naming
    ``flag`` otherwise): the check does what the write will do, so what passes it can be
    written. ``directory``: the path is an output folder. ``remove_stale``: delete an
    existing file there, so a run that ends in an error leaves no output of an earlier run
    behind."""
    if path is None:
        return None
    _check_path_given(path, flag, directory)
    path = Path(path)
    _check_kind(path, flag, directory, _stat(path, flag))
    _probe(path, flag, directory)
    if remove_stale and not directory:
        _remove_stale(path, flag)
    return path


def _check_path_given(path: str | Path, flag: str, directory: bool) -> None:
    if str(path).strip() == "" or (not directory and str(path).strip() == "."):
        raise IdauditError(f"{flag}: the path is empty (give a file name)")


def _check_kind(path: Path, flag: str, directory: bool, st: os.stat_result | None) -> None:
    if st is None:
        return
    if directory:
        if not stat.S_ISDIR(st.st_mode):
            raise IdauditError(f"{flag} {path}: exists and is not a directory")
    elif stat.S_ISDIR(st.st_mode):
        raise IdauditError(f"{flag} {path}: is a directory, not a file")
    elif not stat.S_ISREG(st.st_mode):
        raise IdauditError(f"{flag} {path}: is not a regular file")


def _remove_stale(path: Path, flag: str) -> None:
    """Delete an earlier run's file at ``path`` (a concurrent writer may just have done so,
    or be renaming its own there: neither is an error)."""
    try:
        st = os.stat(path)
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode):
        return
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise IdauditError(f"{flag} {path}: cannot replace it ({exc.strerror})") from None


def _identity(path: str | Path) -> tuple[str, tuple[int, int] | None]:
    """(the resolved path, (st_dev, st_ino) where something is there)."""
    try:
        st = os.stat(path)
        inode = (st.st_dev, st.st_ino)
    except (OSError, ValueError):
        inode = None
    return os.path.realpath(path), inode


def refuse_clashes(outputs: Sequence[tuple[str | Path | None, str]],
                   inputs: Sequence[tuple[str | Path | None, str]] = ()) -> None:
    """Refuse (one line naming both) an output that is an input — the same path, a symbolic
    or a hard link (the same st_dev and st_ino) —, lies inside an input directory (a
    dataset's file, or a new one there), or is the same file as another output. ``outputs``
    and ``inputs`` are (path or None, what it is: the flag, "the input", "--data" …); each
    input is resolved once, so a sweep's thousands of run files cost one look each."""
    given = [(Path(p), flag) for p, flag in outputs
             if p is not None and str(p).strip() not in ("", ".")]
    known = [(Path(p), what, *_identity(p), os.path.isfile(p)) for p, what in inputs
             if p is not None and str(p).strip()]
    seen: dict[str, tuple[Path, str]] = {}
    inodes: dict[tuple[int, int], tuple[Path, str]] = {}
    for out, flag in given:
        real, inode = _identity(out)
        other = seen.get(real) or (inodes.get(inode) if inode is not None else None)
        if other is not None:
            raise IdauditError(f"{other[1]} and {flag} name the same file ({out}); give "
                               "each output its own path")
        seen[real] = (out, flag)
        if inode is not None:
            inodes[inode] = (out, flag)
        for inp, what, inp_real, inp_inode, is_file in known:
            if real == inp_real or (inode is not None and inode == inp_inode):
                raise IdauditError(f"{flag} {out}: is the same file as {what} ({inp}); an "
                                   "output never replaces an input (choose another path)")
            if not is_file and real.startswith(inp_real.rstrip(os.sep) + os.sep):
                if inode is not None:
                    raise IdauditError(f"{flag} {out}: is a file of {what} ({inp}); an output "
                                       "never replaces an input (choose another path)")
                raise IdauditError(f"{flag} {out}: lies inside {what} ({inp}); an output "
                                   "never goes into an input directory (choose another path)")


def check_outputs(outputs: Sequence[tuple[str | Path | None, str]],
                  inputs: Sequence[tuple[str | Path | None, str]] = (), *,
                  directory: bool = False, remove_stale: bool = False) -> None:
    """The check every command makes of its outputs before any work: ``outputs`` and
    ``inputs`` are (path or None, what it is — the flag, "the input", "--data"…).

    First, before anything is touched, :func:`refuse_clashes` (an output that is an input,
    lies inside an input directory or is another output); then every output is checked as
    :func:`check_writable` does, and with ``remove_stale`` an existing file at an output is
    deleted once all of them passed."""
    refuse_clashes(outputs, inputs)
    for path, flag in outputs:
        check_writable(path, flag, directory=directory)
    if remove_stale and not directory:
        for path, flag in outputs:
            if path is not None and str(path).strip() not in ("", "."):
                _remove_stale(Path(path), flag)


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


def json_text(data: Any) -> str:
    """The JSON idaudit writes: NaN and ±inf as null (:func:`jsonable`), indented, one line
    break at the end."""
    return json.dumps(jsonable(data), indent=2, sort_keys=False, allow_nan=False) + "\n"


def write_json(path: str | Path, data: Any) -> Path:
    text = json_text(data)

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
    try:
        if path.stat().st_size > MAX_TEXT_INPUT:
            raise IdauditError(f"{kind} file {path} is larger than 1 MiB; not a {kind} file")
        return tomllib.loads(path.read_text())
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise IdauditError(f"{kind} file {path} is nested too deeply to be a {kind} file") \
            from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise IdauditError(f"{kind} file {path} is not valid TOML ({first_line(exc)})") from None
    except OSError as exc:
        raise IdauditError(f"cannot read {kind} file {path} ({exc.strerror or exc})") from None


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


def physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


SMALL = 1 << 26  # 64 MiB: never worth a look at the memory left


def memory_left() -> int | None:
    """Bytes this process can still get: :func:`available_memory`, else the machine's memory
    (None when neither is known)."""
    have = available_memory()
    return physical_memory() if have is None else have


def check_memory(nbytes: float, what: str, bound: str = "about ", purpose: str = "") -> None:
    """Refuse (exit 2, before anything is allocated or read) work whose arrays would not fit in
    the memory this process can still get (:func:`available_memory`; else the machine's
    memory): one line saying what needs how many GiB, e.g. "an evaluation set of 10¹¹ pairs …
    needs about 5960.5 GiB" (``bound``: "at least " where ``nbytes`` is a lower bound, "" where
    it is exact; ``purpose`` follows "of memory", e.g. " to read")."""
    if nbytes < SMALL:
        return
    have = memory_left()
    if have is not None and nbytes > have:
        raise IdauditError(f"{what} needs {bound}{nbytes / 2**30:.1f} GiB of memory{purpose}, "
                           f"but only {have / 2**30:.1f} GiB is available")
