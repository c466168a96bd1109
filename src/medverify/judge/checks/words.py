"""The DIRECTION, POPULATION and DRUG checks of :mod:`medverify.judge.checks`, and their
word lists.

DIRECTION compares each direction word of the claim ("lowers", "increased risk", "slows")
with the direction words of the aligned passage sentences that act on the same thing (share
a content word among the two words after it, or before it for "LDL was reduced"). A curated
list of antonym axes vetoes; antonym pairs read from WordNet (Debian's ``wordnet-base``,
when installed) only mark a verdict not confident.

POPULATION reads groups (children, adults, older adults, men, women, pregnant women, type 1
or type 2 diabetes, ...) and DRUG reads drug and substance names (by suffix, plus a short
list of common names) from both texts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from medverify.judge.checks.text import (
    AUX,
    CLAUSE_PUNCT,
    CLAUSE_WORDS,
    Alignment,
    Doc,
    is_content,
    stem,
    word_list,
    words,
)
from medverify.records import CheckFinding, CheckKind

# --------------------------------------------------------------------------- direction

_AXES = """
amount | increase increases increased increasing raise raises raised raising elevate elevates
  elevated elevating elevation rise rises rising rose boost boosts boosted higher greater more
  upregulate upregulates upregulated upregulation augment augments augmented augmentation
  | decrease decreases decreased decreasing reduce reduces reduced reducing reduction
  reductions lower lowers lowered lowering decline declines declined declining fell drop
  drops dropped diminish diminishes diminished less fewer smaller downregulate downregulates
  downregulated downregulation lessen lessens lessened
quality | improve improves improved improving improvement better benefit benefits benefited
  beneficial favorable favourable | worsen worsens worsened worsening worse harm harms harmed
  harmful detrimental unfavorable unfavourable deteriorate deteriorates deteriorated
  deterioration impair impairs impaired impairment
speed | accelerate accelerates accelerated accelerating acceleration faster hasten hastens
  hastened quicker quicken quickens quickened | slow slows slowed slowing slower delay delays
  delayed delaying decelerate decelerates decelerated
length | shorten shortens shortened shortening shorter | prolong prolongs prolonged
  prolonging prolongation lengthen lengthens lengthened longer
activity | activate activates activated activating activation stimulate stimulates
  stimulated stimulating stimulation promote promotes promoted promoting induce induces
  induced inducing potentiate potentiates potentiated facilitate facilitates facilitated
  cause causes caused causing | inhibit inhibits inhibited inhibiting inhibition suppress
  suppresses suppressed suppressing suppression prevent prevents prevented preventing
  impede impedes impeded hinder hinders hindered attenuate attenuates attenuated
