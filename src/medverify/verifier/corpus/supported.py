"""The ``supported`` family: the sentence restated (verbatim, a leading/trailing clause dropped,
two adjacent sentences fused, an abbreviation or synonym swapped using a definition from the
same document, which the evidence then contains); hedges are kept as they are."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from medverify.verifier.corpus.records import Candidate, CandidatePools, Document
from medverify.verifier.corpus.text import _STOP, _n_words, _wordset, claimable, normalize

_LEAD_DROP = re.compile(
    r"^(?:However|In addition|Additionally|Furthermore|Moreover|Similarly|Overall|In conclusion|"
    r"In summary|Thus|Therefore|As a result|Consequently|In this study|In our study|"
    r"In contrast|Interestingly|Notably|Importantly|Finally|Indeed|In general|"
    r"(?:Although|Though|While|Whereas|Because|Since|As)\s[^,]{3,120}?),\s+(?=[A-Za-z])"
)
_TRAIL_DROP = re.compile(
    r",\s+(?:which|including|such as|especially|particularly|because|although|while|"
    r"whereas|as well as|as shown|as described|as reported|respectively)\b[^.]*(?=\.$)"
)
_PAREN = re.compile(r"\s\([^()]{2,80}\)(?=[\s,.;])")


def clause_drop(sentence: str, rng: random.Random) -> str | None:
    """The sentence without a leading (discourse/concessive) or trailing clause, if it stands."""
    options: list[str] = []
    lead = _LEAD_DROP.match(sentence)
    if lead:
        rest = sentence[lead.end() :]
        if _n_words(rest) >= 5:
            options.append(rest[0].upper() + rest[1:])
    trail = _TRAIL_DROP.search(sentence)
    if trail:
        kept = sentence[: trail.start()] + sentence[trail.end() :]
        if _n_words(kept) >= 5:
            options.append(kept)
    paren = _PAREN.search(sentence)
    if paren and not re.search(r"\b[A-Z]{2,}\b", sentence[paren.end() :]):
        kept = sentence[: paren.start()] + sentence[paren.end() :]
        if _n_words(kept) >= 5:
            options.append(kept)
    return rng.choice(options) if options else None


_STARTERS = _wordset(
    """it this these they the in most some many about a an there he she his her its their
    people symptoms treatment for if when although however also such other each all both
    patients we our"""
)


_CONNECTIVES = _wordset("however but although also yet thus therefore moreover furthermore")


def fuse(first: str, second: str) -> str:
    """Two adjacent sentences as one claim ("A, and b." or "A; B.")."""
    head = first.rstrip(" .!")
    word = second.split()[0]
    bare = word.rstrip(",;:").lower()
    if bare in _CONNECTIVES:
        return f"{head}; {word.lower()}{second[len(word) :]}"
    if bare in _STARTERS and not word.isupper():
        return f"{head}, and {word.lower()}{second[len(word) :]}"
    return f"{head}; {second}"


_DEF = re.compile(r"((?:[A-Za-z][\w'\-]*\s+){1,10})\(([A-Z][A-Za-z0-9\-]{1,9})s?\)")


def abbreviations(sentences: Sequence[str]) -> list[tuple[int, str, str]]:
    """(sentence index, long form, abbreviation) definitions "long form (ABC)" in a document."""
    out = []
    seen: set[str] = set()
    for i, sentence in enumerate(sentences):
        for match in _DEF.finditer(sentence):
            abbr = match.group(2)
            letters = [c.lower() for c in abbr if c.isalpha()]
            if len(letters) < 2 or sum(c.isupper() for c in abbr) < 2 or abbr in seen:
                continue
            words = match.group(1).split()
            for k in range(max(1, len(letters) - 2), min(len(words), len(letters) + 2) + 1):
                cand = words[-k:]
                if cand[0].lower() in _STOP or cand[0][0].lower() != letters[0]:
                    continue
                text = " ".join(cand).lower()
                pos = 0
                for c in letters:
                    pos = text.find(c, pos)
                    if pos < 0:
                        break
                    pos += 1
                if pos > 0:
                    seen.add(abbr)
                    out.append((i, " ".join(cand), abbr))
                    break
    return out


_SYN_DEF = re.compile(
    r",?\s\(?(?:also|sometimes|commonly|formerly|previously)\s(?:called|known as|referred to as|"
    r"termed)\s([^,.;()]{3,60}?)(?=[,.;)]|\sor\s|\sis\s|\sare\s)",
    re.I,
)


def synonyms_of(doc: Document) -> list[tuple[int, str, str]]:
    """(defining sentence, focus name, synonym) pairs stated in the document's own text."""
    if not doc.focus:
        return []
    out = []
    focus = doc.focus
    for i, sentence in enumerate(doc.sentences):
        lower = sentence.lower()
        at = lower.find(focus.lower())
        if at < 0:
            continue
        for match in _SYN_DEF.finditer(sentence, at + len(focus)):
            if match.start() - (at + len(focus)) > 2:
                break
            for name in re.split(r",\s|\sor\s", match.group(1)):
                name = name.strip()
                if 3 <= len(name) <= 60 and name.lower() != focus.lower():
                    out.append((i, focus, name))
        for name in doc.synonyms:
            if name.lower() in lower and name.lower() != focus.lower() and len(name) <= 60:
                out.append((i, focus, name))
    return list(dict.fromkeys(out))


