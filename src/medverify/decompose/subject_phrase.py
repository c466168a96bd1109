"""Reading a claim's subject, for subject resolution (:mod:`medverify.decompose.subjects`).

:func:`subject_of` reads the subject noun phrase of a claim's main clause (a short noun
phrase before its first finite verb, with its number); :func:`question_topic` finds what a
question is about; :func:`is_dummy_it` tells an expletive "it" ("It is important to ...")
from a referring one; :func:`strip_leading` and :func:`main_clause` skip discourse markers
and a leading phrase; :func:`proper_words` lists the capitalised names of a text. English
word lists only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from medverify.decompose.clauses import _AUX, _BASE, _NOUN_LIKE, _PAST, _THIRD_PERSON, _word


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


_MARKERS = (
    r"however|also|additionally|moreover|furthermore|therefore|thus|hence|so|but|and|then"
    r"|finally|overall|yes|no|importantly|notably|otherwise|instead|likewise|similarly"
    r"|consequently|indeed|still|meanwhile|first|second|third|lastly|nevertheless"
    r"|in addition|in general|in fact|as a result|in short|in summary|in most cases"
    r"|generally|typically|usually|often"
)
_LEADING = re.compile(rf"(?:(?:{_MARKERS})(?:,\s*|\s+(?=[A-Za-z])))+", re.IGNORECASE)
_LEAD_PHRASE = _set(
    "if when while although though as after before during in for with because since unless "
    "once whether at on among from by to without upon despite like unlike given whilst")
_DUMMY_IT = re.compile(
    r"it(?:'s|’s| is| was| may be| can be| might be| could be| would be| will be| should be"
    r"| has been| seems| appears| remains| becomes)"
    r"((?: (?:not|also|very|highly|generally|usually|often|always|still|therefore|thus"
    r"|typically|strongly|especially|particularly|equally|absolutely|extremely|really|quite"
    r"|best|better|more|most|less|least|important|essential|crucial|critical|key|vital"
    r"|necessary|unnecessary|possible|impossible|likely|unlikely|unclear|clear|common"
    r"|uncommon|rare|safe|unsafe|advisable|wise|helpful|useful|normal|recommended|advised"
    r"|suggested|required|needed|worth|noting|difficult"
    r"|hard|easy|reasonable|appropriate|okay|ok|fine|good|bad|a|an|the|time|idea|unusual"
    r"|usual|rarely|sometimes|generally|acceptable|beneficial|dangerous|vital|prudent"
    r"|imperative|advised|wise|preferable|true|false|uncertain|encouraged|expected"
    r"|only|just|safest|easiest|wisest|simplest|sensible|customary|standard|routine"
    r"|recommendable|invaluable|valuable|mandatory|compulsory|advantageous|smart|vital"
    r"|appropriate|desirable|preferable|customary|sensible|permissible|ideal)){0,5})"
    r" (?:to|that|if|whether|for(?: [\w-]+){1,5} to)\b"
    r"|it (?:takes|took|can take|may take|might take|will take)(?: [\w-]+){0,5}?"
    r" (?:to|for|before)\b",
    re.IGNORECASE)
_NO_SUBJECT = _set(
    "it its it's it’s they their them this that these those there here you your i we our my "
    "he she his her one some many most all both each other others none such what which who "
    "how when if yes no where why whether imagine suppose note let consider remember please")
_IMPERATIVE = _set(
    "take start stop avoid use apply seek see call keep try drink eat wash get make give "
    "continue consider record check monitor ask wait rest limit increase reduce discontinue "
    "follow remember wear change elevate consult contact go visit tell let stay place sit "
    "measure repeat clean cover gargle soak schedule inform note inject administer taper "
    "decrease store swallow chew dissolve mix shake ensure crush split cut skip double miss "
    "share drive operate")
_STOP = _set(
    "the a an and or of to in on for with at by from is are was were be been can may might "
    "could should would will do does did not no it its this that these those what how when "
    "why which who whom there their they them you your i me my we our us he she his her "
    "about also any some much many more most very than then so if as into over such just "
    "have has had get got take taking know dont don't can't cant thing things")
_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*")
_MAX_SUBJECT_WORDS = 7
_MAX_WITH_PREPOSITION = 5
_PREPOSITIONS = _set("for in on with at by from to into about against between among without")
_VERB_WINDOW = 20


@dataclass(frozen=True, slots=True)
class Subject:
    """A claim's subject noun phrase as written, and whether it is plural (None: unknown)."""

    text: str
    plural: bool | None

    def agrees(self, plural: bool) -> bool:
        return self.plural is None or self.plural == plural

    def phrase(self, start: bool, proper: frozenset[str] = frozenset()) -> str:
        """The phrase to put in a claim: "a"/"an" become "the"; capitalised at the start of
        the claim; elsewhere a capitalised first word is lowered unless the answer or the
        question writes it capitalised inside a sentence (``proper``: a name)."""
        text = re.sub(r"^(?:a|an)\s", "the ", self.text, flags=re.IGNORECASE)
        if start:
            return text[:1].upper() + text[1:]
        first, _, rest = text.partition(" ")
        if first[:1].isupper() and first[1:].islower() and first not in proper:
            first = first.lower()
        return f"{first} {rest}".strip()


