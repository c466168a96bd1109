"""Sentence splitting in medverify.text: one test group per named variant."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import medverify.text
from medverify.text import (
    clause_spans,
    flat_sentences,
    line_sentences,
    sentence_breaks,
    sentence_spans,
)


def pieces(text: str, spans: list[tuple[int, int]]) -> list[str]:
    return [text[a:b] for a, b in spans]


# --------------------------------------------------------------------------- sentence_spans

@pytest.mark.parametrize(("text", "expected"), [
    ("Take 2.5 mg daily. See Dr. Smith today.", ["Take 2.5 mg daily.", "See Dr. Smith today."]),
    ("Aspirin (e.g. Bayer) works. It helps.", ["Aspirin (e.g. Bayer) works.", "It helps."]),
    ("He met John F. Kennedy. It rained.", ["He met John F. Kennedy.", "It rained."]),
    ("Take vitamin D. It helps.", ["Take vitamin D.", "It helps."]),
    ("See No. 5 and Fig. 2 for it.", ["See No. 5 and Fig. 2 for it."]),
    ("Made in the U.S. The end.", ["Made in the U.S.", "The end."]),
    ("Made in the U.S. Food is good.", ["Made in the U.S. Food is good."]),
    ("It works [1]. It helps [2, 3].", ["It works [1].", "It helps [2, 3]."]),
    ("Really?! Yes. ok. done", ["Really?!", "Yes. ok. done"]),
    ("“Stop.” Then go.", ["“Stop.”", "Then go."]),
])
def test_sentence_spans_knows_abbreviations_initials_and_markers(text: str,
                                                                 expected: list[str]) -> None:
    assert pieces(text, sentence_spans(text)) == expected


def test_sentence_spans_edges() -> None:
    assert sentence_spans("") == []
    assert sentence_spans("No end punctuation") == [(0, 18)]
    # the first span starts at ``start`` as given; later ones skip the whitespace between
    assert pieces("  lead. Next", sentence_spans("  lead. Next")) == ["  lead.", "Next"]


def test_sentence_spans_splits_only_inside_the_range_but_reads_around_it() -> None:
    text = "Intro. He met John F. Kennedy. It rained. Outro."
    start, end = text.index("He"), text.index(" Outro")
    assert pieces(text, sentence_spans(text, start, end)) == [
        "He met John F. Kennedy.", "It rained."]
    # "F." is read as an initial because of the word before it, even at a range start
    inner = text.index("F.")
    assert pieces(text, sentence_spans(text, inner, end)) == ["F. Kennedy.", "It rained."]


# --------------------------------------------------------------------------- sentence_breaks

def test_sentence_breaks_after_punctuation_blank_lines_and_before_bullets() -> None:
    text = "One. Two!) Three\n\nFour\n- five"
    assert sentence_breaks(text) == [5, 11, 18, 23]
    assert [text[b:b + 4] for b in sentence_breaks(text)] == ["Two!", "Thre", "Four", "- fi"]


def test_sentence_breaks_has_no_abbreviation_rules() -> None:
    assert sentence_breaks("e.g. this") == [5]
    assert sentence_breaks("2.5 mg") == []
    assert sentence_breaks("") == []
    assert sentence_breaks("end.") == []  # a boundary needs whitespace after it


# --------------------------------------------------------------------------- line_sentences

def test_line_sentences_split_at_punctuation_runs_and_line_ends() -> None:
    assert line_sentences("Fever.  Cough!!\nlast line") == ["Fever.", "Cough!!", "last line"]
    assert line_sentences("Take 2.5 mg.") == ["Take 2.", "5 mg."]
    assert line_sentences("") == [] and line_sentences(" \n ") == []


def test_line_sentences_drop_an_unpunctuated_line_before_another() -> None:
    assert line_sentences("no stop\nlast.") == ["last."]
    assert line_sentences("a\nb\n") == ["b"]
    assert line_sentences("only line\n") == ["only line"]


# --------------------------------------------------------------------------- clause_spans

def test_clause_spans_split_after_semicolons_and_at_newlines() -> None:
    text = "A b. C d!\nE; f g;h\n\n i"
    assert pieces(text, clause_spans(text)) == ["A b.", "C d!", "E;", "f g;h", " i"]
    assert clause_spans("A b. C d!\nE") == [(0, 4), (5, 9), (10, 11)]


def test_clause_spans_drop_blank_pieces() -> None:
    assert clause_spans("") == []
    assert clause_spans(" \n\n ") == []
    assert pieces("x.  \n\ny", clause_spans("x.  \n\ny")) == ["x.", "y"]


# --------------------------------------------------------------------------- flat_sentences

def test_flat_sentences_split_before_a_capital_or_digit() -> None:
    assert flat_sentences("One  a.\nTwo. three. 4 x!  Yes") == [
        "One a.", "Two. three.", "4 x!", "Yes"]


def test_flat_sentences_collapse_whitespace() -> None:
    assert flat_sentences("") == []
    assert flat_sentences("  a\n\tb ") == ["a b"]
    assert flat_sentences("Dr. Smith") == ["Dr.", "Smith"]  # no abbreviation rules


# --------------------------------------------------------------------------- layering

def test_text_is_a_bottom_layer_module() -> None:
    tree = ast.parse(Path(medverify.text.__file__).read_text("utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom)}
    assert {name for name in imported if name.startswith("medverify")} <= {"medverify.errors"}
