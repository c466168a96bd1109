"""The KB writer lock (medverify.kb.lock): one writer at a time, a second one waits or
refuses with "another ingest is writing this KB" (never "damaged"), readers never wait,
and a SQLite constraint failure from a writer that took no lock is not called damage.

The tests with real processes (two CLI ingests of the same files at once, a SIGKILLed
writer) are in the fault suite (``faults``: ``make test-faults``, run by .ci/run)."""

from __future__ import annotations

import logging
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from medverify.cli import main
from medverify.config import KBSettings
from medverify.errors import KBError
from medverify.kb import KnowledgeBase
from medverify.kb.database import DB_NAME, database_error
from medverify.kb.index import INDEX_NAME
from medverify.kb.loaders import iter_sources
from medverify.kb.lock import LOCK_NAME, KBBusyError, WriterLock
from medverify.records import Document
from medverify.retrieve import Retriever

SMALL = KBSettings(chunk_tokens=16, chunk_overlap=4, embedder="hash")
DOCS = [Document(doc_id=f"d{i}", title=f"Doc {i}",
                 text=f"Metformin case {i} lowers glucose. Warfarin case {i} needs vitamin K.")
        for i in range(20)]


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with KnowledgeBase.create(tmp_path / "kb", SMALL) as kb:
        kb.ingest(DOCS[:10])
        yield kb


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_a_second_lock_waits_then_refuses_and_names_the_holder(tmp_path: Path) -> None:
    first = WriterLock(tmp_path, "ingest")
    first.acquire()
    told: list[str] = []
    second = WriterLock(tmp_path, "removal", wait=0.3, on_wait=told.append)
    started = time.monotonic()
    with pytest.raises(KBBusyError) as caught:
        second.acquire()
    assert time.monotonic() - started >= 0.3
    assert f"another ingest is writing this KB (pid {os.getpid()})" in str(caught.value)
    assert "not damaged" in str(caught.value)
    assert len(told) == 1 and "waiting up to 0.3 s" in told[0]
    assert not second.try_acquire()  # (a separate open file: flock excludes it in-process)
    first.release()
    assert second.try_acquire() and second.held
    assert (tmp_path / LOCK_NAME).read_text().split() == [str(os.getpid()), "removal"]
    second.release()


