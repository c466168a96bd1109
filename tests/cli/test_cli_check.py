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
        # the second claim names its subject: a quote must share enough of a claim's
        # content to count (issue 27), and "It is needed ..." shares one word of four
        "The flu vaccine is recommended every year. "
        "The flu vaccine is needed only every ten years."
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


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run_check(kb_dir: Path, *args: str, stdin: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["check", "-", "--kb", str(kb_dir), *args], input=stdin)
    return result.exit_code, " ".join(result.output.split())


def test_terminal_names_the_cause_of_an_over_long_answer(kb_dir: Path) -> None:
    code, out = _run_check(kb_dir, "--max-answer-chars", "10", stdin="Vaccines work every year.")
    assert code == 1
    assert "Run errors (1):" in out and "over the limit of 10" in out


def test_terminal_names_the_cause_of_a_refused_connection(
    kb_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEDVERIFY_LLM__MAX_RETRIES", "0")
    spec = f"openai-compatible:j@http://127.0.0.1:{_free_port()}/v1"
    code, out = _run_check(kb_dir, "--model", spec, "--decomposer", "rules",
                           stdin="Vaccination is recommended every year. It lasts for life.")
    assert code == 1
    assert "Claim errors (2):" in out and "2 × judge call failed" in out
    assert out.count("judge call") == 3  # the table (2 rows, shortened) + once below
    assert "connect" in out.lower()


def test_terminal_names_the_cause_when_the_llm_decomposer_returns_garbage(
    kb_dir: Path,
) -> None:
    with FakeChatServer(FakeResponse(text="<<garbage>> not json")) as bad:
        code, out = _run_check(kb_dir, "--model", f"openai-compatible:j@{bad.base_url}",
                               "--decomposer", "llm", stdin="Vaccination is recommended.")
    assert code == 1
    assert "No claims were checked" in out and "Run errors (1):" in out
    assert "decompos" in out.lower() and "json" in out.lower()


def test_a_batch_prints_each_cause_once(kb_dir: Path) -> None:
    lines = "\n".join(json.dumps({"id": f"a{i}", "answer": "x" * 40}) for i in range(3))
    code, out = _run_check(kb_dir, "--max-answer-chars", "10", "--no-record", stdin=lines)
    assert code == 1
    assert "Across 3 answers (3 with errors):" in out
    assert "3 × decompose: the answer has 40 characters" in out
    assert out.count("over the limit of 10") == 1
