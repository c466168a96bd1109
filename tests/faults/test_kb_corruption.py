"""A damaged vector index is rebuilt from SQLite; an ingest killed with -9 resumes."""

from __future__ import annotations

import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import faiss
import numpy as np
import pytest
from click.testing import CliRunner

from medverify.cli import main
from medverify.config import KBSettings
from medverify.errors import KBError
from medverify.kb import KnowledgeBase
from medverify.records import Document
from medverify.retrieve import Retriever
from medverify.testing import FakeChatServer
from medverify.testing.judge import keyword_rule, scripted_judge

FACTS = {
    "warfarin": "Warfarin is an anticoagulant. Vitamin K reverses warfarin.",
    "asthma": "Inhaled corticosteroids control asthma. Albuterol relieves acute wheeze.",
    "measles": "Measles is prevented by the MMR vaccine given in two doses.",
    "flu": "Influenza vaccination is recommended every year for people aged 6 months and older.",
}
SETTINGS = KBSettings(chunk_tokens=16, chunk_overlap=4, embedder="hash")


@pytest.fixture
def kb_dir(tmp_path: Path) -> Path:
    with KnowledgeBase.create(tmp_path / "kb", SETTINGS) as kb:
        kb.ingest([Document(doc_id=k, title=k.title(), text=v) for k, v in FACTS.items()])
        Retriever(kb).search("warmup", k=1, mode="dense")
    return tmp_path / "kb"


def _chunks(kb_dir: Path) -> int:
    conn = sqlite3.connect(kb_dir / "kb.sqlite")
    try:
        return int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])
    finally:
        conn.close()


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _other_index(dim: int, count: int, mapped: bool = True) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        vectors = np.eye(count, dim, dtype=np.float32)
        if mapped:
            index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
            index.add_with_ids(vectors, np.arange(1, count + 1, dtype=np.int64))
        else:
            index = faiss.IndexFlatIP(dim)
            index.add(vectors)
        faiss.write_index(index, str(path))
    return write


def _corruptions(kb_dir: Path) -> dict[str, Callable[[Path], None]]:
    n = _chunks(kb_dir)
    return {
        "truncated": _truncate,
        "empty": lambda p: p.write_bytes(b""),
        "garbage": lambda p: p.write_bytes(os.urandom(4096)),
        "wrong dimension": _other_index(64, n),
        "wrong count": _other_index(256, n - 1),
        "not an id map": _other_index(256, n, mapped=False),
    }


CORRUPTIONS = ["truncated", "empty", "garbage", "wrong dimension", "wrong count",
               "not an id map"]


