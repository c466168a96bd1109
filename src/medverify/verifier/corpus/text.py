"""Text helpers of the corpus builder: sentence splitting, normalising, the claimable test,
case-keeping replacement, hashing, and evidence windows of consecutive sentences."""

from __future__ import annotations

import hashlib
import random
import re

from medverify.verifier.corpus.records import Document


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


_WS = re.compile(r"\s+")
_SENT_END = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[A-Z0-9(\"\[])")
_ABBREV_END = re.compile(
    r"\b(?:e\.g|i\.e|et al|Dr|vs|Fig|Figs|No|approx|ca|cf|Mr|Mrs|Ms|St|Inc|Ltd|resp)\.$"
)
_TOKEN = re.compile(r"[a-z0-9]+")
_STRAY_DOT = re.compile(r"(?<=[.:;])\s+\.(?=\s|$)|^\s*\.\s+")
_STOP = _wordset(
    """a an the of in on and or to for with by is are was were be been being that this these
    those as at from it its which not no can may might could than into also has have had
    such their there they them he she his her we our you your who whom whose will would
    should do does did about other some any all more most very if when while but so because
    one two how what where why after before between during over under up out only both
    each many much often usually people person"""
)
_BOILER = re.compile(
    r"https?:|www\.|click here|medlineplus|phenotype ontology|orphanet|this table|"
    r"table below|these resources|you can use|see a list|for more information|"
    r"contact us|copyright|\bGARD\b|the information is available|genetic testing registry|"
    r"gene review|clinicaltrials\.gov|encyclopedia:",
    re.I,
)


def normalize(text: str) -> str:
    """Lower-cased alphanumeric words joined by single spaces (for hashing and n-grams)."""
    return " ".join(_TOKEN.findall(text.lower()))


def content_words(text: str) -> list[str]:
    """Lower-cased content words of ``text`` in order (stop words and 1-letter words out)."""
    return [w for w in _TOKEN.findall(text.lower()) if w not in _STOP and len(w) > 1]


def split_sentences(text: str) -> list[str]:
    """Sentences of one paragraph: split at newlines (list items; a missing full stop is
    added) and after ``. ! ?`` before a capital, digit or bracket."""
    out: list[str] = []
    for line in _STRAY_DOT.sub("\n", text).split("\n"):
        line = _WS.sub(" ", line).strip(" -")
        if not line:
            continue
        if line[-1] not in ".!?:;":
            line += ";"  # a list item or heading: kept as evidence, never a claim
        start = 0
        for match in _SENT_END.finditer(line):
            piece = line[start : match.start() + 1]
            if _ABBREV_END.search(piece.rstrip("\"')]")):
                continue
            out.append(piece.strip())
            start = match.end()
        out.append(line[start:].strip())
    return [s for s in out if s and s != "."]


def _n_words(text: str) -> int:
    return len(text.split())


def _clean_sentence(sentence: str) -> bool:
    """A sentence worth keeping in a document (not a question, list fragment or boilerplate)."""
    n = _n_words(sentence)
    if n < 4 or n > 80 or sentence.endswith("?") or _BOILER.search(sentence):
        return False
    letters = sum(c.isalpha() for c in sentence)
    return letters >= 0.6 * len(sentence)


def claimable(sentence: str, lo: int = 6, hi: int = 45) -> bool:
    """A sentence fit to be a claim: a plain statement of ``lo``-``hi`` words."""
    n = _n_words(sentence)
    words = sentence.split()
    return (
        lo <= n <= hi
        and sentence[0].isupper()
        and sentence.count(";") <= 1
        and sum(w[:1].isupper() for w in words[1:]) <= 0.4 * n
        and sentence[-1] in ".!"
        and len(content_words(sentence)) >= 3
        and "(" not in sentence[:2]
    )


def _keep_case(original: str, replacement: str) -> str:
    if original.isupper() and len(original) > 1:
        return replacement.upper()
    if original[:1].isupper():
        return replacement[:1].upper() + replacement[1:]
    return replacement


def _replace_span(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + _keep_case(text[start:end], new) + text[end:]


def _hash(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def _window(
    doc: Document,
    lo: int,
    hi: int,
    rng: random.Random,
    max_words: int,
    exclude: int = -1,
    extra: int | None = None,
) -> str | None:
    """Consecutive sentences covering ``lo..hi`` (minus ``exclude``) plus random context."""
    lengths = [_n_words(s) for s in doc.sentences]
    first_para, last_para = doc.paras[lo], doc.paras[hi]
    total = sum(lengths[k] for k in range(lo, hi + 1) if k != exclude)
    if total > max_words:
        return None
    a, b = lo, hi
    want = rng.randint(0, 4) if extra is None else extra
    for _ in range(want):
        sides = []
        if a - 1 >= 0 and doc.paras[a - 1] == first_para:
            sides.append(-1)
        if b + 1 < len(lengths) and doc.paras[b + 1] == last_para:
            sides.append(1)
        if not sides:
            break
        side = rng.choice(sides)
        k = a - 1 if side < 0 else b + 1
        if total + lengths[k] > max_words:
            break
        total += lengths[k]
        a, b = min(a, k), max(b, k)
    chosen = [doc.sentences[k] for k in range(a, b + 1) if k != exclude]
    return " ".join(chosen) if chosen else None