def _stems(text: str) -> set[str]:
    return {w.lower()[:5] for w in _WORD.findall(text)
            if len(w) >= 4 and w.lower() not in _STOP and w.lower() not in _IMPERATIVE}


def strip_leading(text: str) -> str:
    """``text`` without leading discourse markers ("However, ", "In addition, ", "Yes, ")."""
    match = _LEADING.match(text)
    return text[match.end():] if match else text


def main_clause(text: str) -> str:
    """The main clause of ``text``: after discourse markers and after a leading
    prepositional or subordinate phrase that ends with a comma ("In rare cases, ...")."""
    text = strip_leading(text)
    first = _word(text.split(maxsplit=1)[0]) if text.strip() else ""
    if first in _LEAD_PHRASE:
        comma = text.find(",")
        if comma > 0 and len(text[:comma].split()) <= 12:
            return strip_leading(text[comma + 1:].lstrip())
    return text


_DUMMY_THAT = re.compile(
    r"it(?:'s|’s| is| was| may be| can be| might be| could be| would be| will be| seems"
    r"| appears| remains| has been| should be| must be| should also be| must also be)"
    r"(?: (?!(?:a|an|the|this|these|its|their|in|by|for|with|of|on|at|from|to)\b)[\w-]+){1,3}"
    r" (?:that|whether|if)\b"
    r"|it(?:'s|’s| is| may be| might be| can be)(?: also| still| always| well)? worth\b"
    r"|it(?:'s|’s| is| was| should| must| can| may)(?: also)?(?: be)? (?:noted|explained"
    r"|mentioned|emphasi[sz]ed|stressed|remembered|understood|recognized|acknowledged|argued"
    r"|said|reported|believed|known|thought)(?: [\w-]+){0,4}? that\b",
    re.IGNORECASE)


def _dummy_end(text: str, pos: int = 0) -> int | None:
    """Where a dummy "it" opener at ``pos`` ends, or None."""
    match = _DUMMY_IT.match(text, pos) or _DUMMY_THAT.match(text, pos)
    return match.end() if match else None


def is_dummy_it(text: str) -> bool:
    """True when ``text`` opens with an expletive "it" ("It is important to ...", "It's
    worth noting that ...", "It is recommended that ...", "It takes 2 weeks to ...", "It
    is particularly noteworthy that ...")."""
    return _dummy_end(text) is not None


