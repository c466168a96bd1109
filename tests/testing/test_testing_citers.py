"""The local page server and the scripted citing models of the offline study."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from medverify.audit.cited_urls import extract_sources
from medverify.config import FetchSettings
from medverify.errors import ConfigError
from medverify.llm.base import ChatRequest, Message
from medverify.llm.facade import get_model
from medverify.records import Document, FetchFailure, Source
from medverify.sources import SourceFetcher
from medverify.testing import unregister_fake
from medverify.testing.citers import (
    HABITS,
    NO_REFERENCE,
    REFUSAL,
    UNSUPPORTED_STATEMENTS,
    CitingModel,
    references_for,
    register_citing_models,
    sentences,
    study_documents,
    study_questions,
)
from medverify.testing.page_server import Page, PageServer

DOCS = study_documents()
QUESTIONS = study_questions()
REFERENCES = references_for(QUESTIONS)


@pytest.fixture(scope="module")
def pages() -> Iterator[PageServer]:
    with PageServer.from_documents(DOCS) as server:
        yield server


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def body_of(url: str) -> tuple[str, str]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode("utf-8"), response.headers["Content-Type"]


def ask(model: CitingModel, question: str, template: str = "Question:\n{q}\n\nReply in JSON."
        ) -> str:
    messages = (Message(role="system", content="You answer medical questions."),
                Message(role="user", content=template.format(q=question)))
    return model(ChatRequest(model="m", messages=messages))


def replies(habit: str, pages: PageServer, seed: int = 0) -> dict[str, str]:
    model = CitingModel(habit, REFERENCES, pages.url_for, seed=seed)
    return {q.text: ask(model, q.text) for q in QUESTIONS}


def fetch(urls: list[str], allow: list[str]) -> list[Source]:
    settings = FetchSettings(allow=allow, connect_timeout_s=2.0, read_timeout_s=2.0,
                             total_timeout_s=5.0)

    async def main() -> list[Source]:
        async with SourceFetcher(settings) as fetcher:
            return await fetcher.fetch_all([Source(id=str(i), url=u) for i, u in enumerate(urls)])
    return asyncio.run(main())


# --- page server -------------------------------------------------------------------------


def test_page_server_serves_pages_counts_hits_and_404s() -> None:
    pdf = Page(b"%PDF-1.4 not really", content_type="application/pdf")
    with PageServer({"/a": "<html><body><p>Alpha</p></body></html>", "b": pdf}) as server:
        assert server.base_url == f"http://{server.host_port}"
        assert urlsplit(server.url("/a")).hostname == "127.0.0.1"
        body, ctype = body_of(server.url("/a?x=1"))
        assert "Alpha" in body and ctype == "text/html; charset=utf-8"
        assert body_of(server.url("/b"))[1] == "application/pdf"
        assert status_of(server.url("/missing")) == 404
        server.add("/late", Page("gone", status=410))
        assert status_of(server.url("/late")) == 410
        assert server.hits == {"/a": 1, "/b": 1, "/missing": 1, "/late": 1}
    with pytest.raises(RuntimeError, match="context manager"):
        server.url("/a")


def test_document_pages_escape_html_and_get_unique_paths() -> None:
    docs = [Document(doc_id="Doc 1", title="Salt <b>& you</b>",
                     text="First <script>alert(1)</script> para.\n\nSecond para."),
            Document(doc_id="doc-1", text="Other doc.")]
    with PageServer.from_documents(docs) as server:
        first, second = server.url_for("Doc 1"), server.url_for("doc-1")
        assert first.endswith("/pages/doc-1") and second.endswith("/pages/doc-1-2")
        body, _ = body_of(first)
        assert "<title>Salt &lt;b&gt;&amp; you&lt;/b&gt;</title>" in body
        assert "&lt;script&gt;" in body and "<script>" not in body
        assert body.count("<p>") == 2
        with pytest.raises(KeyError, match="not served"):
            server.url_for("nope")


def test_pages_pass_the_safe_fetcher_only_when_allowed(pages: PageServer) -> None:
    doc = DOCS[0]
    url = pages.url_for(doc.doc_id)
    fetched, missing = fetch([url, pages.url("/articles/none")], allow=[pages.host_port])
    assert fetched.status == "fetched" and fetched.title == doc.title
    assert sentences(doc.text)[1] in " ".join((fetched.text or "").split())
    assert missing.status == "invalid" and missing.http_status == 404
    [blocked] = fetch([url], allow=[])
    assert blocked.failure == FetchFailure.BLOCKED


# --- the study corpus --------------------------------------------------------------------


def test_study_corpus_has_one_question_per_document_from_two_sources() -> None:
    assert len(DOCS) == 12 == len({d.doc_id for d in DOCS})
    assert all(4 <= len(sentences(d.text)) <= 6 and d.title for d in DOCS)
    assert {q.source for q in QUESTIONS} == {"generated", "consumer"}
    assert sum(q.source == "consumer" for q in QUESTIONS) == 6
    assert [q.reference.doc_id for q in QUESTIONS if q.reference] == [d.doc_id for d in DOCS]
    assert len({q.id for q in QUESTIONS}) == len({q.text for q in QUESTIONS}) == 12


# --- habits ------------------------------------------------------------------------------


def test_careful_answers_from_the_reference_and_cites_its_page(pages: PageServer) -> None:
    for question, reply in replies("careful", pages).items():
        data = json.loads(reply)
        doc = REFERENCES[question]
        said = sentences(data["answer"])
        assert 2 <= len(said) <= 3 and all(s in sentences(doc.text) for s in said)
        assert data["sources"] == [{"url": pages.url_for(doc.doc_id), "title": doc.title}]


def test_overreaching_adds_an_unsupported_sentence_and_a_dead_link(pages: PageServer) -> None:
    for question, reply in replies("overreaching", pages).items():
        data = json.loads(reply)
        doc = REFERENCES[question]
        said = sentences(data["answer"])
        assert said[-1] in UNSUPPORTED_STATEMENTS and said[-1] not in doc.text
        real, invented = (s["url"] for s in data["sources"])
        assert real == pages.url_for(doc.doc_id)
        assert urlsplit(invented).netloc == pages.host_port
    assert status_of(invented) == 404 and status_of(real) == 200


def test_hallucinating_cites_only_invented_urls(pages: PageServer) -> None:
    hosts = set()
    for question, reply in replies("hallucinating", pages).items():
        data = json.loads(reply)
        urls = [s["url"] for s in data["sources"]]
        assert pages.url_for(REFERENCES[question].doc_id) not in urls
        assert all(s in REFERENCES[question].text for s in sentences(data["answer"]))
        hosts.update(urlsplit(u).hostname for u in urls)
        assert status_of(urls[0]) == 404
    assert {"127.0.0.1", "www.example-medical-journal.invalid"} <= hosts


def test_freetext_puts_urls_in_prose_or_broken_json(pages: PageServer) -> None:
    found = replies("freetext", pages)
    broken = [r for r in found.values() if r.startswith("{answer:")]
    assert 1 <= len(broken) < len(found)
    for question, reply in found.items():
        with pytest.raises(json.JSONDecodeError):
            json.loads(reply)
        urls = [s.url for s in extract_sources(reply)]
        assert urls == [pages.url_for(REFERENCES[question].doc_id)]


def test_unreliable_covers_refusals_empty_replies_repeats_and_no_sources(
        pages: PageServer) -> None:
    kinds = set()
    for question, reply in replies("unreliable", pages).items():
        if reply in ("", REFUSAL):
            kinds.add(reply or "empty")
            continue
        data = json.loads(reply)
        assert data["answer"]
        urls = [s["url"] for s in data["sources"]]
        if urls:
            assert urls == [pages.url_for(REFERENCES[question].doc_id)] * 10
        kinds.add("repeated" if urls else "no sources")
    assert kinds == {REFUSAL, "empty", "repeated", "no sources"}


def test_replies_are_deterministic_and_depend_on_the_seed(pages: PageServer) -> None:
    for habit in HABITS:
        assert replies(habit, pages) == replies(habit, pages)
    assert replies("careful", pages, seed=1) != replies("careful", pages)
    assert replies("unreliable", pages, seed=1) != replies("unreliable", pages)


def test_question_is_found_verbatim_or_by_word_overlap(pages: PageServer) -> None:
    model = CitingModel("careful", REFERENCES, pages.url_for)
    question = QUESTIONS[2].text
    assert model.find_question(f"<<<F1 question>>>\n{question.upper()}\n<<<END F1>>>") == question
    reworded = "Please tell me: " + question.replace("?", "").replace("and", "&")
    assert model.find_question(reworded) == question
    assert model.find_question("What is the capital of France?") is None
    assert json.loads(ask(model, "What is the capital of France?"))["answer"] == NO_REFERENCE
    freetext = CitingModel("freetext", REFERENCES, pages.url_for)
    assert ask(freetext, "Unrelated words entirely") == NO_REFERENCE


def test_unknown_habit_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="careful"):
        CitingModel("sloppy", REFERENCES, str)


def test_registered_citers_answer_through_the_model_facade(pages: PageServer) -> None:
    specs = register_citing_models(["careful", "unreliable"], REFERENCES, pages.url_for,
                                   prefix="t-citer")
    try:
        assert specs == {"t-citer-careful": "fake:t-citer-careful",
                         "t-citer-unreliable": "fake:t-citer-unreliable"}
        model = get_model(specs["t-citer-careful"])
        question = QUESTIONS[0]
        messages = [Message(role="user", content=f"Answer this: {question.text}")]
        completion = asyncio.run(model.complete(messages, stage="bench.answer"))
        data = json.loads(completion.text)
        assert data["sources"][0]["url"] == pages.url_for(question.reference.doc_id)  # type: ignore[union-attr]
    finally:
        for label in specs:
            unregister_fake(label)
