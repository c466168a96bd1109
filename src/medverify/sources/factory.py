"""What the flows that fetch cited pages take to make a fetcher: the :class:`Fetcher` protocol
(``fetch_all``), a :data:`FetcherFactory` (a callable giving an async context manager of
one), and the config's own factory, which pickles so that an executor's worker makes the
same fetcher."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from medverify.config import Config
from medverify.records import Source
from medverify.sources.fetcher import SourceFetcher


class Fetcher(Protocol):
    """What the audit needs from the source fetcher (``medverify.sources.SourceFetcher``)."""

    async def fetch_all(self, sources: Sequence[Source]) -> list[Source]: ...


FetcherFactory = Callable[[], AbstractAsyncContextManager[Fetcher]]


@dataclass(frozen=True)
class ConfigFetcher:
    """The fetcher factory of a config: picklable, so an executor's worker makes the same
    fetcher (its fetch cache is the worker's ``fetch.cache_path`` or
    ``$MEDVERIFY_HOME/fetch-cache.db``)."""

    config: Config

    def __call__(self) -> AbstractAsyncContextManager[Fetcher]:
        config = self.config
        return SourceFetcher(  # type: ignore[return-value]
            config.fetch, cache_path=config.fetch_cache_path, offline=config.fetch.offline
        )


def default_fetcher(config: Config) -> FetcherFactory:
    """The safe fetcher with the config's settings, cache and offline flag."""
    return ConfigFetcher(config)
