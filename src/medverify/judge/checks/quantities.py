"""Quantities as the NUMBER check (:mod:`medverify.judge.checks.numbers`) reads them from a
text: numbers with their units, intervals, frequencies, ages, ranges and lists.

A quantity is a number (digits or a number word) with what it counts: a unit (converted to
one base unit per dimension, so "1 g" equals "1000 mg" and "24 months" equals "2 years"),
a frequency ("twice daily"), an interval ("every 2 years"), an age ("aged 50 to 75"), a
percentage, a fold change or the noun after it ("3 doses"). Numbers that only name things
are skipped: "COVID-19", "type 2", "HbA1c", "[12]", years such as "(2019)", ordinals; and
statistics ("p < 0.05", "95% CI", "n = 34") are marked so that they never veto. In a range
or a list ("50 to 75 years", "250, 500 or 1000 mg") every number takes the unit written
after the last one. The words these rules read are in :mod:`~medverify.judge.checks.units`
and :mod:`~medverify.judge.checks.counts`.
"""

from __future__ import annotations

from dataclasses import dataclass

from medverify.judge.checks.counts import (
    ARTICLES,
    BARE_PERIODS,
    COUNT_WORDS,
    EVERY,
    HALF,
    article_dose,
    bare_period,
    every_period,
    half_percent,
)
from medverify.judge.checks.text import (
    CLAUSE_PUNCT,
    Doc,
    is_content,
)
from medverify.judge.checks.units import (
    AGE_AFTER,
    AGE_WORDS,
    APPROX,
    CURRENCY,
    DIGITS,
    DOSING,
    GE,
    INTERVAL_WORDS,
    LABELS,
    LE,
    MULTIPLIERS,
    NOT_COUNTS,
    NUMBER_WORDS,
    PERIODS,
    SEPARATORS,
    SPACES,
    STAT_WORDS,
    TIMES_WORDS,
    UNITS,
)
from medverify.terms import number_value

_TRIGGERS = (frozenset(NUMBER_WORDS) | frozenset(TIMES_WORDS) | {d.lower() for d in DOSING}
             | frozenset(COUNT_WORDS) | frozenset(BARE_PERIODS) | frozenset(EVERY) | {HALF}
             | ARTICLES)
"""Words that may start a quantity (besides digits)."""
OR_MORE = {"more": "ge", "greater": "ge", "fewer": "le", "less": "le"}


@dataclass(slots=True)
class Quantity:
    """One number of a text: ``written`` as written, ``mult`` its multiplier ("million"),
    ``factor`` its unit in the dimension's base unit, ``dim`` what it counts ("" for a bare
    number), ``bound`` "ge", "le" or "approx" when a comparator or "about" comes before it,
    ``at`` its token, ``last`` the token after its unit, and ``phrase`` the token range
    quoted for it (its "every"/"aged" prefix, range and unit included); ``within`` the
    range it is one end of ("50 to 75"), in base units; ``article`` for "a dose" (one
    dose, compared only on the passage side)."""

    written: float
    decimals: int
    dim: str
    at: int
    last: int
    factor: float = 1.0
    mult: float = 1.0
    bound: str = ""
    phrase: tuple[int, int] = (0, 0)
    within: tuple[float, float] | None = None
    article: bool = False

    @property
    def scale(self) -> float:
        return self.mult * self.factor

    @property
    def value(self) -> float:
        return self.written * self.mult * self.factor


def quantities(doc: Doc) -> list[Quantity]:
    """The quantities of ``doc`` in order (see the module docstring)."""
    found: list[Quantity] = []
    for i in [i for i, low in enumerate(doc.low) if low[0] in DIGITS or low in _TRIGGERS]:
        if _in_brackets(doc, i):
            continue
        quantity = _read(doc, i)
        if quantity is not None:
            found.append(quantity)
    _group(doc, found)
    return found


def _in_brackets(doc: Doc, i: int) -> bool:
    """Is token ``i`` inside square brackets (a citation such as "[12, 14-16]")?"""
    for k in range(i - 1, max(-1, i - 16), -1):
        if doc.low[k] == "]":
            return False
        if doc.low[k] == "[":
            return True
    return False


