"""The NUMBER check of :mod:`medverify.judge.checks`: the claim's quantities that the passage
states otherwise.

Quantities are read by :func:`~medverify.judge.checks.quantities.quantities` (units,
intervals, frequencies, ages, ranges and lists). A claim quantity is stated when a passage
quantity says the same (:func:`same`: after unit conversion, rounding to the written
precision, "about" within 10%, comparators, a value inside a passage range); a finding is
made when the passage states it nowhere while an aligned sentence states the same kind of
quantity with another value. Statistics ("p < 0.05", "95% CI", "n = 34") never veto.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from medverify.judge.checks.counts import DOSE_COUNTS, rate, same_rate
from medverify.judge.checks.quantities import Quantity, quantities
from medverify.judge.checks.text import CLAUSE_PUNCT, Alignment, Doc, is_content
from medverify.judge.checks.units import CONTEXT_SKIP, UNITS
from medverify.records import CheckFinding, CheckKind

NO_VETO = frozenset({"", "stat", "fold", "units"})
UNIT_DIMS = frozenset(dim for dim, _ in UNITS.values()) - {"percent", "units"}


def _round(x: float, decimals: int) -> float:
    factor = 10.0 ** decimals
    return math.floor(x * factor + 0.5) / factor


def same(c: Quantity, p: Quantity) -> bool:
    """Does passage quantity ``p`` say what claim quantity ``c`` says (after unit
    conversion, rounding either one to the other's written precision, "about" within 10%,
    comparators, and a single value inside a passage range)?"""
    cv, pv = c.value, p.value
    if not (math.isfinite(cv) and math.isfinite(pv)):
        return cv == pv
    if math.isclose(cv, pv, rel_tol=1e-6, abs_tol=1e-12):
        return True
    if "approx" in (c.bound, p.bound) and math.isclose(cv, pv, rel_tol=0.1):
        return True
    if (c.bound == "ge" and pv >= cv) or (c.bound == "le" and pv <= cv):
        return True
    if (p.bound == "ge" and cv >= pv) or (p.bound == "le" and cv <= pv):
        return True
    if p.within and not c.within and p.within[0] <= cv <= p.within[1]:
        return True
    return _rounds_to(pv / c.scale, c) or _rounds_to(cv / p.scale, p)


def _rounds_to(x: float, q: Quantity) -> bool:
    return abs(x) < 1e15 and abs(_round(x, q.decimals) - q.written) < 1e-9 * max(1.0, q.written)


_FOUND_WITH = {"age": {"age", "time"}, "interval": {"interval", "time"},
               "time": {"time", "age", "interval"}}


def _compatible(c: str, p: str) -> bool:
    return c == p or p in _FOUND_WITH.get(c, ())


def number_findings(claim: Doc, passage: Doc, alignment: Alignment,
                    passage_id: str | None, whole: Callable[[], Doc]) -> list[CheckFinding]:
    """A finding for each claim quantity whose value (in its unit) the passage states
    nowhere while an aligned sentence states the same kind of quantity with another value
    that no other claim quantity accounts for. A veto, except for generic kinds (counts,
    percentages, durations) whose two quantities do not share a neighbouring word.
    ``passage`` holds the aligned sentences; ``whole`` tokenizes the whole passage (called
    only when a finding is in view)."""
    mine = quantities(claim)
    claimed = [q for q in mine if q.dim not in NO_VETO and not q.article]
    if not claimed or not alignment.sentences:
        return []
    stated = quantities(passage)
    aligned = [q for a, b in alignment.sentences for q in stated if a <= q.at < b]
    unexplained = [p for p in aligned if not any(_agrees(c, p) for c in mine)]
    findings = []
    everywhere: list[Quantity] | None = None
    for c in claimed:
        if any((p.written == c.written and not p.article and not _rates(c, p)
                and not _other_unit(c, p)) or _agrees(c, p)
               for p in aligned) or _derived(c, aligned):
            continue
        other = next((p for p in unexplained if p.dim == c.dim), None) or next(
            (p for p in unexplained if (c.dim, p.dim) in _INTERVAL_OR_TIME or _rates(c, p)),
            None)
        if other is None:
            continue
        everywhere = quantities(whole()) if everywhere is None else everywhere
        if any(_agrees(c, p) for p in everywhere):
            continue
        findings.append(_finding(claim, passage, c, other, passage_id))
    return findings


def _other_unit(c: Quantity, p: Quantity) -> bool:
    """The same number in another unit of the same dimension ("10 minutes" vs "10
    seconds"): the written number alone does not excuse the claim."""
    return c.dim == p.dim and c.dim in UNIT_DIMS and not math.isclose(c.factor, p.factor)


def _rates(c: Quantity, p: Quantity) -> bool:
    """Are the two a frequency and an interval, or frequencies per other periods ("once
    weekly", "twice daily", "every 12 hours"), compared as times per day?"""
    return c.dim != p.dim and rate(c.dim, 1.0) is not None and rate(p.dim, 1.0) is not None


def _agrees(c: Quantity, p: Quantity) -> bool:
    """Does passage quantity ``p`` state claim quantity ``c`` (:func:`same`, or the same
    number of times per day, a passage range of intervals included)?"""
    if not _rates(c, p):
        return _compatible(c.dim, p.dim) and same(c, p)
    rc = rate(c.dim, c.value)
    ends = p.within if p.within and p.dim == "interval" else (p.value, p.value)
    rp = sorted(r for r in (rate(p.dim, v) for v in ends) if r is not None)
    if rc is None or not rp:
        return False
    return rp[0] <= rc <= rp[-1] or any(same_rate(rc, r) for r in rp)


# "every 2 years" (an interval) against "after 10 years" (a time): the same schedule told
# two ways; compared like durations, vetoing only with a shared neighbouring word.
_INTERVAL_OR_TIME = frozenset({("interval", "time"), ("time", "interval")})


def _finding(claim: Doc, passage: Doc, c: Quantity, other: Quantity,
             passage_id: str | None) -> CheckFinding:
    says, stated = claim.span(*c.phrase), passage.span(*other.phrase)
    both_freq = c.dim.startswith("freq/") and other.dim.startswith("freq/")
    generic = (c.dim in ("percent", "time") or (c.dim != other.dim and not both_freq)
               or other.article
               or (c.dim.startswith("count:") and c.dim[6:] not in DOSE_COUNTS))
    veto = not generic or bool(set(_context(claim, c)) & set(_context(passage, other)) - {""})
    return CheckFinding(kind=CheckKind.NUMBER, veto=veto, passage_id=passage_id,
                        claim_says=says, passage_says=stated,
                        reason=f"the claim says {says}; the passage says {stated}")


def _context(doc: Doc, q: Quantity) -> tuple[str, str]:
    """The nearest content stems before and after a quantity's phrase, in its clause
    (comparators and words such as "only" skipped; a label's colon right before the
    number, "Enrollment: 97 participants", is not a clause break)."""
    pre = post = ""
    for k in range(q.phrase[0] - 1, max(-1, q.phrase[0] - 6), -1):
        if doc.low[k] == ":" and k == q.phrase[0] - 1:
            continue
        if doc.low[k] in CLAUSE_PUNCT:
            break
        if is_content(doc.low[k]) and doc.low[k] not in CONTEXT_SKIP:
            pre = doc.stems[k]
            break
    for k in range(q.phrase[1], min(len(doc.low), q.phrase[1] + 4)):
        if doc.low[k] in CLAUSE_PUNCT:
            break
        if is_content(doc.low[k]):
            post = doc.stems[k]
            break
    return pre, post


def _derived(c: Quantity, aligned: list[Quantity]) -> bool:
    """A percentage the claim may have computed from two in the sentence: their
    difference (points) or the relative change."""
    if c.dim != "percent":
        return False
    values = [p.value for p in aligned if p.dim == "percent"][:8]
    for x in values:
        for y in values:
            if x > y > 0 and any(math.isclose(c.value, d, abs_tol=0.51)
                                 for d in (x - y, 100 * (x - y) / x, 100 * (x - y) / y)):
                return True
    return False
