"""Token-based chunking with character offsets into the document text.

Chunks hold at most ``max_tokens`` tokens of the embedder's tokenizer and overlap by up to
``overlap`` tokens. When a chunk must be cut, the cut goes at the last sentence boundary
in the second half of the window, so chunks tend to end at full sentences.

Text is tokenized in windows of about ``window_chars`` characters, never whole, so a
document of any size is chunked in bounded memory (:func:`iter_chunks` also takes the text
as a stream of pieces). Windows start and end at whitespace and a chunk is only cut where
the window reaches well past it, so for tokenizers whose tokens never span whitespace (the
WordPiece and word tokenizers used here) the chunks are exactly those of tokenizing the
whole text at once.
"""

from __future__ import annotations

import bisect
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass

from medverify.errors import ConfigError
from medverify.kb.embed_base import Tokenizer
from medverify.records import Span
from medverify.text import sentence_breaks

WINDOW_CHARS = 256 * 1024  # characters tokenized at once (MiniLM: ~35 MB of tokenizer memory)
MARGIN_TOKENS = 16  # tokens a window must reach past a chunk for its cut to be final


@dataclass(frozen=True)
class Chunk:
    """A piece of a document: its text, offsets into the document and token count."""

    text: str
    span: Span
    n_tokens: int


def chunk_text(text: str, tokenizer: Tokenizer, max_tokens: int = 512,
               overlap: int = 100) -> list[Chunk]:
    """Split ``text`` into overlapping token windows, preferring sentence ends as cuts."""
    return list(iter_chunks([text], tokenizer, max_tokens, overlap))


def iter_chunks(pieces: Iterable[str], tokenizer: Tokenizer, max_tokens: int = 512,
                overlap: int = 100, window_chars: int = WINDOW_CHARS) -> Iterator[Chunk]:
    """Chunks of the text made of ``pieces`` (consecutive parts of one document), produced
    while reading it: at most about ``window_chars`` characters (plus one piece) are held,
    and offsets are into the whole text."""
    if overlap >= max_tokens:
        raise ConfigError(f"chunk overlap ({overlap}) must be smaller than chunk size "
                          f"({max_tokens})")
    reader = _Reader(iter(pieces))
    need = window_chars
    next_start: int | None = None  # document offset of the next chunk's first token
    while True:
        window = reader.window(need)
        offsets = tokenizer.offsets(window.text)
        begin = _first_token(offsets, next_start, window.start)
        if begin is None:
            if window.final:
                return
            need = max(need, len(window.text)) * 2
            continue
        done, begin = yield from _chunk_window(window, offsets, begin, max_tokens, overlap)
        if done:
            return
        if begin is None:  # the window was too short for one more final chunk
            need = max(need, len(window.text)) * 2
            continue
        next_start = window.start + offsets[begin][0]
        reader.advance(next_start, window_chars)
        need = window_chars


@dataclass(frozen=True)
class _Window:
    text: str
    start: int  # offset of text[0] in the document
    final: bool  # the window reaches the end of the document


class _Reader:
    """The not yet chunked text of a document, read piece by piece."""

    def __init__(self, pieces: Iterator[str]) -> None:
        self._pieces = pieces
        self._buf = ""
        self._base = 0  # document offset of _buf[0]
        self._pos = 0  # first character still needed
        self._eof = False

    def window(self, size: int) -> _Window:
        """At least ``size`` characters from the current position (fewer at the end),
        cut at whitespace unless the document ends there."""
        while not self._eof and len(self._buf) - self._pos < size:
            self._read()
        end = self._pos + size
        if self._eof and end >= len(self._buf):
            return _Window(self._buf[self._pos:], self._base + self._pos, True)
        cut = _last_space(self._buf, self._pos, min(end, len(self._buf)))
        return _Window(self._buf[self._pos:cut], self._base + self._pos, False)

    def _read(self) -> None:
        piece = next(self._pieces, None)
        if piece is None:
            self._eof = True
            return
        self._buf = self._buf[self._pos:] + piece
        self._base += self._pos
        self._pos = 0

    def advance(self, start: int, longest_word: int) -> None:
        """Drop the text before the word holding document offset ``start`` (before
        ``start`` itself inside a word longer than ``longest_word`` characters)."""
        local = start - self._base
        word = local
        while word > self._pos and not self._buf[word - 1].isspace():
            word -= 1
        if word > self._pos or local - self._pos <= longest_word:
            self._pos = word
        else:
            self._pos = local


def _last_space(text: str, floor: int, end: int) -> int:
    """Index of the last whitespace character in ``text[floor + 1:end]`` (``end`` if
    none: a window inside a word longer than the window)."""
    index = end - 1
    while index > floor and not text[index].isspace():
        index -= 1
    return index if index > floor else end


def _first_token(offsets: list[tuple[int, int]], start: int | None,
                 window_start: int) -> int | None:
    """Index of the token starting at document offset ``start`` (the first when None)."""
    if not offsets:
        return None
    if start is None:
        return 0
    index = bisect.bisect_left(offsets, (start - window_start, -1))
    return index if index < len(offsets) else None


def _chunk_window(window: _Window, offsets: list[tuple[int, int]], begin: int,
                  max_tokens: int, overlap: int
                  ) -> Generator[Chunk, None, tuple[bool, int | None]]:
    """Yield the chunks whose cut the window settles; return (finished, next begin)."""
    n = len(offsets)
    safe = n if window.final else n - MARGIN_TOKENS
    starts = _sentence_starts(window.text, offsets)
    produced = False
    while window.final or begin + max_tokens < safe:
        end = _cut(begin, n, max_tokens, starts)
        yield _make_chunk(window, offsets, begin, end)
        produced = True
        if end >= n:
            return True, None
        begin = _next_begin(begin, end, overlap, starts)
    return False, (begin if produced else None)


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
    found = {bisect.bisect_left(token_starts, b) for b in sentence_breaks(text)}
    return sorted(i for i in found if 0 < i < len(offsets))


def _make_chunk(window: _Window, offsets: list[tuple[int, int]], begin: int,
                end: int) -> Chunk:
    text = window.text
    start_char, end_char = offsets[begin][0], offsets[end - 1][1]
    stop = offsets[end][0] if end < len(offsets) else len(text)
    while end_char < stop and not text[end_char].isspace():
        end_char += 1  # keep trailing punctuation the tokenizer did not count as tokens
    return Chunk(text=text[start_char:end_char],
                 span=Span(start=window.start + start_char, end=window.start + end_char),
                 n_tokens=end - begin)
