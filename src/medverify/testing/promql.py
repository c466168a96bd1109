"""A small PromQL evaluator for testing alert rules against scraped metrics, offline (no
Prometheus server is needed, or available, where the tests run).

It evaluates the subset the sample rules in ``examples/prometheus/alerts.yml`` use, over
two or more scrapes (:class:`Scrape`: the time and the samples of one exposition):

* selectors ``name{label="v", label!="v", label=~"re", label!~"re"}``, instant (the latest
  scrape) or with a range ``[5m]`` (the scrapes within it);
* ``rate``, ``increase`` (the difference between the first and the last scrape in the
  range, counter resets added back; *without* Prometheus's extrapolation to the edges of
  the range, so a threshold on one rate reads a little lower than Prometheus would: ratios
  of two rates over the same range are the same), ``histogram_quantile``, ``abs``;
* ``sum``, ``max``, ``min``, ``avg``, ``count`` with ``by (...)`` or ``without (...)``;
* ``+ - * /`` between vectors (samples matched on all their labels, the metric name aside)
  or with numbers, and the comparisons ``> < >= <= == !=``, which keep the samples that
  hold (an alert fires when its expression leaves any sample).

What it does not know (``offset``, ``on``/``ignoring``, ``bool``, other functions) raises
:class:`PromQLError`, so a rule it cannot evaluate fails a test instead of passing it.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from prometheus_client.parser import text_string_to_metric_families

Labels = frozenset[tuple[str, str]]
Vector = dict[Labels, float]
Value = float | Vector

_TOKEN = re.compile(r"""\s*(?:(?P<duration>\d+(?:ms|[smhdwy]))(?![\w.])|(?P<number>\d+(?:\.\d*)?
    (?:e[+-]?\d+)?)|(?P<string>"(?:[^"\\]|\\.)*")|(?P<name>[A-Za-z_:][\w:]*)
    |(?P<op>==|!=|>=|<=|=~|!~|[-+*/<>=(){}\[\],]))""", re.X)
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_AGGREGATIONS = {"sum": sum, "max": max, "min": min, "count": len,
                 "avg": lambda values: sum(values) / len(values)}
_ARITHMETIC: dict[str, Callable[[float, float], float]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul,
    "/": lambda a, b: a / b if b else (math.nan if a == 0 else math.copysign(math.inf, a))}
_COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt, "<": operator.lt, ">=": operator.ge, "<=": operator.le,
    "==": operator.eq, "!=": operator.ne}


class PromQLError(ValueError):
    """An expression this evaluator cannot parse or does not support."""


@dataclass(frozen=True)
class Scrape:
    """One exposition read at ``time`` (seconds): every sample by its labels (the metric
    name as ``__name__``)."""

    time: float
    samples: Vector

    @classmethod
    def parse(cls, time: float, text: str) -> Scrape:
        samples: Vector = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples[frozenset({**s.labels, "__name__": s.name}.items())] = s.value
        return cls(time, samples)


def evaluate(expr: str, scrapes: Sequence[Scrape]) -> Value:
    """``expr`` at the time of the last scrape."""
    if not scrapes:
        raise PromQLError("no scrape to evaluate against")
    parser = _Parser(expr, sorted(scrapes, key=lambda s: s.time))
    value = parser.comparison()
    parser.expect(None)
    return value


def fires(expr: str, scrapes: Sequence[Scrape]) -> bool:
    """Whether an alert with this expression is active (its ``for:`` aside)."""
    value = evaluate(expr, scrapes)
    return bool(value) if isinstance(value, dict) else not math.isnan(value)


def _without_name(labels: Labels) -> Labels:
    return frozenset((k, v) for k, v in labels if k != "__name__")


class _Parser:
    """Recursive descent over the tokens, evaluating as it goes."""

    def __init__(self, text: str, scrapes: list[Scrape]) -> None:
        self.tokens: list[tuple[str, str]] = []
        at = 0
        while at < len(text.rstrip()):
            found = _TOKEN.match(text, at)
            if not found or found.lastgroup is None:
                raise PromQLError(f"cannot read {text[at:at + 20]!r}")
            self.tokens.append((found.lastgroup, found.group(found.lastgroup)))
            at = found.end()
        self.at, self.scrapes = 0, scrapes

    def peek(self) -> str | None:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        if self.at >= len(self.tokens):
            raise PromQLError("the expression ends too early")
        self.at += 1
        return self.tokens[self.at - 1]

    def expect(self, text: str | None) -> None:
        if self.peek() != text:
            raise PromQLError(f"expected {text!r}, found {self.peek()!r}")
        if text is not None:
            self.at += 1

    def comparison(self) -> Value:
        left = self.additive()
        while self.peek() in _COMPARISONS:
            op = self.take()[1]
            left = _binary(left, self.additive(), op)
        return left

    def additive(self) -> Value:
        left = self.multiplicative()
        while self.peek() in ("+", "-"):
            op = self.take()[1]
            left = _binary(left, self.multiplicative(), op)
        return left

    def multiplicative(self) -> Value:
        left = self.unary()
        while self.peek() in ("*", "/"):
            op = self.take()[1]
            left = _binary(left, self.unary(), op)
        return left

    def unary(self) -> Value:
        kind, text = self.take()
        if kind == "number":
            return float(text)
        if text == "(":
            value = self.comparison()
            self.expect(")")
            return value
        if kind != "name":
            raise PromQLError(f"unexpected {text!r}")
        if text in _AGGREGATIONS:
            return self.aggregation(text)
        if self.peek() == "(":
            return self.function(text)
        labels, seconds = self.selector(text)
        if seconds is not None:
            raise PromQLError(f"a range selector {text}[...] outside rate() or increase()")
        latest = self.scrapes[-1].samples
        return {k: v for k, v in latest.items() if _matches(k, labels)}

    def selector(self, name: str) -> tuple[list[tuple[str, str, str]], float | None]:
        matchers = [("__name__", "=", name)]
        if self.peek() == "{":
            self.take()
            while self.peek() != "}":
                label, op, quoted = self.take()[1], self.take()[1], self.take()[1]
                matchers.append((label, op, quoted[1:-1].encode().decode("unicode_escape")))
                if self.peek() == ",":
                    self.take()
            self.take()
        seconds = None
        if self.peek() == "[":
            self.take()
            kind, text = self.take()
            if kind != "duration":
                raise PromQLError(f"a range is a duration like 5m, not {text!r}")
            unit = text.lstrip("0123456789")
            seconds = float(text[: -len(unit)]) * _UNITS[unit]
            self.expect("]")
        return matchers, seconds

    def grouping(self) -> tuple[str, set[str]] | None:
        if self.peek() not in ("by", "without"):
            return None
        how = self.take()[1]
        self.expect("(")
        names = set()
        while self.peek() != ")":
            names.add(self.take()[1])
            if self.peek() == ",":
                self.take()
        self.take()
        return how, names

    def aggregation(self, name: str) -> Vector:
        grouping = self.grouping()
        self.expect("(")
        value = self.comparison()
        self.expect(")")
        grouping = grouping or self.grouping() or ("by", set())
        if not isinstance(value, dict):
            raise PromQLError(f"{name}() of a number")
        groups: dict[Labels, list[float]] = {}
        for labels, v in value.items():
            how, names = grouping
            kept = frozenset((k, x) for k, x in _without_name(labels)
                             if (k in names) == (how == "by"))
            groups.setdefault(kept, []).append(v)
        return {k: float(_AGGREGATIONS[name](vs)) for k, vs in groups.items()}

    def function(self, name: str) -> Value:
        self.expect("(")
        if name in ("rate", "increase"):
            metric = self.take()[1]
            labels, seconds = self.selector(metric)
            if seconds is None:
                raise PromQLError(f"{name}() needs a range selector")
            self.expect(")")
            return self.ranged(labels, seconds, per_second=name == "rate")
        if name == "histogram_quantile":
            q = self.comparison()
            self.expect(",")
            buckets = self.comparison()
            self.expect(")")
            if not isinstance(q, float) or not isinstance(buckets, dict):
                raise PromQLError("histogram_quantile(number, vector)")
            return _quantile(q, buckets)
        if name == "abs":
            value = self.comparison()
            self.expect(")")
            return abs(value) if isinstance(value, float) else {
                k: abs(v) for k, v in value.items()}
        raise PromQLError(f"unsupported function {name}()")

    def ranged(self, matchers: list[tuple[str, str, str]], seconds: float,
               per_second: bool) -> Vector:
        now = self.scrapes[-1].time
        series: dict[Labels, list[tuple[float, float]]] = {}
        for scrape in self.scrapes:
            if now - seconds <= scrape.time:
                for labels, v in scrape.samples.items():
                    if _matches(labels, matchers):
                        series.setdefault(_without_name(labels), []).append((scrape.time, v))
        out: Vector = {}
        for labels, points in series.items():
            if len(points) < 2:
                continue
            grown = sum(b - a if b >= a else b for (_, a), (_, b) in pairwise(points))
            span = points[-1][0] - points[0][0]
            out[labels] = grown / span if per_second else grown
        return out


def _matches(labels: Labels, matchers: list[tuple[str, str, str]]) -> bool:
    have = dict(labels)
    for name, op, want in matchers:
        value = have.get(name, "")
        ok = {"=": value == want, "!=": value != want,
              "=~": re.fullmatch(want, value) is not None,
              "!~": re.fullmatch(want, value) is None}.get(op)
        if ok is None:
            raise PromQLError(f"unknown matcher {op!r}")
        if not ok:
            return False
    return True


def _binary(left: Value, right: Value, op: str) -> Value:
    compare = _COMPARISONS.get(op)
    apply = _ARITHMETIC.get(op)

    def one(a: float, b: float, keep: float) -> float | None:
        if compare is not None:
            return keep if compare(a, b) else None
        assert apply is not None
        return apply(a, b)

    if isinstance(left, float) and isinstance(right, float):
        if compare is not None:
            raise PromQLError("comparing two numbers needs 'bool', which is not supported")
        return one(left, right, left)  # type: ignore[return-value]
    if isinstance(right, float):
        assert isinstance(left, dict)
        pairs = {_without_name(k): (v, right, v) for k, v in left.items()}
    elif isinstance(left, float):
        pairs = {_without_name(k): (left, v, v) for k, v in right.items()}
    else:
        rights = {_without_name(k): v for k, v in right.items()}
        pairs = {_without_name(k): (v, rights[_without_name(k)], v) for k, v in left.items()
                 if _without_name(k) in rights}
    out = {k: one(a, b, keep) for k, (a, b, keep) in pairs.items()}
    return {k: v for k, v in out.items() if v is not None}


def _quantile(q: float, buckets: Vector) -> Vector:
    """Prometheus's histogram_quantile: linear within the bucket holding the rank."""
    groups: dict[Labels, list[tuple[float, float]]] = {}
    for labels, count in buckets.items():
        have = dict(labels)
        if "le" not in have:
            continue
        rest = frozenset((k, v) for k, v in _without_name(labels) if k != "le")
        groups.setdefault(rest, []).append((float(have["le"]), count))
    out: Vector = {}
    for labels, points in groups.items():
        points.sort()
        total = points[-1][1]
        if total == 0 or not math.isinf(points[-1][0]):
            out[labels] = math.nan
            continue
        rank, lower, below = q * total, 0.0, 0.0
        for upper, count in points:
            if count >= rank:
                if math.isinf(upper):
                    out[labels] = lower
                else:
                    out[labels] = lower + (upper - lower) * (rank - below) / max(
                        count - below, 1e-12)
                break
            lower, below = upper, count
    return out
