"""The FREQUENCY check of :mod:`medverify.judge.checks`: how often or how likely, in words.

Frequency and likelihood words sit on one scale: 0 "never"; 1 "rarely", "seldom", "rare",
"uncommon", "infrequently", "almost never", "hardly ever"; 2 "occasionally", "sometimes";
3 "often", "frequently", "common", "commonly", "usually", "typically", "generally",
"almost always"; 4 "always", "invariably". "not" before one turns it over ("not common" is
1, "not uncommon" and "not rare" are 3, "not always" is 2); comparatives ("more common",
"less often", "as common as") are not read.

Each frequency word has surroundings: the content words within ten tokens in its clause,
commas crossed, up to the next frequency word. The aligned passage words that speak of
what the claim word speaks of are those whose surroundings share at least two content
words with the claim word's (one when they hold only one or two); the ones sharing the most
are compared. A claim word conflicts with one of them two or more steps away on the scale
when none of them agrees (one step or less), and no sentence of the whole passage has an
agreeing word sharing as much. A rare-side word (0-1) against a common-side word (3-4), or
"never" against "sometimes", vetoes; other pairs ("sometimes" vs "always") give a finding
without veto.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from medverify.judge.checks.text import (
    AUX,
    Alignment,
    Doc,
    is_content,
    word_list,
    words,
)
from medverify.records import CheckFinding, CheckKind


def _levels(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.strip().splitlines():
        level, *names = word_list(line)
        out.update((w, int(level)) for w in names)
    return out


LEVELS = _levels("""
0 never
1 rarely seldom rare uncommon uncommonly infrequent infrequently seldomly
2 occasionally occasional sometimes
3 often frequently frequent common commonly usually typically generally oftentimes mostly
4 always invariably
""")
"""{word (lower case): level} on the scale of the module docstring."""
_SOFTEN = {("almost", "never"): 1, ("nearly", "never"): 1, ("hardly", "ever"): 1,
           ("almost", "always"): 3, ("nearly", "always"): 3, ("not", "always"): 2,
           ("not", "uncommon"): 3, ("not", "rare"): 3, ("not", "infrequent"): 3,
           ("not", "unusual"): 3, ("not", "common"): 1, ("not", "often"): 1,
           ("not", "frequently"): 1, ("not", "usually"): 1, ("not", "commonly"): 1}
"""Two-word phrases (the second word is the frequency word) and their levels."""
_ADJECTIVES = words("common rare uncommon frequent infrequent occasional")
"""Quoted with the noun after them ("a common cause")."""
_COMPARATIVE = words("more less most least as so too")
_NOT_FREQUENCY_AFTER = words(
    "cold colds bile carotid iliac variable name names sense ancestor law ground good "
    "practice earth earths element elements")
"""After "common" these make a name ("common cold", "common bile duct"), not a frequency."""
_BEFORE_IS_NAME = words("in the")
_CLAUSE_END = frozenset(";:()[]{}.!?\u2014") | words(
    "but whereas while although though however yet because since unless except")
_SKIP = words("people person patients cases case found known reported seen observed") | AUX
_REACH = 10


@dataclass(slots=True)
class Often:
    """A frequency word at token ``at`` (``quote`` the tokens to quote), its ``level`` and
    the content stems of its surroundings."""

    at: int
    level: int
    quote: tuple[int, int]
    around: frozenset[str]


def frequencies(doc: Doc, a: int, b: int) -> list[Often]:
    """The frequency words of tokens ``[a, b)`` with their levels and surroundings."""
    out = []
    for i in range(a, b):
        low = doc.low[i]
        prev = doc.low[i - 1] if i > a else ""
        prev = "not" if prev.endswith("n't") else prev
        level = _SOFTEN.get((prev, low)) if prev else None
        if level is None and low == "ever" and prev == "hardly":
            level = 1
        if level is None:
            level = LEVELS.get(low)
            if level is None or _named(doc, i, a, b):
                continue
            first = i
            if prev == "most" and level == 3:
                first = i - 1  # "most common": the top of the common side
            elif prev in _COMPARATIVE:
                continue
        else:
            first = i - 1
        end = i + 1 + (low in _ADJECTIVES and i + 1 < b and is_content(doc.low[i + 1]))
        out.append(Often(i, level, (first, end), _around(doc, i, a, b)))
    return out


def _named(doc: Doc, i: int, a: int, b: int) -> bool:
    """Is "common" at ``i`` part of a name ("common cold", "in common")?"""
    if doc.low[i] != "common":
        return False
    nxt = doc.low[i + 1] if i + 1 < b else ""
    prev = doc.low[i - 1] if i > a else ""
    return nxt in _NOT_FREQUENCY_AFTER or (prev == "in" and nxt in ("", ".", ",", "with"))


def _around(doc: Doc, i: int, a: int, b: int) -> frozenset[str]:
    """Content stems within :data:`_REACH` tokens of ``i`` in its clause (commas crossed:
    lists of names are part of the clause), up to the next frequency word either way
    ("usually occurs in middle age, and rarely in children")."""
    found: set[str] = set()
    for step in (-1, 1):
        k = i + step
        while (a <= k < b and abs(k - i) <= _REACH and doc.low[k] not in _CLAUSE_END
               and doc.low[k] not in LEVELS):
            low = doc.low[k]
            if is_content(low) and low not in LEVELS and low not in _SKIP:
                found.add(doc.stems[k])
            k += step
    return frozenset(found)


def _about(claim_items: frozenset[str], p: Often) -> int:
    """How much passage word ``p`` speaks of what the claim speaks of: the number of content
    stems its surroundings share with the claim word's, 0 when fewer than two (one when its
    surroundings hold only one or two)."""
    shared = len(claim_items & p.around)
    return shared if shared >= 2 or (shared >= 1 and len(p.around) <= 2) else 0


def _veto(c: int, p: int) -> bool:
    low, high = sorted((c, p))
    return (low <= 1 and high >= 3) or (low == 0 and high >= 2)


def frequency_findings(claim: Doc, passage: Doc, alignment: Alignment,
                       passage_id: str | None, whole: Callable[[], Doc]) -> list[CheckFinding]:
    """A finding for each claim frequency word that an aligned passage frequency word two
    or more steps away, about the same thing, contradicts while no passage word agrees (see
    the module docstring). ``whole`` tokenizes the whole passage."""
    claimed = [f for a, b in claim.sents for f in frequencies(claim, a, b)]
    if not claimed or not alignment.sentences:
        return []
    stated = [f for a, b in alignment.sentences for f in frequencies(passage, a, b)]
    findings = []
    for c in claimed:
        scored = [(_about(c.around, p), p) for p in stated]
        top = max((score for score, _ in scored), default=0)
        against = [p for score, p in scored if score == top and abs(p.level - c.level) >= 2]
        if not top or not against or any(
                score == top and abs(p.level - c.level) <= 1 for score, p in scored):
            continue
        doc = whole()
        if any(abs(p.level - c.level) <= 1 and _about(c.around, p) >= top
               for a, b in doc.sents for p in frequencies(doc, a, b)):
            continue
        p = against[0]
        says, other = claim.span(*c.quote), passage.span(*p.quote)
        findings.append(CheckFinding(
            kind=CheckKind.FREQUENCY, veto=_veto(c.level, p.level), passage_id=passage_id,
            claim_says=says, passage_says=other,
            reason=f"the claim says {says}; the passage says {other}"))
    return findings
