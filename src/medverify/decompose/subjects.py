"""Subject resolution: every claim names what it is about (:func:`resolve_subjects`).

A claim is checked on its own, so "It is taken with meals." or "Start with 5000 mg daily."
cannot be checked: the retriever and the exact checks do not know which drug it is about.
Claims are read in answer order; each one's grammatical subject (:func:`subject_of`) is
remembered, and a claim that has none takes the previous claim's subject, else the
question's topic (:func:`question_topic`):

- a referring pronoun or demonstrative at the start of the claim or of its main clause
  ("It", "It's", "Its", "They", "Their", "This drug", "These medications", "In rare cases,
  it ...") is replaced by the subject, when their number agrees;
- after a dummy "it" opener ("It is important to note that this medication ...", "It is
  recommended to take it ..."), the first pronoun or demonstrative is replaced; the dummy
  "it" itself is kept;
- an imperative names the subject after its verb when the verb takes the drug as its
  object and a preposition or number follows ("Start with 5000 mg daily." -> "Start
  metformin with 5000 mg daily.", "Take it with food." -> "Take metformin with food."),
  else, for instructions about taking or using something or seeking care, it gets a
  "For <subject>, " lead ("For metformin, avoid drinking alcohol."); an imperative that
  already names the subject, a list label ("Place and route: Use ...") and a general
  instruction ("Keep in mind ...") are kept;
- a claim that starts with a participle or a predicate adjective ("Used to treat acne.",
  "Available over the counter.") gets "<subject> is/are" in front.

Resolution is conservative: without a confident subject (a short noun phrase whose number
agrees) the claim is left as it is. Claims that already have a subject are unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from medverify.decompose.clauses import _AUX, _THIRD_PERSON, _word
from medverify.decompose.subject_phrase import (
    _IMPERATIVE,
    _LEAD_PHRASE,
    _NO_SUBJECT,
    _STOP,
    _SUBORDINATORS,
    _WORD,
    Subject,
    _dummy_end,
    _set,
    is_dummy_it,
    main_clause,
    proper_words,
    question_topic,
    strip_leading,
    subject_of,
)

__all__ = ["Subject", "is_dummy_it", "question_topic", "resolve_subjects", "subject_of"]

_GENERIC = _set(
    "drug drugs medication medications medicine medicines condition conditions disease "
    "diseases infection infections virus viruses vaccine vaccines test tests treatment "
    "treatments therapy therapies supplement supplements product products cream creams agent "
    "agents disorder disorders illness illnesses procedure procedures pill pills tablet "
    "tablets antibiotic antibiotics ointment ointments")
_SINGULAR_PRONOUNS = frozenset({"it", "its", "it's", "it’s"})
_DEMONSTRATIVES = {"this": False, "that": False, "these": True, "those": True}
# Instructions that get a "For <subject>, " lead: about taking or using something, or
# advice to seek care; not "note", "keep in mind", "ensure", "consider", "follow", ...
_FOR_VERBS = _set(
    "take start stop avoid use apply seek call contact see visit drink eat wash limit "
    "increase reduce decrease discontinue continue inject administer taper swallow chew "
    "crush split skip double miss wear elevate rest monitor check give store")
_OBJECT_VERBS = _set(
    "take start stop use apply continue discontinue give inject administer taper store "
    "swallow chew dissolve mix shake")
_OBJECT_FOLLOWERS = _set(
    "with at in on for after before by once twice daily every up until only within "
    "immediately as orally regularly exactly each per three four two one")
_IMPERATIVE_LEAD = re.compile(r"(?:(?:do not|don't|don’t|never|always|please|then|now)\s+)+",
                              re.IGNORECASE)
_PREDICATES = _set(
    "used taken given approved prescribed indicated recommended available contraindicated "
    "administered applied known found caused characterized associated metabolized excreted "
    "absorbed sold marketed derived considered effective safe sometimes")
_PREDICATE_LEAD = re.compile(r"(?:(?:usually|typically|often|generally|commonly|also|only|"
                             r"mainly|mostly|primarily|widely|best)\s+)*", re.IGNORECASE)
_REFERENCE = re.compile(
    r"(?P<pro>it's|it’s|its|it|they're|they’re|their|they|them)\b"
    r"|(?P<dem>this|that|these|those)\s+(?P<noun>[A-Za-z]+)\b(?![-’'])", re.IGNORECASE)
_PEOPLE = _set(
    "people patients adults children doctors physicians clinicians men women infants babies "
    "individuals persons users you providers pharmacists nurses parents")
_ADVICE = _set("seek call see contact go visit consult tell ask inform")
_PREDICATE_FOLLOWERS = _set(
    "to for in by with as over under only at on from during after before without when if "
    "orally once twice daily")


_OBJECT_PRONOUN = re.compile(r"\b(?:it|them)\s*[.,;:!?)]", re.IGNORECASE)
"""A pronoun ending a clause of the previous claim ("A blood test can confirm it."): it
names something other than that claim's subject, and a pronoun in the next claim most
likely names the same thing, so the previous subject is not taken for it."""


@dataclass(frozen=True, slots=True)
class _Context:
    previous: Subject | None
    topic: Subject | None
    proper: frozenset[str]
    previous_points_elsewhere: bool = False  # the previous claim ends a clause on a pronoun

    def pick(self, plural: bool | None, topic_only: bool = False,
             things: bool = False) -> Subject | None:
        """The previous claim's subject, else the question's topic, when the number agrees
        (``things``: not a group of people, for an instruction); only the topic when the
        previous claim's own pronoun points elsewhere (:data:`_OBJECT_PRONOUN`)."""
        skip_previous = topic_only or self.previous_points_elsewhere
        for found in ((self.topic,) if skip_previous else (self.previous, self.topic)):
            if found is None or (plural is not None and not found.agrees(plural)):
                continue
            if things and _word(found.text.split()[-1]) in _PEOPLE:
                continue
            return found
        return None


