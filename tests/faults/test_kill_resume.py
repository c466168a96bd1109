"""Kill -9 at seeded points, rerun, compare with a clean run (issue 13, "Hardening").

Each flow runs its CLI command in a subprocess, once cleanly (workspace ``clean``) and once
as a chain in workspace ``killed``: SIGKILLed at :data:`N_KILLS` increasing points drawn
from :data:`SEED` (records committed, requests a local fake model server received, or
seconds since the start), each run resuming what the earlier ones left, then rerun to
completion. The two workspaces have the same layout under their own ``MEDVERIFY_HOME``
(request cache, fetch cache, run store), so the chain cannot borrow the clean run's
cache. The final outputs must equal the clean run's record for record after
:func:`~medverify.testing.faults.normalise` (run ids, timestamps, durations, token usage
and the workspace path removed), the metrics exactly; no record lost, none duplicated.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from medverify.llm.base import ChatRequest, Message
from medverify.retrieve import Retriever
from medverify.testing import CitingModel, FakeChatServer, PageServer
from medverify.testing.faults import (
    VOLATILE,
    KillChain,
    RecordComparison,
    cli_env,
    compare_records,
    first_difference,
    kill_points,
    normalise,
    read_jsonl,
    run_cli,
    run_killed,
)

SEED = 13
N_KILLS = 3
FIGURES: list[str] = []

# a flow runs its command 5 times (clean, 3 killed, final); on 2 shared cores under load
# that can take longer than the default 120 s per test
pytestmark = pytest.mark.timeout(300)


@dataclass(frozen=True)
class Workspace:
    """One run's directory: ``home`` is its MEDVERIFY_HOME, outputs go below ``root``."""

    root: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def env(self) -> dict[str, str]:
        return cli_env(self.home)

    @property
    def replace(self) -> dict[str, str]:
        return {str(self.root): "<WS>"}


@pytest.fixture
def spaces(tmp_path: Path) -> tuple[Workspace, Workspace]:
    return Workspace(tmp_path / "clean"), Workspace(tmp_path / "killed")


def _figures(flow: str, chain: KillChain, points: list[float], *comparisons: RecordComparison,
             extra: str = "") -> None:
    compared = sum(c.compared for c in comparisons)
    lost = sum(len(c.lost) for c in comparisons)
    duplicated = sum(len(c.duplicated) for c in comparisons)
    at = [a.progress_at_kill for a in chain.attempts]
    line = (f"{flow}: points {[round(p, 2) for p in points]}, killed at {at}, "
            f"kills {chain.kills}/{len(points)}, records compared {compared}, lost {lost}, "
            f"duplicated {duplicated}{extra}")
    FIGURES.append(line)
    print("\nFAULTS " + line)


def _assert_same(comparison: RecordComparison, what: str) -> None:
    assert comparison.ok, f"{what}: {comparison}"
    assert comparison.compared > 0, f"{what}: nothing compared"


def _assert_equal(clean: Any, resumed: Any, what: str, clean_ws: Workspace,
                  killed_ws: Workspace, drop: frozenset[str] = VOLATILE) -> None:
    diff = first_difference(normalise(clean, drop=drop, replace=clean_ws.replace),
                            normalise(resumed, drop=drop, replace=killed_ws.replace))
    assert diff is None, f"{what} differs after kill and resume: {diff}"


def _assert_killed(chain: KillChain) -> None:
    """Every kill point must land mid-run, else the test proves nothing."""
    assert chain.kills == len(chain.attempts), [a.describe() for a in chain.attempts
                                                 if not a.killed]


def _as_request(body: dict[str, Any]) -> ChatRequest:
    messages = tuple(Message(role=m["role"], content=str(m["content"]))
                     for m in body.get("messages", []))
    return ChatRequest(model=str(body.get("model", "")), messages=messages)


def _server_calls(*servers: FakeChatServer) -> Callable[[], float]:
    return lambda: float(sum(len(s.calls) for s in servers))


