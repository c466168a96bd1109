"""Reading audit JSONL, extracting and normalising cited URLs, given claims."""

from __future__ import annotations

import json

import pytest

from data_paths import data_path
from medverify.audit.cited_urls import extract_sources, normalize_url
from medverify.audit.inputs import given_claims, normalize_label, read_audit
from medverify.audit.records import SupportLabel
from medverify.records import Answer


def _line(**fields: object) -> bytes:
    return json.dumps(fields).encode() + b"\n"


def test_reads_answers_sources_claims_and_extra_fields() -> None:
    data = _line(
        id="a1", question="Q?", answer="Aspirin thins blood [2].", system="gpt", field="Med",
        sources=[{"url": "https://Example.com/a#top", "marker": 2, "text": "Aspirin text."},
                 {"url": "https://other.org/b"}],
        claims=[{"text": "Aspirin thins blood [2].", "label": "supported"},
                {"text": "It is old.", "label": None}, "A plain claim."],
    )
    inputs, warnings = read_audit(data)
    assert warnings == ["line 1: duplicate source id '2', renamed to '2.2'"]
    (item,) = inputs
    answer = item.answer
    assert (answer.id, answer.question, item.line) == ("a1", "Q?", 1)
    assert answer.meta == {"system": "gpt", "field": "Med"}
    first, second = answer.sources
    assert (first.id, first.url, first.status, first.text) == (
        "2", "https://example.com/a", "given", "Aspirin text.")
    assert (second.id, second.status, second.text) == ("2.2", "not_fetched", None)
    assert item.claims is not None
    assert [(c.text, c.label) for c in item.claims] == [
        ("Aspirin thins blood [2].", SupportLabel.SUPPORTED), ("It is old.", None),
        ("A plain claim.", None)]


def test_source_ids_marker_or_position_and_duplicates_renamed() -> None:
    data = _line(answer="x", sources=[{"url": "https://a.org", "marker": 3},
                                      {"url": "https://b.org"},
                                      {"url": "https://c.org", "marker": 3}, 42])
    (item,), warnings = read_audit(data)
    assert [s.id for s in item.answer.sources] == ["3", "2", "3.3"]
    assert any("duplicate source id '3'" in w for w in warnings)
    assert any("source 4" in w for w in warnings)


def test_labels_are_normalised() -> None:
    assert normalize_label("Supported") is SupportLabel.SUPPORTED
    assert normalize_label("NOT SUPPORTED") is SupportLabel.NOT_SUPPORTED
    assert normalize_label("not-supported") is SupportLabel.NOT_SUPPORTED
    assert normalize_label(False) is SupportLabel.NOT_SUPPORTED
    assert normalize_label(None) is None
    assert normalize_label("maybe") is None
    data = _line(answer="x", claims=[{"text": "c", "label": "maybe"}])
    (item,), warnings = read_audit(data)
    assert item.claims is not None and item.claims[0].label is None
    assert any("unknown label 'maybe'" in w for w in warnings)


def test_bad_lines_are_warnings_with_line_numbers() -> None:
    data = b"".join([
        _line(id="ok1", answer="Fine."),
        b"\n   \n",
        b"{not json\n",
        b"[1, 2]\n",
        _line(id="noanswer", question="q"),
        b"\x00\x01\x02binary\n",
        b'{"id": "latin", "answer": "caf\xe9 au lait"}\n',
        _line(id="ok1", answer="Duplicate id."),
    ])
    inputs, warnings = read_audit(data, source_name="in.jsonl")
    assert [i.answer.id for i in inputs] == ["ok1", "latin", "ok1#9"]
    assert inputs[1].answer.text == "caf\ufffd au lait"
    joined = "\n".join(warnings)
    for expected in ("in.jsonl:4: not valid JSON", "in.jsonl:5: expected a JSON object",
                     "in.jsonl:6: no 'answer'", "in.jsonl:7: binary data",
                     "in.jsonl:8: undecodable bytes", "in.jsonl:9: duplicate answer id"):
        assert expected in joined


