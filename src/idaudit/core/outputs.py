"""The checks every command makes of its outputs before any long work: ``check_outputs``
(``refuse_clashes``: an output that is an input or another output; ``check_writable``: a probe
that does what the write will do)."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path

from idaudit.core.atomic import _temp_prefix
from idaudit.core.errors import IdauditError

__all__ = ["check_outputs", "refuse_clashes"]


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
