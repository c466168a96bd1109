"""The ENTITY check of :mod:`medverify.judge.checks`: a disease, organism, cancer or vaccine
of the claim that the passage never names, while the passage names another of the same
kind where the claim's should be.

Names come from a small curated lexicon (:data:`LEXICON`): diseases (infections,
endocrine, joint, lung, skin, brain and blood diseases; "hepatitis B" and "hepatitis C"
differ), cancers by organ ("breast cancer", "colorectal cancer"), microbes (named ones,
and the classes "virus", "bacteria", "fungus", "parasite"), animals that carry or spread
disease, and vaccine names (Zostavax, MMR, Tdap, ...; "X vaccine" is a vaccine, not a
mention of the disease X). Synonyms count as one name ("chickenpox" and "varicella",
"shingles" and "herpes zoster", "flu" and "influenza"). Drugs are the DRUG check's
(:mod:`medverify.judge.checks.words`).

A finding needs the claim's name nowhere in the whole passage (as a name of the lexicon or
as a plain substring) and an aligned sentence naming another of the same kind that the
claim does not name. It vetoes when the two stand in the same place: the nearest content
word before or after each is the same ("protect older adults from getting chickenpox" vs
"... from getting shingles"); otherwise it is a finding without veto.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from medverify.judge.checks.text import CLAUSE_PUNCT, Alignment, Doc, is_content, parse
from medverify.records import CheckFinding, CheckKind

_LEXICON_TEXT = """
disease: shingles = shingles / herpes zoster / zoster
disease: chickenpox = chickenpox / chicken pox / varicella
disease: measles = measles / rubeola
disease: mumps = mumps
disease: rubella = rubella / german measles
disease: influenza = influenza / flu
disease: pneumonia = pneumonia
disease: tuberculosis = tuberculosis / tb
disease: malaria = malaria
disease: rabies = rabies
disease: hiv = hiv
disease: polio = polio / poliomyelitis
disease: tetanus = tetanus / lockjaw
disease: diphtheria = diphtheria
disease: pertussis = pertussis / whooping cough
disease: cholera = cholera
disease: typhoid = typhoid
disease: yellow fever = yellow fever
disease: dengue = dengue
disease: zika = zika
disease: ebola = ebola
disease: smallpox = smallpox / variola
disease: covid = covid / covid-19 / coronavirus disease / sars-cov-2 / 2019-ncov
disease: lyme = lyme disease / lyme
disease: meningitis = meningitis
disease: encephalitis = encephalitis
disease: sepsis = sepsis
disease: gonorrhea = gonorrhea / gonorrhoea
disease: syphilis = syphilis
disease: chlamydia = chlamydia
disease: scabies = scabies
disease: pinworm infection = enterobiasis
disease: hypothyroidism = hypothyroidism / underactive thyroid
disease: hyperthyroidism = hyperthyroidism / overactive thyroid / graves disease
disease: hypoglycemia = hypoglycemia / hypoglycaemia / low blood sugar
disease: hyperglycemia = hyperglycemia / hyperglycaemia / high blood sugar
disease: hypertension = hypertension / high blood pressure
disease: hypotension = hypotension / low blood pressure
disease: gout = gout
disease: osteoarthritis = osteoarthritis
disease: rheumatoid arthritis = rheumatoid arthritis
disease: osteoporosis = osteoporosis
disease: asthma = asthma
disease: copd = copd / chronic obstructive pulmonary disease
disease: emphysema = emphysema
disease: bronchitis = bronchitis
disease: cystic fibrosis = cystic fibrosis
disease: psoriasis = psoriasis
disease: eczema = eczema / atopic dermatitis
disease: lupus = lupus
disease: alzheimer = alzheimer / alzheimer's / alzheimers
disease: parkinson = parkinson / parkinson's / parkinsons
disease: epilepsy = epilepsy
disease: migraine = migraine / migraines
disease: multiple sclerosis = multiple sclerosis
disease: anemia = anemia / anaemia
disease: leukemia = leukemia / leukaemia
disease: lymphoma = lymphoma
disease: melanoma = melanoma
disease: glaucoma = glaucoma
disease: cataract = cataract / cataracts
disease: celiac disease = celiac disease / coeliac disease
disease: crohn = crohn / crohn's / crohns
disease: ulcerative colitis = ulcerative colitis
disease: cirrhosis = cirrhosis
disease: gallstones = gallstones / gallstone
disease: kidney stones = kidney stones / kidney stone
microbe: e. coli = e. coli / escherichia coli
microbe: salmonella = salmonella
microbe: listeria = listeria
microbe: staphylococcus = staphylococcus / staph
microbe: streptococcus = streptococcus / strep
microbe: clostridium = clostridium
microbe: helicobacter = helicobacter / h. pylori
microbe: candida = candida
microbe: pinworm = pinworm / pinworms / enterobius
microbe: roundworm = roundworm / roundworms / ascaris
microbe: hookworm = hookworm / hookworms
microbe: tapeworm = tapeworm / tapeworms
microbe: whipworm = whipworm / whipworms
microbe: giardia = giardia
microbe class: virus = virus / viruses / viral
microbe class: bacteria = bacteria / bacterium / bacterial
microbe class: fungus = fungus / fungi / fungal
microbe class: parasite = parasite / parasites / parasitic
animal: dog = dog / dogs
animal: cat = cats / kitten / kittens
animal: bat = bat / bats
animal: raccoon = raccoon / raccoons
animal: skunk = skunk / skunks
animal: fox = fox / foxes
animal: mosquito = mosquito / mosquitoes / mosquitos
animal: tick = tick / ticks
animal: flea = flea / fleas
animal: louse = louse / lice
animal: bird = bird / birds
animal: pig = pig / pigs
animal: cattle = cattle / cows / cow
animal: monkey = monkey / monkeys
microbe: hpv = hpv / human papillomavirus
vaccine: zostavax | shingles vaccine = zostavax
vaccine: shingrix | shingles vaccine = shingrix
vaccine: mmr | measles vaccine | mumps vaccine | rubella vaccine = mmr
vaccine: dtap | diphtheria vaccine | tetanus vaccine | pertussis vaccine = dtap
vaccine: tdap | diphtheria vaccine | tetanus vaccine | pertussis vaccine = tdap
vaccine: bcg | tuberculosis vaccine = bcg
vaccine: gardasil | hpv vaccine = gardasil
"""
_ORGANS = {
    "breast": "breast", "lung": "lung", "prostate": "prostate", "colon": "colorectal",
    "colorectal": "colorectal", "rectal": "colorectal", "bowel": "colorectal", "skin": "skin",
    "cervical": "cervical", "ovarian": "ovarian", "pancreatic": "pancreatic",
    "liver": "liver", "kidney": "kidney", "renal": "kidney", "bladder": "bladder",
    "stomach": "stomach", "gastric": "stomach", "thyroid": "thyroid", "brain": "brain",
    "testicular": "testicular", "uterine": "uterine", "endometrial": "uterine",
    "esophageal": "esophageal", "oral": "oral", "bone": "bone", "blood": "blood",
    "oropharyngeal": "oropharyngeal", "hypopharyngeal": "hypopharyngeal",
    "nasopharyngeal": "nasopharyngeal", "laryngeal": "laryngeal", "gallbladder": "gallbladder",
    "parathyroid": "parathyroid", "anal": "anal", "penile": "penile", "vaginal": "vaginal",
    "vulvar": "vulvar"}
_CANCER = frozenset({"cancer", "cancers", "carcinoma", "carcinomas"})
_VACCINE = frozenset({"vaccine", "vaccines", "vaccination", "vaccinations", "shot", "shots"})


def _lexicon(text: str) -> dict[tuple[str, ...], tuple[str, frozenset[str]]]:
    """{alias as its lower-case tokens (as :func:`parse` splits them): (kind, the names it
    stands for)}: ``kind: name | other name = alias / alias`` lines."""
    out: dict[tuple[str, ...], tuple[str, frozenset[str]]] = {}
    for line in text.strip().splitlines():
        head, _, aliases = line.partition("=")
        kind, _, names = head.partition(":")
        named = frozenset(n.strip() for n in names.split("|"))
        for alias in aliases.split("/"):
            out[tuple(parse(alias.strip()).low)] = (kind.strip(), named)
    return out


LEXICON = _lexicon(_LEXICON_TEXT)
"""{alias tokens: (kind, names)}: the names the ENTITY check reads."""
_LONGEST = max(len(k) for k in LEXICON)
_FIRST = frozenset(k[0] for k in LEXICON)
_HEPATITIS = frozenset("abcde")
_STARTS = _FIRST | frozenset(_ORGANS) | {"hepatitis"}
"""Tokens a name may start with: others are skipped at once."""
_NOT_AFTER = {"cats": {"scan", "scans"}, "tick": {"off", "box"}}
"""Names that are something else before these words ("CAT scan")."""


@dataclass(slots=True, frozen=True)
class Entity:
    """A name of the lexicon in a text: its kind, the canonical names it stands for (a
    vaccine brand also for "<disease> vaccine") and its token range."""

    kind: str
    names: frozenset[str]
    start: int
    end: int


def entities(doc: Doc, a: int = 0, b: int | None = None) -> list[Entity]:
    """The names of the lexicon in tokens ``[a, b)``, longest first at each token; "X
    vaccine" makes a vaccine ("shingles vaccine"), not a mention of disease X."""
    b = len(doc.toks) if b is None else b
    low = doc.low
    out: list[Entity] = []
    i = a
    while i < b:
        found = _at(low, i, b) if low[i] in _STARTS else None
        if found is None:
            i += 1
            continue
        kind, names, end = found
        if kind == "disease" and end < b and low[end] in _VACCINE:
            kind, names, end = "vaccine", frozenset(f"{n} vaccine" for n in names), end + 1
        out.append(Entity(kind, names, i, end))
        i = end
    return out


