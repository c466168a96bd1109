"""Readers of the public medical question sets: MedicationQA (CSV), K-QA and MedLFQA
(JSONL), TREC-2017 LiveQA medical and MedQuAD (XML).

Each reader offers the questions of one decoded file to a
:class:`~medverify.bench.question_input.Collector`, with the reference answer or document
kept when the set has one; :func:`medverify.bench.questions.read_questions` picks the reader.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from medverify.audit.cited_urls import normalize_url
from medverify.bench.question_input import (
    Collector,
    Decoded,
    collapse,
    csv_rows,
    json_objects,
    reference_document,
)

# -- MedicationQA (CSV) -------------------------------------------------------------------------


def read_medicationqa(path: Path, decoded: Decoded, source: str | None,
                       out: Collector) -> None:
    source = source or "medicationqa"
    for where, text_key, row in csv_rows(path, decoded, out, ("Question",)):
        reference = reference_document(source, row.get("Answer"), row.get("URL"),
                               title=row.get("Section Title"))
        meta = {_snake(k): v.strip() for k, v in row.items()
                if k not in (text_key, "Answer", "URL") and v.strip()}
        out.offer(where, row[text_key], source, reference=reference, meta=meta)


def _snake(name: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_")


# -- K-QA and MedLFQA -----------------------------------------------------------------------------

_URL = re.compile(r"https?://\S+")
_ROW_PREFIX = re.compile(r'\A\d{0,4},\s*"?(?P<text>.*?)"?\s*\Z', re.DOTALL)
_ANSWER_FIELDS = ("Question", "Free_form_answer")


def read_kqa(path: Path, decoded: Decoded, source: str | None, out: Collector) -> None:
    _read_answer_records(path, decoded, source or "k-qa", out, strip_row_prefix=False)


def read_medlfqa(path: Path, decoded: Decoded, source: str | None, out: Collector) -> None:
    _read_answer_records(path, decoded, source or medlfqa_source(path), out,
                         strip_row_prefix=True)


def medlfqa_source(path: Path) -> str:
    """``healthsearch_qa_test.jsonl`` -> ``healthsearch_qa``; ``live_qa_test_MedLFQA`` ->
    ``live_qa``."""
    name = re.sub(r"(_MedLFQA)?$", "", path.stem, flags=re.IGNORECASE)
    return re.sub(r"_test$", "", name) or path.stem


def _read_answer_records(path: Path, decoded: Decoded, source: str, out: Collector, *,
                         strip_row_prefix: bool) -> None:
    repaired: list[str] = []
    for where, obj in json_objects(path, decoded, out):
        text = obj.get("Question")
        meta = {k: v for k, v in obj.items() if k not in _ANSWER_FIELDS}
        if strip_row_prefix and isinstance(text, str):
            match = _ROW_PREFIX.match(text.strip())
            if match and match.group("text").strip():
                meta["original_text"], text = text, match.group("text")
                repaired.append(where.rsplit(" ", 1)[-1])
        urls = [u for u in map(normalize_url, _URL.findall(str(obj.get("Sources") or ""))) if u]
        if urls:
            meta["reference_urls"] = urls
        reference = reference_document(source, obj.get("Free_form_answer"),
                                       urls[0] if urls else None)
        out.offer(where, text, source, reference=reference, meta=meta)
    if repaired:
        shown = ", ".join(repaired[:5]) + (", ..." if len(repaired) > 5 else "")
        out.note(f"{out.name}: removed a leading row-number prefix (such as '60,') from "
                 f"{len(repaired)} question(s) (lines {shown}); the original is in "
                 "meta['original_text']")


# -- XML: LiveQA and MedQuAD ----------------------------------------------------------------------

_QID_ATTR = re.compile(r'\bqid="([^"]+)"')


def _parse_xml(path: Path, decoded: Decoded, out: Collector) -> ET.Element | None:
    try:
        return ET.fromstring(decoded.text)
    except ET.ParseError as exc:
        line = exc.position[0] if exc.position else "?"
        out.unreadable(f"{out.name} line {line}", f"invalid XML ({exc}); whole file skipped")
        return None


def _qid_lines(text: str) -> dict[str, int]:
    lines: dict[str, int] = {}
    line, position = 1, 0
    for match in _QID_ATTR.finditer(text):
        line += text.count("\n", position, match.start())
        position = match.start()
        lines.setdefault(match.group(1), line)
    return lines


def read_liveqa(path: Path, decoded: Decoded, source: str | None, out: Collector) -> None:
    source = source or "liveqa"
    root = _parse_xml(path, decoded, out)
    if root is None:
        return
    lines = _qid_lines(decoded.text)
    for index, node in enumerate(root.iter("NLM-QUESTION"), start=1):
        qid = node.get("qid") or str(index)
        where = f"{out.name} line {lines.get(qid, '?')} (question {qid})"
        text, meta = _liveqa_question(node)
        answers = _liveqa_answers(node)
        reference = reference_document(source, *answers[0]) if answers else None
        meta.update(qid=qid, reference_urls=[url for _, url in answers if url])
        out.offer(where, text, source, qid=f"{source}:{qid}", reference=reference, meta=meta)


def _liveqa_question(node: ET.Element) -> tuple[str, dict[str, Any]]:
    """The NIST paraphrase, else the NLM summary, else the original subject and message."""
    original = node.find("Original-Question")
    subject = collapse(original.findtext("SUBJECT")) if original is not None else ""
    message = collapse(original.findtext("MESSAGE")) if original is not None else ""
    candidates = (("nist_paraphrase", collapse(node.findtext("NIST-PARAPHRASE"))),
                  ("nlm_summary", collapse(node.findtext("NLM-Summary"))),
                  ("original", collapse(f"{subject}. {message}" if subject else message)))
    used, text = next(((name, text) for name, text in candidates if text), ("none", ""))
    meta: dict[str, Any] = {"question_field": used, "subject": subject, "message": message}
    if candidates[1][1]:
        meta["summary"] = candidates[1][1]
    meta["focus"] = [collapse(f.text) for f in node.iter("FOCUS") if collapse(f.text)]
    meta["types"] = [collapse(t.text) for t in node.iter("TYPE") if collapse(t.text)]
    return text, meta


def _liveqa_answers(node: ET.Element) -> list[tuple[str, str | None]]:
    answers = []
    for ref in node.iter():
        if ref.tag in ("ReferenceAnswer", "RefAnswer"):
            url = collapse(ref.findtext("AnswerURL")) or None
            answers.append(((ref.findtext("ANSWER") or "").strip(), url))
    return answers


# MedQuAD: <Document id source url> (or <DiseaseFile fid source url>) with <Focus> and
# <QAPair><Question qid qtype/><Answer/>; a few files use <doc docid corpus url>,
# <doctitle-focus> and <pair><question/><answer/>.
_MEDQUAD = {
    "Document": ("source", "Focus", "QAPair", "Question", "Answer"),
    "DiseaseFile": ("source", "Focus", "QAPair", "Question", "Answer"),
    "doc": ("corpus", "doctitle-focus", "pair", "question", "answer"),
}


def read_medquad(path: Path, decoded: Decoded, source: str | None, out: Collector) -> None:
    source = source or "medquad"
    root = _parse_xml(path, decoded, out)
    if root is None:
        return
    shape = _MEDQUAD.get(root.tag)
    if shape is None:
        out.unreadable(f"{out.name} line 1", f"XML root <{root.tag}> is not a MedQuAD or "
                       "LiveQA question file; whole file skipped")
        return
    collection_attr, focus_tag, pair_tag, question_tag, answer_tag = shape
    collection = root.get(collection_attr)
    focus = collapse(root.findtext(focus_tag)) or None
    lines = _qid_lines(decoded.text)
    for index, pair in enumerate(root.iter(pair_tag), start=1):
        node = pair.find(question_tag)
        qid = node.get("qid") if node is not None else None
        where = f"{out.name} line {lines.get(qid or '', '?')} (pair {index})"
        reference = reference_document(source, pair.findtext(answer_tag), root.get("url"),
                                       title=focus, doc_source=collection)
        meta = {"collection": collection, "focus": focus, "document": path.stem, "qid": qid,
                "qtype": node.get("qtype") if node is not None else None}
        text = collapse(node.text) if node is not None else None
        out.offer(where, text, source, reference=reference,
                  meta={k: v for k, v in meta.items() if v})


