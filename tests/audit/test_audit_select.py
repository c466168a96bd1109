"""Passage selection: BM25 + dense, fused; short sources whole; embeddings reused."""

from __future__ import annotations

import numpy as np

from medverify.audit.select import BM25, PassageSelector
from medverify.kb.embed_base import HashEmbedder
from medverify.records import Claim, Source

FILLER = (
    "The committee met on Tuesday to review the annual budget of the library. "
    "Several members discussed the renovation of the reading room and new chairs. "
)
KEY = "Metformin lowers hepatic glucose production in patients with type 2 diabetes. "
OTHER = "Regular aerobic exercise improves cardiorespiratory fitness in older adults. "


class CountingEmbedder(HashEmbedder):
    """The hash embedder, counting the texts it was asked to embed."""

    def __init__(self) -> None:
        super().__init__(dim=256)
        self.calls: list[int] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append(len(texts))
        return super().embed(texts)


def _long_source(source_id: str = "7") -> Source:
    text = FILLER * 20 + KEY + FILLER * 20 + OTHER + FILLER * 10
    return Source(id=source_id, url="https://x.org/p", title="Page", text=text, status="given")


def _claim(cid: str, text: str) -> Claim:
    return Claim(id=cid, text=text)


def test_bm25_ranks_the_document_with_the_query_terms_first() -> None:
    index = BM25(["the cat sat", "metformin lowers glucose", "glucose in the blood"])
    scores = index.scores("Does metformin lower glucose?")
    assert int(np.argmax(scores)) == 1
    assert scores[0] == 0.0


def test_selection_picks_the_relevant_passage_for_each_claim() -> None:
    selector = PassageSelector(HashEmbedder(), passage_tokens=32, k=2)
    source = _long_source()
    claims = [_claim("c1", "Metformin reduces hepatic glucose production in type 2 diabetes."),
              _claim("c2", "Aerobic exercise improves fitness in older adults.")]
    chosen = selector.select(claims, source)
    assert "Metformin lowers hepatic glucose" in chosen["c1"][0].text
    assert "aerobic exercise" in chosen["c2"][0].text
    for passages in chosen.values():
        assert len(passages) == 2
        for passage in passages:
            assert passage.doc_id == "7" and passage.url == "https://x.org/p"
            assert passage.id.startswith("7:")
            assert passage.span is not None
            assert source.text is not None
            assert source.text[passage.span.start:passage.span.end] == passage.text
            assert set(passage.scores) == {"rrf", "bm25", "dense"}


def test_short_source_is_used_whole_and_token_counts_match() -> None:
    selector = PassageSelector(HashEmbedder(), passage_tokens=32, k=3)
    source = Source(id="1", text=KEY + OTHER, status="given")
    claim = _claim("c1", "Metformin lowers glucose.")
    (selected,) = selector.select_pairs([(claim, source)])
    assert [p.text for p in selected.passages] == [KEY + OTHER]
    assert selected.passages[0].id == "1:1"
    assert selected.input_tokens == selected.source_tokens == 3 + 11 + 9


def test_long_source_reads_far_fewer_tokens_than_the_whole() -> None:
    selector = PassageSelector(HashEmbedder(), passage_tokens=32, k=3)
    claim = _claim("c1", "Metformin lowers glucose.")
    (selected,) = selector.select_pairs([(claim, _long_source())])
    assert selected.input_tokens <= 3 + 3 * 32
    assert selected.source_tokens > 10 * selected.input_tokens


def test_passages_embedded_once_per_source_and_claims_once_per_call() -> None:
    embedder = CountingEmbedder()
    selector = PassageSelector(embedder, passage_tokens=32, k=2)
    first, second = _long_source("1"), _long_source("2")
    claims = [_claim("c1", "Metformin lowers glucose."), _claim("c2", "Exercise helps.")]
    pairs = [(c, s) for c in claims for s in (first, second)]
    selector.select_pairs(pairs)
    n_passages = len(selector.passages(first).passages)
    # the two sources have the same text: its passages are embedded once, and the two
    # distinct claim texts once
    assert sorted(embedder.calls) == sorted([n_passages, 2])
    selector.select_pairs(pairs)
    assert len(embedder.calls) == 3  # the text is cached; only the claims again
    # each source keeps its own passage ids, title and URL
    assert {p.doc_id for p in selector.passages(second).passages} == {"2"}
    assert selector.passages(second).passages[0].id == "2:1"
    assert selector.passages(first).passages[0].id == "1:1"


def test_source_without_text_has_no_passages() -> None:
    selector = PassageSelector(HashEmbedder())
    empty = Source(id="1", url="https://x.org", status="invalid")
    assert selector.select([_claim("c1", "Anything.")], empty) == {"c1": []}


def test_lexical_mode_embeds_nothing_and_ranks_by_bm25() -> None:
    embedder = CountingEmbedder()
    selector = PassageSelector(embedder, passage_tokens=32, k=2, mode="lexical")
    chosen = selector.select([_claim("c1", KEY)], _long_source())["c1"]
    assert embedder.calls == []
    assert len(chosen) == 2 and KEY.strip() in chosen[0].text
    assert chosen[0].scores.keys() == {"bm25"} and chosen[0].score == chosen[0].scores["bm25"]