def _kill_on_calls(args: Callable[[Workspace], list[str]], spaces: tuple[Workspace, Workspace],
                   *servers: FakeChatServer) -> tuple[list[float], KillChain, int]:
    """A clean run in the first workspace, then the killed chain in the second, killed when
    the servers have received seeded shares (10-90 %) of the clean run's requests.
    Returns the kill points, the chain and the clean run's request count."""
    clean, killed = spaces
    first = run_cli(args(clean), env=clean.env, cwd=clean.root)
    assert first.returncode == 0, first.describe()
    n_calls = sum(len(server.calls) for server in servers)
    for server in servers:
        server.calls.clear()
    points = kill_points(SEED, N_KILLS, 0.1 * n_calls, 0.9 * n_calls)
    chain = run_killed(args(killed), env=killed.env, cwd=killed.root, points=points,
                       progress=_server_calls(*servers))
    _assert_killed(chain)
    return points, chain, n_calls


def _redone(chain: KillChain, *servers: FakeChatServer) -> int:
    """Requests the chain sent more than once. Only a request in flight when the process
    was killed has no cached reply (the cache commits each reply as it comes), and a model
    has at most ``ModelSettings.concurrency`` requests in flight: more would be paid calls
    repeated."""
    from medverify.config import ModelSettings

    bodies = [json.dumps(c.body, sort_keys=True) for s in servers for c in s.calls]
    redone = len(bodies) - len(set(bodies))
    bound = chain.kills * ModelSettings().concurrency * len(servers)
    assert redone <= bound, f"{redone} requests sent again after {chain.kills} kills"
    return redone


# -- kb ingest --------------------------------------------------------------------------------

WORDS = ["metformin", "insulin", "glucose", "kidney", "liver", "asthma", "inhaler", "dose",
         "daily", "weekly", "tablet", "vaccine", "measles", "influenza", "fever", "cough",
         "pressure", "artery", "stroke", "heart", "statin", "cholesterol", "warfarin",
         "bleeding", "vitamin", "pregnancy", "child", "adult", "elderly", "infection",
         "antibiotic", "penicillin", "allergy", "rash", "migraine", "aura", "sleep", "anxiety",
         "depression", "exercise", "diet", "salt", "sugar", "alcohol", "smoking", "lung",
         "breath", "pain", "joint", "gout", "uric"]


def _corpus(folder: Path, n: int) -> Path:
    rng = np.random.default_rng(SEED)
    folder.mkdir(parents=True)
    for i in range(n):
        sentences = [" ".join(rng.choice(WORDS, size=12)).capitalize() + "."
                     for _ in range(10)]
        suffix = "md" if i % 5 == 0 else "txt"
        head = f"# Leaflet {i}\n\n" if suffix == "md" else ""
        (folder / f"doc{i:04d}.{suffix}").write_text(head + " ".join(sentences), "utf-8")
    return folder


def _documents_in(kb: Path) -> Callable[[], float]:
    def count() -> float:
        if not (kb / "kb.sqlite").is_file():
            return 0.0
        try:
            with sqlite3.connect(f"file:{kb / 'kb.sqlite'}?mode=ro", uri=True,
                                 timeout=0.05) as conn:
                return float(conn.execute("SELECT count(*) FROM documents").fetchone()[0])
        except sqlite3.Error:
            return 0.0

    return count


def _dump_kb(kb: Path) -> dict[str, list[dict[str, Any]]]:
    conn = sqlite3.connect(f"file:{kb / 'kb.sqlite'}?mode=ro", uri=True)
    try:
        docs = [dict(zip(("doc_id", "content_hash", "title", "url", "source", "meta",
                          "n_chunks"), row, strict=True))
                for row in conn.execute("SELECT doc_id, content_hash, title, url, source, "
                                        "meta, n_chunks FROM documents")]
        chunks = [{"doc_id": r[0], "ord": r[1], "text": r[2], "start": r[3], "end": r[4],
                   "n_tokens": r[5], "vector": r[6].hex(), "fts_title": r[7],
                   "fts_body": r[8]}
                  for r in conn.execute(
                      'SELECT d.doc_id, c.ord, c.text, c.start, c."end", c.n_tokens, '
                      "c.vector, f.title, f.body FROM chunks c JOIN documents d ON d.id = "
                      "c.doc LEFT JOIN chunks_fts f ON f.rowid = c.id")]
        terms = [{"term": t, "df": df} for t, df in
                 conn.execute("SELECT term, df FROM terms WHERE df != 0")]
        orphans = conn.execute("SELECT count(*) FROM chunks_fts WHERE rowid NOT IN "
                               "(SELECT id FROM chunks)").fetchone()[0]
    finally:
        conn.close()
    return {"documents": docs, "chunks": chunks, "terms": terms,
            "fts_orphans": [{"n": orphans}]}


