"""The ``contradicted`` edits of a quantity: a number changed by a clear factor, a dose,
duration or frequency changed, a unit swapped for another of the same dimension. Years,
citations, confidence intervals, stage/grade/type numbers and phone numbers are left alone.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from medverify.verifier.corpus.text import _replace_span

_DOSE_UNITS = (
    r"times|mg|mcg|µg|ug|g|kg|ml|mL|L|IU|units?|tablets?|capsules?|doses?|drops?|puffs?|"
    r"mg/kg|mg/day|mg/d|g/day|mmol|mEq"
)
_TIME_UNITS = r"seconds?|minutes?|hours?|days?|weeks?|months?|years?"
_NUMBER = re.compile(r"(?<![\w.\-/–])(\d+(?:[.,]\d+)?)(?![\w\-–]|[.,]\d)(\s?%|\s(?:percent))?")
_NUM_BLOCK_BEFORE = re.compile(
    r"\b(?:type|grade|stage|phase|class|chromosome|trisomy|factor|covid|fig|figure|table|"
    r"version|level|wave|gen|step|day|week|n|no|p|ref|refs|chapter|section)\W{0,3}$",
    re.I,
)
_UNIT_AFTER = re.compile(rf"^\s?({_DOSE_UNITS}|{_TIME_UNITS})\b")
_PER_AFTER = re.compile(r"\s(?:a|per|each|every)\s(?:day|week|month|year)\b")
_DURATION_BEFORE = re.compile(r"\b(for|every|per|within|after|over|each|up to|about|last)\s$", re.I)


def _number_spans(sentence: str) -> list[tuple[int, int, str, bool]]:
    """(start, end, number text, dose-like) of the editable numbers of ``sentence``."""
    out = []
    for match in _NUMBER.finditer(sentence):
        num = match.group(1)
        before = sentence[: match.start()]
        after = sentence[match.end(1) :]
        value = float(num.replace(",", "")) if num.count(",") <= 1 else 0.0
        if re.fullmatch(r"1[89]\d\d|20[0-4]\d", num):
            continue  # a year
        if (_NUM_BLOCK_BEFORE.search(before) or before.endswith(("(", "[", "-"))) and not (
            before.endswith("(") and match.group(2)
        ):
            continue
        if re.match(r"^%?\s*(?:CI|confidence|credible)\b", after):
            continue
        if re.match(r"^\s*[\]\)]", after) and before.rstrip().endswith(("(", "[", ",")):
            continue  # a citation like (12)
        if value == 0 or before.lower().endswith(("call ", "dial ")):
            continue
        unit = _UNIT_AFTER.match(after)
        dose = bool(unit) and (
            not re.fullmatch(_TIME_UNITS, unit.group(1))
            or bool(_DURATION_BEFORE.search(before))
            or bool(_PER_AFTER.match(after[unit.end() :]))
        )
        out.append((match.start(1), match.end(1), num, dose))
    return out


def _changed_number(num: str, rng: random.Random, percent: bool) -> str:
    value = float(num.replace(",", ""))
    decimals = len(num.split(".")[1]) if "." in num else 0
    for _ in range(10):
        factor = rng.choice((2.0, 3.0, 4.0, 0.5, 0.25, 1.5))
        new = value * factor if value >= 2 or factor > 1 else value + rng.choice((2, 5, 10))
        if percent and new > 100:
            new = value / 2 if value > 2 else value + 10
        text = f"{new:.{decimals}f}" if decimals else str(round(new))
        if text != num.replace(",", "") and float(text) > 0:
            return text
    return str(round(value) + 7)


def edit_number(sentence: str, rng: random.Random, dose: bool = False) -> str | None:
    """Change one number (``dose``: one next to a dose/duration unit) by a clear factor."""
    spans = [s for s in _number_spans(sentence) if s[3] == dose]
    if not spans:
        return None
    start, end, num, _ = rng.choice(spans)
    percent = bool(re.match(r"\s?(?:%|percent)", sentence[end:]))
    return sentence[:start] + _changed_number(num, rng, percent) + sentence[end:]


_FREQ = {
    "once": ["twice", "three times"],
    "twice": ["once", "four times"],
    "daily": ["weekly", "monthly"],
    "weekly": ["daily", "monthly"],
    "monthly": ["weekly", "yearly"],
    "annually": ["every month", "every five years"],
    "yearly": ["monthly", "every five years"],
    "hourly": ["daily"],
    "every day": ["every week", "every month"],
    "every other day": ["twice a day", "every week"],
    "once a day": ["twice a day", "once a week"],
    "twice a day": ["once a week", "four times a day"],
    "once a week": ["once a month", "every day"],
    "once a month": ["once a week", "once a year"],
    "once a year": ["once a month", "every ten years"],
    "every year": ["every month", "every ten years"],
    "every week": ["every day", "every month"],
    "every month": ["every week", "every year"],
}
_FREQ_RE = re.compile(r"\b(" + "|".join(sorted(_FREQ, key=len, reverse=True)) + r")\b", re.I)


def edit_dose_frequency(sentence: str, rng: random.Random) -> str | None:
    """Change a dose, a duration or a frequency (number by a unit, or a frequency word)."""
    options: list[Callable[[], str | None]] = []
    if any(s[3] for s in _number_spans(sentence)):
        options.append(lambda: edit_number(sentence, rng, dose=True))
    freq = [
        m
        for m in _FREQ_RE.finditer(sentence)
        if not (
            m.group(1).lower() == "once"
            and re.match(r"\s+(?:the|a|an|you|it|they|he|she|this|symptoms)\b", sentence[m.end() :])
        )
    ]
    if freq:
        match = rng.choice(freq)
        new = rng.choice(_FREQ[match.group(1).lower()])
        options.append(lambda: _replace_span(sentence, match.start(), match.end(), new))
    if not options:
        return None
    return rng.choice(options)()


_UNIT_SWAPS = {
    "mg": ["g", "mcg"],
    "g": ["mg", "kg"],
    "mcg": ["mg"],
    "µg": ["mg"],
    "kg": ["g"],
    "ml": ["L"],
    "mL": ["L"],
    "cm": ["mm", "m"],
    "mm": ["cm"],
    "seconds": ["minutes"],
    "second": ["minute"],
    "minutes": ["hours", "seconds"],
    "minute": ["hour", "second"],
    "hours": ["days", "minutes"],
    "hour": ["day", "minute"],
    "days": ["weeks", "hours"],
    "day": ["week", "hour"],
    "weeks": ["months", "days"],
    "week": ["month", "day"],
    "months": ["years", "weeks"],
    "month": ["year", "week"],
    "years": ["months", "decades"],
    "year": ["month", "decade"],
}
_UNIT_RE = re.compile(
    r"(?<![\w.])\d+(?:[.,]\d+)?(?:\s?(?:-|–|to)\s?\d+(?:[.,]\d+)?)?\s?("
    + "|".join(sorted(_UNIT_SWAPS, key=len, reverse=True))
    + r")(?![\w])"
)


def edit_unit(sentence: str, rng: random.Random) -> str | None:
    """Swap the unit of a measured quantity for another of the same dimension."""
    matches = [m for m in _UNIT_RE.finditer(sentence) if not sentence[m.end() :].startswith("-")]
    if not matches:
        return None
    match = rng.choice(matches)
    new = rng.choice(_UNIT_SWAPS[match.group(1)])
    return sentence[: match.start(1)] + new + sentence[match.end(1) :]
