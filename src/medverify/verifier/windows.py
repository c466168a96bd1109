"""Split long evidence into windows that fit the cross-encoder next to the claim.

Evidence is cut into sentences, and sentences are packed greedily into windows of at most
``max_tokens - len(claim) - 3`` word pieces; consecutive windows share one sentence so a
statement split across a boundary is still seen whole once. A sentence longer than a window
is cut at word-piece boundaries. Windows are returned as substrings of the evidence.
"""

from __future__ import annotations

import re
from typing import Any

from medverify.text import clause_spans

_WORD = re.compile(r"[a-z0-9]+")
MAX_CLAIM_TOKENS = 96
_STOP_WORDS = """a an the of in on and or to for with by is are was were be been that this as at
from it its which not no can may than into"""
_STOP = frozenset(_STOP_WORDS.split())


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences of ``text`` (whitespace trimmed, empties dropped)."""
    return clause_spans(text)


def _piece_spans(tokenizer: Any, text: str, span: tuple[int, int], budget: int) -> list[tuple]:
    """Cut one over-long sentence into spans of at most ``budget`` word pieces."""
    enc = tokenizer(text[span[0] : span[1]], add_special_tokens=False, return_offsets_mapping=True)
    offsets = enc["offset_mapping"]
    pieces = []
    for i in range(0, len(offsets), budget):
        chunk = offsets[i : i + budget]
        pieces.append((span[0] + chunk[0][0], span[0] + chunk[-1][1], len(chunk)))
    return pieces


def _units(tokenizer: Any, text: str, budget: int) -> list[tuple[int, int, int]]:
    """Sentences as (start, end, n_tokens), over-long ones cut to fit ``budget``."""
    spans = sentence_spans(text)
    if not spans:
        return []
    counts = [
        len(ids)
        for ids in tokenizer([text[a:b] for a, b in spans], add_special_tokens=False)["input_ids"]
    ]
    units: list[tuple[int, int, int]] = []
    for span, count in zip(spans, counts, strict=True):
        units.extend(
            _piece_spans(tokenizer, text, span, budget) if count > budget else [(*span, count)]
        )
    return units


def claim_budget(tokenizer: Any, claim: str, max_tokens: int) -> int:
    """Word pieces left for evidence beside ``claim`` (claim capped at MAX_CLAIM_TOKENS)."""
    n_claim = min(len(tokenizer(claim, add_special_tokens=False)["input_ids"]), MAX_CLAIM_TOKENS)
    return max(16, max_tokens - n_claim - 3)


def make_windows(tokenizer: Any, claim: str, evidence: str, max_tokens: int = 256) -> list[str]:
    """Evidence windows that fit beside ``claim`` within ``max_tokens`` (at least one window)."""
    budget = claim_budget(tokenizer, claim, max_tokens)
    units = _units(tokenizer, evidence, budget)
    if not units:
        return [evidence]
    windows: list[str] = []
    first = 0
    while first < len(units):
        last, used = first, units[first][2]
        while last + 1 < len(units) and used + units[last + 1][2] + 1 <= budget:
            last += 1
            used += units[last][2] + 1
        windows.append(evidence[units[first][0] : units[last][1]])
        if last + 1 >= len(units):
            break
        first = last if last > first else last + 1
    return windows


def content_words(text: str) -> set[str]:
    """Lower-cased content words (for lexical overlap between claim and window)."""
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1}


def best_window(claim: str, windows: list[str], anchor: str | None = None) -> str:
    """The window sharing most content words with ``anchor`` (a rationale) or the claim."""
    target = content_words(anchor or claim)
    return max(windows, key=lambda w: len(target & content_words(w)) / (1 + len(target)))