sign | positive positively | negative negatively
level | high | low
efficacy | effective efficacious | ineffective
safety | safe | unsafe
excess | excess excessive | deficiency deficient insufficient insufficiency
rank | superior | inferior
gain | gain gains gained gaining | loss losses lose loses losing lost
agonism | agonist agonists | antagonist antagonists
"""
"""Direction axes: ``name | up words | down words``. Words of one side agree; words of
opposite sides on one axis contradict each other when they act on the same thing."""


def _axes(text: str) -> dict[str, tuple[str, int]]:
    """{stem: (axis, sign)} from ``_AXES``-style text."""
    out: dict[str, tuple[str, int]] = {}
    for block in re.split(r"\n(?=\S)", text.strip()):
        name, up, down = (part.strip() for part in block.split("|"))
        for sign, side in ((1, up), (-1, down)):
            out.update((stem(w), (name, sign)) for w in word_list(side))
    return out


DIRECTIONS = _axes(_AXES)
"""{stem: (axis, +1 or -1)} for every curated direction word."""
PHRASAL = {("speed", "up"): ("speed", 1), ("sped", "up"): ("speed", 1)}
"""Direction words that need the next word ("speeds up"), by stem and next word."""
_NOUNS = words("gain gains loss losses")
"""Direction nouns that act on the word before them ("weight gain", "hearing loss")."""
_GENERIC = words(
    "up down level levels concentration concentrations rate rates amount amounts number "
    "numbers value values count counts expression activity effect effects risk risks "
    "incidence odds significantly markedly substantially slightly greatly dramatically")
"""Words skipped when looking for what a direction word acts on."""
_COMPARE = words("than versus vs compared relative")
_REVERSALS = frozenset(stem(w) for w in word_list(
    "deficiency deficient deficiencies lack lacking absence absent loss knockout knockdown "
    "deletion deleted depletion depleted inhibitor inhibitors blockade blocking antagonist "
    "antagonists withdrawal null silencing silenced mutant mutants mutation mutations "
    "ablation disruption"))
"""Words that reverse the sign of what follows ("deficiency of folate increases"): when only
one side has one, a direction difference may be composed and does not veto."""
WORDNET_DIR = Path("/usr/share/wordnet")
_WORDNET_SKIP = words(
    "lead follow give take come make keep stay remain leave bring send find lose know "
    "ignore remember forget push pull start finish begin ask answer have lack")
"""Common verbs whose WordNet antonyms are mostly other senses ("leads to" vs "follow")."""


@dataclass(slots=True)
class Turn:
    """A direction word at token ``at``: its axis, sign, the stems of what it acts on,
    the token range to quote, and the stem after "than" in a comparison ("" if none)."""

    at: int
    axis: str
    sign: int
    objects: frozenset[str]
    head: str
    quote: tuple[int, int]
    than: str
    curated: bool

    def acts_like(self, other: Turn) -> bool:
        """Do the two act on the same thing: the same head (the last object after the word,
        or the nearest before it) or two shared objects?"""
        return self.head == other.head or len(self.objects & other.objects) >= 2


def wordnet_antonyms(root: Path = WORDNET_DIR) -> dict[str, frozenset[str]]:
    """{stem: stems of its antonyms} from WordNet's adjective and verb data files under
    ``root`` (single words of 4+ letters), or {} when the files are absent. Read once per
    root and cached."""
    return _wordnet(str(root))


@lru_cache(maxsize=4)
def _wordnet(root: str) -> dict[str, frozenset[str]]:
    pairs: dict[str, set[str]] = {}
    for name in ("data.adj", "data.verb"):
        path = Path(root) / name
        try:
            lines = path.read_text("utf-8", errors="replace").splitlines()
        except OSError:
            continue
        synsets: dict[str, list[str]] = {}
        pointers: list[tuple[str, int, str, int]] = []
        for line in lines:
            if line[:1].isdigit():
                _wordnet_line(line, synsets, pointers)
        for offset, source, target_offset, target in pointers:
            left, right = synsets.get(offset, []), synsets.get(target_offset, [])
            if 0 < source <= len(left) and 0 < target <= len(right):
                _add_pair(pairs, left[source - 1], right[target - 1])
    return {word: frozenset(others) for word, others in pairs.items()}


def _wordnet_line(line: str, synsets: dict[str, list[str]],
                  pointers: list[tuple[str, int, str, int]]) -> None:
    fields = line.split(" | ", 1)[0].split()
    try:
        count = int(fields[3], 16)
        names = [re.sub(r"\(.*\)$", "", w).lower() for w in fields[4: 4 + 2 * count: 2]]
        at = 4 + 2 * count
        for k in range(int(fields[at])):
            symbol, target, _pos, ends = fields[at + 1 + 4 * k: at + 5 + 4 * k]
            if symbol == "!":
                pointers.append((fields[0], int(ends[:2], 16), target, int(ends[2:], 16)))
    except (IndexError, ValueError):
        return
    synsets[fields[0]] = names


def _add_pair(pairs: dict[str, set[str]], left: str, right: str) -> None:
    if not (left.isalpha() and right.isalpha() and len(left) > 3 and len(right) > 3):
        return
    if left in _WORDNET_SKIP or right in _WORDNET_SKIP:
        return
    a, b = stem(left), stem(right)
    if a == b or a in DIRECTIONS or b in DIRECTIONS:
        return
    pairs.setdefault(a, set()).add(b)
    pairs.setdefault(b, set()).add(a)


def turns(doc: Doc, a: int, b: int, antonyms: dict[str, frozenset[str]]) -> list[Turn]:
    """The direction words of tokens ``[a, b)`` that are not negated, with what they act
    on. A WordNet word gets one axis per antonym (not curated)."""
    out = []
    for i in range(a, b):
        if doc.negated[i]:
            continue
        word = doc.stems[i]
        axes: list[tuple[str, int, bool]] = []
        phrasal = PHRASAL.get((word, doc.low[i + 1] if i + 1 < b else ""))
        if phrasal is not None:
            axes.append((*phrasal, True))
        elif word in DIRECTIONS:
            axis, sign = DIRECTIONS[word]
            axes.append((axis, sign, True))
        elif word in antonyms and is_content(doc.low[i]):
            axes.extend((f"wn:{min(word, o)}|{max(word, o)}", 1 if word < o else -1, False)
                        for o in antonyms[word])
        if not axes:
            continue
        objects, head, quote = _objects(doc, i, a, b) if not _noun(doc, i, a) else (
            frozenset({doc.stems[i - 1]}), doc.stems[i - 1], (i - 1, i + 1))
        if objects:
            than = _than(doc, i, b)
            out.extend(Turn(i, axis, sign, objects, head, quote, than, curated)
                       for axis, sign, curated in axes)
    return out


def _objects(doc: Doc, i: int, a: int, b: int,
             ) -> tuple[frozenset[str], str, tuple[int, int]]:
    """What the direction word at ``i`` acts on: up to two content stems after it (and
    before it when it follows an auxiliary, "LDL was reduced", or nothing follows), the
    head among them, and the token range to quote."""
    after, last = _scan(doc, range(i + 1, min(b, i + 7)))
    first = i
    passive = i > a and doc.low[i - 1] in AUX
    before: list[str] = []
    if passive or not after:
        before, first = _scan(doc, range(i - 1, max(a, i - 6) - 1, -1))
    head = after[-1] if after else (before[0] if before else "")
    end = max(last, i) if after else i  # nothing after: the quote ends at the word itself
    return frozenset(after) | frozenset(before), head, (min(first, i), end + 1)


def _noun(doc: Doc, i: int, a: int) -> bool:
    """Is the direction word at ``i`` a noun acting on the content word before it?"""
    return (doc.low[i] in _NOUNS and i > a and is_content(doc.low[i - 1])
            and doc.stems[i - 1] not in DIRECTIONS)


def _scan(doc: Doc, where: range) -> tuple[list[str], int]:
    """Up to two content stems met in ``where`` before a clause boundary, and the index of
    the last one (the first index of ``where`` when none)."""
    found: list[str] = []
    last = where.start
    for k in where:
        low = doc.low[k]
        if low in CLAUSE_PUNCT or low in CLAUSE_WORDS or low in ("and", "or") or low in _COMPARE:
            break
        if not is_content(low) or low in _GENERIC or low in AUX or doc.stems[k] in DIRECTIONS:
            continue
        found.append(doc.stems[k])
        last = k
        if len(found) == 2:
            break
    return found, last


def _than(doc: Doc, i: int, b: int) -> str:
    for k in range(i + 1, min(b, i + 9)):
        if doc.low[k] in _COMPARE:
            stems, _ = _scan(doc, range(k + 1, min(b, k + 5)))
            return stems[0] if stems else "?"
        if doc.low[k] in CLAUSE_PUNCT:
            break
    return ""


def direction_findings(claim: Doc, passage: Doc, alignment: Alignment,
                       passage_id: str | None, antonyms: dict[str, frozenset[str]],
                       whole: Callable[[], Doc]) -> list[CheckFinding]:
    """A finding for each claim direction word that an aligned passage direction word on the
    same axis, acting on the same thing (:meth:`Turn.acts_like`), contradicts while no
    direction word of the passage on that axis with a shared object agrees. A veto on
    curated axes, unless one side only names a reversal ("deficiency of", "knockout",
    "inhibitor": the sign may be composed). ``whole`` tokenizes the whole passage."""
    claimed = [t for a, b in claim.sents for t in turns(claim, a, b, antonyms)]
    if not claimed:
        return []
    stated = [t for a, b in alignment.sentences for t in turns(passage, a, b, antonyms)]
    reversal = _reversal(claim, claim.sents) != _reversal(passage, alignment.sentences)
    everywhere: list[Turn] | None = None
    findings, seen = [], set()
    for c in claimed:
        against = [p for p in stated if p.axis == c.axis and p.than == c.than
                   and p.sign != c.sign and c.acts_like(p)]
        if c.at in seen or not against:
            continue
        if everywhere is None:
            doc = whole()
            everywhere = [t for a, b in doc.sents for t in turns(doc, a, b, antonyms)]
        if any(p.axis == c.axis and p.than == c.than and p.sign == c.sign
               and c.acts_like(p) for p in everywhere):
            continue
        seen.add(c.at)
        says, other = claim.span(*c.quote), passage.span(*against[0].quote)
        findings.append(CheckFinding(
            kind=CheckKind.DIRECTION, veto=c.curated and not reversal, passage_id=passage_id,
            claim_says=says, passage_says=other,
            reason=f"the claim says {says}; the passage says {other}"))
    return findings


def _reversal(doc: Doc, ranges: list[tuple[int, int]]) -> bool:
    """A reversal word in ``ranges``; "loss" after a content word ("weight loss") is a
    direction of its own, not a reversal."""
    return any(doc.stems[i] in _REVERSALS and not _noun(doc, i, a)
               for a, b in ranges for i in range(a, b))


# --------------------------------------------------------------------------- population

_GROUP_TEXT = """
infant: infant infants newborn newborns neonate neonates neonatal baby babies
child: child children childhood paediatric pediatric kids schoolchildren toddler toddlers
  boys girls
