"""The safe fetcher: cited URLs (untrusted) in, :class:`Source` records with text out.

Per URL: :func:`check_url` (scheme, host forms, literal addresses), then for each hop
of the redirect chain: one DNS lookup with every address checked, a connection to the
checked address only (DNS pinning: :class:`PinnedBackend` is the only way out, and it
refuses any host:port the fetcher has not vetted), a GET under per-host and global
concurrency limits with connect/read timeouts and a total time budget, a streamed byte
cap applied to decompressed bytes, then extraction. Redirects are followed by hand and
every target is checked again. Outcomes go to the :class:`FetchCache`.

Nothing raises for a bad URL or page: each problem is a ``failure`` and a ``reason``.
The network transport (pinned backend, per-origin pools) is :mod:`medverify.sources.transport`;
reading a body under its byte cap, :mod:`medverify.sources.body`.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import ssl
import time
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urljoin

import httpcore

from medverify.config import FetchSettings
from medverify.records import FetchFailure, Source, content_hash, utcnow
from medverify.sources.body import read_capped
from medverify.sources.cache import FetchCache, FetchResult
from medverify.sources.extract import extract_text
from medverify.sources.safety import (
    AllowList,
    FetchProblem,
    Resolver,
    UrlCheck,
    check_url,
    resolve_and_check,
    system_resolver,
)
from medverify.sources.transport import OriginPools, PinnedBackend

log = logging.getLogger(__name__)


REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
RETRY_CODES = frozenset({429, 503})
KEPT_HEADERS = ("content-type", "content-length", "content-encoding", "last-modified",
                "etag", "date", "retry-after", "location")
ACCEPT = b"text/html,application/xhtml+xml,application/pdf;q=0.9,text/plain;q=0.8,*/*;q=0.1"
OFFLINE_REASON = "offline: not in the fetch cache"


@dataclass
class _Response:
    status: int
    headers: dict[str, str]
    body: bytes = b""


class _Budget:
    """The total time one URL may spend on the network (queueing for a slot is free)."""

    def __init__(self, total_s: float) -> None:
        self.total_s = total_s
        self.left_s = total_s

    @asynccontextmanager
    async def spend(self) -> AsyncIterator[None]:
        if self.left_s <= 0:
            raise self._expired()
        started = time.monotonic()
        timer = asyncio.timeout(self.left_s)
        try:
            async with timer:
                yield
        except TimeoutError:
            if timer.expired():
                raise self._expired() from None
            raise
        finally:
            self.left_s -= time.monotonic() - started

    def _expired(self) -> FetchProblem:
        return FetchProblem(FetchFailure.TIMEOUT, f"total time limit of {self.total_s:g} s "
                            "exceeded", transient=True)


def _kept_headers(raw: Sequence[tuple[bytes, bytes]]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in raw:
        key = name.decode("latin-1").lower()
        if key in KEPT_HEADERS:
            headers[key] = value.decode("latin-1").strip()
    return headers


def retry_after_s(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta seconds or an HTTP date), None if absent."""
    if not value:
        return None
    if value.strip().isdigit():
        return float(value.strip())
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - utcnow()).total_seconds()) if when.tzinfo else None


def _connect_problem(exc: Exception) -> FetchProblem:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLError | ssl.CertificateError):
            return FetchProblem(FetchFailure.TLS, f"TLS error: {cause}")
        cause = cause.__cause__ or cause.__context__
    return FetchProblem(FetchFailure.CONNECT, f"connection failed ({type(exc).__name__}: "
                        f"{exc or 'no detail'})", transient=True)