@pytest.mark.parametrize("kind", CORRUPTIONS)
def test_damaged_index_is_rebuilt_with_a_warning(kb_dir: Path, kind: str,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    _corruptions(kb_dir)[kind](kb_dir / "vectors.faiss")
    with KnowledgeBase.open(kb_dir) as kb:
        assert kb.stats().vector_index == "fresh"  # its metadata still matches
        with caplog.at_level(logging.WARNING, logger="medverify.kb.store"):
            top = Retriever(kb).search("what reverses warfarin", k=1, mode="dense")
        assert top[0].doc_id == "warfarin"
    assert "rebuilding it from kb.sqlite" in caplog.text
    index = faiss.read_index(str(kb_dir / "vectors.faiss"))  # saved again, whole
    assert (index.ntotal, index.d) == (_chunks(kb_dir), 256)


def test_ingest_over_a_damaged_index_rebuilds_it(kb_dir: Path) -> None:
    _truncate(kb_dir / "vectors.faiss")
    with KnowledgeBase.open(kb_dir) as kb:
        kb.ingest([Document(doc_id="statin", title="Statin", text="Statins lower LDL.")])
        assert Retriever(kb).search("statins LDL", k=1, mode="dense")[0].doc_id == "statin"
    index = faiss.read_index(str(kb_dir / "vectors.faiss"))
    assert index.ntotal == _chunks(kb_dir)


def _break_beyond_repair(kb_dir: Path) -> None:
    _truncate(kb_dir / "vectors.faiss")
    conn = sqlite3.connect(kb_dir / "kb.sqlite")
    conn.execute("UPDATE chunks SET vector = x'00' WHERE id = (SELECT min(id) FROM chunks)")
    conn.commit()
    conn.close()


def test_unrebuildable_index_is_one_clear_error(kb_dir: Path) -> None:
    _break_beyond_repair(kb_dir)
    with KnowledgeBase.open(kb_dir) as kb, pytest.raises(KBError) as caught:
        Retriever(kb).search("warfarin", k=1)
    message = str(caught.value)
    assert "\n" not in message and "cannot be rebuilt" in message
    assert "vector of 1 bytes" in message
    assert f"medverify kb ingest PATH... --kb {kb_dir}" in message


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_cli_search_survives_a_truncated_index(kb_dir: Path) -> None:
    _truncate(kb_dir / "vectors.faiss")
    code, out = invoke("kb", "search", "--kb", str(kb_dir), "vitamin K warfarin", "-k", "1",
                       "--json")
    assert code == 0, out
    assert json.loads(out)[0]["doc_id"] == "warfarin"


def test_cli_search_on_an_unrebuildable_index_exits_2(kb_dir: Path) -> None:
    _break_beyond_repair(kb_dir)
    code, out = invoke("kb", "search", "--kb", str(kb_dir), "warfarin")
    assert code == 2
    assert out.startswith("error: ") and out.count("\n") == 1 and "Traceback" not in out
    assert "medverify kb ingest" in out


@pytest.fixture
def judge_server() -> Iterator[FakeChatServer]:
    rule = keyword_rule(supported="every year", contradicted="every ten years")
    with FakeChatServer(scripted_judge(rule)) as fake:
        yield fake


def _check(kb_dir: Path, server: FakeChatServer, tmp_path: Path) -> tuple[int, str]:
    answer = tmp_path / "answer.txt"
    answer.write_text("The flu vaccine is recommended every year.", "utf-8")
    return invoke("check", str(answer), "--kb", str(kb_dir), "--model",
                  f"openai-compatible:judge@{server.base_url}", "--decomposer", "rules",
                  "--json", str(tmp_path / "r.json"))


def test_cli_check_survives_a_truncated_index(kb_dir: Path, judge_server: FakeChatServer,
                                              tmp_path: Path) -> None:
    _truncate(kb_dir / "vectors.faiss")
    code, out = _check(kb_dir, judge_server, tmp_path)
    assert code == 0, out
    report = json.loads((tmp_path / "r.json").read_text("utf-8"))
    assert report["results"][0]["category"] == "FACT"


def test_cli_check_on_an_unrebuildable_index_exits_2(kb_dir: Path,
                                                     judge_server: FakeChatServer,
                                                     tmp_path: Path) -> None:
    _break_beyond_repair(kb_dir)
    code, out = _check(kb_dir, judge_server, tmp_path)
    assert code == 2, out
    assert "Traceback" not in out and "cannot be rebuilt" in out
    assert out.strip().count("\n") == 0


CHILD = textwrap.dedent("""
    import sys
    from medverify.kb import KnowledgeBase, LoadReport, loaders
    from medverify.kb.loaders import iter_sources
    loaders.STREAM_BYTES = 64 * 1024
    with KnowledgeBase.open_or_create(sys.argv[1], None, "hash") as kb:
        kb.flush_chunks = 64
        stats = kb.ingest(iter_sources([sys.argv[2]], LoadReport()))
    print(stats.model_dump_json())
""")


def _ingest_child(kb_dir: Path, source: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(kb_dir), str(source)],
                            stdout=subprocess.PIPE, text=True)


