"""``medverify review``: export the queue, import labels given elsewhere (validated, refused
rows reported), teach the KB from imported labels, and the loop report."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from medverify.cli import main
from medverify.kb import KnowledgeBase
from medverify.records import Claim, Document
from medverify.review import ReviewItem, ReviewLabel, ReviewStatus
from medverify.store.access import AuditLog
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def _item(n: int, text: str, *, priority: float = 0.5) -> ReviewItem:
    return ReviewItem(id=f"rv-{n:04d}", run_id="run-1", answer_id="a-1",
                      answer_text=f"Answer. {text}", claim=Claim(id=f"c{n}", text=text),
                      category="COVERAGE_GAP", priority=priority,
                      created_at=T0 + timedelta(minutes=n))


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "runs.db"
    with RunStore(path) as runs:
        ReviewStore(runs).add_items([
            _item(1, "Metformin can cause lactic acidosis.", priority=0.9),
            _item(2, "=HYPERLINK(\"http://evil.example\")", priority=0.7),
            _item(3, "Aspirin is safe for children.", priority=0.2)])
        ReviewStore(runs).label("rv-0003", "dr-who", ReviewLabel.HALLUCINATION,
                                correction="Aspirin is not for children.")
    return path


def _run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_export_csv_one_row_per_label_and_formulas_escaped(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "queue.csv"
    result = _run("review", "export", str(out), "--store", str(db))
    assert result.exit_code == 0, result.output and "3 item(s)" in result.output
    rows = list(csv.DictReader(io.StringIO(out.read_text("utf-8"))))
    assert [r["item_id"] for r in rows] == ["rv-0001", "rv-0002", "rv-0003"]  # by priority
    assert rows[0]["label"] == "" and rows[0]["reviewer"] == ""  # to fill in
    assert rows[1]["claim"].startswith("'=HYPERLINK")  # a spreadsheet shows it as text
    assert (rows[2]["reviewer"], rows[2]["label"], rows[2]["status"]) == (
        "dr-who", "HALLUCINATION", "closed")
    closed = tmp_path / "closed.jsonl"
    assert _run("review", "export", str(closed), "--format", "jsonl", "--status", "closed",
                "--store", str(db)).exit_code == 0
    [line] = closed.read_text("utf-8").splitlines()
    item = ReviewItem.model_validate_json(line)
    assert item.id == "rv-0003" and item.labels[0].correction == "Aspirin is not for children."


def test_import_a_filled_in_export(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "queue.csv"
    _run("review", "export", str(out), "--store", str(db), "--status", "open")
    rows = list(csv.DictReader(io.StringIO(out.read_text("utf-8"))))
    rows[0].update(reviewer="dr-a", label="fact", source_url="https://example.org/x")
    rows[1].update(reviewer="dr-a", label="HALLUCINATION", correction="'=1+1 is not a claim")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    out.write_text(buffer.getvalue(), "utf-8")

    result = _run("review", "import", str(out), "--store", str(db), "--no-teach")
    assert result.exit_code == 0, result.output
    assert "imported 2 label(s)" in result.output and "0 refused" in result.output
    assert "2 closed item(s) have a reviewed statement to teach" in result.output
    with RunStore(db) as runs:
        queue = ReviewStore(runs)
        first, second = queue.get("rv-0001"), queue.get("rv-0002")
        assert first.final_label is ReviewLabel.FACT and first.labels[0].reviewer == "dr-a"
        assert second.labels[0].correction == "=1+1 is not a claim"  # the escape removed
        [event] = AuditLog(runs).list()
        assert event.action == "review.import" and "2 label(s)" in (event.detail or "")

    again = _run("review", "import", str(out), "--store", str(db), "--no-teach")
    assert again.exit_code == 1 and "2 refused" in again.output
    assert "row 2:" in again.stderr and "closed" in again.stderr


def test_import_reports_bad_rows_and_goes_on(db: Path, tmp_path: Path) -> None:
    rows = [
        {"item_id": "rv-9999", "reviewer": "dr-a", "label": "FACT"},  # unknown item
        {"item_id": "rv-0001", "reviewer": "dr-a", "label": "SURE"},  # not a label
        {"item_id": "rv-0001", "reviewer": "", "label": "FACT"},  # no reviewer
        {"item_id": "rv-0001", "reviewer": "dr-a", "label": "FACT",
         "source_url": "http://10.1.2.3/intranet"},  # private address
        {"item_id": "rv-0003", "reviewer": "dr-b", "label": "FACT"},  # closed
        ["not", "an", "object"],
        {"item_id": "rv-0002", "reviewer": "dr-b", "label": "COVERAGE_GAP",
         "note": "fine"},  # the one that counts
    ]
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n", "utf-8")
    result = _run("review", "import", str(path), "--store", str(db))
    assert result.exit_code == 1
    assert "imported 1 label(s)" in result.output and "6 refused" in result.output
    for number, words in [(1, "no review item"), (2, "unknown label"), (3, "reviewer"),
                          (4, "source_url"), (5, "closed"), (6, "not a JSON object")]:
        line = next(x for x in result.stderr.splitlines() if x.startswith(f"row {number}:"))
        assert words in line, line
    with RunStore(db) as runs:
        queue = ReviewStore(runs)
        assert queue.get("rv-0001").status is ReviewStatus.OPEN
        assert queue.get("rv-0002").final_label is ReviewLabel.COVERAGE_GAP


def test_import_refuses_a_file_without_the_columns(db: Path, tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_text("id,verdict\nrv-0001,FACT\n", "utf-8")
    result = CliRunner().invoke(main, ["review", "import", str(path), "--store", str(db)])
    assert result.exit_code == 2 and "no column item_id, reviewer, label" in result.output


def test_imported_labels_teach_the_kb(db: Path, tmp_path: Path) -> None:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest([Document(doc_id="metformin", text="Metformin is first-line.")])
    path = tmp_path / "labels.csv"
    path.write_text("item_id,reviewer,label,correction,source_url,note\n"
                    "rv-0001,dr-a,FACT,,https://example.org/metformin,\n", "utf-8")
    result = _run("review", "import", str(path), "--store", str(db), "--kb",
                  str(tmp_path / "kb"))
    assert result.exit_code == 0, result.output
    assert "taught the knowledge base 1 reviewed statement(s)" in result.output
    with KnowledgeBase.open(tmp_path / "kb") as kb:
        assert kb.stats().documents == 2
    with RunStore(db) as runs:
        [change] = ReviewStore(runs).kb_changes()
        assert change.doc_id == "review-rv-0001" and change.reviewer == "dr-a"


def test_report_table_and_json(db: Path) -> None:
    table = _run("review", "report", "--store", str(db))
    assert table.exit_code == 0, table.output
    assert "clinical loop by week" in table.output and "2026-W10" in table.output
    assert "queue now: 2 open" in table.output
    data = json.loads(_run("review", "report", "--json", "--by", "day", "--store",
                           str(db)).output)
    assert data["by"] == "day" and data["total"]["escalated"] == 3
    assert data["total"]["items_closed"] == 1 and data["total"]["judge_agreement"] == 0.0