def _read(doc: Doc, i: int) -> Quantity | None:
    tok = doc.toks[i]
    if tok[0] in DIGITS:
        return _number(doc, i)
    low = doc.low[i]
    if low in TIMES_WORDS:
        return _times(doc, i, TIMES_WORDS[low], i + 1)
    if tok in DOSING:
        return Quantity(DOSING[tok], 0, "freq/day", i, i + 1)
    if low == HALF:
        return Quantity(50.0, 0, "percent", i, i + 1, bound=_bound(doc, i)) if half_percent(
            doc, i) else None
    if low in BARE_PERIODS:
        period = bare_period(doc, i)
        return Quantity(1.0, 0, f"freq/{period}", i, i + 1) if period else None
    if low in ARTICLES:
        k = article_dose(doc, i)
        return None if k is None else Quantity(1.0, 0, f"count:{doc.stems[k]}", i, k + 1,
                                               phrase=(i, k + 1), article=True)
    if low in EVERY:
        every = every_period(doc, i)
        if every is None:
            return None
        dim, written, factor, end = every
        return Quantity(written, 0, dim, i, end, factor, phrase=(i, end))
    value = NUMBER_WORDS.get(low, COUNT_WORDS.get(low))
    if value is not None and not (i + 1 < len(doc.low) and doc.low[i + 1] == "of"):
        quantity = _with_unit(doc, i, value, 0)
        if quantity is not None and low in COUNT_WORDS and i > 0 and doc.low[i - 1] in ("a", "an"):
            quantity.phrase = (i - 1, quantity.phrase[1])  # "a single dose"
        return quantity if quantity is not None and quantity.dim else None
    return None


def _number(doc: Doc, i: int) -> Quantity | None:
    text, start = doc.text, doc.starts[i]
    before = text[start - 2: start] if start >= 2 else " " + text[:start]
    if before[-1:].isalpha() or (before[-1:] in "-/" and before[:1].isalnum()):
        return None  # COVID-19, IL-6, CD4, H1N1, Smc5/6
    if _adjacent_word(doc, i) and doc.low[i + 1] not in UNITS and doc.low[i + 1] != "h":
        return None  # 19th, 3D, 1c
    if _continues_number(doc, i):
        return None
    raw, after = _spaced_number(doc, i)
    token = number_value(raw.replace("\u00b7", "."))
    if len(token) > 15 or token.count(".") > 1:
        return None  # a version or a label ("B.1.1.529"), or too long to be a quantity
    written = float(token)
    decimals = len(token.partition(".")[2])
    prev = doc.low[i - 1] if i > 0 else ""
    if prev in LABELS or (prev == "." and i > 1 and doc.low[i - 2] in LABELS):
        return None
    if i > 0 and _acronym(doc.toks[i - 1]):
        return None  # BRCA 1, HER 2
    quantity = _with_unit(doc, i, written, decimals, after)
    if quantity is None:
        return None
    if (decimals == 0 and 1800 <= written <= 2100 and len(token) == 4
            and (not quantity.dim or quantity.dim.startswith("count:"))):
        return None  # a year ("in 2019", "the 2003 coronavirus")
    if i > 0 and doc.toks[i - 1] in CURRENCY:
        quantity.dim = f"money:{doc.toks[i - 1]}"
    if _is_stat(doc, i, quantity.last):
        quantity.dim = "stat"
    return quantity


def _digits(token: str) -> bool:
    return token.isascii() and token.isdigit()


def _continues_number(doc: Doc, i: int) -> bool:
    """Is token ``i`` the second group of a number written with a space ("50 000")?"""
    return (i > 0 and len(doc.toks[i]) == 3 and _digits(doc.toks[i])
            and _digits(doc.toks[i - 1]) and len(doc.toks[i - 1]) <= 3
            and doc.starts[i] - doc.ends[i - 1] == 1 and doc.text[doc.ends[i - 1]] in SPACES)


def _spaced_number(doc: Doc, i: int) -> tuple[str, int]:
    """Token ``i`` joined with the 3-digit groups that follow it after one space, and the
    index of the token after the number."""
    token = doc.toks[i]
    if _digits(token) and len(token) <= 3:
        while i + 1 < len(doc.toks) and _continues_number(doc, i + 1):
            i += 1
            token += doc.toks[i]
    return token, i + 1


