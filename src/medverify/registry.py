"""Named registries for backends: built-ins register here the same way plugins do."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from medverify.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps a short name to a factory. Factories may be given as ``"module:attr"`` strings,
    imported lazily on first use, so optional dependencies load only when chosen."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._factories: dict[str, Callable[..., T] | str] = {}

    def register(self, name: str, factory: Callable[..., T] | str) -> None:
        self._factories[name] = factory

    def names(self) -> list[str]:
        return sorted(self._factories)

    def get(self, name: str) -> Callable[..., T]:
        try:
            factory = self._factories[name]
        except KeyError:
            known = ", ".join(self.names()) or "none"
            raise ConfigError(f"unknown {self.kind} {name!r}; known: {known}") from None
        if isinstance(factory, str):
            module, _, attr = factory.partition(":")
            factory = getattr(importlib.import_module(module), attr)
            self._factories[name] = factory
        return factory

    def create(self, name: str, *args: Any, **kwargs: Any) -> T:
        return self.get(name)(*args, **kwargs)
