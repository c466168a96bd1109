"""Untrusted text into a prompt, and a model's JSON reply out of it.

Answers, evidence and fetched pages are data, never instructions: each piece goes inside a
fence whose name is derived from the content (so text cannot forge the closing line), and
the prompts tell the model to ignore instructions inside fences. Replies are parsed
strictly: anything but the expected JSON is a :class:`~medverify.errors.ParseError` that
keeps the raw output, never a guess.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from medverify.errors import ParseError
from medverify.records import content_hash

_CODE_FENCE = re.compile(r"\A\s*```(?:json|JSON)?[ \t]*\n?(?P<body>.*?)\s*```\s*\Z", re.DOTALL)


def fence_id(texts: Iterable[str]) -> str:
    """A fence name that depends on every text it will enclose."""
    return "F" + content_hash("\x00".join(texts))[:12]


def fenced(fence: str, header: str, text: str) -> str:
    """``text`` between the opening ``<<<fence header>>>`` and closing ``<<<END fence>>>``."""
    return f"<<<{fence} {header}>>>\n{text}\n<<<END {fence}>>>"


def defuse(text: str) -> str:
    """Text with the fence delimiters broken up, for headers and one-line fields."""
    return text.replace("<<<", "< < <").replace(">>>", "> > >")


class _DuplicateKey(ValueError):
    """A JSON object of a reply names the same key twice."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict; a key given twice raises (``json`` would silently
    keep the last: ``"supported": false, ..., "supported": true`` reads as true)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f"duplicate key {key[:40]!r} in a JSON object")
        out[key] = value
    return out


def load_json_reply(raw: str, what: str = "reply") -> Any:
    """The JSON value in a model reply (a surrounding ```json code fence is tolerated).

    Raises ParseError for anything but one strict JSON value, including an object that
    names a key twice (which value the model meant is unknowable). One repair is made: a
    comma right before a closing ``}`` or ``]`` (outside strings) is dropped, a slip small
    models make that changes no value."""
    match = _CODE_FENCE.match(raw)
    body = match.group("body") if match else raw
    try:
        try:
            return json.loads(body, object_pairs_hook=_unique_keys)
        except json.JSONDecodeError:
            repaired = without_trailing_commas(body)
            if repaired == body:
                raise
            return json.loads(repaired, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise ParseError(f"{what} is not usable JSON: {exc}", raw=raw) from None
    except json.JSONDecodeError as exc:
        raise ParseError(f"{what} is not valid JSON ({exc.msg} at char {exc.pos})",
                         raw=raw) from None
    except (ValueError, RecursionError) as exc:  # an integer too long, nesting too deep
        raise ParseError(f"{what} is not usable JSON ({type(exc).__name__}: "
                         f"{str(exc)[:80]})", raw=raw) from None


def without_trailing_commas(text: str) -> str:
    """``text`` without the commas that directly precede a closing ``}`` or ``]`` (spaces
    between them allowed), outside JSON strings; everything else unchanged."""
    out: list[str] = []
    in_string = escaped = False
    for i, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "," and text[i + 1:].lstrip()[:1] in ("}", "]"):
            continue
        out.append(char)
    return "".join(out)


def validation_detail(exc: ValidationError, limit: int = 3) -> str:
    """The first ``limit`` problems of a pydantic validation error, on one line."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'reply'}: {e['msg']}"
                     for e in exc.errors()[:limit])
