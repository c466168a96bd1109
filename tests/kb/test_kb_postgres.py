"""The KB store on PostgreSQL (medverify.kb.postgres): the parts that need no server, and,
behind the ``database`` marker, the store on a throwaway server: search, writes, and two
store objects on one database standing for two replicas (teaching and reverting on one is
searched on the other within the poll bound)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from medverify.checker import Checker
from medverify.config import Config, KBSettings
from medverify.errors import KBError
from medverify.kb import KB_STORES, open_store
from medverify.kb.postgres import PostgresKB, lexical_sql, metadata_condition, tsquery_text
from medverify.kb.postgres_replica import ChunkRow, ReplicaIndexes
from medverify.kb.protocol import KBStore
from medverify.kit import FlowKit
from medverify.llm.facade import Model
from medverify.records import Answer, Category, Document
from medverify.retrieve import Retriever
from medverify.review import ReviewLabel, ReviewStatus, items_from_report, revert, teach
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider
from medverify.testing.judge import Decision, scripted_judge

DOCS = [
    Document(doc_id="metformin", title="Metformin", text="Metformin is taken twice a day "
             "with meals to lower blood glucose in type 2 diabetes.", meta={"topic": "diabetes"}),
    Document(doc_id="asthma", title="Asthma", text="Inhaled corticosteroids reduce airway "
             "inflammation in persistent asthma.", meta={"tags": ["lungs", "Chronic"]}),
    Document(doc_id="measles", title="Measles vaccine", text="Two doses of the measles "
             "vaccine give lasting protection against measles.", meta={"live": True}),
]
METFORMIN = Document(doc_id="metformin", title="Metformin",
                     text="Metformin is a first-line medicine for type 2 diabetes. The usual "
                     "starting dose is 500 mg once or twice daily with meals.")
ANSWER = Answer(question="What should I know about metformin?",
                text="Metformin is a first-line medicine for type 2 diabetes. "
                     "Metformin can cause lactic acidosis.")
TAUGHT = Document(doc_id="review-7", title="Clinician-reviewed statement",
                  text="Zoledronate infusions are given once yearly for osteoporosis.")


def _word_for_word(claim: str, passages: dict[str, str]) -> Decision:
    """A judge that finds a claim supported when a passage holds it word for word."""
    text = " ".join(" ".join(passages.values()).split()).casefold()
    return claim.strip().rstrip(".").casefold() in text, False


# ---- no server ------------------------------------------------------------------------


def test_query_words_carry_no_tsquery_syntax() -> None:
    assert tsquery_text("metformin & !dose | (twice):* <-> 'x'") == "metformin dose twice x"
    assert tsquery_text("the of and") == "the of and"  # only stopwords: kept, as FTS5's
    assert tsquery_text("") == ""


def test_sql_lexical_query_takes_the_words_as_a_parameter() -> None:
    sql = lexical_sql("ts_rank_cd", 1)
    assert "ts_rank_cd(c.tsv, q.q, 1)" in sql and sql.count("?") == 2
    assert "plainto_tsquery('english', ?)" in sql and sql.endswith("LIMIT ?")
    with pytest.raises(KBError, match="unknown lexical ranking"):
        lexical_sql("bm25; DROP TABLE kb_chunks", 1)


def test_metadata_condition_refuses_keys_that_are_not_names() -> None:
    with pytest.raises(KBError, match="bad metadata key"):
        metadata_condition({"x') OR 1=1 --": "y"})
    condition, params = metadata_condition({"doc_id_prefix": "review-", "topic": "Diabetes"})
    assert condition.startswith("d.doc_id >= ? AND d.doc_id < ?")
    assert params[:2] == ["review-", "review-\U0010ffff"] and params[2:] == [
        "topic", "topic", "Diabetes", "topic", "Diabetes"]


def test_the_location_must_be_a_postgresql_url() -> None:
    with pytest.raises(ValidationError):
        KBSettings(location="/data/kb")
    assert KBSettings(location="postgresql://u@h/db").location == "postgresql://u@h/db"


def test_a_location_opens_the_postgresql_store(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[tuple[str, object]] = []
    monkeypatch.setattr(KB_STORES, "build",
                        lambda name, location, config: opened.append((name, location)))
    config = Config(kb_settings=KBSettings(location="postgresql://u@h/db"))
    open_store(config)
    assert opened == [("postgresql", "postgresql://u@h/db")]
    assert "postgresql" in KB_STORES.names()


def _rows(n: int, start: int = 1) -> list[ChunkRow]:
    rng = np.random.default_rng(start)
    vectors = rng.standard_normal((n, 16)).astype(np.float32)
    return [ChunkRow(start + i, f"Title {i % 7}", f"text {i} word{i % 13} common", v.tobytes())
            for i, v in enumerate(vectors)]


def test_replica_indexes_follow_adds_and_removals_of_every_kind() -> None:
    rows = _rows(100)
    for kind in ("flat", "ivf", "hnsw"):
        replica = ReplicaIndexes(16, KBSettings(index=kind))  # type: ignore[arg-type]
        replica.build(rows)
        assert replica.spec.kind == kind and replica.size == 100
        query = np.frombuffer(rows[5].vector, dtype=np.float32)[None, :]
        assert replica.dense(query, 1)[0][0][0] == 6  # itself, by chunk id
        assert replica.lexical("word5 common", 3, 5000)[0][0] in {6, 19, 32}
        replica.remove([6, 999])
        assert 6 not in [i for i, _ in replica.dense(query, 10)[0]]
        assert 6 not in [i for i, _ in replica.lexical("text 5", 50, 5000)]
        assert replica.size == 99 and len(replica.dense(query, 10)[0]) == 10
        replica.add(_rows(5, start=1000))
        assert replica.size == 104 and not replica.outgrown()
        replica.close()


def test_replica_stored_postings_rank_as_bm25_and_follow_changes() -> None:
    plain = ReplicaIndexes(16, KBSettings(lexical_postings_from=None))
    stored = ReplicaIndexes(16, KBSettings(lexical_postings_from=10))
    queries = ["word5 common", "title 3 text", "word12 word1 nothing"]
    for replica in (plain, stored):
        replica.build(_rows(80))
    assert stored._postings.ranker() is not None  # built: ranked in numpy
    assert [stored.lexical(q, 20, 5000) for q in queries] == [
        plain.lexical(q, 20, 5000) for q in queries]
    for replica in (plain, stored):
        replica.remove([6, 7])
    assert stored._postings.ranker() is None  # stale after a change: bm25() ranks
    assert stored.follow_postings() and stored._postings.ranker() is not None
    assert [stored.lexical(q, 20, 5000) for q in queries] == [
        plain.lexical(q, 20, 5000) for q in queries]
    plain.close()
    stored.close()


def test_replica_indexes_outgrow_as_the_embedded_index_does() -> None:
    replica = ReplicaIndexes(16, KBSettings(index_threshold=100))
    replica.build(_rows(60))
    assert replica.spec.kind == "flat" and not replica.outgrown()
    replica.add(_rows(60, start=100))
    assert replica.outgrown()  # auto crossed the threshold: rebuilt approximate
    replica.rebuild_vectors(_rows(120))
    assert replica.spec.kind != "flat" and not replica.outgrown()
    hnsw = ReplicaIndexes(16, KBSettings(index="hnsw"))
    hnsw.build(_rows(50))
    hnsw.dead_limit = 5
    hnsw.remove(range(1, 6))
    assert not hnsw.outgrown()
    hnsw.remove([6])  # more removed than it holds apart: rebuilt
    assert hnsw.outgrown()
    for done in (replica, hnsw):
        done.close()


# ---- on a throwaway server ------------------------------------------------------------

database = pytest.mark.database


@pytest.fixture
def kb_pair(pg_url: str) -> Iterator[tuple[PostgresKB, PostgresKB]]:
    """Two store objects on one database: replicas A and B (B polls every 0.2 s)."""
    a = PostgresKB.open(pg_url, KBSettings(embedder="hash", chunk_tokens=64, chunk_overlap=8))
    b = PostgresKB.open(pg_url, KBSettings(generation_poll_s=0.2))
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def _dense_ids(kb: PostgresKB, query: str) -> list[str]:
    [found] = kb.dense_candidates([query], 10)
    return [kb.chunks([i])[i].doc_id for i, _ in found]


@database
def test_search_reads_and_writes(kb_pair: tuple[PostgresKB, PostgresKB]) -> None:
    a, _ = kb_pair
    assert isinstance(a, KBStore)
    empty = a.snapshot_id
    stats = a.ingest(DOCS)
    assert (stats.documents_added, a.counts()) == (3, (3, 3))
    [(best, score)] = a.lexical_candidates("metformin twice daily?", 1)
    assert a.chunks([best])[best].doc_id == "metformin" and score > 0
    assert a.lexical_candidates("!!! &&", 5) == []
    for rank in ("ts_rank_cd", "fts5"):
        a.rank_function = rank
        assert a.lexical_candidates("metformin twice daily?", 1)[0][0] == best
        assert len(a.lexical_candidates("metformin asthma", 5)) == 2
        if rank == "ts_rank_cd":
            continue  # (no budget)
        a.lexical_budget = 1  # the rarest words within 1 posting (at least one word)
        [(only, _)] = a.lexical_candidates("metformin asthma", 5)
        # df 1 each: the first word in the query (as the embedded store)
        assert a.chunks([only])[only].doc_id == "metformin"
        a.lexical_budget = 5000
    assert _dense_ids(a, DOCS[1].title + "\n" + DOCS[1].text)[0] == "asthma"
    assert a.ingest(DOCS).documents_unchanged == 3  # unchanged: skipped, same generation
    full = a.snapshot_id
    assert full != empty and a.remove_documents(["asthma", "nothing"]) == 1
    assert a.remove_documents(["nothing"]) == 0
    assert "asthma" not in _dense_ids(a, DOCS[1].text)
    a.ingest([DOCS[1]])
    assert a.snapshot_id == full  # the same content: the same snapshot id
    passages = Retriever(a).search("inhaled corticosteroids asthma", k=2)
    assert passages[0].doc_id == "asthma"


@database
def test_metadata_subsets_and_taught_documents(kb_pair: tuple[PostgresKB, PostgresKB]) -> None:
    a, _ = kb_pair
    a.ingest([*DOCS, TAUGHT])
    assert [c.doc_id for c in a.subset({"topic": "DIABETES"}).chunks] == ["metformin"]
    assert [c.doc_id for c in a.subset({"tags": "chronic"}).chunks] == ["asthma"]
    assert [c.doc_id for c in a.subset({"live": "true"}).chunks] == ["measles"]
    taught = a.subset({"doc_id_prefix": "review-"})
    assert [c.doc_id for c in taught.chunks] == ["review-7"] and taught.vectors.shape == (1, 256)
    with pytest.raises(KBError, match="more than"):
        a.subset({}, limit=2)
    main, apart = Retriever(a).search_apart(["zoledronate yearly"], 2, "hybrid",
                                            prefix="review-", apart=1)
    assert [p.doc_id for p in apart[0]] == ["review-7"]
    assert "review-7" not in [p.doc_id for p in main[0]]


@database
def test_teaching_and_reverting_reach_the_other_replica(
        kb_pair: tuple[PostgresKB, PostgresKB]) -> None:
    a, b = kb_pair
    a.ingest(DOCS)
    assert "metformin" in _dense_ids(b, "metformin")  # B builds its index from the table
    built = b.replica_generation
    assert built == a.generation
    a.ingest([TAUGHT])
    deadline = time.monotonic() + 5
    while "review-7" not in _dense_ids(b, TAUGHT.text) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "review-7" in _dense_ids(b, TAUGHT.text)
    [(taught, _)] = b.lexical_candidates("zoledronate", 1)  # B's FTS5 index followed too
    assert b.chunks([taught])[taught].doc_id == "review-7"
    assert b.replica_generation == a.generation > (built or 0)
    assert b.snapshot_id == a.snapshot_id and b.lineage == a.lineage
    a.remove_documents(["review-7"])
    assert b.chunks([taught]) == {}  # chunks are read from the tables: gone at once
    time.sleep(0.25)
    assert "review-7" not in _dense_ids(b, TAUGHT.text)
    assert b.lexical_candidates("zoledronate", 1) == []
    assert b.replica_generation == a.generation


@database
def test_a_changed_document_is_replaced_on_every_replica(
        kb_pair: tuple[PostgresKB, PostgresKB]) -> None:
    a, b = kb_pair
    a.ingest(DOCS)
    b.follow(force=True)
    before = set(a.subset({"doc_id_prefix": "measles"}).chunks)
    changed = DOCS[2].model_copy(update={"text": "A single dose is not enough."})
    assert a.ingest([changed]).documents_updated == 1
    b.follow(force=True)
    [now] = b.subset({"doc_id_prefix": "measles"}).chunks
    assert now.text == changed.text and now not in before
    assert b._index.size == 3  # the old chunk dropped, the new one added


@database
def test_the_first_replica_records_the_settings(pg_url: str) -> None:
    with PostgresKB.open(pg_url, KBSettings(embedder="hash", chunk_tokens=32,
                                            chunk_overlap=4)) as first:
        first.ingest(DOCS[:1])
    with PostgresKB.open(pg_url, KBSettings(chunk_tokens=512)) as second:
        assert (second.settings.chunk_tokens, second.embedder_id) == (32, first.embedder_id)
        assert second.counts() == (1, 1)


@database
def test_a_label_taught_on_one_replica_settles_the_claim_on_the_other(
        kb_pair: tuple[PostgresKB, PostgresKB], tmp_path: Path) -> None:
    """Checker on replica B, clinician's label taught (and reverted) on replica A."""
    a, b = kb_pair
    a.ingest([METFORMIN])
    config = Config(model="fake:x", decomposer="rules",
                    arbitration={"coverage_gap": "ESCALATE"})
    judge = Model(ScriptedProvider(scripted_judge(_word_for_word)))
    checker = Checker.from_config(config, kit=FlowKit(kb=b, model=judge))
    with RunStore(tmp_path / "runs.db") as runs:
        queue = ReviewStore(runs)

        def categories() -> list[Category]:
            report = asyncio.run(checker.run([ANSWER], store=runs))[0]
            return [r.category for r in report.results]

        before = categories()
        assert before == [Category.FACT, Category.COVERAGE_GAP]
        [report] = asyncio.run(checker.run([ANSWER], store=runs))
        queue.add_items(items_from_report(report))
        [item] = queue.list(status=ReviewStatus.OPEN)
        closed = queue.label(item.id, "rev-a", ReviewLabel.FACT,
                             source_url="https://example.org/metformin-safety")
        change = teach(closed, a, queue)
        assert change is not None and change.kb_path == a.path
        time.sleep(0.25)  # B's generation_poll_s is 0.2
        assert categories() == [Category.FACT, Category.FACT]
        assert b.replica_generation == a.generation
        revert(change.id, a, queue)
        time.sleep(0.25)
        assert categories() == before


@database
def test_a_refused_write_is_a_kb_error_and_keeps_nothing(
        kb_pair: tuple[PostgresKB, PostgresKB]) -> None:
    a, _ = kb_pair
    a.ingest(DOCS[:1])
    generation = a.generation
    with pytest.raises(KBError, match="refused a write"):  # PostgreSQL text holds no NUL
        a.ingest([Document(doc_id="nul", title="Bad", text="A NUL \x00 in the text.")])
    assert (a.counts(), a.generation) == ((1, 1), generation)
    assert a.ingest(DOCS[1:]).documents_added == 2  # the connection is usable again