def _at(low: list[str], i: int, b: int) -> tuple[str, frozenset[str], int] | None:
    if low[i] == "hepatitis":
        nxt = low[i + 1] if i + 1 < b else ""
        return ("disease", frozenset({f"hepatitis {nxt}"}), i + 2) if nxt in _HEPATITIS else None
    if low[i] in _ORGANS:
        k = i + 1
        while k < b and k - i < 12 and (low[k] in _ORGANS or low[k] in (",", "and", "or")):
            k += 1  # "breast, liver and pancreatic cancer"
        if k < b and low[k] in _CANCER:
            return "cancer", frozenset({f"{_ORGANS[low[i]]} cancer"}), i + 1 + (k == i + 1)
    if low[i] in _NOT_AFTER and i + 1 < b and low[i + 1] in _NOT_AFTER[low[i]]:
        return None
    for size in range(min(_LONGEST, b - i), 0, -1):
        found = LEXICON.get(tuple(low[i: i + size]))
        if found is not None:
            return *found, i + size
    return None


def _neighbours(doc: Doc, e: Entity) -> set[str]:
    """The nearest content stems before and after a name, in its clause."""
    out = set()
    for k in range(e.start - 1, max(-1, e.start - 4), -1):
        if doc.low[k] in CLAUSE_PUNCT:
            break
        if is_content(doc.low[k]):
            out.add(doc.stems[k])
            break
    for k in range(e.end, min(len(doc.low), e.end + 3)):
        if doc.low[k] in CLAUSE_PUNCT:
            break
        if is_content(doc.low[k]):
            out.add(doc.stems[k])
            break
    return out