def _kb_metrics(kb_dir: Path) -> dict[str, Any]:
    from medverify.kb import KnowledgeBase

    with KnowledgeBase.open(kb_dir) as kb:
        stats = kb.stats().model_dump(exclude={"path", "size_bytes"})
        hits = {q: [(p.id, {k: round(v, 6) for k, v in p.scores.items()})
                    for p in Retriever(kb).search(q, k=5)]
                for q in ("metformin dose for the kidney", "measles vaccine fever",
                          "warfarin bleeding and vitamin", "gout uric joint pain")}
    return {"stats": stats, "search": hits}


def test_kb_ingest_survives_kills(spaces: tuple[Workspace, Workspace], tmp_path: Path) -> None:
    clean, killed = spaces
    corpus = _corpus(tmp_path / "corpus", 900)

    def args(ws: Workspace) -> list[str]:
        return ["kb", "ingest", str(corpus), "--kb", str(ws.root / "kb"), "--embedder", "hash",
                "--chunk-tokens", "32", "--chunk-overlap", "8"]

    first = run_cli(args(clean), env=clean.env, cwd=clean.root)
    assert first.returncode == 0, first.describe()
    n_docs = _documents_in(clean.root / "kb")()
    assert n_docs == 900
    points = kill_points(SEED, N_KILLS, 0.1 * n_docs, 0.9 * n_docs)
    chain = run_killed(args(killed), env=killed.env, cwd=killed.root, points=points,
                       progress=_documents_in(killed.root / "kb"))
    _assert_killed(chain)
    assert chain.final is not None and "KB now has 900 documents" in chain.final.stdout

    want, got = _dump_kb(clean.root / "kb"), _dump_kb(killed.root / "kb")
    keys: dict[str, Callable[[dict[str, Any]], Any]] = {
        "documents": lambda r: r["doc_id"], "chunks": lambda r: (r["doc_id"], r["ord"]),
        "terms": lambda r: r["term"], "fts_orphans": lambda r: "orphans"}
    comparisons = []
    for table, key in keys.items():
        comparison = compare_records(want[table], got[table], key,
                                     replace_clean=clean.replace,
                                     replace_resumed=killed.replace)
        _assert_same(comparison, f"kb {table}")
        comparisons.append(comparison)
    assert got["fts_orphans"] == [{"n": 0}]
    metrics = _kb_metrics(killed.root / "kb")
    assert metrics["stats"]["vector_index"] == "fresh"
    _assert_equal(_kb_metrics(clean.root / "kb"), metrics, "KB stats and search", clean,
                  killed)
    _figures("kb ingest", chain, points, *comparisons)


# -- check ------------------------------------------------------------------------------------

CHECK_DOCS = [
    ("flu", "Influenza vaccination is recommended every year for people aged 6 months and "
            "older."),
    ("mmr", "The MMR vaccine protects against measles, mumps and rubella; two doses are "
            "given in childhood."),
    ("metformin", "Adults usually start metformin at 500 mg once daily with meals."),
]
CHECK_SENTENCES = (
    "The flu vaccine is recommended every year.",
    "The flu vaccine is needed only every ten years.",
    "Two doses of MMR are given every year in childhood.",
    "Metformin is started at 500 mg every year with meals.",
    "Measles vaccination is needed every ten years.",
)


def _check_kb(path: Path) -> Path:
    from medverify.kb import KnowledgeBase
    from medverify.records import Document

    with KnowledgeBase.create(path, embedder="hash") as kb:
        kb.ingest([Document(doc_id=d, title=d, text=t) for d, t in CHECK_DOCS])
    return path


