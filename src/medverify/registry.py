"""Named registries for backends: built-ins register here the same way plugins do.

A registry maps a short name to a factory. Built-ins are registered in code, usually as
``"module:attr"`` strings (``attr`` may be dotted: ``"pkg.mod:Class.from_config"``)
imported on first use, so optional dependencies load only when chosen. Third-party packages
add names through Python entry points in the registry's group (e.g. ``medverify.judges``)::

    [project.entry-points."medverify.judges"]
    mine = "my_package.judge:MyJudge.from_config"

There is one way to build a component: its kind's registry's ``create``, whose signature is
the kind's own (a judge's ``JUDGES.create(name, config, model)``, an embedder's
``EMBEDDERS.create(name, precision=..., device=..., runtime=...)``, a provider's
``providers.create(name, spec, settings)``, ...): each kind subclasses :class:`Registry`
and its ``create`` hands what the kind needs to :meth:`Registry.build`, which calls the
factory in the shape docs/plugins.md gives for that kind. A caller that wants other
settings for one judge or decomposer passes ``config.model_copy(update=...)``.

Entry points are read once, on the first lookup; a plugin cannot replace a built-in name (it
is skipped with a warning), and a plugin that fails to import is an error only when it is
chosen, never for the rest of medverify. A plugin's failures (an import error, an exception
from its factory, a factory that makes something of the wrong kind) become a
:class:`ConfigError` naming the kind, the name and the distribution, the same for every
registry; a built-in factory's errors are its own. See docs/plugins.md.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from importlib import metadata
from typing import Any, Generic, TypeVar

from medverify.errors import ConfigError, MedverifyError

T = TypeVar("T")

log = logging.getLogger(__name__)

def load_attr(target: str) -> Any:
    """The object named by ``"module:attr"`` (``attr`` may be dotted)."""
    module, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split(".") if attr else []:
        obj = getattr(obj, part)
    return obj


class Registry(Generic[T]):
    """Maps a short name to a factory: a callable, a ``"module:attr"`` string, or (from a
    plugin) an entry point, all imported lazily on first use. A kind's registry subclasses
    it with a typed ``create`` that calls :meth:`build`."""

    def __init__(self, kind: str, group: str | None = None, *, protocol: type | None = None,
                 needs: str = "") -> None:
        """``protocol``: what a plugin's factory must make (a ``runtime_checkable``
        protocol; None: not checked), ``needs`` saying what that means in an error."""
        self.kind = kind
        self.group = group
        self.protocol = protocol
        self.needs = needs
        self._factories: dict[str, Callable[..., T] | str | metadata.EntryPoint] = {}
        self._plugins: dict[str, str] = {}
        self._scanned = group is None

    def register(self, name: str, factory: Callable[..., T] | str) -> None:
        self._factories[name] = factory

    def adopt(self, name: str, factory: Callable[..., T] | None) -> None:
        """In a worker process (``medverify.executor``): make ``name`` mean ``factory``,
        the factory the driver resolved and shipped, whatever this process had under the
        name (nothing, for one registered in the driver only; an older one, in a reused
        worker). ``None``: leave the name as it is."""
        if factory is not None:
            self._scan()
            self._factories[name] = factory

    def _scan(self) -> None:
        """Add the entry points of :attr:`group` (once)."""
        if self._scanned:
            return
        self._scanned = True
        for point in metadata.entry_points(group=self.group):
            dist = point.dist.name if point.dist is not None else "unknown package"
            if point.name in self._factories:
                log.warning("%s %r from %s ignored: the name is taken", self.kind, point.name, dist)
                continue
            self._factories[point.name] = point
            self._plugins[point.name] = dist

    def names(self) -> list[str]:
        self._scan()
        return sorted(self._factories)

    def plugin(self, name: str) -> str | None:
        """The distribution that registered ``name`` through an entry point (None: built in)."""
        self._scan()
        return self._plugins.get(name)

    def __contains__(self, name: object) -> bool:
        self._scan()
        return name in self._factories

    def get(self, name: str) -> Callable[..., T]:
        self._scan()
        try:
            factory = self._factories[name]
        except KeyError:
            known = ", ".join(self.names()) or "none"
            raise ConfigError(f"unknown {self.kind} {name!r}; known: {known}") from None
        if isinstance(factory, str | metadata.EntryPoint):
            factory = self._load(name, factory)
            self._factories[name] = factory
        return factory

    def _load(self, name: str, factory: str | metadata.EntryPoint) -> Callable[..., T]:
        if isinstance(factory, str):
            return load_attr(factory)  # type: ignore[no-any-return]
        try:
            return factory.load()  # type: ignore[no-any-return]
        except Exception as exc:
            raise ConfigError(f"{self.kind} {name!r} from plugin {self._plugins.get(name)} "
                              f"failed to load ({factory.value}): {type(exc).__name__}: {exc}"
                              ) from exc

    def build(self, name: str, *args: Any) -> T:
        """The component registered as ``name``, made by ``factory(*args)``: what a kind's
        typed ``create`` calls with the arguments of the kind's factory shape. ConfigError
        for an unknown name and for any failure of a plugin (see the module docstring)."""
        factory = self.get(name)
        plugin = self.plugin(name)
        if plugin is None:
            return factory(*args)
        try:
            made = factory(*args)
        except MedverifyError:
            raise
        except Exception as exc:
            raise ConfigError(f"{self.kind} {name!r} from plugin {plugin} failed: "
                              f"{type(exc).__name__}: {exc}") from exc
        if self.protocol is not None and not isinstance(made, self.protocol):
            raise ConfigError(f"{self.kind} {name!r} from plugin {plugin} made a "
                              f"{type(made).__name__}, which is not a {self.kind}"
                              f"{f' ({self.needs})' if self.needs else ''}")
        return made  # type: ignore[no-any-return]