def test_a_holder_finishing_while_it_is_named_does_not_refuse_the_next_writer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--wait 0``: the holder releases between the failed try and the reading of its
    pid (the CI race that refused with "pid unknown"); the writer takes the lock."""
    holder = WriterLock(tmp_path, "ingest")
    holder.acquire()
    describe = WriterLock.describe_holder

    def finish_then_describe(lock: WriterLock) -> str:
        holder.release()
        return describe(lock)

    monkeypatch.setattr(WriterLock, "describe_holder", finish_then_describe)
    second = WriterLock(tmp_path, "ingest", wait=0)
    second.acquire()
    assert second.held
    assert (tmp_path / LOCK_NAME).read_text().split() == [str(os.getpid()), "ingest"]
    second.release()


def test_a_waiting_writer_goes_on_once_the_holder_finishes(
        kb: KnowledgeBase, caplog: pytest.LogCaptureFixture) -> None:
    holder = WriterLock(kb.path, "ingest")
    holder.acquire()
    threading.Timer(0.4, holder.release).start()
    kb.writer_wait = 30
    with caplog.at_level(logging.WARNING, logger="medverify.kb.lock"):
        stats = kb.ingest(DOCS)
    assert stats.documents_added == 10 and stats.documents_unchanged == 10
    assert "another ingest is writing this KB" in caplog.text
    assert "waiting up to 30 s" in caplog.text


def test_a_busy_kb_is_refused_not_called_damaged_and_readers_keep_working(
        kb: KnowledgeBase) -> None:
    before = kb.snapshot_id
    holder = WriterLock(kb.path, "ingest")
    holder.acquire()
    try:
        kb.writer_wait = 0.2
        for write in (lambda: kb.ingest(DOCS), lambda: kb.remove_documents(["d1"]),
                      lambda: kb.rebuild_index(), lambda: kb.build_lexical_postings()):
            with pytest.raises(KBBusyError, match="another ingest is writing this KB"):
                write()
        with KnowledgeBase.open(kb.path) as reader:  # readers take no lock
            hits = Retriever(reader).search("metformin glucose", k=3)
            assert hits and hits[0].doc_id.startswith("d")
            assert reader.stats().documents == 10
        assert Retriever(kb).search("vitamin K warfarin", k=2, mode="dense")
    finally:
        holder.release()
    assert kb.snapshot_id == before
    assert kb.ingest(DOCS).documents_added == 10  # and writes go on once it is free


def test_cli_ingest_refuses_cleanly_while_another_writes(tmp_path: Path) -> None:
    corpus = tmp_path / "docs"
    corpus.mkdir()
    for i in range(3):
        (corpus / f"d{i}.txt").write_text(f"Metformin note {i} about glucose.", "utf-8")
    kb_dir = str(tmp_path / "kb")
    assert invoke("kb", "ingest", str(corpus), "--kb", kb_dir, "--embedder", "hash")[0] == 0
    with WriterLock(tmp_path / "kb", "ingest"):
        code, out = invoke("kb", "ingest", str(corpus), "--kb", kb_dir, "--wait", "0")
        assert code == 2, out
        assert "another ingest is writing this KB" in out and "is damaged" not in out
        code, out = invoke("kb", "reindex", "--kb", kb_dir, "--wait", "0.1")
        assert code == 2 and "another ingest is writing this KB" in out, out
        code, out = invoke("kb", "search", "--kb", kb_dir, "metformin glucose", "-k", "1")
        assert code == 0 and "[docs/d" in out, out
    code, out = invoke("kb", "ingest", str(corpus), "--kb", kb_dir)
    assert code == 0 and "unchanged 3" in out, out


def test_a_constraint_failure_from_an_unlocked_writer_is_not_damage(
        kb: KnowledgeBase) -> None:
    """A writer that takes no lock (an older medverify, another tool) stores a document
    while this ingest holds it in memory: the UNIQUE failure says so, and a rerun
    finishes the ingest with each document once."""

    def racing() -> Iterator[Document]:
        yield DOCS[15]
        other = sqlite3.connect(kb.path / DB_NAME)
        with other:
            other.execute("INSERT INTO documents (doc_id, content_hash, n_chunks, added_at) "
                          "VALUES ('d15', 'partial:x', 0, 0)")
        other.close()
        yield DOCS[16]

    with pytest.raises(KBError) as caught:
        kb.ingest(racing())
    message = str(caught.value)
    assert "UNIQUE constraint failed" in message and "another writer changed" in message
    assert "is damaged" not in message and "is not damaged" in message
    stats = kb.ingest(DOCS[15:17])  # the partial row is replaced
    assert stats.documents_updated + stats.documents_added == 2
    rows = sqlite3.connect(kb.path / DB_NAME).execute(
        "SELECT doc_id, COUNT(*), MIN(content_hash) FROM documents GROUP BY doc_id").fetchall()
    assert {r[0] for r in rows} == {f"d{i}" for i in [*range(10), 15, 16]}
    assert all(count == 1 and not digest.startswith("partial:") for _, count, digest in rows)


@pytest.mark.parametrize(("error", "says", "damaged"), [
    (sqlite3.IntegrityError("UNIQUE constraint failed: documents.doc_id"),
     "another writer changed", False),
    (sqlite3.OperationalError("database is locked"), "another process is writing", False),
    (sqlite3.OperationalError("database or disk is full"), "cannot write", False),
    (sqlite3.OperationalError("attempt to write a readonly database"), "cannot write", False),
    (sqlite3.DatabaseError("database disk image is malformed"), "is damaged", True),
    (sqlite3.DatabaseError("file is not a database"), "is damaged", True),
])
def test_sqlite_errors_are_named_by_what_they_mean(
        tmp_path: Path, error: sqlite3.DatabaseError, says: str, damaged: bool) -> None:
    message = str(database_error(error, tmp_path / "kb"))
    assert says in message and str(error) in message
    assert ("delete" in message and "is damaged" in message) == damaged


def test_two_threads_creating_one_kb_get_one_kb(tmp_path: Path) -> None:
    """Creation holds the lock: one creates the KB, the other opens it (before, both wrote
    kb.sqlite.creating and one of them failed, or replaced the other's database)."""
    barrier = threading.Barrier(4)
    made: list[KnowledgeBase] = []
    errors: list[BaseException] = []

    def create() -> None:
        barrier.wait()
        try:
            made.append(KnowledgeBase.open_or_create(tmp_path / "kb", SMALL))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=create) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(made) == 4
    for i, kb in enumerate(made):
        kb.ingest(DOCS[i * 5:(i + 1) * 5])
    assert made[0].stats().documents == 20
    for kb in made:
        kb.close()


def test_a_reader_saves_a_rebuilt_index_only_when_no_writer_holds_the_kb(
        kb: KnowledgeBase) -> None:
    (kb.path / INDEX_NAME).unlink()
    with WriterLock(kb.path, "ingest"), KnowledgeBase.open(kb.path) as reader:
        assert Retriever(reader).search("warfarin vitamin", k=2, mode="dense")
        assert not (kb.path / INDEX_NAME).exists()  # used from memory, not saved
    with KnowledgeBase.open(kb.path) as reader:
        assert Retriever(reader).search("warfarin vitamin", k=2, mode="dense")
    assert (kb.path / INDEX_NAME).exists()
    with KnowledgeBase.open(kb.path) as reader:
        assert reader.stats().vector_index == "fresh"


