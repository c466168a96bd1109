"""How much harm a claim can do if it is wrong: whether it states a dose, names a drug, a
group of people or a number.

Arbitration (:mod:`medverify.arbitration`) escalates a not-sure verdict only on such claims
and fills its escalation budget with the most severe first; the review queue ranks by the
same severity (docs/arbitration.md, "Who reaches a clinician"). The readers are the exact
checks' own (:mod:`medverify.judge.checks.numbers`, :mod:`medverify.judge.checks.words`), so
"a dose" means the same thing here as in a NUMBER finding.
"""

from __future__ import annotations

from functools import lru_cache

from medverify.judge.checks.quantities import quantities
from medverify.judge.checks.text import parse, word_list
from medverify.judge.checks.words import drugs, groups

__all__ = ["EXTRA_KIND", "KIND_ORDER", "SEVERITY", "clinical_kinds", "severity"]

SEVERITY = {"dose": 1.0, "drug": 0.95, "population": 0.7, "number": 0.65, "other": 0.4}
"""The weight of each kind of claim: doses and drugs first, then populations and numbers,
then the rest. A claim takes the weight of its most severe kind plus :data:`EXTRA_KIND` for
each other kind it has, so "Start metformin with 5000 mg daily." (dose, drug, number)
comes before "Metformin is first-line therapy." (drug)."""
EXTRA_KIND = 0.01
KIND_ORDER = ("dose", "drug", "population", "number")

_DOSE_DIMS = frozenset({"mass", "volume", "iu", "units", "meq", "amount"})
_DOSE_WORDS = frozenset(word_list(
    "dose doses dosage dosages dosing overdose tablet tablets pill pills capsule capsules "
    "puff puffs injection injections drop drops teaspoon teaspoons spoonful"))
_MAX_CHARS = 2_000  # longer texts are not one claim: only their start is read


@lru_cache(maxsize=4096)
def clinical_kinds(text: str) -> tuple[str, ...]:
    """The clinically severe kinds of a claim, in :data:`KIND_ORDER`: ``dose`` (an amount
    with a mass, volume or unit dimension, a dosing frequency, or a dose word),
    ``drug`` (a drug or substance name), ``population`` (a group of people), ``number``
    (any other quantity). Empty for none; never raises."""
    try:
        doc = parse(text[:_MAX_CHARS])
        found = quantities(doc)
        dims = {q.dim for q in found}
        kinds = set()
        if (dims & _DOSE_DIMS or any(d.startswith("freq") for d in dims)
                or _DOSE_WORDS & set(doc.low)):
            kinds.add("dose")
        if drugs(doc):
            kinds.add("drug")
        if groups(doc):
            kinds.add("population")
        if found:
            kinds.add("number")
    except Exception:  # a reading failure makes a claim no less severe than "other"
        return ()
    return tuple(k for k in KIND_ORDER if k in kinds)


def severity(text: str) -> float:
    """The claim's weight: :data:`SEVERITY` of its most severe kind (``other`` for none),
    plus :data:`EXTRA_KIND` for each further kind."""
    kinds = clinical_kinds(text)
    if not kinds:
        return SEVERITY["other"]
    return round(SEVERITY[kinds[0]] + EXTRA_KIND * (len(kinds) - 1), 6)
