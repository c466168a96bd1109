"""Corrupted and truncated files of every kind medverify reads back (not the KB's own files).

Each file is damaged in the same ways (``variants``: truncated at several offsets, bytes
flipped, zero-length, not UTF-8, valid JSON of the wrong type) and read back, through the
CLI where a user meets it. The result must be a clear project error on one line, or an
automatic logged recovery; never a raw traceback, never silently wrong data.
"""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from medverify.audit.evaluate import load_audits
from medverify.bench.records import GeneratedQuestion, GenerationStatus
from medverify.cli import main
from medverify.config import Config
from medverify.errors import ConfigError, InputError, MedverifyError
from medverify.files import read_records
from medverify.llm import Completion
from medverify.llm.cache import RequestCache
from medverify.records import content_hash
from medverify.risk.data import read_examples, write_examples
from medverify.risk.records import LabeledExample, RiskLabel
from medverify.sources.cache import FetchCache, FetchResult
from medverify.store.runs import RunStore

Variant = tuple[str, Callable[[bytes], bytes]]


def variants(good: bytes) -> list[Variant]:
    """The damaged copies of ``good``: name and how it is made."""
    out: list[Variant] = [("empty", lambda b: b"")]
    for frac in (0.1, 0.5, 0.9):
        out.append((f"cut{int(frac * 100)}", lambda b, f=frac: b[: max(1, int(len(b) * f))]))
    for frac in (0.05, 0.3, 0.6, 0.95):
        out.append((f"flip{int(frac * 100)}", lambda b, f=frac: _flip(b, f)))
    out.append(("latin1", lambda b: b"\xff\xfe" + b[2:].replace(b"a", b"\xe9")))
    out.append(("wrong_type", lambda b: b'["a", 1, null]\n'))
    return out


def _flip(data: bytes, frac: float) -> bytes:
    if not data:
        return data
    at = min(int(len(data) * frac), len(data) - 1)
    chunk = bytes(x ^ 0x5A for x in data[at: at + 64])
    return data[:at] + chunk + data[at + 64:]


def damaged(path: Path, make: Callable[[bytes], bytes]) -> None:
    path.write_bytes(make(path.read_bytes()))


