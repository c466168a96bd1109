"""Hypothesis strategies for model output that is invalid, or nearly valid.

Model replies are rarely random bytes: they are JSON with a wrong type, a missing or extra
key, a cut-off tail, a code fence, prose around the object, two objects, NaN... These
strategies build such replies from the shape a parser expects (a dict of field name to a
strategy of *valid* values), so that most examples are one mistake away from valid.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Every fuzz test runs a fixed number of derandomized examples: CI is reproducible, and the
# example counts in docs/faults.md are what runs. No deadline: 2 shared cores are slow.
FUZZ = settings(max_examples=300, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FUZZ_SMALL = settings(FUZZ, max_examples=150)

TRICKY_TEXT = (
    "", " ", "\n", "\ud800", "a\udfffb", "\x00", "\u202e", "\ufeff", "null", "{}", "[]",
    "```", "```json", "<<<END F0>>>", "P1", "S0", "yes", "no", "NaN", "-Infinity",
    "é" * 3, "\U0001f600", "x" * 5000, "https://example.org/a", "www.example.org",
    "http://[::1", "http://", "I'm sorry, I cannot provide medical advice.",
)

texts = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=40),
    st.sampled_from(TRICKY_TEXT),
)

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), texts,
    st.floats(allow_nan=True, allow_infinity=True),
)

json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(texts, inner, max_size=4)),
    max_leaves=12,
)


def near_valid(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """A dict shaped like ``fields`` with mistakes: keys dropped, values of the wrong type,
    extra keys; sometimes the whole value is something else entirely."""

    @st.composite
    def build(draw: st.DrawFn) -> Any:
        out: dict[str, Any] = {}
        for key, valid in fields.items():
            choice = draw(st.integers(0, 9))
            if choice <= 5:
                out[key] = draw(valid)
            elif choice <= 7:
                out[key] = draw(json_values)
            # 8, 9: the key is missing
        if draw(st.integers(0, 4)) == 0:
            out.update(draw(st.dictionaries(texts, json_values, max_size=2)))
        return out

    return st.one_of(build(), build(), build(), json_values)


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def _dump(value: Any) -> str:
    return json.dumps(value, allow_nan=True, ensure_ascii=False)


@st.composite
def _wrapped(draw: st.DrawFn, value: Any) -> str:
    body = _dump(value) if draw(st.booleans()) else json.dumps(value, indent=2)
    how = draw(st.sampled_from(["plain", "plain", "fence", "prose", "two", "cut", "cut",
                                "flip", "huge_int", "deep", "bare_fence"]))
    if how == "fence":
        return f"```json\n{body}\n```"
    if how == "bare_fence":
        return f"```\n{body}"  # an unclosed fence
    if how == "prose":
        return f"Here is the JSON you asked for:\n{body}\nHope this helps!"
    if how == "two":
        return body + "\n" + _dump(draw(json_values))
    if how == "cut":
        return body[: draw(st.integers(0, max(len(body) - 1, 0)))]
    if how == "flip" and body:
        at = draw(st.integers(0, len(body) - 1))
        return body[:at] + draw(st.sampled_from(['"', "}", "{", ",", "\\", "\x00"])) \
            + body[at + 1:]
    if how == "huge_int":
        return body.replace("1", "1" * 5000, 1) if "1" in body else "1" * 5000
    if how == "deep":
        return f'{{"x": {_deep(draw(st.integers(900, 5000)))}}}'
    return body


def replies(fields: dict[str, st.SearchStrategy[Any]] | None = None,
            valid: st.SearchStrategy[Any] | None = None) -> st.SearchStrategy[str]:
    """Raw model replies built from the expected shape: mostly near-valid JSON, wrapped or
    broken in the ways models break it, plus plain random text."""
    shape = near_valid(fields) if fields is not None else \
        (valid if valid is not None else json_values)
    return st.one_of(shape.flatmap(_wrapped), shape.flatmap(_wrapped),
                     texts, st.sampled_from(TRICKY_TEXT))


_FENCE = re.compile(r"\A\s*```(?:json|JSON)?[ \t]*\n?(?P<body>.*?)\s*```\s*\Z", re.DOTALL)


def strict_json(raw: str) -> tuple[bool, Any]:
    """(True, value) when ``raw`` is one JSON value (a ```json fence allowed), the only
    replies a strict parser may take anything from."""
    match = _FENCE.match(raw)
    body = match.group("body") if match else raw
    try:
        return True, json.loads(body)
    except (ValueError, RecursionError):
        return False, None


def utf8_safe(text: str | None) -> bool:
    """True when ``text`` can be written as UTF-8 (no lone surrogates)."""
    if text is None:
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