def entity_findings(claim: Doc, passage: Doc, alignment: Alignment,
                    passage_id: str | None, whole: Callable[[], Doc]) -> list[CheckFinding]:
    """A finding for each claim name of the lexicon that the passage never names while an
    aligned sentence names another of the same kind that the claim does not (see the module
    docstring); a veto when the two have the same neighbouring word."""
    claimed = entities(claim)
    if not claimed or not alignment.sentences:
        return []
    names = frozenset().union(*(e.names for e in claimed))
    stated = [p for a, b in alignment.sentences for p in entities(passage, a, b)
              if not p.names & names]
    if not stated:
        return []
    everywhere = frozenset().union(*(e.names for e in entities(whole())))
    text = passage.text.casefold()
    findings, seen = [], set()
    for c in claimed:
        if c.names & (everywhere | seen) or claim.span(c.start, c.end).casefold() in text:
            continue
        other = next((p for p in stated if p.kind == c.kind), None)
        if other is None:
            continue
        seen |= c.names
        says, stated = claim.span(c.start, c.end), passage.span(other.start, other.end)
        veto = bool(_neighbours(claim, c) & _neighbours(passage, other))
        findings.append(CheckFinding(
            kind=CheckKind.ENTITY, veto=veto, passage_id=passage_id, claim_says=says,
            passage_says=stated, reason=f"the claim says {says}; the passage says {stated}"))
    return findings