_CUT = frozenset({"that", "which", "who", "whose", "whom", "where", "when", "if", "such"})
_LONG_BRACKET = re.compile(r"\s*\((?:[^()]*[,;][^()]*|(?:[^\s()]+\s+){2,}[^\s()]+)\)")
_SINGULAR_VERBS = frozenset({"is", "was", "has", "does", "isn't", "wasn't", "hasn't", "doesn't"})
_PLURAL_VERBS = frozenset({"are", "were", "have", "do", "aren't", "weren't", "haven't", "don't"})
_EXTRA_THIRD = _set(
    "includes belongs refers means consists acts feels looks comes goes lasts stays plays "
    "happens varies ranges works needs helps causes affects occurs")
_SINGULAR_S = _set(
    "diabetes herpes measles mumps rabies scabies news series species lupus mellitus virus "
    "sepsis psoriasis arthritis syndrome pertussis tetanus")
_SUBORDINATORS = _set(
    "if when while although though because since unless once as after before whenever "
    "whereas")


_ABSTRACT_HEADS = _set(
    "cause causes risk risks benefit benefits use effect effects symptom symptoms sign signs "
    "treatment type types dose number amount level levels rate goal aim purpose mechanism "
    "duration severity diagnosis management part kind form side")


def _verb_at(words: Sequence[str]) -> int | None:
    """Index of the first finite verb after the first word (a noun read as a verb, as in
    "The causes of ...", is skipped when "of" or a verb follows it)."""
    for k in range(1, min(len(words), _VERB_WINDOW)):
        word = _word(words[k])
        nxt = _word(words[k + 1]) if k + 1 < len(words) else ""
        if word in _AUX or word in _PAST:
            return k
        if word in _BASE and word not in _NOUN_LIKE and _word(words[k - 1]).endswith("s"):
            return k  # "Statins lower ..."
        if (word in _THIRD_PERSON or word in _EXTRA_THIRD) and not (
                nxt == "of" or nxt in _AUX or nxt in _THIRD_PERSON):
            return k
    return None


_APPOSITION = _set("a an the which who sold known also commonly often usually sometimes "
                   "including such like or marketed called")


def _subject_words(words: Sequence[str]) -> list[str]:
    """The subject's words: up to a relative word, or to a comma that opens an apposition
    ("Escitalopram, sold under ..."); a comma inside a list of adjectives ("The thin,
    flexible tube") gives no subject."""
    out: list[str] = []
    depth = 0
    for i, raw in enumerate(words):
        if not depth and _word(raw) in _CUT:
            break
        depth += raw.count("(")
        out.append(raw)
        depth -= raw.count(")")
        if not depth and raw.endswith(","):
            nxt = _word(words[i + 1]) if i + 1 < len(words) else ""
            return out if nxt in _APPOSITION or nxt.endswith("ed") else []
    while out and "(" in " ".join(out) and depth > 0:  # an unclosed bracket: cut before it
        out = " ".join(out).split("(")[0].split()
        depth = 0
    return out


def _plural(subject: str, verb: str) -> bool | None:
    words = re.sub(r"\([^()]*\)", "", subject.lower()).split()
    if not words:
        return None
    if "and" in words:
        return True
    if verb in _SINGULAR_VERBS or verb in _THIRD_PERSON or verb in _EXTRA_THIRD:
        return False
    if verb in _PLURAL_VERBS or verb in _BASE:
        return True
    head = words[words.index("of") - 1] if "of" in words[1:] else words[-1].strip("(),")
    if head.endswith(("ss", "us", "is")) or head in _SINGULAR_S:
        return False
    return head.endswith("s")


