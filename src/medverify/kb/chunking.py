"""Token-based chunking with character offsets into the document text.

Chunks hold at most ``max_tokens`` tokens of the embedder's tokenizer and overlap by up to
``overlap`` tokens. When a chunk must be cut, the cut goes at the last sentence boundary
in the second half of the window, so chunks tend to end at full sentences.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from medverify.errors import ConfigError
from medverify.kb.embed import Tokenizer
from medverify.records import Span

_SENTENCE_END = re.compile(r"(?:[.!?][\"')\]]*\s+|\n\s*\n|\n(?=\s*[-*\u2022]\s))")


@dataclass(frozen=True)
class Chunk:
    """A piece of a document: its text, offsets into the document and token count."""

    text: str
    span: Span
    n_tokens: int


def chunk_text(text: str, tokenizer: Tokenizer, max_tokens: int = 512,
               overlap: int = 100) -> list[Chunk]:
    """Split ``text`` into overlapping token windows, preferring sentence ends as cuts."""
    if overlap >= max_tokens:
        raise ConfigError(f"chunk overlap ({overlap}) must be smaller than chunk size "
                          f"({max_tokens})")
    offsets = tokenizer.offsets(text)
    if not offsets:
        return []
    starts = _sentence_starts(text, offsets)
    chunks: list[Chunk] = []
    begin = 0
    while True:
        end = _cut(begin, len(offsets), max_tokens, starts)
        chunks.append(_make_chunk(text, offsets, begin, end))
        if end >= len(offsets):
            return chunks
        begin = _next_begin(begin, end, overlap, starts)


def _cut(begin: int, n: int, max_tokens: int, starts: list[int]) -> int:
    """End index (exclusive) of the chunk starting at token ``begin``."""
    limit = begin + max_tokens
    if limit >= n:
        return n
    pos = bisect.bisect_right(starts, limit) - 1
    if pos >= 0 and starts[pos] > begin + max_tokens // 2:
        return starts[pos]
    return limit


def _next_begin(begin: int, end: int, overlap: int, starts: list[int]) -> int:
    """Start of the next chunk: ``overlap`` tokens back, moved forward to a sentence start
    inside the overlap when there is one."""
    floor = max(end - overlap, begin + 1)
    pos = bisect.bisect_left(starts, floor)
    if overlap and pos < len(starts) and starts[pos] < end:
        return starts[pos]
    return floor


def _sentence_starts(text: str, offsets: list[tuple[int, int]]) -> list[int]:
    """Indices of tokens that begin a sentence (sorted)."""
    token_starts = [s for s, _ in offsets]
    found = {bisect.bisect_left(token_starts, m.end()) for m in _SENTENCE_END.finditer(text)}
    return sorted(i for i in found if 0 < i < len(offsets))


def _make_chunk(text: str, offsets: list[tuple[int, int]], begin: int, end: int) -> Chunk:
    start_char, end_char = offsets[begin][0], offsets[end - 1][1]
    stop = offsets[end][0] if end < len(offsets) else len(text)
    while end_char < stop and not text[end_char].isspace():
        end_char += 1  # keep trailing punctuation the tokenizer did not count as tokens
    return Chunk(text=text[start_char:end_char], span=Span(start=start_char, end=end_char),
                 n_tokens=end - begin)