adolescent: adolescent adolescents teenager teenagers teens adolescence
adult: adult adults
older: elderly seniors geriatric
male: men man male males boys
female: women woman female females girls
pregnant: pregnant pregnancy pregnancies
nonpregnant: nonpregnant
lactating: breastfeeding lactating lactation
"""
_OLDER_NOUNS = words("adults adult people patients persons individuals women men subjects "
                     "population populations")
CATEGORY = {"infant": "age", "child": "age", "adolescent": "age", "adult": "age",
             "older": "age", "male": "sex", "female": "sex", "pregnant": "pregnancy",
             "nonpregnant": "pregnancy", "lactating": "pregnancy", "t1d": "diabetes",
             "t2d": "diabetes"}
_DISJOINT = {frozenset(p) for p in (("infant", "adult"), ("infant", "older"), ("child", "adult"),
                                    ("child", "older"), ("adolescent", "older"),
                                    ("male", "female"), ("pregnant", "nonpregnant"),
                                    ("t1d", "t2d"))}
_WITHIN = {("older", "adult"), ("infant", "child")}
"""(narrow, broad): a passage about the broad group covers a claim about the narrow one."""
_ALWAYS_VETO = frozenset({"diabetes", "pregnancy"})
_RESTRICT = words("only exclusively solely restricted limited reserved")
_DIABETES = re.compile(
    r"\b(?:type\s*(?P<a>1|I|one)|type\s*(?P<b>2|II|two))(?:\s*(?:and|or|/)\s*type\s*\w+)?"
    r"(?=\s*(?:diabet|DM\b))|\b(?P<c>T1DM?|IDDM)\b|\b(?P<d>T2DM?|NIDDM)\b")


def _group_words(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for block in re.split(r"\n(?=\S)", text.strip()):
        name, members = block.split(":")
        for member in word_list(members):
            out.setdefault(member, []).append(name)
    return out


GROUPS = _group_words(_GROUP_TEXT)


def groups(doc: Doc, a: int = 0, b: int | None = None) -> list[tuple[str, int, int]]:
    """(group, first token, end token) for each population group named in ``[a, b)``."""
    b = len(doc.toks) if b is None else b
    out = []
    for i in range(a, b):
        low = doc.low[i]
        if low in ("older", "elderly") and i + 1 < b and doc.low[i + 1] in _OLDER_NOUNS:
            out.append(("older", i, i + 2))
        elif low == "non" and i + 2 < b and doc.low[i + 1] == "-" and doc.low[i + 2] == "pregnant":
            out.append(("nonpregnant", i, i + 3))
        elif low in GROUPS and not (i > a and doc.low[i - 1] in ("older", "elderly", "-")):
            out.extend((g, i, i + 1) for g in GROUPS[low])
    start, end = doc.starts[a] if a < len(doc.toks) else 0, doc.ends[b - 1] if b > a else 0
    for match in _DIABETES.finditer(doc.text, start, end):
        group = "t1d" if match.group("a") or match.group("c") else "t2d"
        first = next((k for k in range(a, b) if doc.starts[k] >= match.start()), a)
        last = next((k for k in range(first, b) if doc.starts[k] >= match.end()), b)
        last += last < b and doc.low[last].startswith("diabet")
        out.append((group, first, max(last, first + 1)))
    return out


def population_findings(claim: Doc, passage: Doc, alignment: Alignment,
                        passage_id: str | None, whole: Callable[[], Doc]) -> list[CheckFinding]:
    """A finding for a claim group the passage never names while an aligned sentence names
    another group of the same kind; a veto when the two cannot overlap and the passage
    restricts itself to its group ("only in adults") or the kind is a diabetes type or
    pregnancy status. ``passage`` holds the aligned sentences; ``whole`` tokenizes the whole
    passage (called only when a finding is in view)."""
    claimed = {g for g, _, _ in groups(claim)}
    if not claimed:
        return []
    everywhere: set[str] | None = None
    findings = []
    for group in sorted(claimed):
        category = CATEGORY[group]
        for a, b in alignment.sentences:
            other = next(((g, x, y) for g, x, y in groups(passage, a, b)
                          if CATEGORY[g] == category and g not in claimed), None)
            if other is None:
                continue
            if everywhere is None:
                everywhere = {g for g, _, _ in groups(whole())}
            if group in everywhere or any(
                    (group, broad) in _WITHIN for broad in everywhere):
                break
            disjoint = frozenset((group, other[0])) in _DISJOINT
            veto = disjoint and (category in _ALWAYS_VETO or _restricted(passage, other[1], a, b))
            says = _group_text(claim, group)
            stated = passage.span(max(a, other[1] - 1), other[2])
            findings.append(CheckFinding(
                kind=CheckKind.POPULATION, veto=veto, passage_id=passage_id, claim_says=says,
                passage_says=stated, reason=f"the claim says {says}; the passage says {stated}"))
            break
    return findings


def _restricted(doc: Doc, i: int, a: int, b: int) -> bool:
    near = range(max(a, i - 3), min(b, i + 3))
    return any(doc.low[k] in _RESTRICT for k in near)


def _group_text(doc: Doc, group: str) -> str:
    for g, x, y in groups(doc):
        if g == group:
            return doc.span(max(0, x - 1), y) if x > 0 and doc.low[x - 1] in (
                "in", "among", "for", "of") else doc.span(x, y)
    return group


# --------------------------------------------------------------------------- drugs

_DRUG_SUFFIXES = tuple(word_list(
    "mab nib pril sartan statin olol azole mycin cillin floxacin oxacin vir formin gliptin "
    "gliflozin glutide natide reotide dipine prazole oxetine azepam zolam parin xaban gatran "
    "triptan setron tidine afil profen quine cycline semide thiazide lukast terol sonide "
    "platin taxel rubicin parib glitazone coxib dronate ercept barbital sone olone terone "
    "idone oxone trexone adone caine"))
_DRUG_NAMES = words(
    "aspirin paracetamol acetaminophen insulin warfarin heparin morphine codeine fentanyl "
    "oxycodone ivermectin tamoxifen methotrexate lithium digoxin levothyroxine colchicine "
    "allopurinol clopidogrel ticagrelor metformin furosemide spironolactone ketamine "
    "buprenorphine methadone naloxone estrogen oestrogen progesterone testosterone oxytocin "
    "interferon nitroglycerin atropine epinephrine adrenaline bupropion venlafaxine "
    "duloxetine sertraline citalopram escitalopram gabapentin pregabalin levetiracetam "
    "valproate carbamazepine lamotrigine haloperidol olanzapine quetiapine clozapine "
    "donepezil memantine levodopa tirzepatide glipizide glyburide melatonin zinc caffeine "
    "nicotine azithromycin doxycycline amoxicillin favipiravir remdesivir hydroxychloroquine "
    "chloroquine dexamethasone prednisone prednisolone hydrocortisone budesonide "
    "cannabidiol penicillin vancomycin")
_NOT_DRUGS = words(
    "peptide peptides nucleotide nucleotides polypeptide dipeptide oligonucleotide person "
    "ozone hormone hormones someone everyone cocaine")
_VITAMIN = re.compile(r"\bvitamin\s+([A-K]\d{0,2})\b", re.IGNORECASE)


def drugs(doc: Doc, a: int = 0, b: int | None = None) -> dict[str, str]:
    """{drug name (lower case): the suffix or "name" that marked it} in tokens ``[a, b)``."""
    b = len(doc.toks) if b is None else b
    out: dict[str, str] = {}
    for i in range(a, b):
        low = doc.low[i]
        if len(low) < 6 or not low.isalpha() or low in _NOT_DRUGS:
            continue
        if low in _DRUG_NAMES:
            out[low] = "name"
            continue
        suffix = next((s for s in _DRUG_SUFFIXES if low.endswith(s)), None)
        if suffix is not None and len(low) - len(suffix) >= 3:
            out[low] = suffix
    if b > a:
        for match in _VITAMIN.finditer(doc.text, doc.starts[a], doc.ends[b - 1]):
            out[f"vitamin {match.group(1).lower()}"] = "vitamin"
    return out


def drug_findings(claim: Doc, passage: Doc, alignment: Alignment,
                  passage_id: str | None) -> list[CheckFinding]:
    """A non-veto finding for a claim drug the passage never names (not even inside another
    word) while an aligned sentence names another drug the claim does not (one of the same
    class first)."""
    claimed = drugs(claim)
    if not claimed or not alignment.sentences:
        return []
    text = passage.text.casefold()
    findings = []
    for name, marker in claimed.items():
        if name in text:
            continue
        a, b = alignment.sentences[0]
        others = [(n, m) for n, m in drugs(passage, a, b).items() if n not in claimed]
        if not others:
            continue
        other = next((n for n, m in others if m == marker and m != "name"), others[0][0])
        findings.append(CheckFinding(
            kind=CheckKind.DRUG, veto=False, passage_id=passage_id, claim_says=name,
            passage_says=other, reason=f"the claim says {name}; the passage says {other}"))
    return findings
