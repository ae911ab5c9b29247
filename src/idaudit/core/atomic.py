"""Atomic writes (a temporary file beside the target, then a rename) and the temporaries they
leave: ``atomic_write``, ``make_temp_dir``, ``clean_stale_temporaries`` (what killed writers
left), and ``remove_tree`` for a tree a program we do not trust wrote."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from idaudit.core.errors import IdauditError, first_line, printable

__all__ = ["atomic_write", "clean_stale_temporaries", "make_temp_dir", "remove_tree",
           "replace_path"]


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


def replace_path(made: Path, dest: Path) -> Path:
    """Put ``made`` (a file or a directory, written beside ``dest``) at ``dest``, replacing
    what is there (a directory removed first: ``os.replace`` cannot replace one with a
    non-empty tree); returns ``dest``.

    Args:
        made: what was written, on the same filesystem as ``dest``.
        dest: where it goes.

    Returns:
        ``dest``.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp()); (d / "new").mkdir(); (d / "old").mkdir()
        >>> _ = (d / "old" / "x").write_text("1"); _ = (d / "new" / "y").write_text("2")
        >>> sorted(p.name for p in replace_path(d / "new", d / "old").iterdir())
        ['y']
    """
    if dest.is_dir() and not dest.is_symlink():
        shutil.rmtree(dest)
    elif dest.exists() or dest.is_symlink():
        dest.unlink()
    os.replace(made, dest)
    return dest


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