@pytest.fixture
def judge_server() -> Iterator[FakeChatServer]:
    from medverify.testing.judge import keyword_rule, scripted_judge

    rule = keyword_rule(supported="every year", contradicted="every ten years")
    with FakeChatServer(scripted_judge(rule), delay_s=0.03) as server:
        yield server


def test_check_batch_survives_kills(spaces: tuple[Workspace, Workspace], tmp_path: Path,
                                    judge_server: FakeChatServer) -> None:
    clean, killed = spaces
    kb = _check_kb(tmp_path / "kb")
    answers = tmp_path / "answers.jsonl"
    rows = [{"id": f"a{i:03d}", "question": f"Question {i}?",
             "answer": " ".join(CHECK_SENTENCES[(i + j) % len(CHECK_SENTENCES)]
                                .replace(".", f" (note {i}).") for j in range(1 + i % 3))}
            for i in range(60)]
    answers.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")

    def args(ws: Workspace) -> list[str]:
        return ["check", str(answers), "--kb", str(kb), "--model",
                f"openai-compatible:judge@{judge_server.base_url}", "--decomposer", "rules",
                "--json", str(ws.root / "reports.json")]

    points, chain, n_calls = _kill_on_calls(args, spaces, judge_server)

    def key(report: dict[str, Any]) -> str:
        return str(report["answer"]["id"])

    want = json.loads((clean.root / "reports.json").read_text("utf-8"))
    got = json.loads((killed.root / "reports.json").read_text("utf-8"))
    reports = compare_records(want, got, key, replace_clean=clean.replace,
                              replace_resumed=killed.replace)
    _assert_same(reports, "check reports")
    assert [key(r) for r in got] == [r["id"] for r in rows]  # input order kept
    _assert_equal([r["metrics"] for r in want], [r["metrics"] for r in got], "check metrics",
                  clean, killed, drop=frozenset())
    stored = compare_records(_stored_reports(clean), _stored_reports(killed), key,
                             replace_clean=clean.replace, replace_resumed=killed.replace)
    _assert_same(stored, "check reports rebuilt from the run store")
    _figures("check", chain, points, reports, stored,
             extra=f", requests redone {_redone(chain, judge_server)} (clean run: {n_calls})")


def _last_done(store: Any, kind: str) -> str:
    """The id of the store's last finished run of ``kind``; the killed runs before it stay
    'running' (a SIGKILLed process cannot mark its run)."""
    done = [r for r in store.list_runs() if r.kind == kind and r.status == "done"]
    assert done, f"no finished {kind} run in the store"
    return str(done[0].id)


def _stored_reports(ws: Workspace) -> list[dict[str, Any]]:
    """The reports of the workspace's last finished run, rebuilt from the run store."""
    from medverify.store.runs import RunStore

    with RunStore(ws.home / "runs.db") as store:
        return [r.model_dump(mode="json") for r in store.reports(_last_done(store, "check"))]


# -- factcheck --------------------------------------------------------------------------------


@pytest.fixture
def flow_server() -> Iterator[FakeChatServer]:
    from medverify.testing.factcheck_model import factcheck_model

    model = factcheck_model()
    with FakeChatServer(lambda body: model(_as_request(body)), delay_s=0.02) as server:
        yield server