def test_huge_line_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import medverify.audit.inputs as inputs_module

    monkeypatch.setattr(inputs_module, "MAX_LINE_BYTES", 100)
    data = _line(answer="x" * 200) + _line(answer="short")
    inputs, warnings = read_audit(data)
    assert [i.answer.text for i in inputs] == ["short"]
    assert "over the limit" in warnings[0]


def test_binary_file_gives_no_inputs_and_no_crash() -> None:
    inputs, warnings = read_audit(bytes(range(256)) * 10)
    assert inputs == []
    assert warnings


def test_without_sources_urls_are_extracted_from_the_answer() -> None:
    data = _line(answer="See [1].\n\n[1] https://www.nih.gov/x")
    (item,), _ = read_audit(data)
    assert [(s.id, s.url) for s in item.answer.sources] == [("1", "https://www.nih.gov/x")]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("  https://EXAMPLE.com/Path?q=1#frag ", "https://example.com/Path?q=1"),
        ("www.cdc.gov/flu.", "https://www.cdc.gov/flu"),
        ("<https://a.org/x>", "https://a.org/x"),
        ("http://a.org:80/x", "http://a.org/x"),
        ("https://a.org:443", "https://a.org/"),
        ("https://a.org:8443/x", "https://a.org:8443/x"),
        ("https://bücher.de/p", "https://xn--bcher-kva.de/p"),
        ("https://en.wikipedia.org/wiki/Foo_(bar)).", "https://en.wikipedia.org/wiki/Foo_(bar)"),
        ("https://a.org/a b", "https://a.org/a%20b"),
        ("HTTPS://A.ORG/x", "https://a.org/x"),
        ("ftp://files.org/x", "ftp://files.org/x"),
        ("not a url", None),
        ("http://exa mple.com", None),
        ("http://a.org:99999/", None),
        ("https://", None),
    ],
)
def test_normalize_url(raw: str, expected: str | None) -> None:
    assert normalize_url(raw) == expected


def test_extract_numbered_reference_list_gives_marker_ids() -> None:
    text = (
        "Statins lower LDL [2]. Exercise helps [1].\n\nReferences:\n"
        "[1] AHA. Exercise. https://www.heart.org/ex\n"
        "2. https://www.nhs.uk/statins/\n"
    )
    sources = extract_sources(text)
    assert [(s.id, s.url) for s in sources] == [
        ("1", "https://www.heart.org/ex"), ("2", "https://www.nhs.uk/statins/")]
    assert sources[0].title == "AHA. Exercise."


def test_extract_json_source_list_markdown_and_bare_urls() -> None:
    text = (
        'Vitamin D matters [docs](https://ods.od.nih.gov/vitd) and [3](https://x.org/three).\n'
        "Also www.mayoclinic.org/vitd, and http://bad host/x.\n"
        '```json\n{"sources": [{"url": "https://pubmed.gov/1", "id": 7, "title": "T"},'
        ' "https://who.int/d"]}\n```\n'
        "Bare again: https://ods.od.nih.gov/vitd#section"
    )
    sources = extract_sources(text)
    by_url = {s.url: s.id for s in sources}
    assert by_url["https://x.org/three"] == "3"
    assert by_url["https://pubmed.gov/1"] == "7"
    assert by_url["https://ods.od.nih.gov/vitd"].startswith("u")
    assert "https://www.mayoclinic.org/vitd" in by_url
    assert "https://who.int/d" in by_url
    urls = [s.url for s in sources]
    assert urls.count("https://ods.od.nih.gov/vitd") == 1  # deduplicated
    assert urls[0] == "https://ods.od.nih.gov/vitd"  # text order


def test_extract_json_array_of_urls_numbers_them_in_order() -> None:
    sources = extract_sources('Answer text.\n["https://a.org/1", "https://b.org/2"]')
    assert [(s.id, s.url) for s in sources] == [("1", "https://a.org/1"), ("2", "https://b.org/2")]


def test_extract_keeps_malformed_urls_for_the_fetcher() -> None:
    sources = extract_sources("[1] http://[bad/x\n[2] https://ok.org")
    assert [(s.id, s.url) for s in sources] == [("1", "http://[bad/x"), ("2", "https://ok.org/")]


