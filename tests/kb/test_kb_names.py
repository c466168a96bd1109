"""Names from the corpus cannot forge output: document ids made from file names are
percent-encoded reversibly (medverify.kb.names), titles are one line, and the kb CLI and
check reports show every name with its control characters escaped (and no rich markup)."""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from medverify.cli import main
from medverify.kb import KnowledgeBase
from medverify.kb.loaders import LoadReport, iter_sources
from medverify.kb.names import decode_id, encode_id
from medverify.text import UNSAFE, one_line, printable

HOSTILE = "evil\nforged line\r\x1b[31mred[bold]bold<b>x.txt"
UNDECODABLE = os.fsdecode(b"caf\xe9.txt")  # a Latin-1 file name: a lone surrogate in Python


def invoke(*args: str) -> tuple[int, str]:
    """The command's output as a terminal would get it (color=True: click strips no ANSI)."""
    result = CliRunner().invoke(main, list(args), color=True)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / HOSTILE).write_text("Metformin lowers glucose in type 2 diabetes.", "utf-8")
    (folder / UNDECODABLE).write_text("Vitamin K reverses the effect of warfarin.", "utf-8")
    (folder / "plain 50%.txt").write_text("Statins lower LDL cholesterol.", "utf-8")
    (folder / "x[").mkdir()  # with the next name: the path docs/x[/]y[bold].bin
    (folder / "x[" / "]y[bold].bin").write_bytes(b"\x00\x01\x02")
    return folder


@pytest.mark.parametrize("name", [
    "docs/a.txt", "plain 50%.txt", "%zz", "x%4", "100%%", "a%0Ab", "%41%", HOSTILE,
    UNDECODABLE, "\u202eevil\u2028line\x85", "\udcc3\x85", "tab\there", "%%0A\n%0a",
])
def test_ids_round_trip_and_hold_no_unsafe_character(name: str) -> None:
    encoded = encode_id(name)
    assert decode_id(encoded) == name
    assert not UNSAFE.search(encoded)


def test_ordinary_names_keep_their_ids_and_any_file_name_round_trips() -> None:
    for name in ["docs/a b.txt", "plain 50%.txt", "50%zz", "medquad:GHR:0001", "é/ü.md"]:
        assert encode_id(name) == name  # ids of existing KBs do not change
    assert encode_id("a%41") == "a%2541" and encode_id("a\nb") == "a%0Ab"
    rng = random.Random(7)
    for _ in range(20_000):  # any byte but NUL and "/", as the file system gives it
        raw = bytes(rng.choice([*range(1, 47), *range(48, 256)]) for _ in range(rng.randint(1, 9)))
        name = os.fsdecode(raw)
        assert os.fsencode(decode_id(encode_id(name))) == raw


def test_printable_and_one_line() -> None:
    assert printable("a\nb\r\t\x1b[31m\u202e\udce9\x7f") == (
        "a\\nb\\r\\t\\x1b[31m\\u202e\\udce9\\x7f")
    assert printable("plain [bold] \\n text") == "plain [bold] \\n text"
    assert one_line("Title\r\n  of\u2028a\x1b[1mdoc") == "Title   of a\\x1b[1mdoc"
    assert one_line("  spaced  title ") == "  spaced  title "  # unchanged without unsafe chars


def test_hostile_file_names_give_clean_reversible_ids(corpus: Path) -> None:
    report = LoadReport()
    docs = {doc.doc_id: doc for doc in iter_sources([corpus], report)}
    assert set(map(decode_id, docs)) == {f"docs/{HOSTILE}", f"docs/{UNDECODABLE}",
                                          "docs/plain 50%.txt"}
    assert "docs/plain 50%.txt" in docs and "docs/caf%E9.txt" in docs
    for doc_id, doc in docs.items():
        assert not UNSAFE.search(doc_id) and not UNSAFE.search(doc.title or "")
    hostile = docs[encode_id(f"docs/{HOSTILE}")]
    assert hostile.doc_id == "docs/evil%0Aforged line%0D%1B[31mred[bold]bold<b>x.txt"
    assert hostile.title == "evil forged line \\x1b[31mred[bold]bold<b>x"
    assert [s.reason.startswith("binary") for s in report.skipped] == [True]


def test_kb_search_prints_one_line_per_hit_and_no_raw_escape(corpus: Path,
                                                           tmp_path: Path) -> None:
    kb = str(tmp_path / "kb")
    code, out = invoke("kb", "ingest", str(corpus), "--kb", kb, "--embedder", "hash")
    assert code == 0, out
    flat = "".join(out.split())  # (rich wraps long lines)
    assert "docs/x[/]y[bold].bin:binaryfile" in flat  # rich markup in a path is text
    code, out = invoke("kb", "search", "--kb", kb, "metformin glucose vitamin warfarin",
                       "-k", "3")
    assert code == 0, out
    assert "\x1b" not in out and "\r" not in out and "\u202e" not in out
    heads = [line for line in out.splitlines() if re.match(r"\d+\. \[", line)]
    assert len(heads) == 3
    assert len(out.splitlines()) == 3 * 4  # head, scores, snippet, blank: no forged lines
    assert not any(line.startswith("forged") for line in out.splitlines())
    hostile = next(line for line in heads if "evil" in line)
    assert hostile[3:].startswith("[docs/evil%0Aforged line%0D%1B[31mred[bold]bold<b>x.txt#0]")
    assert hostile.endswith("evil forged line \\x1b[31mred[bold]bold<b>x")
    assert any("[docs/caf%E9.txt#0] caf\\udce9" in line for line in heads)
    code, out = invoke("kb", "search", "--kb", kb, "metformin glucose", "-k", "3", "--json")
    ids = {hit["doc_id"] for hit in json.loads(out)}
    assert f"docs/{HOSTILE}" in {decode_id(doc_id) for doc_id in ids}


def test_jsonl_ids_with_control_characters_are_encoded_with_a_warning(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    records = [{"doc_id": "a\nb", "title": "Two\nlines", "text": "one"},
               {"doc_id": "a%20b", "text": "two"}, {"doc_id": "50%", "text": "three"}]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), "utf-8")
    report = LoadReport()
    docs = list(iter_sources([corpus], report))
    assert [d.doc_id for d in docs] == ["a%0Ab", "a%20b", "50%"]  # others kept as given
    assert decode_id(docs[0].doc_id) == "a\nb" and docs[0].title == "Two lines"
    assert len(report.warnings) == 1 and "stored as a%0Ab" in report.warnings[0]
    assert "\n" not in report.warnings[0]


def test_check_shows_the_names_escaped_in_terminal_and_html(corpus: Path,
                                                          tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    with KnowledgeBase.create(kb, embedder="hash") as store:
        store.ingest(iter_sources([corpus]))
    html, out_json = tmp_path / "r.html", tmp_path / "r.json"
    result = CliRunner().invoke(main, ["check", "-", "--kb", str(kb), "--html", str(html),
                                       "--json", str(out_json), "--judge", "builtin",
                                       "--decomposer", "rules"],
                                input="Metformin lowers glucose in type 2 diabetes.",
                                color=True)
    assert result.exit_code in (0, 1), result.output
    assert "\x1b[31m" not in result.output and "\r" not in result.output
    page = html.read_text("utf-8")
    assert "docs/evil%0Aforged line" in page and "\x1b" not in page
    assert "<b>x" not in page and "&lt;b&gt;x" in page  # autoescaped
    results = json.loads(out_json.read_text("utf-8"))["results"]
    ids = {p["doc_id"] for r in results for p in r["passages"]}
    assert f"docs/{HOSTILE}" in {decode_id(doc_id) for doc_id in ids}