def _committed(kb_dir: Path) -> int:
    try:
        conn = sqlite3.connect(kb_dir / "kb.sqlite", timeout=1)
        try:
            return int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def test_kill_9_during_a_large_file_ingest_resumes(tmp_path: Path) -> None:
    sentence = "Metformin is first-line therapy for type 2 diabetes in most adults. "
    source = tmp_path / "big.txt"
    source.write_text((sentence * 9 + "\n\n") * 3500, "utf-8")  # ~2.2 MB
    child = _ingest_child(tmp_path / "kb", source)
    deadline = time.monotonic() + 180  # a loaded 2-core machine starts the child slowly
    while (_committed(tmp_path / "kb") < 128 and time.monotonic() < deadline
           and child.poll() is None):
        time.sleep(0.05)
    finished_early = child.poll()  # not None: the child ended before it was killed
    child.send_signal(signal.SIGKILL)
    child.communicate()
    killed_at = _committed(tmp_path / "kb")
    assert finished_early is None, f"the ingest child ended on its own ({finished_early})"
    assert killed_at >= 128 and killed_at % 64 == 0, killed_at  # whole batches only
    rerun = _ingest_child(tmp_path / "kb", source)
    stats = json.loads((rerun.communicate(timeout=120)[0]).strip().splitlines()[-1])
    assert rerun.returncode == 0 and stats["documents_resumed"] == 1
    clean = _ingest_child(tmp_path / "clean", source)
    clean_stats = json.loads(clean.communicate(timeout=120)[0].strip().splitlines()[-1])
    assert stats["chunks_added"] + killed_at == clean_stats["chunks_added"]
    with KnowledgeBase.open(tmp_path / "kb") as resumed, \
            KnowledgeBase.open(tmp_path / "clean") as reference:
        assert resumed.snapshot_id == reference.snapshot_id
        spans = 'SELECT ord, start, "end" FROM chunks ORDER BY ord'
        assert (resumed._conn.execute(spans).fetchall()
                == reference._conn.execute(spans).fetchall())
        assert resumed.stats().vector_index == "fresh"


# -- a damaged kb.sqlite ----------------------------------------------------------------------

def _sqlite_variants() -> list[tuple[str, Callable[[bytes], bytes]]]:
    def flip(frac: float) -> Callable[[bytes], bytes]:
        def make(data: bytes) -> bytes:
            at = min(int(len(data) * frac), len(data) - 1)
            return data[:at] + bytes(x ^ 0x5A for x in data[at:at + 512]) + data[at + 512:]
        return make

    out: list[tuple[str, Callable[[bytes], bytes]]] = [("empty", lambda b: b"")]
    out += [(f"cut{int(f * 100)}", lambda b, f=f: b[: max(1, int(len(b) * f))])
            for f in (0.1, 0.5, 0.9)]
    out += [(f"flip{int(f * 100)}", flip(f)) for f in (0.0, 0.3, 0.6, 0.95)]
    out.append(("garbage", lambda b: os.urandom(len(b))))
    return out


@pytest.mark.parametrize("name", [v[0] for v in _sqlite_variants()])
def test_damaged_kb_sqlite_is_one_clear_error_or_still_works(kb_dir: Path, name: str,
                                                             tmp_path: Path) -> None:
    """kb.sqlite truncated, byte-flipped (header, tables, FTS pages) or replaced: `kb search`
    and `kb ingest` end in one `error:` line with exit 2, or work; never a traceback."""
    db = kb_dir / "kb.sqlite"
    for suffix in ("-wal", "-shm"):
        (kb_dir / f"kb.sqlite{suffix}").unlink(missing_ok=True)
    db.write_bytes(dict(_sqlite_variants())[name](db.read_bytes()))
    runner = CliRunner()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "new.txt").write_text("Statins lower LDL cholesterol.", "utf-8")
    for args in (["kb", "search", "--kb", str(kb_dir), "warfarin vitamin K"],
                 ["kb", "stats", "--kb", str(kb_dir)],
                 ["kb", "ingest", str(tmp_path / "docs"), "--kb", str(kb_dir)]):
        result = runner.invoke(main, args)
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            name, args, result.output)
        if result.exit_code != 0:
            lines = [line for line in result.output.splitlines() if line.strip()]
            assert result.exit_code == 2 and "Traceback" not in result.output
            assert lines[-1].startswith("error: ") and "kb" in lines[-1].lower(), result.output