def _is_stat(doc: Doc, i: int, last: int) -> bool:
    toks = doc.toks
    prev = toks[i - 1] if i > 0 else ""
    if prev in ("=", "±") or prev in STAT_WORDS:
        return True
    if prev in ("<", ">", "≤", "≥", ":") and i > 1 and toks[i - 2] in STAT_WORDS:
        return True  # "p < 0.05", "OR: 1.5"; "Enrollment: 97 participants" is a count
    return last < len(toks) and doc.low[last] in ("ci", "confidence", "cis")


def _acronym(token: str) -> bool:
    return (len(token) > 1 and token.isalpha() and token.isupper() and token not in STAT_WORDS
            and token.lower() not in UNITS)


def _adjacent_word(doc: Doc, i: int) -> bool:
    return (i + 1 < len(doc.toks) and doc.starts[i + 1] == doc.ends[i]
            and doc.toks[i + 1][0].isalpha())


def _with_unit(doc: Doc, i: int, written: float, decimals: int,
               after: int | None = None) -> Quantity | None:
    """The quantity whose number starts at token ``i`` and ends before token ``after``
    (default ``i + 1``): its multiplier, unit and role."""
    n, low = len(doc.low), doc.low
    j = i + 1 if after is None else after
    mult = 1.0
    if j < n and low[j] in MULTIPLIERS and low[i] != "hundred":
        mult, j = MULTIPLIERS[low[j]], j + 1
    if (j + 1 < n and low[j] == "-" and doc.ends[j - 1] == doc.starts[j]
            and low[j + 1][:1].isalpha()):
        j += 1  # "5-year", "2-fold"
        if low[j] == "time" and j + 1 < n and is_content(low[j + 1]):
            j += 1  # "a one-time dose" is one dose
    if j + 1 < n and low[j] == "in" and mult == 1.0:
        den = _plain_value(doc, j + 1)
        if den:
            return Quantity(round(written / den, 9), 9, "ratio", i, j + 2)
    bound = ""
    if j + 2 < n and low[j] == "or" and low[j + 1] in OR_MORE and low[j + 2] == "times":
        bound, j = OR_MORE[low[j + 1]], j + 2  # "three or more times a month"
    if j < n and low[j] == "times":
        quantity = _times(doc, i, written, j + 1, decimals)
        if quantity is not None:
            quantity.bound = bound or quantity.bound
        return quantity
    if j < n and low[j] == "fold":
        return Quantity(written, decimals, "fold", i, j + 1, mult=mult)
    dim, factor, last = _unit(doc, j)
    quantity = Quantity(written, decimals, dim, i, last, factor, mult, _bound(doc, i))
    _role(doc, quantity)
    return quantity


def _plain_value(doc: Doc, j: int) -> float:
    """The value of a number or number word at token ``j`` (0.0 when it is neither)."""
    tok = doc.toks[j]
    if _digits(tok) and len(tok) < 10:
        return float(tok)
    return NUMBER_WORDS.get(doc.low[j], 0.0)


def _unit(doc: Doc, j: int) -> tuple[str, float, int]:
    """The dimension, factor and end of the unit at token ``j`` ("" when there is none)."""
    n, low = len(doc.low), doc.low
    if j >= n:
        return "", 1.0, j
    word = low[j]
    if word == "per" and j + 1 < n and low[j + 1] == "cent":
        return "percent", 1.0, j + 2
    if word == "mm" and j + 1 < n and low[j + 1] == "hg":
        return "mmhg", 1.0, j + 2
    if word in UNITS:
        dim, factor = UNITS[word]
        if j + 2 < n and low[j + 1] in ("/", "per") and low[j + 2] in UNITS:
            den_dim, den_factor = UNITS[low[j + 2]]
            return f"{dim}/{den_dim}", factor / den_factor, j + 3
        return dim, factor, j + 1
    tok = doc.toks[j]
    if is_content(word) and tok == word and word not in NOT_COUNTS:
        return f"count:{doc.stems[j]}", 1.0, j + 1
    return "", 1.0, j


def _times(doc: Doc, i: int, count: float, j: int, decimals: int = 0) -> Quantity | None:
    """``once``/``twice``/``N times`` at ``i``..``j``: a frequency when a period follows
    ("twice daily", "3 times a week"), else a fold change ("twice as likely")."""
    n, low = len(doc.low), doc.low
    k = j + (j < n and low[j] == "-")
    if k < n and low[k] in ("a", "an", "per", "each", "every"):
        k += 1 + (k + 1 < n and low[k + 1] == "-")  # "once-a-day"
    if k < n and low[k] in PERIODS and low[k] not in ("d", "h"):
        return Quantity(count, decimals, f"freq/{PERIODS[low[k]]}", i, k + 1)
    if low[i] == "once":
        return None
    return Quantity(count, decimals, "fold", i, j)


