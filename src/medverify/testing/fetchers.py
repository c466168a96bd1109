"""An offline source fetcher for audits and studies in tests: fixed pages by URL.

:class:`StaticPages` is a fetcher factory (what ``Auditor.from_config(fetcher_factory=...)``
takes) that pickles, so an executor's worker (Ray) makes the same fetcher as the driver.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

from medverify.records import FetchFailure, Source, content_hash


@dataclass(frozen=True)
class StaticPages:
    """Serves ``pages`` (URL -> text): a source with given text comes back ``given``, a
    listed URL ``fetched`` with its text, any other URL ``invalid`` (HTTP 404). No network,
    no clock: the same sources always come back the same."""

    pages: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, pages: Mapping[str, str]) -> StaticPages:
        return cls(tuple(sorted(pages.items())))

    def __call__(self) -> AbstractAsyncContextManager[StaticFetcher]:
        return _open(StaticFetcher(dict(self.pages)))


@asynccontextmanager
async def _open(fetcher: StaticFetcher) -> AsyncIterator[StaticFetcher]:
    yield fetcher


class StaticFetcher:
    """The fetcher :class:`StaticPages` opens; ``fetched`` lists the URLs it was asked for."""

    def __init__(self, pages: dict[str, str]) -> None:
        self.pages = pages
        self.fetched: list[str] = []

    async def fetch_all(self, sources: Sequence[Source]) -> list[Source]:
        return [self._one(source) for source in sources]

    def _one(self, source: Source) -> Source:
        if source.status != "not_fetched":
            return source
        if source.text and source.text.strip():
            digest = source.content_hash or content_hash(source.text)
            return source.model_copy(update={"status": "given", "content_hash": digest})
        self.fetched.append(source.url or "")
        text = self.pages.get(source.url or "")
        if text is None:
            return source.model_copy(update={
                "status": "invalid", "failure": FetchFailure.HTTP_STATUS, "http_status": 404,
                "reason": "HTTP 404"})
        return source.model_copy(update={"status": "fetched", "text": text,
                                         "content_hash": content_hash(text)})