def one_line_error(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    assert lines, "no message"
    assert "Traceback" not in output
    assert lines[-1].startswith("error: "), output[-400:]
    return lines[-1]


# -- the run store (store/runs.py) via `medverify runs list/show` ---------------------------

def _run_store(path: Path) -> str:
    with RunStore(path) as db:
        run_id = db.start_run(kind="check", config={"a": 1}, models={"judge": "m"},
                              prompt_versions={"judge": "v1"}, kb_snapshot=None)
        db.finish_run(run_id, status="done", usage={})
    return run_id


@pytest.mark.parametrize("name", [v[0] for v in variants(b"x" * 100)])
def test_run_store_file(tmp_path: Path, name: str) -> None:
    store = tmp_path / "runs.db"
    run_id = _run_store(store)
    for extra in ("-wal", "-shm"):
        (tmp_path / f"runs.db{extra}").unlink(missing_ok=True)
    make = dict(variants(store.read_bytes()))[name]
    damaged(store, make)
    runner = CliRunner()
    listed = runner.invoke(main, ["runs", "list", "--json", "--store", str(store)])
    if listed.exit_code == 0:
        runs = json.loads(listed.output)
        assert runs == [] or [r["id"] for r in runs] == [run_id]
        if runs:
            assert runs[0]["config"] == {"a": 1}  # read back intact, or not at all
    else:
        assert listed.exit_code == 2 and not isinstance(listed.exception, sqlite3.Error)
        one_line_error(listed.output)
    shown = runner.invoke(main, ["runs", "show", run_id, "--store", str(store)])
    assert shown.exit_code in (0, 2), shown.output
    if shown.exit_code == 2:
        one_line_error(shown.output)


@pytest.mark.parametrize("column,value", [
    ("config", "{not json"), ("models", "[1, 2]"), ("usage", '{"judge": 5}'),
    ("config", "\udcff"), ("prompt_versions", ""),
])
def test_run_store_damaged_row(tmp_path: Path, column: str, value: str) -> None:
    store = tmp_path / "runs.db"
    run_id = _run_store(store)
    with sqlite3.connect(store) as conn:
        conn.execute(f"UPDATE runs SET {column} = ?",  # a fixed column name
                     (value.encode("utf-8", "surrogateescape"),))
    for args in (["runs", "list"], ["runs", "show", run_id]):
        result = CliRunner().invoke(main, [*args, "--store", str(store)])
        assert result.exit_code == 2, result.output
        assert "run store" in one_line_error(result.output)


# -- the LLM request cache (llm/cache.py): unusable means disabled, with a warning ---------

def _cache(path: Path) -> None:
    cache = RequestCache(path)
    for i in range(50):
        cache.put(f"key{i}", "p", Completion(text=f"answer {i} " * 20, model="m"))
    cache.close()
    for extra in ("-wal", "-shm"):
        Path(f"{path}{extra}").unlink(missing_ok=True)


@pytest.mark.parametrize("name", [v[0] for v in variants(b"x" * 100)])
def test_request_cache_file(tmp_path: Path, name: str,
                            caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "cache.db"
    _cache(path)
    damaged(path, dict(variants(path.read_bytes()))[name])
    with caplog.at_level(logging.WARNING, logger="medverify.llm.cache"):
        cache = RequestCache(path)
        got = [cache.get(f"key{i}") for i in range(50)]
        cache.put("new", "p", Completion(text="new", model="m"))
        enabled = cache.enabled
        cache.close()
    for i, completion in enumerate(got):  # a miss costs a call; a wrong answer is a bug
        assert completion is None or completion.text == f"answer {i} " * 20
    if not enabled:
        assert caplog.records, "a dropped cache must be logged"


def test_request_cache_damaged_entry(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "cache.db"
    _cache(path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE completions SET completion = ? WHERE key = 'key1'", ('{"text": 5',))
        conn.execute("UPDATE completions SET completion = ? WHERE key = 'key2'", (b"\xff\x00",))
        conn.execute("UPDATE completions SET completion = ? WHERE key = 'key3'", ("[]",))
    cache = RequestCache(path)
    with caplog.at_level(logging.WARNING, logger="medverify.llm.cache"):
        assert [cache.get(f"key{i}") is None for i in (1, 2, 3)] == [True] * 3
    assert cache.get("key4") is not None and len(caplog.records) == 3
    cache.close()


def test_request_cache_catches_a_valid_looking_changed_reply(tmp_path: Path) -> None:
    """A byte flipped inside a stored reply's text keeps valid JSON: the checksum stored
    beside it catches the change (before checksums, the wrong reply was served)."""
    path = tmp_path / "cache.db"
    _cache(path)
    with sqlite3.connect(path) as conn:
        payload = conn.execute("SELECT completion FROM completions WHERE key = 'key5'"
                               ).fetchone()[0]
        conn.execute("UPDATE completions SET completion = ? WHERE key = 'key5'",
                     (payload.replace("answer 5", "answer 6"),))
    cache = RequestCache(path)
    assert cache.get("key5") is None and cache.get("key4") is not None
    cache.close()


def test_request_cache_written_before_checksums_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE completions (key TEXT PRIMARY KEY, provider TEXT NOT NULL, "
                     "completion TEXT NOT NULL, created_at TEXT NOT NULL)")
        conn.execute("INSERT INTO completions VALUES ('k', 'p', ?, 'now')",
                     (Completion(text="old", model="m").model_dump_json(),))
    cache = RequestCache(path)
    got = cache.get("k")
    cache.put("k2", "p", Completion(text="new", model="m"))
    assert got is not None and got.text == "old" and cache.get("k2").text == "new"
    cache.close()


# -- the sources fetch cache (sources/cache.py) ---------------------------------------------

def _fetch_cache(path: Path) -> None:
    with FetchCache(path) as cache:
        for i in range(40):
            text = f"page {i} " * 30  # stored with its hash, as the fetcher does
            cache.put(FetchResult(url=f"https://e.org/{i}", http_status=200,
                                  headers={"a": "b"}, text=text, content_hash=content_hash(text)))
    for extra in ("-wal", "-shm"):
        Path(f"{path}{extra}").unlink(missing_ok=True)


# A byte flipped inside a stored page text is caught by the text's content hash (the
# fetcher stores one with every page) and the page is fetched again.
@pytest.mark.parametrize("name", [v[0] for v in variants(b"x" * 100)])
def test_fetch_cache_file(tmp_path: Path, name: str, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "fetch.db"
    _fetch_cache(path)
    damaged(path, dict(variants(path.read_bytes()))[name])
    try:
        cache = FetchCache(path)
    except ConfigError as exc:
        assert "fetch cache" in str(exc) and "\n" not in str(exc)
        return
    with caplog.at_level(logging.WARNING, logger="medverify.sources.cache"), cache:
        got = [cache.get(f"https://e.org/{i}") for i in range(40)]
    for i, result in enumerate(got):
        assert result is None or result.text == f"page {i} " * 30


def test_fetch_cache_damaged_entry(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "fetch.db"
    _fetch_cache(path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE fetches SET headers = '{oops' WHERE url = 'https://e.org/1'")
        conn.execute("UPDATE fetches SET http_status = 'x' WHERE url = 'https://e.org/2'")
    with caplog.at_level(logging.WARNING, logger="medverify.sources.cache"), \
            FetchCache(path) as cache:
        assert cache.get("https://e.org/1") is None and cache.get("https://e.org/2") is None
        assert cache.get("https://e.org/3") is not None
    assert len(caplog.records) == 2


# -- JSONL read back: risk examples, bench records, audit answers ---------------------------

def _examples(path: Path) -> None:
    write_examples(path, [LabeledExample(id=f"e{i}", question="q", text=f"text {i}",
                                         label=RiskLabel.FACT, provenance={"source": "t"})
                          for i in range(20)])


@pytest.mark.parametrize("name", [v[0] for v in variants(b"x" * 100)])
def test_risk_examples_jsonl(tmp_path: Path, name: str) -> None:
    path = tmp_path / "examples.jsonl"
    _examples(path)
    damaged(path, dict(variants(path.read_bytes()))[name])
    try:
        examples = read_examples(path)
    except InputError as exc:
        assert str(exc)
        return
    assert (name == "empty" and examples == []) or all(e.text.startswith("text ")
                                                       for e in examples)


@pytest.mark.parametrize("name", [v[0] for v in variants(b"x" * 100)])
def test_bench_records_jsonl(tmp_path: Path, name: str) -> None:
    path = tmp_path / "generated.jsonl"
    lines = [GeneratedQuestion(doc_id=f"d{i}", status=GenerationStatus.INVALID,
                               error=f"e{i}", prompt_version="v1").model_dump_json()
             for i in range(20)]
    path.write_text("\n".join(lines) + "\n", "utf-8")
    damaged(path, dict(variants(path.read_bytes()))[name])
    warnings: list[str] = []
    records = read_records(path, GeneratedQuestion, warnings, key=lambda g: g.doc_id)
    for record in records:
        assert record.error == f"e{record.doc_id[1:]}"
    if len(records) < 20 and name not in ("empty",) and not name.startswith("cut"):
        assert warnings
    # repaired: appending after it and reading again works
    assert len(read_records(path, GeneratedQuestion, [])) == len(records)


@pytest.mark.parametrize("name", [v[0] for v in variants(b"x" * 100)])
def test_audit_answers_jsonl(tmp_path: Path, name: str) -> None:
    path = tmp_path / "answers.jsonl"
    path.write_text("\n".join(json.dumps({"x": i}) for i in range(5)) + "\n", "utf-8")
    damaged(path, dict(variants(path.read_bytes()))[name])
    try:
        audits, warnings = load_audits(path)
    except MedverifyError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert audits == [] and (warnings or name == "empty")


# -- risk classifier card / model, verifier weights, config ---------------------------------

def test_config_file(tmp_path: Path) -> None:
    good = b'[model]\ntimeout_s = 30\n'
    cases = [(name, make(good)) for name, make in variants(good)]
    cases += [("wrong_value", b'[model]\ntimeout_s = "soon"\n'),
              ("wrong_table", b"model = 5\n")]
    for name, data in cases:
        path = tmp_path / f"{name}.toml"
        path.write_bytes(data)
        try:
            Config.load(path, env={})
        except ConfigError as exc:
            assert "\n" not in str(exc), f"{name}: {exc}"
        result = CliRunner().invoke(main, ["runs", "list", "--config", str(path),
                                           "--store", str(tmp_path / "r.db")])
        assert result.exit_code in (0, 2) and "Traceback" not in result.output, name
        if result.exit_code == 2:
            one_line_error(result.output)


def _verifier_copy(tmp_path: Path) -> Path:
    from medverify.verifier.infer import DEFAULT_WEIGHTS

    copy = tmp_path / "weights"
    shutil.copytree(DEFAULT_WEIGHTS, copy)
    return copy


@pytest.mark.parametrize("target", ["verifier.json", "verifier.safetensors"])
def test_verifier_weights(tmp_path: Path, target: str) -> None:
    from medverify.verifier.model import load_model

    source = _verifier_copy(tmp_path)
    good = (source / target).read_bytes()
    cases = variants(good) if target == "verifier.json" else \
        [v for v in variants(good) if v[0] != "wrong_type"]
    if target == "verifier.json":
        meta = json.loads(good)
        cases.append(("n_layers", lambda b: json.dumps({**meta, "n_layers": "4"}).encode()))
        cases.append(("no_n_layers", lambda b: json.dumps(
            {k: v for k, v in meta.items() if k != "n_layers"}).encode()))
    for name, make in cases:
        (source / target).write_bytes(make(good))
        with pytest.raises(ConfigError) as info:
            load_model(source)
        assert "\n" not in str(info.value), name
    (source / target).write_bytes(good)
    load_model(source)  # the intact copy still loads


def test_risk_classifier_card(tmp_path: Path) -> None:
    from medverify.risk.persist import CARD_FILE, read_card

    folder = tmp_path / "clf"
    folder.mkdir()
    good = json.dumps({"format": "x", "card": {}}).encode()
    for _name, make in variants(good):
        (folder / CARD_FILE).write_bytes(make(good))
        with pytest.raises(InputError):
            read_card(folder)