def _bound(doc: Doc, i: int) -> str:
    """"ge", "le" or "approx" for the comparator before token ``i`` ("more than 20",
    "at least", "up to", "about"), "" when there is none."""
    low = doc.low
    for back in (1, 2, 3):
        k = i - back
        if k < 0 or low[k] in CLAUSE_PUNCT:
            return ""
        word = low[k]
        if word in APPROX:
            return "approx"
        if word in GE or (word == "than" and k > 0 and low[k - 1] in GE):
            return "ge"
        if word in LE or (word == "than" and k > 0 and low[k - 1] in LE):
            return "le"
        if word not in ("than", "at", "to", "of", "from", "between", "an", "a", "the"):
            return ""
    return ""


def _role(doc: Doc, q: Quantity) -> None:
    """Interval ("every 2 years") and age ("aged 50", "50 years old") from the words around
    a quantity; the phrase then starts at "every"/"aged"."""
    low, first = doc.low, q.at
    for back in (1, 2, 3):
        k = q.at - back
        if k < 0 or low[k] in CLAUSE_PUNCT:
            break
        if low[k] in INTERVAL_WORDS and q.dim == "time":
            q.dim, first = "interval", k
            break
        if low[k] in AGE_WORDS and q.dim in ("", "time"):
            q.factor = q.factor if q.dim else 365.25
            q.dim, first = "age", k
            break
    if q.dim == "time" and _age_after(doc, q.last):
        q.dim = "age"
    q.phrase = (first, q.last)


def _age_after(doc: Doc, j: int) -> bool:
    low, n = doc.low, len(doc.low)
    j += j < n and low[j] == "-"
    if j < n and low[j] in AGE_AFTER:
        return True
    if j + 1 < n and low[j] == "of" and low[j + 1] == "age":
        return True
    return j + 1 < n and low[j] in ("and", "or") and low[j + 1] in ("older", "over", "above")


def _group(doc: Doc, found: list[Quantity]) -> None:
    """Ranges and lists: a number without a unit takes the unit of the next number in its
    group; an interval or age role carries forward; each takes the group's phrase."""
    groups: list[list[Quantity]] = []
    for q in found:
        if groups and _joined(doc, groups[-1][-1], q):
            groups[-1].append(q)
        else:
            groups.append([q])
    for group in groups:
        if len(group) == 1:
            if group[0].phrase == (0, 0):
                group[0].phrase = (group[0].at, group[0].last)
            continue
        _merge(group)
        if len(group) == 2 and _is_range(doc, group[0], group[1]):
            low, high = sorted((group[0].value, group[1].value))
            group[0].within = group[1].within = (low, high)


def _joined(doc: Doc, left: Quantity, right: Quantity) -> bool:
    if left.dim and left.dim != right.dim and left.dim != "stat":
        return False
    between = range(left.last, right.at)
    return 0 < len(between) <= 3 and all(doc.low[k] in SEPARATORS for k in between)


def _merge(group: list[Quantity]) -> None:
    for k in range(len(group) - 2, -1, -1):
        q, nxt = group[k], group[k + 1]
        if not q.dim and nxt.dim:
            q.dim, q.factor = nxt.dim, nxt.factor
    head = group[0]
    for q in group[1:]:
        q.bound = q.bound or ("approx" if head.bound == "approx" else "")
        if head.dim == "stat":
            q.dim = "stat"
        elif head.dim in ("interval", "age") and q.dim in ("time", ""):
            q.factor = q.factor if q.dim else head.factor
            q.dim = head.dim
    first = min(q.phrase[0] if q.phrase != (0, 0) else q.at for q in group)
    for q in group:
        q.phrase = (first, group[-1].last)


def _is_range(doc: Doc, left: Quantity, right: Quantity) -> bool:
    between = [doc.low[k] for k in range(left.last, right.at)]
    if between in (["to"], ["-"], ["–"], ["—"]):
        return True
    return between == ["and"] and left.at > 0 and doc.low[left.at - 1] in ("between", "from")
