"""The sentences of a passage and the one a verdict quotes: the passage sentence sharing the
most words with the claim (inside the deciding window when there is one), cut to
:data:`QUOTE_WORDS` words verbatim; and whether a claim is one or more whole sentences of a
passage word for word (:func:`is_verbatim`).
"""

from __future__ import annotations

import re

from medverify.text import line_sentences

QUOTE_WORDS = 40

_WORD = re.compile(r"\w+")
_TOKEN = re.compile(r"\S+")
_EDGE = re.compile(r"^[\W_]+|[\W_]+$")


def _bare(text: str) -> str:
    """Lower-cased words only, single-spaced (punctuation at the ends dropped)."""
    return " ".join(_EDGE.sub("", w) for w in text.casefold().split() if _EDGE.sub("", w))


def is_verbatim(claim: str, passage: str) -> bool:
    """True when the claim (at least 4 words) is one or more whole sentences of the passage,
    word for word: entailed by definition, so the verifier's score is not needed (a weak
    verifier should never reject a quote). Case, spacing and punctuation are ignored."""
    words = _bare(claim)
    if len(words.split()) < 4:
        return False
    bare_sentences = [_bare(s) for s in sentences(passage)]
    for start in range(len(bare_sentences)):
        joined = ""
        for sentence in bare_sentences[start:]:
            joined = f"{joined} {sentence}".strip()
            if joined == words:
                return True
            if len(joined) >= len(words):
                break
    return False


def _share_in(words: set[str], region: set[str]) -> float:
    """The share of ``words`` found in ``region`` (word sets survive a tokenizer's decode)."""
    return len(words & region) / len(words) if words else 0.0


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.casefold()) if len(w) > 2}


def sentences(text: str) -> list[str]:
    """Sentences of ``text`` as verbatim slices (split at . ! ? and line ends)."""
    return line_sentences(text)


def truncate_words(text: str, limit: int = QUOTE_WORDS) -> str:
    """The first ``limit`` words of ``text``, cut inside the original string (verbatim)."""
    tokens = list(_TOKEN.finditer(text))
    if len(tokens) <= limit:
        return text.strip()
    return text[: tokens[limit - 1].end()].strip()


def best_sentence(claim: str, text: str, *, within: str | None = None) -> str | None:
    """The passage sentence sharing the most words with the claim, truncated to
    ``QUOTE_WORDS`` words. With ``within`` (the deciding window's text), only sentences
    that lie mostly inside that window compete (all of them if none does)."""
    candidates = sentences(text)
    if within:
        region = _words(within)
        inside = [s for s in candidates if _share_in(_words(s), region) >= 0.5]
        candidates = inside or candidates
    if not candidates:
        return None
    target = _words(claim)
    best = max(candidates, key=lambda s: (len(target & _words(s)), -len(s)))
    return truncate_words(best)