def subject_of(text: str) -> Subject | None:
    """The subject noun phrase of a claim's main clause, if it is a short noun phrase
    (at most five words, no pronoun, not an imperative), with its number."""
    words = main_clause(text).split()
    if len(words) < 2:
        return None
    first = _word(words[0])
    if first in _NO_SUBJECT or first in _LEAD_PHRASE or (
            (first in _BASE or first in _IMPERATIVE) and _word(words[1]) != "of"):
        return None
    k = _verb_at(words)
    if k is None:
        return None
    kept = _subject_words(words[:k])
    phrase = _LONG_BRACKET.sub("", " ".join(kept)).rstrip(",;:")
    kept = phrase.split()
    if not kept or len(kept) > _MAX_SUBJECT_WORDS or first in ("your", "my", "our"):
        return None
    if len(kept) > _MAX_WITH_PREPOSITION and any(_word(w) in _PREPOSITIONS for w in kept):
        return None
    if _word(kept[-1]) in _STOP:
        return None
    lowered = [_word(w) for w in kept]
    if "of" in lowered[1:] and lowered[lowered.index("of") - 1] in _ABSTRACT_HEADS:
        return None  # "The exact cause of blepharitis": "it" rarely means the cause
    if len(kept) == 1 and lowered[0] in _ABSTRACT_HEADS:
        return None
    if not all(re.fullmatch(r"[\w'’()/+-]+,?", w) for w in kept):
        return None
    if all(_word(w) in _STOP for w in kept):
        return None
    return Subject(phrase, _plural(phrase, _word(words[k])))


_QUESTION_SKIP = _STOP | _set(
    "what what's whats how is are does do can could should would will tell more long often "
    "why alright hi hello please okay ok well im i'm i've ive question one anything "
    "something best way need want know use using getting measure treat treated prevent stop "
    "start manage cure avoid help safe normal good bad possible causes cause causing symptoms "
    "side effects effect difference between same like thoughts mean means okay usual "
    "dose dosage work works happen happens go away last take taking took but or always never "
    "ever even still really come comes feel feels look turn become cause case turn out")


def _question_phrase(question: str) -> Subject | None:
    words = [w for w in re.findall(r"[\w'’-]+", question)]
    i = 0
    while i < len(words) and (words[i].lower() in _QUESTION_SKIP
                              or words[i].lower() in _NO_SUBJECT
                              or words[i].lower() in _IMPERATIVE):
        i += 1
    lowered = [w.lower() for w in words[i: i + 5]]
    if "of" in lowered[1:]:  # "the common causes of X", "the symptoms of X": X is the topic
        i += lowered.index("of", 1) + 1
    out: list[str] = []
    if i and words[i - 1].lower() == "the":
        out.append("the")
    for word in words[i: i + 4]:
        lower = word.lower()
        if (lower in _QUESTION_SKIP or lower.endswith("ly") or lower in _PAST
                or lower in _THIRD_PERSON or lower in _BASE):
            break
        out.append(word)
    if not any(len(w) >= 3 and w.isalpha() and w != "the" for w in out):
        return None
    if out[-1].lower().endswith(("al", "ous", "ful", "ive", "ing", "ed", "ble", "ly")):
        return None  # an adjective or a verb form ("fungal", "able"), not a topic
    head = out[-1].lower()
    return Subject(" ".join(out), head.endswith("s") and not head.endswith(("ss", "us", "is"))
                   and head not in _SINGULAR_S)


def question_topic(question: str | None,
                   subjects: Iterable[Subject | None]) -> Subject | None:
    """The question's topic: the first claim subject that shares a content word with the
    question ("Liraglutide (Saxenda)" for "... a dose of Saxenda?"), else the first noun
    phrase of the question after its question words ("type 2 diabetes" for "How is type 2
    diabetes treated?"); None without a question."""
    if not question or not question.strip():
        return None
    asked = _stems(question)
    for subject in subjects:
        if subject is not None and _stems(subject.text) & asked:
            return subject
    return _question_phrase(question)


def proper_words(text: str) -> frozenset[str]:
    """Capitalised words that ``text`` writes inside a sentence (names: "Lexapro")."""
    found = re.findall(r"(?<![.!?:\n]\s)(?<![.!?:\n])(?<=\s)([A-Z][a-z][\w-]*)", text)
    return frozenset(found)