def _possessive(phrase: str) -> str:
    return phrase + ("'" if phrase.endswith("s") else "'s")


def _lower_first(text: str) -> str:
    first = text.split(maxsplit=1)[0] if text.strip() else ""
    if first[:1].isupper() and first[1:2].islower():
        return text[:1].lower() + text[1:]
    return text


def _replace_reference(text: str, pos: int, ctx: _Context) -> tuple[str, Subject] | None:
    """Replace the pronoun or demonstrative noun phrase at ``pos`` by the subject."""
    match = _REFERENCE.match(text, pos)
    if match is None:
        return None
    word = (match.group("pro") or match.group("dem")).lower().replace("’", "'")
    if match.group("dem"):
        if match.group("noun").lower() not in _GENERIC:
            return None
        plural: bool = _DEMONSTRATIVES[word]
    elif word in ("it", "it's") and is_dummy_it(text[pos:]):
        return None
    else:
        plural = word not in _SINGULAR_PRONOUNS
    subject = ctx.pick(plural)
    if subject is None:
        return None
    phrase = subject.phrase(not text[:pos].strip(), ctx.proper)
    after = text[match.end():]
    if word in ("its", "their"):
        if _word(after.split(maxsplit=1)[0] if after.strip() else "") == _word(
                subject.text.split()[-1]):
            return None  # "their assets" after "Assets ...": not a possessive of itself
        phrase = _possessive(phrase)
    elif word == "it's":
        phrase += " has" if after.split(maxsplit=1)[:1] == ["been"] else " is"
    elif word == "they're":
        phrase += " are"
    return text[:pos] + phrase + after, subject


def _reference_positions(text: str) -> list[int]:
    """Where a claim's subject may be a pronoun: the start (after discourse markers), the
    word after a leading subordinator or preposition ("When it lasts ..."), and the start
    of the main clause after a leading phrase ("In rare cases, it ..."), unless that phrase
    is a subordinate clause with a subject of its own ("When a migraine lasts ..., it")."""
    body = strip_leading(text)
    start = len(text) - len(body)
    positions = [start]
    first = body.split(maxsplit=1)[0] if body.strip() else ""
    if _word(first) not in _LEAD_PHRASE:
        return positions
    second = re.match(r"\S+\s+", body)
    if second is not None:
        positions.append(start + second.end())
    own_subject = (_word(first) in _SUBORDINATORS and second is not None
                   and _REFERENCE.match(body, second.end()) is None)
    clause_at = len(text) - len(main_clause(text))
    if clause_at != start and not own_subject:
        positions.append(clause_at)
    return positions


def _resolve_reference(text: str, ctx: _Context) -> tuple[str, Subject] | None:
    for pos in _reference_positions(text):
        if text[pos:].lower().startswith(("it ", "it's", "it’s")) and is_dummy_it(text[pos:]):
            found = _resolve_after_dummy(text, pos, ctx)
        else:
            found = _replace_reference(text, pos, ctx)
        if found is not None:
            return found
    return None


