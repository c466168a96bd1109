from __future__ import annotations

import json
from pathlib import Path

import pytest

from medverify.kb import LoadReport, iter_documents, sample_kb_path
from medverify.kb.loaders import html_to_text

MEDQUAD_XML = """<?xml version="1.0" encoding="UTF-8"?>
<Document id="0000001" source="GARD" url="https://example.org/gard/1">
<Focus>Fabry disease</Focus>
<QAPairs>
  <QAPair pid="1"><Question qid="1-1">What is (are) Fabry disease ?</Question>
    <Answer>Fabry disease is an inherited disorder.</Answer></QAPair>
  <QAPair pid="2"><Question qid="1-2">How to diagnose Fabry disease ?</Question>
    <Answer></Answer></QAPair>
  <QAPair pid="3"><Question qid="1-3">What are the treatments for Fabry disease ?</Question>
    <Answer>Enzyme replacement therapy.</Answer></QAPair>
</QAPairs>
</Document>
"""


def load(*paths: Path) -> tuple[list, LoadReport]:
    report = LoadReport()
    return list(iter_documents(paths, report)), report


def make_pdf(path: Path, text: str | None = None, password: str | None = None) -> None:
    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    writer = PdfWriter()
    page = writer.add_blank_page(width=300, height=200)
    if text:
        font = DictionaryObject({NameObject("/Type"): NameObject("/Font"),
                                 NameObject("/Subtype"): NameObject("/Type1"),
                                 NameObject("/BaseFont"): NameObject("/Helvetica")})
        page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): DictionaryObject(
            {NameObject("/F1"): writer._add_object(font)})})
        stream = DecodedStreamObject()
        stream.set_data(f"BT /F1 12 Tf 20 100 Td ({text}) Tj ET".encode())
        page[NameObject("/Contents")] = writer._add_object(stream)
    if password:
        writer.encrypt(password)
    with path.open("wb") as handle:
        writer.write(handle)


def test_text_and_markdown(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Aspirin thins the blood.", "utf-8")
    (tmp_path / "b.md").write_text("# Metformin\n\nFirst-line for type 2 diabetes.", "utf-8")
    docs, report = load(tmp_path)
    assert [d.title for d in docs] == ["a", "Metformin"]
    assert docs[0].text == "Aspirin thins the blood."
    assert docs[0].doc_id == f"{tmp_path.name}/a.txt"
    assert report.documents == 2 and not report.skipped


def test_non_utf8_is_replaced_and_counted(tmp_path: Path) -> None:
    (tmp_path / "latin.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))
    docs, report = load(tmp_path / "latin.txt")
    assert docs[0].text == "caf\ufffd au lait"
    assert report.files_with_replacements == 1 and report.replaced_chars == 1


def test_binary_file_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    docs, report = load(tmp_path)
    assert docs == []
    assert "binary" in report.skipped[0].reason


def test_html_uses_extractor_and_title(tmp_path: Path) -> None:
    body = "<p>" + "Statins lower LDL cholesterol and reduce cardiovascular events. " * 8 + "</p>"
    html = f"<html><head><title>Statins</title></head><body><article>{body}</article></body></html>"
    (tmp_path / "s.html").write_text(html, "utf-8")
    docs, _ = load(tmp_path / "s.html")
    assert docs[0].title == "Statins"
    assert "Statins lower LDL cholesterol" in docs[0].text
    assert "<p>" not in docs[0].text


def test_html_fallback_and_empty(tmp_path: Path) -> None:
    assert "Short note" in html_to_text("<html><body><div>Short note</div></body></html>")
    (tmp_path / "empty.html").write_text(
        "<html><head><script>var x = 1;</script></head><body>  </body></html>", "utf-8")
    docs, report = load(tmp_path / "empty.html")
    assert docs == [] and report.skipped[0].reason == "no text"


def test_pdf_valid_corrupt_and_encrypted(tmp_path: Path) -> None:
    make_pdf(tmp_path / "good.pdf", "Warfarin interacts with vitamin K")
    make_pdf(tmp_path / "locked.pdf", "secret", password="pw")
    good = (tmp_path / "good.pdf").read_bytes()
    (tmp_path / "corrupt.pdf").write_bytes(good[: len(good) // 3])
    (tmp_path / "garbage.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    docs, report = load(tmp_path)
    assert [d.doc_id.split("/")[-1] for d in docs] == ["good.pdf"]
    assert "Warfarin interacts with vitamin K" in docs[0].text
    reasons = {Path(s.path).name: s.reason for s in report.skipped}
    assert "encrypted" in reasons["locked.pdf"]
    assert set(reasons) >= {"garbage.pdf", "locked.pdf"}
    assert report.files == 4  # the truncated file was read or reported, never raised


def test_medquad_xml(tmp_path: Path) -> None:
    (tmp_path / "0000001.xml").write_text(MEDQUAD_XML, "utf-8")
    (tmp_path / "other.xml").write_text("<note>hi</note>", "utf-8")
    docs, report = load(tmp_path)
    doc = docs[0]
    assert (doc.title, doc.url, doc.source) == ("Fabry disease", "https://example.org/gard/1",
                                                "GARD")
    assert doc.text == ("What is (are) Fabry disease ?\nFabry disease is an inherited disorder."
                        "\n\nWhat are the treatments for Fabry disease ?\n"
                        "Enzyme replacement therapy.")
    assert "diagnose" not in doc.text
    assert len(report.skipped) == 1 and "not a MedQuAD" in report.skipped[0].reason


def test_jsonl_corpus(tmp_path: Path) -> None:
    lines = [json.dumps({"doc_id": 7, "title": "T", "text": "alpha", "url": "u", "year": 2020}),
             "not json", json.dumps({"doc_id": "e", "text": ""}),
             json.dumps({"doc_id": "b", "title": "", "text": "beta"})]
    (tmp_path / "c.jsonl").write_text("\n".join(lines) + "\n", "utf-8")
    docs, report = load(tmp_path / "c.jsonl")
    assert [(d.doc_id, d.title, d.url) for d in docs] == [("7", "T", "u"), ("b", None, None)]
    assert docs[0].meta == {"year": 2020}
    assert len(report.skipped) == 2


def test_limit_and_missing_path(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"{i}.txt").write_text(f"document {i}", "utf-8")
    report = LoadReport()
    assert len(list(iter_documents([tmp_path / "nope", tmp_path], report, limit=3))) == 3
    assert report.skipped[0].reason == "no such file or directory"


def test_sample_kb_is_shipped() -> None:
    path = sample_kb_path()
    if not path.is_file():
        pytest.fail("medquad_sample.jsonl is missing; run scripts/make_sample_kb.py")
    docs, report = load(path)
    assert 250 <= len(docs) <= 350 and not report.skipped
    assert all(d.url and d.source for d in docs)
    assert len({d.doc_id for d in docs}) == len(docs)
    assert path.stat().st_size < 5_000_000
