"""The persistent request cache."""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

import pytest

from medverify.llm import Completion, RequestCache, TokenCount


def completion(text: str) -> Completion:
    return Completion(text=text, model="m", usage=TokenCount(prompt_tokens=1,
                                                            completion_tokens=2))


def test_round_trip_marks_cached(tmp_path: Path) -> None:
    cache = RequestCache(tmp_path / "sub" / "cache.db")
    assert cache.enabled and cache.get("k") is None
    cache.put("k", "prov", completion("hello"))
    hit = cache.get("k")
    assert hit is not None and hit.cached and hit.text == "hello"
    assert hit.usage.completion_tokens == 2
    cache.close()
    reopened = RequestCache(tmp_path / "sub" / "cache.db")
    assert reopened.count() == 1
    reopened.close()


def test_corrupt_file_disables_cache(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "cache.db"
    path.write_bytes(b"\x00garbage" * 500)
    with caplog.at_level(logging.WARNING):
        cache = RequestCache(path)
    assert not cache.enabled and "continuing without a cache" in caplog.text
    cache.put("k", "p", completion("x"))
    assert cache.get("k") is None and cache.count() == 0


def test_unreadable_entry_is_a_miss(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "cache.db"
    RequestCache(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO completions (key, provider, completion, created_at) "
                     "VALUES ('k', 'p', '{broken', 'now')")
    conn.close()
    cache = RequestCache(path)
    with caplog.at_level(logging.WARNING):
        assert cache.get("k") is None
    assert "unreadable entry" in caplog.text
    cache.close()


def test_concurrent_use_from_threads(tmp_path: Path) -> None:
    cache = RequestCache(tmp_path / "cache.db")

    def worker(n: int) -> None:
        for i in range(25):
            cache.put(f"{n}-{i}", "p", completion(f"{n}-{i}"))
            assert cache.get(f"{n}-{i}") is not None

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert cache.count() == 100
    cache.close()
