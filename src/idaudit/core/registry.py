"""Name → object registries: built-in entries, lazy placeholders and other packages' plugins.

A :class:`Registry` holds one kind of thing (worlds, objectives, metric groups, file formats,
encoders …). An entry is registered once, in one of three ways:

* ``REG.add(name, obj)`` or the decorator ``@REG.register(name)``: the object itself;
* ``REG.add_lazy(name, "package.module:attribute", help=…)``: a placeholder that imports the
  module on first :meth:`Registry.get` — so listing names and their help (``--help``) imports
  neither torch nor numpy;
* ``REG.add_family(prefix, "package.module:attribute", help=…)``: every name ``prefix`` +
  something (``swm:ReacherDMControl-v0``) is that one object, imported on first use (the object
  reads the rest of the name); such names are not listed (:meth:`Registry.names`), only the
  family (:meth:`Registry.families`);
* an **entry point** of the registry's ``group`` in another installed distribution (its
  ``pyproject.toml``: ``[project.entry-points."idaudit.worlds"] myworld =
  "mypkg.worlds:MY_WORLD"``): found without importing it, loaded on first use. A plugin's code
  is the user's own installed code, not data read from a file: the trust rule does not apply.

A plugin may not take a built-in name (one line names both), and a plugin that fails to load
or is not what the registry holds is one line naming its distribution — a usage error (2),
never a traceback.

Example:
    >>> reg = Registry("colour")
    >>> reg.add("red", 0xFF0000)
    >>> reg.add_lazy("pi", "math:pi", help="a number")
    >>> reg.names(), round(reg.get("pi"), 2), reg.help("pi")
    (['pi', 'red'], 3.14, 'a number')
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Generic, TypeVar

from idaudit.core.errors import UsageError, one_line

T = TypeVar("T")

@dataclass(frozen=True)
class Plugin:
    """An entry point of another distribution: its ``name``, ``target`` (``module:attribute``)
    and the distribution (``dist``, ``version``) that declares it."""

    group: str
    name: str
    target: str
    dist: str
    version: str

    def origin(self) -> str:
        return f"{self.dist} {self.version} ({self.target})"


def plugins(group: str) -> list[Plugin]:
    """The entry points of ``group`` in every installed distribution, sorted by name, read
    from their metadata without importing them.

    Args:
        group: an entry-point group, e.g. ``"idaudit.worlds"``.

    Returns:
        One :class:`Plugin` per entry point (a name two distributions declare appears twice).

    Example:
        >>> plugins("idaudit.no-such-group")
        []
    """
    found = []
    for ep in _entry_points().select(group=group):
        dist = getattr(ep, "dist", None)
        name = dist.metadata["Name"] if dist is not None else "?"
        version = dist.version if dist is not None else "?"
        found.append(Plugin(group, one_line(ep.name), one_line(ep.value), one_line(name),
                            one_line(version)))
    return sorted(found, key=lambda p: (p.name, p.dist))


@functools.cache
def _entry_points() -> metadata.EntryPoints:
    """Every installed distribution's entry points, read once per process (one scan of the
    metadata serves every group)."""
    return metadata.entry_points()


def load_target(target: str, what: str) -> Any:
    """The object ``module:attribute`` names (dots nest attributes), imported now.

    Args:
        target: ``package.module:attribute``.
        what: how an error names the entry (``"plugin world 'x' of mypkg 1.0"``).

    Returns:
        The object.

    Example:
        >>> load_target("math:pi", "a number") > 3
        True
    """
    module, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in filter(None, attr.split(".")):
            obj = getattr(obj, part)
    except Exception as exc:  # noqa: BLE001 - a plugin's import may raise anything
        raise UsageError(f"{what} ({target}) failed to load: {type(exc).__name__}: "
                         f"{one_line(str(exc))}") from None
    return obj


class Registry(Generic[T]):
    """Names → objects of one ``kind``; ``group``: the entry-point group plugins use (None:
    built-ins only); ``accept(name, obj)`` turns what a placeholder or plugin names into what
    the registry holds, raising ``TypeError`` with what is wrong."""

    def __init__(self, kind: str, group: str | None = None,
                 accept: Callable[[str, Any], T] | None = None) -> None:
        self.kind = kind
        self.group = group
        self._accept = accept
        self._items: dict[str, T] = {}
        self._lazy: dict[str, str] = {}
        self._help: dict[str, str] = {}
        self._plugins: dict[str, Plugin] | None = None
        self._order: list[str] = []  # idaudit's own names, as they were registered
        self._families: dict[str, str] = {}  # prefix → module:attribute
        self._family_loaded: dict[str, T] = {}  # prefix → its object, once imported

    # ---- registering -----------------------------------------------------------------
    def register(self, name: str, help: str = "") -> Callable[[T], T]:
        """A decorator that registers what it decorates under ``name``."""
        def deco(obj: T) -> T:
            self._claim(name, help)
            self._items[name] = obj
            return obj

        return deco

    def add(self, name: str, obj: T, help: str = "") -> None:
        """Register ``obj`` under ``name``."""
        self.register(name, help)(obj)

    def add_lazy(self, name: str, target: str, help: str = "") -> None:
        """Register ``module:attribute`` under ``name``, imported on first :meth:`get`."""
        self._claim(name, help)
        self._lazy[name] = target

    def add_family(self, prefix: str, target: str, help: str = "") -> None:
        """Register ``module:attribute`` under every name that starts with ``prefix`` (and has
        more after it), imported on first :meth:`get` of one of them."""
        if prefix in self._families:
            raise ValueError(f"{self.kind} family {prefix!r} registered twice")
        self._families[prefix] = target
        if help:
            self._help[prefix] = help

    def family(self, name: object) -> str | None:
        """The prefix of the family ``name`` belongs to (None: none)."""
        if not isinstance(name, str):
            return None
        return next((p for p in self._families if name.startswith(p) and len(name) > len(p)),
                    None)

    def families(self) -> list[str]:
        """The families' prefixes, as they were registered."""
        return list(self._families)

    def family_objects(self) -> list[T]:
        """The object of each family (imported now)."""
        return [self._family_object(p) for p in self._families]

    def _family_object(self, prefix: str) -> T:
        if prefix not in self._family_loaded:
            what = f"{self.kind} family {prefix!r}"
            self._family_loaded[prefix] = self._admit(
                prefix, load_target(self._families[prefix], what), what)
        return self._family_loaded[prefix]

    def _claim(self, name: str, help: str) -> None:
        if name in self._items or name in self._lazy:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self._order.append(name)
        if help:
            self._help[name] = help

    # ---- plugins ---------------------------------------------------------------------
    def plugins(self) -> dict[str, Plugin]:
        """This registry's entry points by name (read once per process, nothing imported)."""
        if self._plugins is None:
            found: dict[str, Plugin] = {}
            for p in plugins(self.group) if self.group else []:
                if p.name in self._items or p.name in self._lazy:
                    raise UsageError(f"{p.dist} {p.version} declares {self.kind} {p.name!r} "
                                     f"({self.group}), a name idaudit has; rename it")
                if p.name in found:
                    raise UsageError(f"{self.kind} {p.name!r} is declared by two packages: "
                                     f"{found[p.name].dist} and {p.dist}")
                found[p.name] = p
            self._plugins = found
        return self._plugins

    # ---- looking up ------------------------------------------------------------------
    def get(self, name: str) -> T:
        """The object registered as ``name`` (a placeholder or plugin is loaded now)."""
        if name in self._items:
            return self._items[name]
        prefix = self.family(name)
        if prefix is not None:
            return self._family_object(prefix)
        if name in self._lazy:
            obj = self._admit(name, load_target(self._lazy[name], f"{self.kind} {name!r}"),
                              f"{self.kind} {name!r}")
        elif isinstance(name, str) and name in self.plugins():
            p = self.plugins()[name]
            what = f"plugin {self.kind} {name!r} of {p.dist} {p.version}"
            obj = self._admit(name, load_target(p.target, what), what)
        else:
            raise UsageError(f"unknown {self.kind} {name!r}; valid: "
                             f"{', '.join([*self.names(), *(p + '…' for p in self._families)])}")
        self._items[name] = obj
        return obj

    def _admit(self, name: str, obj: Any, what: str) -> T:
        if self._accept is None:
            return obj
        try:
            return self._accept(name, obj)
        except TypeError as exc:
            raise UsageError(f"{what} is not a {self.kind}: {one_line(str(exc))}") from None

    def builtin(self) -> list[str]:
        """idaudit's own names, in the order they were registered."""
        return list(self._order)

    def names(self) -> list[str]:
        """Every name, built-in and plugin, sorted (nothing imported)."""
        return sorted({*self._items, *self._lazy, *self.plugins()})

    def ordered(self) -> list[str]:
        """Built-in names in registration order, then plugins' names sorted."""
        return [*self.builtin(), *sorted(self.plugins())]

    def target(self, name: str) -> str | None:
        """The ``module:object`` a placeholder or plugin names (None: registered as an
        object), nothing imported."""
        if name in self._lazy:
            return self._lazy[name]
        plugin = self.plugins().get(name)
        return plugin.target if plugin is not None else None

    def help(self, name: str) -> str:
        """The one line registered with ``name`` (a plugin: which package adds it)."""
        if name in self._help:
            return self._help[name]
        plugin = self.plugins().get(name)
        return f"from {plugin.dist}" if plugin is not None else ""

    def origin(self, name: str) -> str:
        """``idaudit``, or the distribution and entry point a plugin comes from."""
        plugin = self.plugins().get(name)
        return plugin.origin() if plugin is not None else "idaudit"

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._items or name in self._lazy
                                          or name in self.plugins()
                                          or self.family(name) is not None)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


__all__ = ["Plugin", "Registry", "load_target", "plugins"]