def test_factcheck_batch_survives_kills(spaces: tuple[Workspace, Workspace], tmp_path: Path,
                                        flow_server: FakeChatServer) -> None:
    from medverify.kb import KnowledgeBase
    from medverify.records import Document
    from medverify.testing.factcheck_model import DEMO_ANSWER

    clean, killed = spaces
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest([Document(doc_id="metformin", title="Metformin dosing", text=(
            "Metformin is a first-line medicine for type 2 diabetes. The usual starting dose "
            "of metformin is 500 mg once or twice daily, taken with meals. Stomach upset is a "
            "common side effect of metformin when starting treatment.")),
            Document(doc_id="metformin-safety", title="Metformin contraindications", text=(
                "Metformin is contraindicated in people with severe kidney disease. "
                "Metformin should be paused before surgery or contrast imaging."))])
    answers = tmp_path / "answers.jsonl"
    rows = [{"id": f"f{i:02d}", "question": f"How is metformin started (case {i})?",
             "answer": DEMO_ANSWER if i % 2 else DEMO_ANSWER.replace("5000 mg", "500 mg")}
            for i in range(16)]
    answers.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")

    def args(ws: Workspace) -> list[str]:
        return ["factcheck", str(answers), "--kb", str(tmp_path / "kb"), "--model",
                f"openai-compatible:flow@{flow_server.base_url}", "--json",
                str(ws.root / "factcheck.json")]

    points, chain, n_calls = _kill_on_calls(args, spaces, flow_server)
    # token counts hold only the calls this invocation paid for (cache hits are free)
    drop = VOLATILE | {"tokens"}
    want = json.loads((clean.root / "factcheck.json").read_text("utf-8"))
    got = json.loads((killed.root / "factcheck.json").read_text("utf-8"))
    assert sum(len(r["facts"]) for r in want) >= 2 * len(rows)
    reports = compare_records(want, got, lambda r: r["answer_id"], drop=drop,
                              replace_clean=clean.replace, replace_resumed=killed.replace)
    _assert_same(reports, "factcheck reports")
    _figures("factcheck", chain, points, reports,
             extra=f", requests redone {_redone(chain, flow_server)} (clean run: {n_calls})")


# -- audit ------------------------------------------------------------------------------------

AUDIT_CONFIG = ('[kb_settings]\nembedder = "hash"\n[audit]\nbootstrap = 100\n')


