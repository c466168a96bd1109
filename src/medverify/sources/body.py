"""Reading a fetched body under a byte cap: Content-Encoding (gzip, deflate, raw deflate)
decoded incrementally, never producing more than the cap allows, and the body refused
(TOO_LARGE) as soon as its raw or decoded bytes pass it.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from typing import Any

from medverify.records import FetchFailure
from medverify.sources.safety import FetchProblem


class _Inflater:
    """Content-Encoding decoder that never produces more than it is asked for."""

    def __init__(self, encoding: str) -> None:
        name = encoding.strip().lower()
        self._raw_fallback = name == "deflate"
        if name in ("", "identity"):
            self._z: Any = None
        elif name in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif name == "deflate":
            self._z = zlib.decompressobj(zlib.MAX_WBITS)
        else:
            raise FetchProblem(FetchFailure.NOT_TEXT, f"unsupported content-encoding "
                               f"{encoding!r}")

    def feed(self, data: bytes, room: int) -> bytes:
        """Decoded bytes of ``data``; at most ``room + 1`` (one more means: over the cap)."""
        if self._z is None:
            return data
        try:
            return bytes(self._z.decompress(data, room + 1))
        except zlib.error as exc:
            if not self._raw_fallback:
                raise FetchProblem(FetchFailure.EXTRACTION, f"corrupt compressed body "
                                   f"({exc})") from None
            self._z, self._raw_fallback = zlib.decompressobj(-zlib.MAX_WBITS), False
            return self.feed(data, room)

    def flush(self) -> bytes:
        return bytes(self._z.flush()) if self._z is not None else b""


def _too_large(max_bytes: int) -> FetchProblem:
    return FetchProblem(FetchFailure.TOO_LARGE, f"body larger than {max_bytes:,} bytes "
                        "(after decompression)")


async def read_capped(chunks: AsyncIterator[bytes], encoding: str, max_bytes: int) -> bytes:
    """The decoded body, refused (TOO_LARGE) as soon as it passes ``max_bytes``."""
    inflater = _Inflater(encoding)
    body = bytearray()
    raw = 0
    async for chunk in chunks:
        raw += len(chunk)
        body += inflater.feed(chunk, max_bytes - len(body))
        if raw > max_bytes or len(body) > max_bytes:
            raise _too_large(max_bytes)
    body += inflater.flush()
    if len(body) > max_bytes:
        raise _too_large(max_bytes)
    return bytes(body)