def test_given_source_with_malformed_url_is_kept_raw() -> None:
    (item,), _ = read_audit(_line(answer="x", sources=[{"url": "htp:/broken"}, {"url": ""}]))
    urls = [s.url for s in item.answer.sources]
    assert urls == ["htp:/broken", None]


def test_given_claims_strip_markers_and_find_spans() -> None:
    answer = Answer(text="Aspirin thins blood [1, 2]. Unrelated.", id="a")
    data = _line(answer=answer.text, claims=[{"text": "Aspirin thins blood [1, 2]."}])
    (item,), _ = read_audit(data)
    assert item.claims is not None
    (claim,) = given_claims(item.answer, item.claims)
    assert (claim.id, claim.text, claim.markers) == ("c1", "Aspirin thins blood.", ["1", "2"])
    assert claim.span is not None and answer.text[claim.span.start:claim.span.end].startswith(
        "Aspirin")


# --- ExpertQA shape: attribution + claims with evidence (issue 13) ---------------------

EXPERTQA_ROW = {
    "id": "expertqa-0", "question": "What does exercise do?", "field": "Medicine",
    "system": "gpt4",
    "answer": "Exercise lowers blood pressure [1]. It improves sleep [3]. It is fun.",
    "attribution": ["[1] https://example.org/bp", "[2] https://example.org/bp",
                    "[3] https://example.org/sleep "],
    "claims": [
        {"claim": "Exercise lowers blood pressure [1].",
         "evidence": ["[1] https://example.org/bp\n\nRegular exercise lowers blood pressure."],
         "support": "Complete", "correctness": "Definitely correct"},
        {"claim": "It improves sleep [3].", "evidence": ["[3] https://example.org/sleep"],
         "support": "Incomplete"},
        {"claim": "It is fun.", "evidence": [], "support": "Missing"},
    ],
}


def test_expertqa_attribution_and_evidence_are_read() -> None:
    inputs, warnings = read_audit(json.dumps(EXPERTQA_ROW).encode())
    assert warnings == []
    answer = inputs[0].answer
    assert [(s.id, s.url) for s in answer.sources] == [
        ("1", "https://example.org/bp"), ("3", "https://example.org/sleep")]
    bp, sleep = answer.sources
    assert bp.text == "Regular exercise lowers blood pressure." and bp.status == "given"
    assert sleep.text is None and sleep.status == "not_fetched"  # no passage: fetched
    assert answer.meta == {"field": "Medicine", "system": "gpt4"}
    claims = inputs[0].claims or []
    assert [c.label for c in claims] == [SupportLabel.SUPPORTED, SupportLabel.NOT_SUPPORTED,
                                         None]


def test_unread_source_like_fields_are_warned_about() -> None:
    row = {"answer": "Statins lower LDL [1].",
           "citations": [{"link": "https://example.org/statins"}],
           "sources": {"1": "https://example.org/statins"}}
    inputs, warnings = read_audit(json.dumps(row).encode())
    assert inputs[0].answer.sources == []
    assert any("'sources' is a dict" in w for w in warnings)
    assert any("'citations' looks like it holds sources" in w for w in warnings)
    assert any("'sources' looks like it holds sources" in w for w in warnings)
    assert set(inputs[0].answer.meta) == {"citations", "sources"}


def test_numbered_url_strings_in_sources_keep_their_marker() -> None:
    inputs, warnings = read_audit(_line(answer="A [2].", sources=["[2] https://x.org/a"]))
    assert warnings == [] and [(s.id, s.url) for s in inputs[0].answer.sources] == [
        ("2", "https://x.org/a")]


def test_source_object_without_url_or_text_is_a_warning() -> None:
    _, warnings = read_audit(_line(answer="A.", sources=[{"link": "https://x.org"}]))
    assert any("no 'url' and no 'text' (keys: link)" in w for w in warnings)


@pytest.mark.data("answers/expertqa_val.jsonl")
def test_shared_expertqa_answers_file_has_its_sources() -> None:
    path = data_path("answers/expertqa_val.jsonl")
    inputs, _ = read_audit(path.read_bytes())
    sources = [s for i in inputs for s in i.answer.sources]
    assert len(inputs) == 263 and all(i.answer.sources for i in inputs)
    assert len(sources) == 1414 and sum(1 for s in sources if s.text) == 776