def _distinct(a: str, b: str) -> bool:
    """Neither name contained in the other (a real alternative name, not a shortening)."""
    a, b = normalize(a), normalize(b)
    return bool(a) and bool(b) and a not in b and b not in a


def _sub_once(text: str, old: str, new: str) -> str | None:
    """``text`` with the first ``old`` (whole words, any case) replaced by ``new`` as written
    (capitalised only at the start of the sentence)."""
    pattern = re.compile(r"(?<![\w-])" + re.escape(old) + r"(?![\w-])", re.I)
    match = pattern.search(text)
    if not match:
        return None
    if match.start() == 0:
        new = new[:1].upper() + new[1:]
    elif new[:1].isupper() and new[1:].islower():
        new = new[:1].lower() + new[1:]  # "Magnetic resonance imaging" mid-sentence
    return text[: match.start()] + new + text[match.end() :]


def add_restatements(
    pools: CandidatePools, d: int, i: int, sentence: str, rng: random.Random
) -> None:
    """The ``extract`` and ``clause_drop`` candidates of claimable sentence ``i`` of doc ``d``."""
    pools.add(Candidate("extract", d, i, i, sentence))
    dropped = clause_drop(sentence, rng)
    if dropped and dropped != sentence:
        pools.add(Candidate("clause_drop", d, i, i, dropped))


def add_fusion(pools: CandidatePools, d: int, doc: Document, i: int) -> None:
    """A ``fusion`` candidate of sentence ``i`` and the next, if both are short claims of the
    same paragraph."""
    sents = doc.sentences
    sentence = sents[i]
    nxt = i + 1
    if (
        nxt < len(sents)
        and doc.paras[nxt] == doc.paras[i]
        and claimable(sentence, 4, 35)
        and claimable(sents[nxt], 4, 35)
        and _n_words(sentence) + _n_words(sents[nxt]) <= 60
    ):
        pools.add(Candidate("fusion", d, i, nxt, fuse(sentence, sents[nxt])))


def add_abbreviations(pools: CandidatePools, d: int, doc: Document) -> None:
    """``abbreviation`` candidates: near a definition "long form (ABC)", a claimable sentence
    with the abbreviation spelt out, or the long form abbreviated."""
    sents = doc.sentences
    for j, long_form, abbr in abbreviations(sents):
        for i, sentence in enumerate(sents):
            if i == j or not claimable(sentence) or abs(i - j) > 6:
                continue
            lo, hi = min(i, j), max(i, j)
            if re.search(rf"(?<![\w-]){re.escape(abbr)}(?![\w-])", sentence):
                if f"({abbr}" in sentence:
                    continue
                new = _sub_once(sentence, abbr, long_form)
            elif long_form.lower() in sentence.lower():
                new = _sub_once(sentence, long_form, abbr)
            else:
                continue
            if new and new != sentence:
                pools.add(Candidate("abbreviation", d, lo, hi, new))


def add_synonyms(pools: CandidatePools, d: int, doc: Document) -> None:
    """``synonym`` candidates: near a sentence defining a synonym of the focus, a claimable
    sentence with the focus and the synonym swapped."""
    for j, focus, name in synonyms_of(doc):
        for i, sentence in enumerate(doc.sentences):
            if i == j or not claimable(sentence) or abs(i - j) > 8:
                continue
            new = _sub_once(sentence, focus, name) or _sub_once(sentence, name, focus)
            if new and new != sentence:
                pools.add(Candidate("synonym", d, min(i, j), max(i, j), new))
