"""Cited sources: the safe fetcher, its URL/address decisions, extraction and cache.

``SourceFetcher(config.fetch, cache_path=config.fetch_cache_path, offline=...)`` turns
cited URLs (untrusted input) into :class:`~medverify.records.Source` records with text.
See docs/fetch.md for what is blocked and why.
"""

from medverify.sources.cache import FetchCache, FetchResult
from medverify.sources.extract import Extraction, extract_text
from medverify.sources.fetcher import SourceFetcher, apply_result
from medverify.sources.safety import (
    AllowList,
    Resolver,
    UrlCheck,
    blocked_reason,
    check_url,
    literal_ip,
    resolve_and_check,
    system_resolver,
)
from medverify.sources.transport import PinnedBackend

__all__ = [
    "AllowList",
    "Extraction",
    "FetchCache",
    "FetchResult",
    "PinnedBackend",
    "Resolver",
    "SourceFetcher",
    "UrlCheck",
    "apply_result",
    "blocked_reason",
    "check_url",
    "extract_text",
    "literal_ip",
    "resolve_and_check",
    "system_resolver",
]
