"""evidence.normalise: the ASCII fast path and the cache give the full Unicode path's result."""

from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from medverify.judge import evidence
from medverify.judge.evidence import _normalise_unicode, normalise

_ASCII = st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=200)
_TRICKY = st.sampled_from(
    [*string.whitespace, "\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\u00a0", "\u2009",
                               "\u200b", "\u00ad", "\u2019", "\u201c", "\u2013", "\ufb01",
                               "\uff21", "\u0130", "\u00df", "\u03a3", "K", "e\u0301"]
)
_MIXED = st.lists(st.one_of(_ASCII, st.text(max_size=20), _TRICKY), max_size=12).map("".join)


@settings(max_examples=300, deadline=None)
@given(_ASCII)
def test_ascii_fast_path_equals_full_path(text: str) -> None:
    assert normalise(text) == _normalise_unicode(text)


@settings(max_examples=150, deadline=None)
@given(_MIXED)
def test_any_text_equals_full_path(text: str) -> None:
    assert normalise(text) == _normalise_unicode(text)


def test_fast_path_is_taken_and_cached() -> None:
    text = "Aspirin\tREDUCES  the risk\n of stroke."
    assert normalise(text) == "aspirin reduces the risk of stroke."
    before = evidence.normalise.cache_info().hits
    assert normalise(text) == "aspirin reduces the risk of stroke."
    assert evidence.normalise.cache_info().hits == before + 1
    # non-ASCII still folds: typographic quote, zero-width space, ligature, NBSP
    assert normalise("the \ufb01rst\u200b \u2019dose\u2019\u00a0OK") == "the first 'dose' ok"
