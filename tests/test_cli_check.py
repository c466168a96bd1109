from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from medverify.cli import main
from medverify.kb import KnowledgeBase
from medverify.records import Document
from medverify.testing import FakeChatServer, FakeResponse
from medverify.testing.judge import keyword_rule, scripted_judge

DOC = Document(
    doc_id="flu",
    title="Influenza",
    text="Influenza vaccination is recommended every year for people aged 6 months and older.",
)


@pytest.fixture
def kb_dir(tmp_path: Path) -> Path:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest([DOC])
    return tmp_path / "kb"


@pytest.fixture
def server() -> Iterator[FakeChatServer]:
    rule = keyword_rule(supported="every year", contradicted="every ten years")
    with FakeChatServer(scripted_judge(rule)) as fake:
        yield fake


def _spec(server: FakeChatServer) -> str:
    return f"openai-compatible:judge@{server.base_url}"


def test_check_against_local_endpoint_writes_reports(
    kb_dir: Path, server: FakeChatServer, tmp_path: Path
) -> None:
    answer = tmp_path / "answer.txt"
    answer.write_text(
        "The flu vaccine is recommended every year. It is needed only every ten years."
    )
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    result = CliRunner().invoke(
        main,
        [
            "check",
            str(answer),
            "--kb",
            str(kb_dir),
            "--model",
            _spec(server),
            "--decomposer",
            "rules",
            "--question",
            "How often?",
            "--json",
            str(out_json),
            "--html",
            str(out_html),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(out_json.read_text())
    assert [r["category"] for r in report["results"]] == ["FACT", "HALLUCINATION"]
    assert "<html" in out_html.read_text().lower()
    assert server.requests, "the judge must have been called over HTTP"

    listed = CliRunner().invoke(main, ["runs", "list", "--json"])
    [run] = json.loads(listed.output)
    assert run["status"] == "done" and run["n_claims"] == 2
    shown = CliRunner().invoke(
        main, ["runs", "show", run["id"], "--json", str(tmp_path / "again.json")]
    )
    assert shown.exit_code == 0, shown.output
    again = json.loads((tmp_path / "again.json").read_text())
    assert [r["category"] for r in again["results"]] == ["FACT", "HALLUCINATION"]


def test_check_reads_stdin_jsonl_batch(
    kb_dir: Path, server: FakeChatServer, tmp_path: Path
) -> None:
    lines = "\n".join(
        json.dumps({"id": f"a{i}", "answer": "Vaccination is recommended every year."})
        for i in range(3)
    )
    out = tmp_path / "all.json"
    result = CliRunner().invoke(
        main,
        [
            "check",
            "-",
            "--kb",
            str(kb_dir),
            "--model",
            _spec(server),
            "--decomposer",
            "rules",
            "--json",
            str(out),
            "--no-record",
        ],
        input=lines,
    )
    assert result.exit_code == 0, result.output
    assert [r["answer"]["id"] for r in json.loads(out.read_text())] == ["a0", "a1", "a2"]


def test_judge_errors_give_exit_1(kb_dir: Path, tmp_path: Path) -> None:
    with FakeChatServer(FakeResponse(text="I think it is true!")) as bad:
        result = CliRunner().invoke(
            main,
            [
                "check",
                "-",
                "--kb",
                str(kb_dir),
                "--model",
                f"openai-compatible:j@{bad.base_url}",
                "--decomposer",
                "rules",
                "--json",
                str(tmp_path / "r.json"),
            ],
            input="Vaccination is recommended every year.",
        )
    assert result.exit_code == 1
    [claim] = json.loads((tmp_path / "r.json").read_text())["results"]
    assert claim["category"] == "ERROR" and "unparseable" in claim["error"]


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["--kb", "{missing}"], "Some answer.", "no knowledge base"),
        (["--kb", "{kb}"], "", "empty"),
        (["--kb", "{kb}"], "\x00\x01\x02", "binary"),
        (["--kb", "{kb}", "--model", "nosuch:model"], "Some answer.", "provider"),
    ],
)
def test_unusable_input_exits_2_with_message(
    kb_dir: Path, tmp_path: Path, args: list[str], stdin: str, message: str
) -> None:
    args = [a.format(kb=kb_dir, missing=tmp_path / "missing") for a in args]
    result = CliRunner().invoke(main, ["check", "-", *args], input=stdin)
    assert result.exit_code == 2
    assert message in result.output.lower()