# ---- real processes (fault suite) --------------------------------------------------------

SLOW_WRITER = """
import sys, time
from medverify.kb import KnowledgeBase, iter_documents
def slowly(docs):
    for doc in docs:
        time.sleep(0.03)
        yield doc
with KnowledgeBase.open_or_create(sys.argv[1], embedder="hash") as kb:
    kb.flush_chunks = 8
    kb.ingest(slowly(iter_documents([sys.argv[2]])))
"""


def _corpus(folder: Path, n: int) -> Path:
    folder.mkdir()
    for i in range(n):
        (folder / f"note{i:03d}.txt").write_text(
            f"Note {i}: metformin lowers glucose in patient {i}. Warfarin dose {i} mg "
            f"is reversed by vitamin K. " * 3, "utf-8")
    return folder


def _reference(corpus: Path, kb_dir: Path) -> Path:
    """The KB one ingest of ``corpus`` alone builds (as `kb ingest --embedder hash`)."""
    with KnowledgeBase.create(kb_dir, KBSettings(embedder="hash")) as kb:
        kb.ingest(iter_sources([corpus]))
    return kb_dir


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "medverify", *args]


def _check_intact(kb_dir: Path, reference: Path, n: int) -> None:
    """Each document once and complete, the vector index in step, the content the
    reference KB (built alone) holds."""
    rows = sqlite3.connect(kb_dir / DB_NAME).execute(
        "SELECT doc_id, content_hash, n_chunks, (SELECT COUNT(*) FROM chunks c "
        "WHERE c.doc = d.id) FROM documents d").fetchall()
    assert len(rows) == n and len({r[0] for r in rows}) == n
    assert all(not r[1].startswith("partial:") and r[2] == r[3] for r in rows)
    with KnowledgeBase.open(kb_dir) as kb, KnowledgeBase.open(reference) as ref:
        assert kb.snapshot_id == ref.snapshot_id
        stats = kb.stats()
        assert stats.chunks == ref.stats().chunks
        assert kb.vector_index.ensure().ntotal == stats.chunks
        assert Retriever(kb).search("warfarin vitamin K", k=3)


@pytest.mark.faults
def test_two_processes_ingesting_the_same_files(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "docs", 300)
    reference = _reference(corpus, tmp_path / "ref")
    for trial, waits in enumerate([("60", "60"), ("60", "0")]):
        kb_dir = tmp_path / f"kb{trial}"
        runs = [subprocess.Popen(_cli("kb", "ingest", str(corpus), "--kb", str(kb_dir),
                                      "--embedder", "hash", "--wait", wait),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for wait in waits]
        outs = [run.communicate(timeout=120)[0] for run in runs]
        codes = [run.returncode for run in runs]
        assert all("is damaged" not in out and "Traceback" not in out for out in outs), outs
        assert 0 in codes, outs
        for code, out in zip(codes, outs, strict=True):
            # (the holder's pid may be unwritten for a moment: "another writer ...")
            assert code == 0 or (code == 2 and re.search(
                r"another (ingest|KB creation|writer) is writing this KB", out)), outs
        if waits[1] == "60":
            assert codes == [0, 0], outs
        _check_intact(kb_dir, reference, 300)


@pytest.mark.faults
def test_a_sigkilled_writer_leaves_no_stale_lock(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "docs", 200)
    reference = _reference(corpus, tmp_path / "ref")
    kb_dir = tmp_path / "kb"
    writer = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, str(kb_dir), str(corpus)])
    try:
        deadline = time.monotonic() + 60
        while not _generation(kb_dir) >= 3:  # some batches committed: mid-ingest
            assert writer.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        assert (kb_dir / LOCK_NAME).read_text().split() == [str(writer.pid), "ingest"]
        code, out = invoke("kb", "search", "--kb", str(kb_dir), "metformin glucose")
        assert code == 0 and "note" in out, out  # a reader during the ingest
        code, out = invoke("kb", "ingest", str(corpus), "--kb", str(kb_dir), "--wait", "0.2")
        assert code == 2 and f"another ingest is writing this KB (pid {writer.pid})" in out
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
    assert writer.returncode == -signal.SIGKILL
    started = time.monotonic()
    done = subprocess.run(_cli("kb", "ingest", str(corpus), "--kb", str(kb_dir), "--wait", "0"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "waiting" not in done.stderr and time.monotonic() - started < 60
    _check_intact(kb_dir, reference, 200)


def _generation(kb_dir: Path) -> int:
    try:
        conn = sqlite3.connect(f"file:{kb_dir / DB_NAME}?mode=ro", uri=True)
        try:
            return int(conn.execute("SELECT value FROM meta WHERE key='generation'")
                       .fetchone()[0])
        finally:
            conn.close()
    except (sqlite3.Error, TypeError):
        return -1
