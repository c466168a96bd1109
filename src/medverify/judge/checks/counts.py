"""Counts and rates as people write them, for the NUMBER check
(:mod:`medverify.judge.checks.numbers`).

- Count words beyond the plain numbers: "single" ("a single dose" is one dose) and "half"
  ("reduced the risk by about half" is 50 percent).
- Frequencies without a number: "taken daily", "a weekly injection" are once a day, once a
  week, read only next to a dosing word, so that "daily life" is no frequency; "every day",
  "every week" and "every other day" are read unless a preposition comes before them ("on
  every day of the test").
- "a"/"an" before a dose noun ("a booster dose") is one dose on the passage side only: a
  claim's "a dose" is never compared, and the passage's vetoes only with a shared
  neighbouring word.
- Rates: a frequency ("twice daily", "3 times a week") and an interval ("every 12 hours")
  are both a number of times per day, so "once weekly" differs from "once daily" and "every
  12 hours" equals "twice daily".
- Dose counts ("two doses", "one tablet", "3 injections") are specific enough to veto like
  units, unlike other counted nouns.
"""

from __future__ import annotations

import math

from medverify.judge.checks.text import Doc, words

COUNT_WORDS = {"single": 1.0}
"""Words that count like a number word ("a single dose")."""
HALF = "half"
_HALF_BEFORE = words("by about nearly almost roughly approximately than over under only "
                     "least around")
PERIOD_DAYS = {"hour": 1 / 24, "day": 1.0, "week": 7.0, "month": 30.4375, "year": 365.25}
"""The length of each frequency period (:data:`checks_units.PERIODS`' values) in days."""
BARE_PERIODS = {"daily": "day", "nightly": "day", "weekly": "week", "monthly": "month",
                "yearly": "year", "annually": "year", "annual": "year", "hourly": "hour"}
"""Period words that say "once per period" on their own ("taken daily")."""
_DOSING_WORDS = words(
    "take takes taken taking took give gives given giving dose doses dosing tablet tablets "
    "pill pills capsule capsules injection injections injected inject shot shots infusion "
    "infusions apply applied use used dosed administered administer booster boosters "
    "vaccine vaccination treatment treatments medicine medication medications drug drugs "
    "pump puffs antibiotic antibiotics")
"""Words that make a bare period word a dosing frequency ("a daily pill", "taken weekly")."""
_NUMBERISH = words("once twice thrice times time - one two three four five six seven eight "
                   "nine ten bid tid qid qd")
DOSE_COUNTS = frozenset({"dose", "shot", "injection", "tablet", "pill", "capsul", "booster",
                         "infusion", "puff", "vaccin", "drop", "patch", "suppository"})
"""Stems of counted nouns that are doses: a different count of them vetoes."""


EVERY = {"every": 1.0}
_NOT_BEFORE_EVERY = words("on of for in at during throughout")
"""Before "every day" these make it a time, not a frequency ("on each day of the test")."""
_EVERY_PERIODS = {"day": "day", "night": "day", "morning": "day", "evening": "day",
                  "week": "week", "month": "month", "year": "year", "hour": "hour"}


def every_period(doc: Doc, i: int) -> tuple[str, float, float, int] | None:
    """"every day", "every week" (once per period) or "every other day" (an interval of two
    periods) at token ``i``: (dimension, written value, unit factor in days, end token), or
    None when a number follows ("every 6 hours" is read from its number)."""
    k = i + 1
    if i > 0 and doc.low[i - 1] in _NOT_BEFORE_EVERY:
        return None
    other = k < len(doc.low) and doc.low[k] == "other"
    k += other
    period = _EVERY_PERIODS.get(doc.low[k]) if k < len(doc.low) else None
    if period is None:
        return None
    if other:
        return "interval", 2.0, PERIOD_DAYS[period], k + 1
    return f"freq/{period}", 1.0, 1.0, k + 1


ARTICLES = frozenset({"a", "an"})


def article_dose(doc: Doc, i: int) -> int | None:
    """The token of the dose noun after "a"/"an" at ``i`` ("a dose", "a booster dose", "a
    one-time dose"), at most one word between, or None ("a single dose" is counted by its
    number word)."""
    nxt = doc.low[i + 1] if i + 1 < len(doc.low) else ""
    if nxt in COUNT_WORDS or nxt in _NUMBERISH or nxt[:1].isdigit():
        return None
    for k in (i + 1, i + 2):
        if k < len(doc.stems) and doc.stems[k] in DOSE_COUNTS and doc.low[k] == doc.stems[k]:
            return k
    return None


def half_percent(doc: Doc, i: int) -> bool:
    """Is "half" at token ``i`` a share ("by about half", "half of the patients", "more than
    half"), read as 50 percent?"""
    prev = doc.low[i - 1] if i > 0 else ""
    nxt = doc.low[i + 1] if i + 1 < len(doc.low) else ""
    return prev in _HALF_BEFORE or (nxt == "of" and prev not in ("one", "a", "the", "first",
                                                                 "second", "last"))


def bare_period(doc: Doc, i: int) -> str | None:
    """The period of a bare frequency word at token ``i`` ("daily" in "taken daily"), or
    None when a number already counts it ("twice daily", "3 times a day") or no dosing word
    is within four tokens."""
    period = BARE_PERIODS.get(doc.low[i])
    if period is None:
        return None
    before = doc.low[max(0, i - 3): i]
    if any(w in _NUMBERISH or w[:1].isdigit() for w in before[-2:]):
        return None
    near = doc.low[max(0, i - 4): i + 4]
    if not any(w in _DOSING_WORDS for w in near):
        return None
    return period


def rate(dim: str, value: float) -> float | None:
    """Times per day of a frequency (``freq/<period>``, ``value`` times per period) or an
    interval (``value`` in days between two times); None for other quantities."""
    if dim.startswith("freq/"):
        days = PERIOD_DAYS.get(dim[5:])
        return value / days if days else None
    if dim == "interval" and value > 0 and math.isfinite(value):
        return 1.0 / value
    return None


def same_rate(c: float, p: float) -> bool:
    """Two rates that say the same (10 % apart at most: "every 8 hours" is "3 times a day",
    "every 4 weeks" is about "monthly")."""
    return math.isclose(c, p, rel_tol=0.1)
