"""Fact-check detection scores against human labels, and answer ratings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medverify.errors import InputError
from medverify.factcheck.evaluate import (
    AnswerRating,
    answer_id,
    evaluate,
    evaluate_reports,
    intervals,
    match_labels,
    normalise_fact,
    rating_summary,
    read_fact_labels,
    read_ratings,
    read_reports,
    score_verdicts,
)
from medverify.factcheck.records import Fact, FactCheckReport, FactStep, FactVerdict
from medverify.records import Category, Claim

T, F, U, E = FactVerdict.TRUE, FactVerdict.FALSE, FactVerdict.UNVERIFIABLE, FactVerdict.ERROR


def test_hand_computed_confusion_matrix() -> None:
    pairs = ([(F, True)] * 3 + [(U, True)] + [(T, True)] + [(F, False)] * 2
             + [(T, False)] * 5 + [(E, True), (E, False)])
    s = score_verdicts(pairs)
    assert (s.n, s.n_unscored, s.tp, s.fp, s.tn, s.fn) == (12, 2, 4, 2, 5, 1)
    assert s.sensitivity == pytest.approx(4 / 5)
    assert s.specificity == pytest.approx(5 / 7)
    assert s.ppv == pytest.approx(4 / 6)
    assert s.f1 == pytest.approx(8 / 11)  # 2PR/(P+R) with P 2/3, R 4/5
    assert s.balanced_accuracy == pytest.approx((4 / 5 + 5 / 7) / 2)


def test_undefined_scores_are_none() -> None:
    empty = score_verdicts([])
    assert (empty.n, empty.sensitivity, empty.specificity, empty.ppv, empty.f1,
            empty.balanced_accuracy) == (0, None, None, None, None, None)
    all_true = score_verdicts([(T, False), (F, False)])  # no fact is really false
    assert all_true.sensitivity is None and all_true.specificity == 0.5
    assert all_true.balanced_accuracy is None and all_true.ppv == 0.0 and all_true.f1 == 0.0
    no_alarm = score_verdicts([(T, True), (T, False)])  # nothing predicted positive
    assert no_alarm.ppv is None and no_alarm.sensitivity == 0.0 and no_alarm.f1 == 0.0
    only_errors = score_verdicts([(E, True)])
    assert only_errors.n == 0 and only_errors.n_unscored == 1


def test_intervals_are_deterministic_and_bracket_the_value() -> None:
    pairs = [(F, True)] * 8 + [(T, True)] * 2 + [(T, False)] * 15 + [(F, False)] * 5
    first = intervals(pairs, n_boot=300, seed=1)
    assert first == intervals(pairs, n_boot=300, seed=1)
    low, high = first["sensitivity"]
    assert low <= 0.8 <= high and high - low > 0
    assert "balanced_accuracy" in first
    assert intervals([(F, True)]) == {}


# -- reports and labels ---------------------------------------------------------------------


def _fact(fid: str, text: str, verdict: FactVerdict) -> Fact:
    category = {T: Category.FACT, F: Category.HALLUCINATION, U: Category.COVERAGE_GAP,
                E: Category.ERROR}[verdict]
    step = FactStep(round=1, text=text, verdict=verdict, category=category)
    return Fact(id=fid, claim=Claim(id=fid, text=text), steps=[step], final_text=text,
                final_verdict=verdict)


def _report(question: str, facts: list[Fact]) -> FactCheckReport:
    text = " ".join(f.claim.text for f in facts)
    return FactCheckReport(question=question, initial_answer=text, final_answer=text,
                           facts=facts)


REPORTS = [
    _report("What is the dose of metformin?", [
        _fact("f1", "Metformin starts at 500 mg daily.", T),
        _fact("f2", "Metformin is contraindicated in asthma.", F),
        _fact("f3", "Metformin is an oral drug.", U),
    ]),
    _report("Is aspirin safe?", [
        _fact("f1", "Aspirin can cause bleeding.", T),
        _fact("f2", "Metformin is an oral drug.", T),
    ]),
]


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    return path


def test_labels_match_by_normalised_text_answer_and_question(tmp_path: Path) -> None:
    aid = answer_id(REPORTS[0])
    path = _jsonl(tmp_path / "labels.jsonl", [
        {"answer_id": aid, "fact": "metformin starts at 500 MG daily", "label": "true"},
        {"answer_id": aid, "fact": "Metformin is contraindicated in asthma.", "label": "FALSE"},
        {"question": "is aspirin safe?", "text": "Aspirin can cause bleeding.", "label": 0},
        {"fact": "Metformin is an oral drug.", "label": "incorrect"},  # in both answers
        {"fact": "Not in any answer.", "label": True},
        {"question": "What is the dose of metformin?", "fact_id": "f3", "label": "correct"},
    ])
    labels = read_fact_labels(path)
    assert [lb.false for lb in labels] == [False, True, True, True, False, False]
    match = match_labels(REPORTS, labels)
    assert match.pairs == [(T, False), (F, True), (T, True), (U, False)]
    assert len(match.unmatched) == 2
    assert "line 4: matches facts of 2 answers" in match.unmatched[0]
    assert "line 5: no such fact" in match.unmatched[1]
    scores = evaluate_reports(REPORTS, labels)
    assert (scores.tp, scores.fp, scores.tn, scores.fn) == (1, 1, 1, 1)


def test_csv_labels_and_bad_rows(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_text("Answer_ID,Fact,Label\nx,Some fact,Incorrect\ny,Other fact,correct\n",
                    "utf-8")
    labels = read_fact_labels(path)
    assert [(lb.answer_id, lb.fact, lb.false, lb.line) for lb in labels] == [
        ("x", "Some fact", True, 2), ("y", "Other fact", False, 3)]
    bad = tmp_path / "bad.csv"
    bad.write_text("fact,label\nA fact,maybe\n", "utf-8")
    with pytest.raises(InputError, match=r"bad.csv:2: unknown fact label 'maybe'"):
        read_fact_labels(bad)
    missing = _jsonl(tmp_path / "m.jsonl", [{"fact": "x"}])
    with pytest.raises(InputError, match="needs a fact"):
        read_fact_labels(missing)
    with pytest.raises(InputError, match="no such file"):
        read_fact_labels(tmp_path / "nope.jsonl")


def test_normalise_fact() -> None:
    assert normalise_fact("  The “drug”  is SAFE. ") == normalise_fact('the "drug" is safe')


def test_ratings_words_and_scores(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "ratings.jsonl", [
        {"answer_id": "a", "rating": "improved"},
        {"answer_id": "b", "rating": "Same"},
        {"answer_id": "c", "initial": 3, "final": 2},
        {"answer_id": "d", "initial": "2", "final": "4.5"},
        {"answer_id": "e", "rating": "-1"},
    ])
    ratings = read_ratings(path)
    assert [r.outcome for r in ratings] == ["improved", "equal", "worse", "improved", "worse"]
    summary = rating_summary(ratings)
    assert (summary.n, summary.improved, summary.equal, summary.worse) == (5, 2, 1, 2)
    bad = _jsonl(tmp_path / "bad.jsonl", [{"answer_id": "a", "initial": 3}])
    with pytest.raises(InputError, match=r"bad\.jsonl:1"):
        read_ratings(bad)
    assert rating_summary([AnswerRating(answer_id="x", outcome="equal")]).equal == 1


def test_read_reports_from_file_list_and_directory(tmp_path: Path) -> None:
    (tmp_path / "one.json").write_text(REPORTS[0].model_dump_json(), "utf-8")
    listing = "[" + ",".join(r.model_dump_json() for r in REPORTS) + "]"
    (tmp_path / "many.json").write_text(listing, "utf-8")
    (tmp_path / "one.selfrefine.json").write_text("{}", "utf-8")  # a baseline: skipped
    assert len(read_reports(tmp_path / "one.json")) == 1
    assert len(read_reports(tmp_path)) == 3
    (tmp_path / "junk.json").write_text('{"x": 1}', "utf-8")
    with pytest.raises(InputError, match=r"junk\.json: not a fact-check report"):
        read_reports(tmp_path)
    with pytest.raises(InputError, match="no such file"):
        read_reports(tmp_path / "absent")


def test_evaluate_collects_everything(tmp_path: Path) -> None:
    labels = read_fact_labels(_jsonl(tmp_path / "l.jsonl", [
        {"answer_id": answer_id(REPORTS[0]), "fact": "Metformin is an oral drug.",
         "label": "false"}]))
    result = evaluate(REPORTS, labels, [AnswerRating(answer_id="x", outcome="worse")],
                      n_boot=50)
    assert (result.n_reports, result.n_facts, result.n_labels, result.n_matched) == (2, 5, 1, 1)
    assert result.scores.tp == 1 and result.ratings is not None and result.ratings.worse == 1
