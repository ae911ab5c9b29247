"""Where a sweep's results live: a directory on this machine or any place fsspec reaches
(``s3://bucket/prefix``, ``gs://``, ``memory://``, ``file://``), behind one small interface.

:func:`open_store` is the one place that tells a local directory from a URI. Every key is a
``/``-separated path relative to the store's root (``runs/ID.json``). Writes are whole or not
at all: on this machine a temporary file renamed into place (:mod:`idaudit.core.atomic`), in
an object store one PUT (or a multipart upload, visible only once complete). Credentials and
endpoints are fsspec's business (for S3: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``, ``AWS_ENDPOINT_URL``, ``AWS_DEFAULT_REGION``, or fsspec's config).
fsspec is imported only when a URI is opened.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from idaudit.core.errors import IdauditError, first_line

__all__ = ["Store", "is_uri", "open_store"]

_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")
#: the extra that installs a protocol's implementation, where idaudit declares one
_EXTRAS = {"s3": "s3", "s3a": "s3"}


def is_uri(text: str | Path) -> bool:
    """Whether ``text`` is a URI (``PROTOCOL://...``) rather than a path on this machine.

    Args:
        text: what the user gave (a ``Path`` is never a URI: it lost its ``//``).

    Returns:
        True for ``s3://b/x``, ``file:///x``, ``memory://x``; False for ``out``, ``/tmp/o``.
    """
    return isinstance(text, str) and _URI.match(text) is not None


class Store:
    """A sweep's results: a local directory (``fs`` None) or a place under ``fs``."""

    def __init__(self, root: str, fs: Any = None, uri: str | None = None) -> None:
        self.root = root.rstrip("/") if fs is not None else str(Path(root))
        self.fs = fs
        self.uri = uri  # as the user gave it, for messages and for nodes to open again

    @property
    def is_local(self) -> bool:
        """Whether the store is a directory on this machine."""
        return self.fs is None

    def __str__(self) -> str:
        return self.uri or self.root

    def path(self, key: str = "") -> str:
        """The full path (local) or fsspec path (remote) of ``key``.

        Args:
            key: a ``/``-separated path under the root ("" for the root).

        Returns:
            The path the file system sees.
        """
        key = key.strip("/")
        if not key:
            return self.root
        return str(Path(self.root) / key) if self.fs is None else f"{self.root}/{key}"

    def join(self, *parts: str) -> str:
        """The key (or, for a local store, nothing more) ``parts`` joined with ``/``.

        Args:
            parts: the key's parts.

        Returns:
            The joined key.
        """
        return "/".join(p.strip("/") for p in parts if p)

    def shown(self, key: str = "") -> str:
        """``key`` as the user would write it (a local path, or the URI of it)."""
        if self.fs is None or not self.uri:
            return self.path(key)
        return f"{self.uri.rstrip('/')}/{key.strip('/')}" if key else self.uri

    def _fail(self, what: str, key: str, exc: BaseException) -> IdauditError:
        return IdauditError(f"cannot {what} {self.shown(key)} ({first_line(exc)})")

    def exists(self, key: str) -> bool:
        """Whether a file (or directory) ``key`` is in the store.

        Args:
            key: the key.

        Returns:
            True where it exists.
        """
        if self.fs is None:
            return os.path.lexists(self.path(key))
        try:
            self.fs.invalidate_cache()
            return bool(self.fs.exists(self.path(key)))
        except Exception as exc:
            raise self._fail("reach", key, exc) from None

    def read_bytes(self, key: str) -> bytes:
        """The bytes of the file ``key`` (a missing one: :class:`FileNotFoundError`).

        Args:
            key: the key.

        Returns:
            Its bytes.
        """
        if self.fs is None:
            return Path(self.path(key)).read_bytes()
        try:
            return self.fs.cat_file(self.path(key))
        except FileNotFoundError:
            raise
        except Exception as exc:
            raise self._fail("read", key, exc) from None

    def read_text(self, key: str) -> str:
        """The UTF-8 text of the file ``key``.

        Args:
            key: the key.

        Returns:
            Its text.
        """
        return self.read_bytes(key).decode("utf-8")

    def write_bytes(self, key: str, data: bytes) -> None:
        """Write ``data`` as ``key``, whole or not at all (parents made as needed).

        Args:
            key: the key.
            data: the bytes.
        """
        if self.fs is None:
            from idaudit.core.atomic import atomic_write

            atomic_write(self.path(key), lambda tmp: Path(tmp).write_bytes(data))
            return
        try:
            self.fs.pipe_file(self.path(key), data)
        except Exception as exc:
            raise self._fail("write", key, exc) from None

    def write_text(self, key: str, text: str) -> None:
        """Write ``text`` (UTF-8) as ``key``, whole or not at all.

        Args:
            key: the key.
            text: the text.
        """
        self.write_bytes(key, text.encode("utf-8"))

    def listdir(self, key: str = "") -> list[str]:
        """The names directly under the directory ``key``, sorted ([] where there is none).

        Args:
            key: the directory's key.

        Returns:
            The names (not keys) in it.
        """
        if self.fs is None:
            try:
                return sorted(os.listdir(self.path(key)))
            except (FileNotFoundError, NotADirectoryError):
                return []
        try:
            self.fs.invalidate_cache()
            entries = self.fs.ls(self.path(key), detail=False)
        except FileNotFoundError:
            return []
        except Exception as exc:
            raise self._fail("list", key, exc) from None
        return sorted({str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries} - {""})

    def remove(self, key: str) -> None:
        """Remove the file ``key`` (a missing one is no error).

        Args:
            key: the key.
        """
        if self.fs is None:
            Path(self.path(key)).unlink(missing_ok=True)
            return
        try:
            self.fs.rm_file(self.path(key))
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise self._fail("remove", key, exc) from None

    def upload(self, local: str | Path, key: str) -> None:
        """Put the local file or directory ``local`` at ``key``, file by file, each whole
        (a directory's ``meta.json``, where it has one, last: its completion mark).

        Args:
            local: the file or directory on this machine.
            key: where it goes in the store.
        """
        local = Path(local)
        files = [local] if local.is_file() else sorted(
            (p for p in local.rglob("*") if p.is_file()),
            key=lambda p: (p.relative_to(local).as_posix() == "meta.json", str(p)))
        for f in files:
            sub = "" if f == local else f.relative_to(local).as_posix()
            target = self.join(key, sub)
            if self.fs is None:
                from idaudit.core.atomic import atomic_write

                atomic_write(self.path(target), lambda tmp, f=f: shutil.copyfile(f, tmp))
                continue
            try:
                self.fs.put_file(str(f), self.path(target))
            except Exception as exc:
                raise self._fail("write", target, exc) from None

    def download(self, key: str, local: str | Path) -> Path:
        """Copy the file or directory ``key`` to ``local`` on this machine, whole or not at
        all (a temporary beside it, renamed; an existing ``local`` is replaced).

        Args:
            key: the file or directory in the store.
            local: where it goes on this machine.

        Returns:
            ``local``.
        """
        from idaudit.core.atomic import replace_path

        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{local.name}.", dir=local.parent))
        try:
            target = tmp / "x"
            src = self.path(key)
            if self.fs is None:
                if Path(src).is_dir():
                    shutil.copytree(src, target)
                else:
                    shutil.copyfile(src, target)
            else:
                try:
                    self.fs.invalidate_cache()
                    if self.fs.isdir(src):
                        for f in self.fs.find(src):
                            rel = str(f)[len(src.rstrip("/")) + 1:]
                            (target / rel).parent.mkdir(parents=True, exist_ok=True)
                            self.fs.get_file(f, str(target / rel))
                    else:
                        self.fs.get_file(src, str(target))
                except FileNotFoundError:
                    raise
                except Exception as exc:
                    raise self._fail("read", key, exc) from None
            replace_path(target, local)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return local


def open_store(where: str | Path, flag: str = "--out") -> Store:
    """The store at ``where``: a local directory, or a URI fsspec knows.

    A protocol fsspec does not know, or whose implementation is not installed, is a one-line
    :class:`IdauditError` naming what to install (``--out s3://b/x needs s3fs: pip install
    "idaudit[s3]"``).

    Args:
        where: a path on this machine, or a URI (``s3://bucket/prefix``, ``file:///dir``).
        flag: the option that gave it, for messages.

    Returns:
        The :class:`Store`.
    """
    if not is_uri(str(where)) or isinstance(where, Path):
        return Store(str(where))
    uri = str(where)
    protocol = _URI.match(uri).group(1).lower()
    try:
        import fsspec
        from fsspec.registry import known_implementations
    except ImportError:
        raise IdauditError(f"{flag} {uri} needs fsspec: pip install fsspec") from None
    known = fsspec.available_protocols()
    if protocol not in known:
        raise IdauditError(f"{flag} {uri}: unknown protocol {protocol!r} (fsspec knows "
                           f"{', '.join(sorted(p for p in known if len(p) > 1)[:12])}, …)")
    try:
        fs, path = fsspec.core.url_to_fs(uri)
    except ImportError:
        err = known_implementations.get(protocol, {}).get("err", "")
        package = (re.search(r"[Ii]nstall (?:the )?([A-Za-z0-9_.-]+)", err) or [None, None])[1]
        package = package or protocol
        extra = _EXTRAS.get(protocol)
        how = f'pip install "idaudit[{extra}]"' if extra else f"pip install {package}"
        raise IdauditError(f"{flag} {uri} needs {package}: {how}") from None
    except Exception as exc:
        raise IdauditError(f"{flag} {uri}: {first_line(exc)}") from None
    if type(fs).__name__ == "LocalFileSystem":  # file:// is a directory on this machine
        return Store(path)
    if not str(path).strip("/"):
        raise IdauditError(f"{flag} {uri}: give a bucket (and a prefix), e.g. "
                           f"{protocol}://bucket/sweep")
    return Store(str(path), fs, uri)