class SourceFetcher:
    """Fetch cited URLs safely (see the module docstring); use as ``async with``.

    ``cache_path`` (default ``settings.cache_path``; None = no disk cache) holds every
    outcome. ``offline`` (default ``settings.offline``) serves only the cache. The
    ``resolver`` and the inner ``network_backend`` are seams for tests and benchmarks;
    ``ssl_context`` replaces the default (certifi) trust store, e.g. for an intranet CA.
    At most one retry, for 429/503 with a Retry-After up to ``retry_after_cap_s``.
    """

    def __init__(
        self, settings: FetchSettings, *, cache_path: Path | None = None,
        offline: bool | None = None, resolver: Resolver | None = None,
        network_backend: httpcore.AsyncNetworkBackend | None = None,
        retry_after_cap_s: float = 5.0, extract_workers: int = 2,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.settings = settings
        self.allow = AllowList(settings.allow)
        self.offline = settings.offline if offline is None else offline
        self.retry_after_cap_s = retry_after_cap_s
        self._resolver = resolver or system_resolver
        path = cache_path or settings.cache_path
        self.cache = FetchCache(path) if path else None
        self._backend = PinnedBackend(network_backend)
        idle_pools = max(1, settings.concurrency // settings.per_host)
        self._pools = OriginPools(self._backend, ssl_context or httpcore.default_ssl_context(),
                                  settings.per_host, idle_pools)
        self._global: asyncio.Semaphore | None = None
        self._hosts: dict[str, asyncio.Semaphore] = {}
        self._inflight: dict[str, asyncio.Future[FetchResult]] = {}
        # Extraction is CPU-bound Python: few threads, so the event loop keeps the GIL often.
        self._extractor = ThreadPoolExecutor(max_workers=extract_workers,
                                             thread_name_prefix="medverify-extract")
        self._headers = [(b"User-Agent", settings.user_agent.encode("latin-1", "replace")),
                         (b"Accept", ACCEPT), (b"Accept-Encoding", b"gzip, deflate")]

    # --- public API ------------------------------------------------------------------

    async def fetch_all(self, sources: Sequence[Source]) -> list[Source]:
        """Every source fetched (or returned as is), in order; identical URLs fetched once."""
        return list(await asyncio.gather(*(self.fetch_source(s) for s in sources)))

    async def fetch_source(self, source: Source) -> Source:
        """An updated copy: ``fetched`` with text, or ``invalid`` with failure and reason.

        Sources that are not ``not_fetched`` (given, fetched, invalid) come back
        unchanged; a ``not_fetched`` source that carries text is marked ``given``.
        """
        if source.status != "not_fetched":
            return source
        if source.text and source.text.strip():
            digest = source.content_hash or content_hash(source.text)
            return source.model_copy(update={"status": "given", "content_hash": digest})
        return apply_result(source, await self.fetch_url(source.url))

    async def fetch_url(self, url: str | None) -> FetchResult:
        """The outcome for one URL; concurrent calls for the same URL share one fetch."""
        check = check_url(url, self.allow)
        if not check.ok:
            return FetchResult(url=check.raw, failure=check.failure, reason=check.reason)
        key = check.url
        future = self._inflight.get(key)
        if future is None:  # finished fetches leave: the cache serves later repeats
            future = asyncio.ensure_future(self._fetch_checked(check))
            self._inflight[key] = future
            future.add_done_callback(lambda _: self._inflight.pop(key, None))
        return await asyncio.shield(future)

    async def aclose(self) -> None:
        for future in list(self._inflight.values()):
            future.cancel()
        await self._pools.aclose()
        self._extractor.shutdown(wait=False, cancel_futures=True)
        if self.cache is not None:
            self.cache.close()

    async def __aenter__(self) -> SourceFetcher:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    # --- one URL ---------------------------------------------------------------------

    async def _fetch_checked(self, check: UrlCheck) -> FetchResult:
        cached = self._cached(check.url)
        if cached is not None and (self.offline or not cached.transient):
            return cached
        if self.offline:
            return FetchResult(url=check.url, failure=FetchFailure.OFFLINE, reason=OFFLINE_REASON)
        result = await self._guarded(check)
        self._store(result)
        return result

    def _cached(self, url: str) -> FetchResult | None:
        try:
            return self.cache.get(url) if self.cache is not None else None
        except (sqlite3.Error, ValueError) as exc:  # a damaged row is a miss, not a crash
            log.warning("fetch cache read failed for %s: %s", url, exc)
            return None

    def _store(self, result: FetchResult) -> None:
        try:
            if self.cache is not None:
                self.cache.put(result)
        except sqlite3.Error as exc:  # e.g. disk full: the run goes on uncached
            log.warning("fetch cache write failed for %s: %s", result.url, exc)

    async def _guarded(self, check: UrlCheck) -> FetchResult:
        started = utcnow()
        try:
            result = await self._download(check)
        except FetchProblem as problem:
            result = FetchResult(url=check.url, failure=problem.failure, reason=problem.reason,
                                 http_status=problem.http_status, transient=problem.transient)
        except Exception as exc:  # one source must never stop a run
            log.warning("unexpected error fetching %s", check.url, exc_info=True)
            result = FetchResult(url=check.url, failure=FetchFailure.CONNECT, transient=True,
                                 reason=f"unexpected error ({type(exc).__name__}: {exc})")
        return result.model_copy(update={"fetched_at": started})

    async def _download(self, start: UrlCheck) -> FetchResult:
        budget = _Budget(self.settings.total_timeout_s)
        check, seen = start, {start.url}
        for _ in range(self.settings.max_redirects + 1):
            response = await self._request(check, budget)
            location = response.headers.get("location")
            if response.status not in REDIRECT_CODES or not location:
                return await self._result(start, check, response)
            check = self._follow(check, location, seen)
        raise FetchProblem(FetchFailure.REDIRECTS,
                           f"more than {self.settings.max_redirects} redirects")

    def _follow(self, check: UrlCheck, location: str, seen: set[str]) -> UrlCheck:
        target = urljoin(check.url, location.strip())
        following = check_url(target, self.allow)
        if not following.ok:
            assert following.failure is not None
            raise FetchProblem(following.failure, f"redirect to {target}: {following.reason}")
        if following.url in seen:
            raise FetchProblem(FetchFailure.REDIRECTS, f"redirect loop at {following.url}")
        seen.add(following.url)
        return following

    async def _request(self, check: UrlCheck, budget: _Budget) -> _Response:
        response = await self._request_once(check, budget)
        delay = self._retry_delay(response)
        if delay is None:
            return response
        log.info("HTTP %s from %s: retrying once in %.1f s", response.status, check.url, delay)
        await asyncio.sleep(delay)
        return await self._request_once(check, budget)

    def _retry_delay(self, response: _Response) -> float | None:
        if response.status not in RETRY_CODES:
            return None
        delay = retry_after_s(response.headers.get("retry-after"))
        return delay if delay is not None and delay <= self.retry_after_cap_s else None

    async def _request_once(self, check: UrlCheck, budget: _Budget) -> _Response:
        async with budget.spend():
            ip = await resolve_and_check(check, self._resolver, self.allow,
                                         self.settings.connect_timeout_s)
        self._backend.pin(check.host, check.port, str(ip))
        async with self._slot(check.host), budget.spend():
            return await self._exchange(check)

    @asynccontextmanager
    async def _slot(self, host: str) -> AsyncIterator[None]:
        if self._global is None:
            self._global = asyncio.Semaphore(self.settings.concurrency)
        per_host = self._hosts.setdefault(host, asyncio.Semaphore(self.settings.per_host))
        async with per_host, self._global:
            yield

    async def _exchange(self, check: UrlCheck) -> _Response:
        try:
            return await self._get(check)
        except httpcore.TimeoutException as exc:
            kind = "connect" if isinstance(exc, httpcore.ConnectTimeout) else "read"
            raise FetchProblem(FetchFailure.TIMEOUT, f"{kind} timed out", transient=True) from None
        except httpcore.ConnectError as exc:
            raise _connect_problem(exc) from None
        except httpcore.UnsupportedProtocol as exc:
            raise FetchProblem(FetchFailure.BAD_URL, f"unsupported URL ({exc})") from None
        except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
            raise FetchProblem(FetchFailure.CONNECT, f"connection broken ({type(exc).__name__}:"
                               f" {exc or 'no detail'})", transient=True) from None

    async def _get(self, check: UrlCheck) -> _Response:
        settings = self.settings
        timeouts = {"connect": settings.connect_timeout_s, "read": settings.read_timeout_s,
                    "write": settings.read_timeout_s, "pool": settings.total_timeout_s}
        url = httpcore.URL(scheme=check.scheme.encode(), host=check.host.encode("ascii"),
                           port=check.port, target=check.target.encode("ascii"))
        headers = [(b"Host", check.netloc.encode("ascii")), *self._headers]
        async with self._pools.use(check) as pool, pool.stream(
                "GET", url, headers=headers, extensions={"timeout": timeouts}) as response:
            kept = _kept_headers(response.headers)
            if response.status != 200:
                return _Response(response.status, kept)
            self._refuse_declared_size(kept)
            body = await read_capped(response.aiter_stream(), kept.get("content-encoding", ""),
                                     settings.max_bytes)
            return _Response(200, kept, body)

    def _refuse_declared_size(self, headers: dict[str, str]) -> None:
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.settings.max_bytes:
            raise FetchProblem(FetchFailure.TOO_LARGE, f"declared length {int(declared):,} "
                               f"bytes exceeds the {self.settings.max_bytes:,} byte limit")

    async def _result(self, start: UrlCheck, final: UrlCheck, response: _Response) -> FetchResult:
        ctype = response.headers.get("content-type")
        common: dict[str, Any] = {"url": start.url, "final_url": final.url,
                                  "http_status": response.status, "headers": response.headers,
                                  "content_type": ctype}
        if response.status != 200:
            return FetchResult(**common, **_status_failure(response))
        extract = partial(extract_text, response.body, ctype, max_chars=self.settings.max_chars)
        extraction = await asyncio.get_running_loop().run_in_executor(self._extractor, extract)
        if extraction.failure is not None:
            return FetchResult(**common, title=extraction.title, failure=extraction.failure,
                               reason=extraction.reason)
        return FetchResult(**common, title=extraction.title, text=extraction.text,
                           truncated=extraction.truncated,
                           content_hash=content_hash(extraction.text))


def _status_failure(response: _Response) -> dict[str, Any]:
    status = response.status
    detail = ""
    if status in REDIRECT_CODES:
        detail = " (redirect without a Location)"
    elif status in RETRY_CODES and response.headers.get("retry-after"):
        detail = f" (Retry-After {response.headers['retry-after']})"
    return {"failure": FetchFailure.HTTP_STATUS, "reason": f"HTTP {status}{detail}",
            "transient": status == 429 or status >= 500}


def apply_result(source: Source, result: FetchResult) -> Source:
    """``source`` updated with a fetch outcome (``fetched`` when it gave text)."""
    ok = result.ok
    failure = None if ok else (result.failure or FetchFailure.EMPTY)
    return source.model_copy(update={
        "status": "fetched" if ok else "invalid",
        "text": result.text if ok else None,
        "title": result.title or source.title,
        "http_status": result.http_status,
        "reason": None if ok else (result.reason or "no text"),
        "failure": failure,
        "content_hash": result.content_hash if ok else None,
        "final_url": result.final_url,
        "content_type": result.content_type,
        "truncated": result.truncated,
        "fetched_at": result.fetched_at,
        "from_cache": result.from_cache,
    })


__all__ = ["SourceFetcher", "apply_result", "retry_after_s"]