def _audit_rows(n: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        rows.append({
            "id": f"u{i:03d}", "system": ("gpt", "claude")[i % 2], "question": f"Q{i}?",
            "answer": f"Aspirin thins the blood in case {i} [1]. Aspirin cures cancer {i} [2].",
            "sources": [
                {"url": f"https://a.org/aspirin/{i}", "marker": 1,
                 "text": f"Aspirin thins blood. Case {i} is described here."},
                {"url": f"https://b.org/cancer/{i}", "marker": 2,
                 "text": f"Aspirin does not cure cancer {i}."}],
            "claims": [{"text": f"Aspirin thins the blood in case {i} [1].",
                        "label": "SUPPORTED"},
                       {"text": f"Aspirin cures cancer {i} [2].", "label": "NOT_SUPPORTED"}]})
    return rows


def test_audit_survives_kills(spaces: tuple[Workspace, Workspace], tmp_path: Path) -> None:
    from medverify.testing.judge import keyword_rule, scripted_judge

    clean, killed = spaces
    data = tmp_path / "answers.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _audit_rows(60)), "utf-8")
    config = tmp_path / "config.toml"
    config.write_text(AUDIT_CONFIG, "utf-8")
    with FakeChatServer(scripted_judge(keyword_rule(supported="thins")),
                        delay_s=0.03) as server:

        def args(ws: Workspace) -> list[str]:
            return ["audit", str(data), "--out", str(ws.root / "audit"), "--offline",
                    "--judge", "llm", "--model", f"openai-compatible:j@{server.base_url}",
                    "--config", str(config)]

        points, chain, n_calls = _kill_on_calls(args, spaces, server)
        redone = _redone(chain, server)

    def key(audit: dict[str, Any]) -> str:
        return str(audit["answer"]["id"])

    answers = compare_records(read_jsonl(clean.root / "audit" / "answers.jsonl"),
                              read_jsonl(killed.root / "audit" / "answers.jsonl"), key,
                              replace_clean=clean.replace, replace_resumed=killed.replace)
    _assert_same(answers, "audit answers.jsonl")
    want = json.loads((clean.root / "audit" / "summary.json").read_text("utf-8"))
    got = json.loads((killed.root / "audit" / "summary.json").read_text("utf-8"))
    assert got["notes"]["resumed"] > 0  # the final run really resumed
    # notes: how this invocation went (resumed/audited counts, warnings about a cut line)
    _assert_equal(want, got, "audit summary", clean, killed, drop=VOLATILE | {"notes"})
    _assert_equal(want["overall"], got["overall"], "audit metrics", clean, killed,
                  drop=frozenset())
    stored = compare_records(_stored_audits(clean), _stored_audits(killed), key,
                             replace_clean=clean.replace, replace_resumed=killed.replace)
    _assert_same(stored, "audits in the run store")
    _figures("audit", chain, points, answers, stored,
             extra=f", requests redone {redone} (clean run: {n_calls})")


def _stored_audits(ws: Workspace) -> list[dict[str, Any]]:
    from medverify.audit.store import audits
    from medverify.store.runs import RunStore

    with RunStore(ws.home / "runs.db") as store:
        return [a.model_dump(mode="json") for a in audits(store, _last_done(store, "audit"))]


# -- bench run --------------------------------------------------------------------------------

BENCH_CONFIG = ('decomposer = "rules"\n[kb_settings]\nembedder = "hash"\n'
                "[audit]\nbootstrap = 100\n[bench]\npermutations = 100\n")
HABITS = ("careful", "overreaching", "unreliable")


def _overlap_rule(claim: str, passages: dict[str, str]) -> tuple[bool, bool]:
    """Supported when at least 80 % of the claim's words occur in its passages."""
    import re

    word = re.compile(r"[a-z0-9]{3,}")
    words = set(word.findall(claim.casefold()))
    seen = set(word.findall(" ".join(passages.values()).casefold()))
    return bool(words) and len(words & seen) >= 0.8 * len(words), False


def test_bench_run_survives_kills(spaces: tuple[Workspace, Workspace], tmp_path: Path) -> None:
    from medverify.bench.questions import write_questions
    from medverify.testing import study_documents, study_questions
    from medverify.testing.citers import references_for
    from medverify.testing.judge import scripted_judge

    clean, killed = spaces
    questions = study_questions()
    path = tmp_path / "questions.jsonl"
    write_questions(path, questions)
    config = tmp_path / "config.toml"
    config.write_text(BENCH_CONFIG, "utf-8")
    references = references_for(questions)
    with PageServer.from_documents(study_documents()) as pages:
        citers = {habit: FakeChatServer(_citer(CitingModel(habit, references, pages.url_for)),
                                        delay_s=0.03).start() for habit in HABITS}
        judge = FakeChatServer(scripted_judge(_overlap_rule), delay_s=0.03).start()
        servers = [*citers.values(), judge]
        try:
            models = ",".join(f"m-{h}=openai-compatible:{h}@{s.base_url}"
                              for h, s in citers.items())

            def args(ws: Workspace) -> list[str]:
                return ["bench", "run", "--models", models, "--questions", str(path),
                        "--out", str(ws.root / "run"), "--allow", pages.host_port,
                        "--judge", "llm", "--judge-model",
                        f"openai-compatible:judge@{judge.base_url}", "--config", str(config)]

            points, chain, n_calls = _kill_on_calls(args, spaces, *servers)
            redone = _redone(chain, *servers)
        finally:
            for server in servers:
                server.close()

    def reply_key(reply: dict[str, Any]) -> tuple[str, str]:
        return str(reply["model"]), str(reply["question_id"])

    def audit_key(audit: dict[str, Any]) -> str:
        return str(audit["answer"]["id"])

    run_c, run_k = clean.root / "run", killed.root / "run"
    replies = compare_records(read_jsonl(run_c / "replies.jsonl"),
                              read_jsonl(run_k / "replies.jsonl"), reply_key,
                              replace_clean=clean.replace, replace_resumed=killed.replace)
    _assert_same(replies, "bench replies.jsonl")
    assert replies.compared == len(HABITS) * len(questions)
    audits = compare_records(read_jsonl(run_c / "audit" / "answers.jsonl"),
                             read_jsonl(run_k / "audit" / "answers.jsonl"), audit_key,
                             replace_clean=clean.replace, replace_resumed=killed.replace)
    _assert_same(audits, "bench audit/answers.jsonl")
    want = json.loads((run_c / "summary.json").read_text("utf-8"))
    got = json.loads((run_k / "summary.json").read_text("utf-8"))
    # notes: this invocation's timing and resume counts; audit_usage: tokens it paid for;
    # cost: a reply asked again after a kill comes from the request cache and costs nothing
    # "in this run" (bench.summary.model_cost), so cached_calls and cost_usd move
    drop = VOLATILE | {"notes", "audit_usage", "cached_calls", "cost_usd"}
    _assert_equal(want, got, "bench summary", clean, killed, drop=drop)
    for part in ("overall", "by_source", "comparisons"):
        _assert_equal(want[part], got[part], f"bench {part} metrics", clean, killed,
                      drop=frozenset())
    stored = compare_records(_stored_replies(clean), _stored_replies(killed), reply_key,
                             replace_clean=clean.replace, replace_resumed=killed.replace)
    _assert_same(stored, "bench replies in the run store")
    _figures("bench run", chain, points, replies, audits, stored,
             extra=f", requests redone {redone} (clean run: {n_calls})")


def _citer(model: CitingModel) -> Callable[[dict[str, Any]], str]:
    return lambda body: model(_as_request(body))


def _stored_replies(ws: Workspace) -> list[dict[str, Any]]:
    from medverify.bench.store import bench_replies
    from medverify.store.runs import RunStore

    with RunStore(ws.home / "runs.db") as store:
        run = _last_done(store, "bench")
        return [r.model_dump(mode="json") for r in bench_replies(store, run)]


# -- risk features ----------------------------------------------------------------------------

RISK_TEXTS = [
    "Metformin is a first-line medicine for type 2 diabetes.",
    "The usual starting dose of metformin is 5000 mg daily.",
    "Aspirin lowers the risk of heart attack in some adults.",
    "Regular exercise raises blood pressure permanently.",
    "Insulin lowers blood glucose.",
    "Vaccines cause the infections they prevent.",
]


RISK_ROUNDS = 24  # 144 examples: 5 blocks of risk.stage.FEATURE_BLOCK


def test_risk_features_survive_kills(spaces: tuple[Workspace, Workspace],
                                     tmp_path: Path) -> None:
    from medverify.risk.data import write_examples
    from medverify.risk.records import LabeledExample, RiskLabel
    from medverify.testing.tiny_lm import build_tiny_lm

    clean, killed = spaces
    scorers = [f"hf:{build_tiny_lm(tmp_path / 'gpt2', 'gpt2')}",
               f"hf:{build_tiny_lm(tmp_path / 'llama', 'llama')}"]
    examples = tmp_path / "examples.jsonl"
    labels = (RiskLabel.FACT, RiskLabel.HALLUCINATION)
    write_examples(examples, [
        LabeledExample(id=f"e{n}-{i}", question=f"Question {n}?", text=f"{t} (case {n})",
                       label=labels[i % 2], provenance={"source": "faults"})
        for n in range(RISK_ROUNDS) for i, t in enumerate(RISK_TEXTS)])

    def args(ws: Workspace) -> list[str]:
        return ["risk", "features", str(examples), *(a for s in scorers for a in ("--scorer", s)),
                "--out", str(ws.root / "features.jsonl")]

    first = run_cli(args(clean), env=clean.env, cwd=clean.root)
    assert first.returncode == 0, first.describe()
    total = RISK_ROUNDS * len(RISK_TEXTS)
    partial = killed.root / "features.jsonl.partial"

    def rows_done() -> float:  # finished blocks appended to the partial file
        try:
            return max(partial.read_bytes().count(b"\n") - 1, 0)
        except OSError:
            return 0

    points = kill_points(SEED, N_KILLS, 0.1 * total, 0.9 * total)
    chain = run_killed(args(killed), env=killed.env, cwd=killed.root, points=points,
                       progress=rows_done)
    _assert_killed(chain)
    # the rerun keeps the blocks that were complete at the last kill (a block cut short by
    # the kill is redone whole)
    assert chain.final is not None
    found = re.search(r"(\d+) resumed", " ".join(chain.final.stderr.split()))
    last = chain.attempts[-1].progress_at_kill or 0
    assert found is not None and int(found.group(1)) % 32 == 0
    assert int(found.group(1)) >= 32 * (int(last) // 32)
    features = compare_records(read_jsonl(clean.root / "features.jsonl"),
                               read_jsonl(killed.root / "features.jsonl"), lambda r: r["id"],
                               replace_clean=clean.replace, replace_resumed=killed.replace)
    _assert_same(features, "risk features.jsonl")
    assert features.compared == total
    schema = "features.jsonl.schema.json"
    _assert_equal(json.loads((clean.root / schema).read_text("utf-8")),
                  json.loads((killed.root / schema).read_text("utf-8")), "feature schema",
                  clean, killed)
    _figures("risk features", chain, points, features,
             extra=f", clean run {first.seconds:.1f}s, final run "
             f"{chain.final.seconds if chain.final else 0:.1f}s")


# -- a kill while a knowledge base is being created ----------------------------------------


def _schema_only(kb: Path) -> None:
    from medverify.kb.database import SCHEMA as _SCHEMA

    conn = sqlite3.connect(kb / "kb.sqlite")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(_SCHEMA)
    conn.close()


def _empty_database(kb: Path) -> None:
    conn = sqlite3.connect(kb / "kb.sqlite")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()


@pytest.mark.parametrize("left", [_schema_only, _empty_database],
                         ids=["tables-without-meta", "empty-database"])
def test_kb_ingest_resumes_after_a_kill_during_creation(
        left: Callable[[Path], None], spaces: tuple[Workspace, Workspace],
        tmp_path: Path) -> None:
    """What ``KnowledgeBase.create`` of an older medverify left when killed after
    connecting and before its meta rows were committed (now it writes a temporary file and
    renames it; the state is made directly, the window being a few ms): ``kb ingest``
    creates the KB again instead of refusing it."""
    _, ws = spaces
    corpus = _corpus(tmp_path / "corpus", 3)
    kb = ws.root / "kb"
    kb.mkdir(parents=True)
    left(kb)
    rerun = run_cli(["kb", "ingest", str(corpus), "--kb", str(kb), "--embedder", "hash"],
                    env=ws.env, cwd=ws.root)
    assert rerun.returncode == 0, rerun.describe()
    assert "KB now has 3 documents" in rerun.stdout


# -- the harness itself -------------------------------------------------------------------


def test_comparator_finds_lost_duplicated_extra_and_changed_records() -> None:
    clean = [{"id": "a", "v": 1, "run_id": "r1"}, {"id": "b", "v": 2, "run_id": "r1"},
             {"id": "c", "v": 3, "path": "/w1/x"}]
    same = [{"id": "c", "v": 3, "path": "/w2/x"}, {"id": "a", "v": 1, "run_id": "r2"},
            {"id": "b", "v": 2, "run_id": "r3"}]
    ok = compare_records(clean, same, lambda r: r["id"], replace_clean={"/w1": "<WS>"},
                         replace_resumed={"/w2": "<WS>"})
    assert ok.ok and ok.compared == 3
    bad = compare_records(clean, [{"id": "a", "v": 1}, {"id": "a", "v": 1},
                                  {"id": "b", "v": 5}, {"id": "z", "v": 0}], lambda r: r["id"])
    assert not bad.ok
    assert (bad.lost, bad.duplicated, bad.extra) == (["c"], ["a"], ["z"])
    assert bad.differing == {"b": "$.v: 2 != 5"}


def test_a_kill_point_kills_the_process_mid_run(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    killed = run_cli(["kb", "ingest", str(_corpus(tmp_path / "corpus", 300)), "--kb",
                      str(tmp_path / "kb"), "--embedder", "hash", "--chunk-tokens", "32",
                      "--chunk-overlap", "8"], env=ws.env, cwd=tmp_path,
                     kill_when=lambda _s: _documents_in(tmp_path / "kb")() or None)
    assert killed.killed and killed.returncode == -9
    assert killed.progress_at_kill is not None and 0 < killed.progress_at_kill < 300


def test_a_kill_during_creation_leaves_no_kb_database(tmp_path: Path) -> None:
    """Creation writes ``kb.sqlite.creating`` and renames it: a leftover temporary file (a
    kill before the rename) is not a KB and the next creation replaces it."""
    from medverify.kb import KnowledgeBase

    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "kb.sqlite.creating").write_bytes(b"half-written")
    with KnowledgeBase.open_or_create(kb, embedder="hash") as base:
        assert base.stats().documents == 0
    assert (kb / "kb.sqlite").is_file() and not (kb / "kb.sqlite.creating").exists()
