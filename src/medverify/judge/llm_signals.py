"""What the LLM judge's reply says about how sure it was: pure functions, no model calls.

- :func:`read_values` finds, in a JSON reply and the token log-probabilities the model
  returned with it, the token that starts the value of every claim's ``"supported"`` (in
  ``factual``) and ``"contradicted"`` (in ``counterfactual``), and reads P(true) there:
  the probability mass of the alternatives that spell ``true`` over the mass of those that
  spell ``true`` or ``false`` (:func:`p_true`; a token split such as ``tr`` + ``ue`` counts
  by its first token, a prefix of the word).
- :func:`value_signals` turns those readings into ``Verdict.signals`` entries
  (``p_supported``, ``p_contradicted``), keeping a reading only when the token read spells
  the value the parser read (a misaligned token gives no signal, never a wrong one).
- :func:`agreement` is the self-consistency share: of k replies, how many gave a claim the
  first reply's category.

Alignment: token strings are concatenated and their character offsets used when the
concatenation equals the reply text; when it does not (a server that rewrites tokens, a
local tokenizer whose per-token decoding differs from the whole), the values are searched
in the concatenation itself, whose offsets match the tokens by construction. Anything odd
(no tokens, non-finite log-probabilities, no alternative spelling true or false) gives no
signal; nothing here raises on odd input.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from medverify.llm.base import TokenLogprobs
from medverify.records import Category

KEYS = {"factual": "supported", "counterfactual": "contradicted"}
"""The analysis objects of a claim entry and the boolean key read in each."""
SIGNAL_NAMES = {"supported": "p_supported", "contradicted": "p_contradicted"}
PLACES = 6  # decimals kept in a recorded signal

_CLAIM_ID = re.compile(r'"claim_id"\s*:\s*"([^"\\]{1,20})"')
_STRIP = " \t\r\n\"':"


@dataclass(frozen=True)
class Reading:
    """P(true) at one value's first token, and whether that token spells ``true``."""

    chosen_true: bool
    p_true: float


def token_offsets(tokens: Sequence[TokenLogprobs]) -> tuple[str, list[int]]:
    """The tokens' concatenated text and each token's start offset in it."""
    starts, at = [], 0
    for token in tokens:
        starts.append(at)
        at += len(token.token)
    return "".join(t.token for t in tokens), starts


def _spells(text: str, word: str) -> bool:
    """Whether a token (spaces, quotes and colons stripped) starts spelling ``word``: a
    non-empty prefix of it, or the whole word followed by no letter or digit."""
    core = text.strip(_STRIP).casefold()
    if not core:
        return False
    if word.startswith(core):
        return True
    return core.startswith(word) and not core[len(word):][:1].isalnum()


def p_true(token: TokenLogprobs) -> float | None:
    """Mass of the alternatives spelling ``true`` / mass of those spelling ``true`` or
    ``false`` at this token (the chosen token counted once among them); None when no
    alternative spells either or the masses are not finite."""
    alternatives = {alt.token: alt.logprob for alt in token.top}
    alternatives.setdefault(token.token, token.logprob)
    mass = {"true": 0.0, "false": 0.0}
    for text, logprob in alternatives.items():
        if not isinstance(logprob, float | int) or math.isnan(logprob) or logprob > 0.0:
            continue
        for word in mass:
            if _spells(text, word):
                mass[word] += math.exp(logprob)
    total = mass["true"] + mass["false"]
    if not math.isfinite(total) or total <= 0.0:
        return None
    return mass["true"] / total


def _skip_string(text: str, at: int) -> int:
    """The index just past the JSON string starting at ``text[at] == '"'``."""
    at += 1
    while at < len(text):
        if text[at] == "\\":
            at += 2
            continue
        if text[at] == '"':
            return at + 1
        at += 1
    return at


def object_spans(text: str, start: int = 0) -> list[tuple[int, int]]:
    """Spans of the JSON objects one level inside the first array at or after ``start``
    (strings skipped, so braces in them do not count); an unclosed object runs to the end."""
    opened = text.find("[", start)
    if opened < 0:
        return []
    spans: list[tuple[int, int]] = []
    depth, begin, at = 0, -1, opened + 1
    while at < len(text):
        char = text[at]
        if char == '"':
            at = _skip_string(text, at)
            continue
        if char in "{[":
            depth += 1
            if depth == 1 and char == "{":
                begin = at
        elif char in "}]":
            if depth == 0:
                break
            depth -= 1
            if depth == 0 and begin >= 0:
                spans.append((begin, at + 1))
                begin = -1
        at += 1
    if begin >= 0:
        spans.append((begin, len(text)))
    return spans


def value_offsets(text: str) -> dict[str, dict[str, int]]:
    """Per claim label, the character offset where each boolean value starts (after the
    key, colon and spaces), for the entries of the reply's ``"results"`` list."""
    results = text.find('"results"')
    out: dict[str, dict[str, int]] = {}
    for begin, end in object_spans(text, max(results, 0)):
        entry = text[begin:end]
        label = _CLAIM_ID.search(entry)
        if label is None or label.group(1) in out:
            continue
        found: dict[str, int] = {}
        for block, key in KEYS.items():
            head = re.search(rf'"{block}"\s*:\s*\{{', entry)
            value = head and re.compile(rf'"{key}"\s*:\s*').search(entry, head.end())
            if value:
                found[key] = begin + value.end()
        out[label.group(1)] = found
    return out


def _token_at(starts: list[int], offset: int) -> int | None:
    """The index of the token covering character ``offset`` (None past the end)."""
    index = None
    for i, start in enumerate(starts):
        if start > offset:
            break
        index = i
    return index


def read_values(
    text: str, tokens: Sequence[TokenLogprobs] | None
) -> dict[str, dict[str, Reading]]:
    """Per claim label and key (``supported``/``contradicted``), the reading at the token
    where its value starts; empty when there are no tokens or nothing aligns."""
    if not tokens:
        return {}
    joined, starts = token_offsets(tokens)
    where = value_offsets(joined if joined != text else text)
    out: dict[str, dict[str, Reading]] = {}
    for label, keys in where.items():
        for key, offset in keys.items():
            index = _token_at(starts, offset)
            if index is None or offset >= len(joined):
                continue
            token = tokens[index]
            piece = joined[offset:starts[index] + len(token.token)]
            chosen = "true" if _spells(piece, "true") else "false" if _spells(piece, "false") \
                else None
            p = p_true(token)
            if chosen is not None and p is not None:
                out.setdefault(label, {})[key] = Reading(chosen == "true", p)
    return out


def value_signals(readings: Mapping[str, Reading], supported: bool,
                  contradicted: bool) -> dict[str, float]:
    """``p_supported`` / ``p_contradicted`` from one claim's readings, each kept only when
    the token read spells the value the parser read."""
    parsed = {"supported": supported, "contradicted": contradicted}
    return {SIGNAL_NAMES[key]: round(reading.p_true, PLACES)
            for key, reading in readings.items()
            if key in parsed and reading.chosen_true == parsed[key]}


def agreement(first: Category, others: Sequence[Category | None]) -> float:
    """The share of the replies (the first included) whose category equals the first's;
    a sample that could not be read (None or ERROR) disagrees."""
    same = 1 + sum(1 for c in others if c is not None and c != Category.ERROR and c == first)
    return round(same / (1 + len(others)), PLACES)