def _resolve_after_dummy(text: str, pos: int, ctx: _Context) -> tuple[str, Subject] | None:
    """After "It is important to note that ...": the first pronoun or demonstrative before
    any content word ("... that this medication can cause ...", "... to use it for ...")."""
    end = _dummy_end(text, pos)
    assert end is not None
    for word in re.finditer(r"\S+", text[end:]):
        at = end + word.start()
        if _REFERENCE.match(text, at) and _word(word.group()) != "that":
            return _replace_reference(text, at, ctx)
        lower = _word(word.group())
        if lower not in _STOP and lower not in _IMPERATIVE and lower not in _AUX:
            return None
    return None


def _names(subject: Subject, text: str) -> bool:
    """Does ``text`` already name the subject (one of its content words)?"""
    words = {w.lower() for w in _WORD.findall(text)}
    return any(w.lower() in words for w in _WORD.findall(subject.text)
               if len(w) >= 3 and w.lower() not in _STOP)


def _resolve_imperative(text: str, ctx: _Context) -> tuple[str, Subject] | None:
    start = len(text) - len(strip_leading(text))
    lead = _IMPERATIVE_LEAD.match(text, start)
    verb_at = lead.end() if lead else start
    words = text[verb_at:].split()
    if len(words) < 2 or (not text[verb_at].isupper() and verb_at == start == 0):
        return None
    verb, nxt = _word(words[0]), _word(words[1])
    if verb not in _IMPERATIVE or nxt == "of" or nxt in _AUX or nxt in _THIRD_PERSON:
        return None
    subject = ctx.pick(None, topic_only=verb in _ADVICE, things=True)
    if subject is None or _names(subject, text):
        return None
    phrase = subject.phrase(False, ctx.proper)
    after_verb = verb_at + len(words[0])
    if nxt in ("it", "them"):
        return _replace_reference(text, text.index(words[1], after_verb), ctx)
    if verb in _OBJECT_VERBS and (nxt in _OBJECT_FOLLOWERS or words[1][:1].isdigit()):
        return text[:after_verb] + f" {phrase}" + text[after_verb:], subject
    if verb not in _FOR_VERBS or ":" in " ".join(words[:8]):
        return None  # a general instruction, or a list item's label ("Place and route: ...")
    if start == 0:
        return f"For {phrase}, {_lower_first(text)}", subject
    return f"{text[:start].rstrip().rstrip(',')}, for {phrase}, {text[start:]}", subject


def _resolve_predicate(text: str, ctx: _Context) -> tuple[str, Subject] | None:
    """"Used to treat acne." -> "<subject> is used to treat acne."."""
    start = len(text) - len(strip_leading(text))
    body = text[start:]
    adverbs = _PREDICATE_LEAD.match(body)
    words = body[adverbs.end() if adverbs else 0:].split()
    if len(words) < 2 or _word(words[0]) not in _PREDICATES:
        return None
    if _word(words[1]) not in _PREDICATE_FOLLOWERS:
        return None
    subject = ctx.pick(None)
    if subject is None:
        return None
    verb = "are" if subject.plural else "is"
    phrase = subject.phrase(start == 0, ctx.proper)
    return f"{text[:start]}{phrase} {verb} {_lower_first(body)}", subject


def _keeps_subject(text: str) -> bool:
    """A claim without a subject of its own (a pronoun, a dummy "it", "there", an
    instruction) keeps the previous claim's subject for the next claim; a claim whose
    subject is a noun phrase this module cannot read does not."""
    clause = _IMPERATIVE_LEAD.sub("", main_clause(text), count=1)
    first = _word(clause.split(maxsplit=1)[0]) if clause.strip() else ""
    return first in _NO_SUBJECT or first in _IMPERATIVE


_RESOLVERS = (_resolve_reference, _resolve_imperative, _resolve_predicate)


def resolve_subjects(texts: Sequence[str], question: str | None = None,
                     answer: str = "") -> list[str]:
    """The claims in answer order, each naming its subject where it had none (see the
    module docstring); a claim that already has one is returned unchanged."""
    known: dict[int, Subject | None] = {}

    def subject(i: int) -> Subject | None:
        if i not in known:
            known[i] = subject_of(texts[i])
        return known[i]

    topic = question_topic(question, (subject(i) for i in range(len(texts))))
    ctx = _Context(None, topic, proper_words(f"{question or ''}\n{answer}"))
    out: list[str] = []
    for i, text in enumerate(texts):
        new, used = text, None
        for resolver in _RESOLVERS:
            found = resolver(text, ctx)
            if found is not None:
                new, used = found
                break
        out.append(new)
        own = subject(i) if new == text else subject_of(new)
        previous = own or used or (ctx.previous if _keeps_subject(new) else None)
        ctx = _Context(previous, ctx.topic, ctx.proper,
                       _OBJECT_PRONOUN.search(text) is not None)
    return out
