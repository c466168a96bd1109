"""Drug and condition names: lexicon entries from MedQuAD focuses, finding them in sentences,
and the ``drug_swap`` / ``condition_swap`` edits of the ``contradicted`` family (a name swapped
for another of the same type that the evidence does not mention)."""

from __future__ import annotations

import random
import re
from collections.abc import Iterable

from medverify.verifier.corpus.records import Candidate, CandidatePools, Document, Lexicons
from medverify.verifier.corpus.text import _TOKEN, _keep_case, _wordset, normalize

SWAP_TYPES = ("drug_swap", "condition_swap")


class _Matcher:
    """Longest-match lookup of lower-cased multi-word names in a sentence's words."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names: dict[tuple[str, ...], str] = {}
        self.first: dict[str, int] = {}
        for name in names:
            key = tuple(_TOKEN.findall(name.lower()))
            if key:
                self.names[key] = name
                self.first[key[0]] = max(self.first.get(key[0], 0), len(key))

    def find(self, sentence: str) -> list[tuple[int, int, str]]:
        """(start char, end char, name) of the names in ``sentence`` (longest, no overlap)."""
        tokens = [(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(sentence.lower())]
        out = []
        i = 0
        while i < len(tokens):
            longest = self.first.get(tokens[i][0], 0)
            hit = None
            for n in range(min(longest, len(tokens) - i), 0, -1):
                key = tuple(t[0] for t in tokens[i : i + n])
                if key in self.names:
                    hit = (tokens[i][1], tokens[i + n - 1][2], self.names[key], n)
                    break
            if hit:
                start, end, name, n = hit
                if _bounded(sentence, start, end):
                    out.append((start, end, name))
                i += n
            else:
                i += 1
        return out


def _bounded(sentence: str, start: int, end: int) -> bool:
    before = sentence[start - 1] if start else " "
    after = sentence[end] if end < len(sentence) else " "
    return before not in "-/" and after not in "-/" and not after.isalnum()


_FORM_WORDS = re.compile(
    r"\s+(?:injection|oral|topical|ophthalmic|nasal|transdermal|rectal|vaginal|otic|inhalation|"
    r"extended|sublingual|intravenous|buccal|implant|powder|solution|spray)\b.*$",
    re.I,
)
_COMMON_WORDS = _wordset(
    """iron oxygen water sodium potassium calcium zinc alcohol sugar salt fat air light heat
    cold pain fever cough stress fatigue sleep milk tea coffee honey garlic ginger aloe
    thyroid insulin estrogen estrogens progesterone testosterone glucagon melatonin dopamine
    serotonin cortisol hydrocortisone vitamin magnesium phosphorus folate protein"""
)


def drug_name(focus: str) -> str | None:
    """A drug lexicon entry from a MedQuAD drug focus (dosage-form words cut off)."""
    name = _FORM_WORDS.sub("", focus).strip().lower()
    if len(name) < 5 or "," in name or " and " in name or name in _COMMON_WORDS:
        return None
    if "vaccine" in name or name.startswith("vitamin"):
        return None
    if len(name.split()) > 3 or not re.fullmatch(r"[a-z][a-z0-9 '\-]+", name):
        return None
    return name


_DISEASE_LIKE = re.compile(
    r"(?:itis|osis|emia|aemia|oma|omas|pathy|plasia|trophy|ia|ism|iasis|algia|cele|ease|"
    r"syndrome|disorder|cancer|deficiency|infection|fever|palsy|diabetes|asthma|influenza|"
    r"measles|tumor|tumors|hernia|stroke|ulcer|ulcers|sclerosis|atresia|failure|injury|"
    r"defect|defects|pox|mumps|rubella|gout|lupus|acne|eczema|psoriasis|glaucoma|"
    r"cataract|cataracts|migraine|hypertension|obesity|autism)$"
)


def condition_name(focus: str) -> str | None:
    """A condition lexicon entry from a MedQuAD disorder focus (short plain names only)."""
    name = re.sub(r"\s*\(.*?\)\s*", " ", focus).strip().lower()
    if len(name) < 4 or "," in name or name in _COMMON_WORDS or len(name.split()) > 5:
        return None
    if not re.fullmatch(r"[a-z][a-z0-9 '\-]+", name) or name.startswith(("what ", "how ")):
        return None
    return name if _DISEASE_LIKE.search(name) else None


def protected_names(doc: Document) -> set[str]:
    """The document's own focus name and synonyms (normalised): never swapped in or out."""
    return {normalize(doc.focus), *(normalize(s) for s in doc.synonyms)}


class SwapFinder:
    """Drug and condition names of the lexicons found in the corpus's claimable sentences."""

    def __init__(self, lex: Lexicons) -> None:
        self.matchers = {
            "drug_swap": _Matcher(lex.drugs),
            "condition_swap": _Matcher(lex.conditions),
        }
        self.seen: dict[str, dict[str, None]] = {kind: {} for kind in self.matchers}

    def add_swaps(
        self,
        pools: CandidatePools,
        d: int,
        i: int,
        sentence: str,
        protected: set[str],
        rng: random.Random,
    ) -> None:
        """A swap candidate per type with a name in the sentence (one name drawn at random);
        every name found joins that type's swap pool."""
        for kind, matcher in self.matchers.items():
            found = [m for m in matcher.find(sentence) if normalize(m[2]) not in protected]
            for m in found:
                self.seen[kind][m[2]] = None
            if found:
                start, end, _ = rng.choice(found)
                pools.add(Candidate(kind, d, i, i, sentence, span=(start, end)))


def swapped_claim(
    claim: str, span: tuple[int, int], doc: Document, pool: list[str], rng: random.Random
) -> str | None:
    """``claim`` with the name at ``span`` replaced by one of ``pool`` that is neither that
    name, nor the document's own, nor anywhere in the document (None after 8 tries)."""
    start, end = span
    old = normalize(claim[start:end])
    protected = protected_names(doc)
    ev_probe = " ".join(doc.sentences).lower()
    for _ in range(8):
        new = rng.choice(pool) if pool else ""
        if (
            new
            and normalize(new) != old
            and normalize(new) not in protected
            and (new not in ev_probe)
        ):
            return claim[:start] + _keep_case(claim[start:end], new) + claim[end:]
    return None
