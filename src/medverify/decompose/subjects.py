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
  else it gets a "For <subject>, " lead ("For metformin, avoid alcohol."); an imperative
  that already names the subject is kept;
- a claim that starts with a participle or a predicate adjective ("Used to treat acne.",
  "Available over the counter.") gets "<subject> is/are" in front.

Resolution is conservative: without a confident subject (a short noun phrase whose number
agrees) the claim is left as it is. Claims that already have a subject are unchanged.
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
    r"|suggested|required|needed|known|believed|thought|estimated|worth|noting|difficult"
    r"|hard|easy|reasonable|appropriate|okay|ok|fine|good|bad|a|an|the|time|idea|unusual"
    r"|usual|rarely|sometimes|generally|acceptable|beneficial|dangerous|vital|prudent"
    r"|imperative|advised|wise|preferable|true|false|uncertain|encouraged|expected"
    r"|only|just|safest|easiest|wisest|simplest|sensible|customary|standard|routine"
    r"|recommendable)){0,5})"
    r" (?:to|that|if|whether|for(?: [\w-]+){1,5} to)\b"
    r"|it (?:takes|took|can take|may take|might take|will take)(?: [\w-]+){0,5}?"
    r" (?:to|for|before)\b",
    re.IGNORECASE)
_GENERIC = _set(
    "drug drugs medication medications medicine medicines condition conditions disease "
    "diseases infection infections virus viruses vaccine vaccines test tests treatment "
    "treatments therapy therapies supplement supplements product products cream creams agent "
    "agents disorder disorders illness illnesses procedure procedures pill pills tablet "
    "tablets antibiotic antibiotics ointment ointments")
_SINGULAR_PRONOUNS = frozenset({"it", "its", "it's", "it’s"})
_PLURAL_PRONOUNS = frozenset({"they", "their", "them", "they're", "they’re"})
_DEMONSTRATIVES = {"this": False, "that": False, "these": True, "those": True}
_NO_SUBJECT = _set(
    "it its it's it’s they their them this that these those there here you your i we our my "
    "he she his her one some many most all both each other others none such what which who "
    "how when if yes no")
_IMPERATIVE = _set(
    "take start stop avoid use apply seek see call keep try drink eat wash get make give "
    "continue consider record check monitor ask wait rest limit increase reduce discontinue "
    "follow remember wear change elevate consult contact go visit tell let stay place sit "
    "measure repeat clean cover gargle soak schedule inform note inject administer taper "
    "decrease store swallow chew dissolve mix shake ensure crush split cut skip double miss "
    "share drive operate")
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


def is_dummy_it(text: str) -> bool:
    """True when ``text`` opens with an expletive "it" ("It is important to ...", "It's
    worth noting that ...", "It is recommended that ...", "It takes 2 weeks to ...")."""
    return _DUMMY_IT.match(text) is not None


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
    while i < len(words) and words[i].lower() in _QUESTION_SKIP:
        i += 1
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
    if len(out) == 1 and out[0].lower().endswith(("al", "ous", "ful", "ive", "ing")):
        return None  # an adjective or a verb form ("fungal"), not a topic
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


_REFERENCE = re.compile(
    r"(?P<pro>it's|it’s|its|it|they're|they’re|their|they|them)\b"
    r"|(?P<dem>this|that|these|those)\s+(?P<noun>[A-Za-z]+)\b", re.IGNORECASE)
_PEOPLE = _set(
    "people patients adults children doctors physicians clinicians men women infants babies "
    "individuals persons users you providers pharmacists nurses parents")
_ADVICE = _set("seek call see contact go visit consult tell ask inform")
_PREDICATE_FOLLOWERS = _set(
    "to for in by with as over under only at on from during after before without when if "
    "orally once twice daily")


@dataclass(frozen=True, slots=True)
class _Context:
    previous: Subject | None
    topic: Subject | None
    proper: frozenset[str]

    def pick(self, plural: bool | None, topic_only: bool = False,
             things: bool = False) -> Subject | None:
        """The previous claim's subject, else the question's topic, when the number agrees
        (``things``: not a group of people, for an instruction)."""
        for found in ((self.topic,) if topic_only else (self.previous, self.topic)):
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
    dummy = _DUMMY_IT.match(text, pos)
    assert dummy is not None
    for word in re.finditer(r"\S+", text[dummy.end():]):
        at = dummy.end() + word.start()
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


def proper_words(text: str) -> frozenset[str]:
    """Capitalised words that ``text`` writes inside a sentence (names: "Lexapro")."""
    found = re.findall(r"(?<![.!?:\n]\s)(?<![.!?:\n])(?<=\s)([A-Z][a-z][\w-]*)", text)
    return frozenset(found)


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
        ctx = _Context(previous, ctx.topic, ctx.proper)
    return out
