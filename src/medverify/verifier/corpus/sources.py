"""The corpus's source documents: MedQuAD answers (and the drug/condition lexicons of their
focuses), PubMedQA abstracts, the retrieval corpora and the evidence texts of the allowed train
pair files; sentences repeated across documents dropped as boilerplate; document frequencies."""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from medverify.errors import InputError
from medverify.verifier.corpus.entities import condition_name, drug_name
from medverify.verifier.corpus.records import Document, Lexicons
from medverify.verifier.corpus.text import (
    _clean_sentence,
    _hash,
    content_words,
    normalize,
    split_sentences,
)

TRAIN_PAIR_FILES = ("checkcovid_train", "citint_train", "scifact_train")
_FORBIDDEN = ("_dev", "_val", "healthver", "covidfact", "covid-fact", "expertqa")


def _document(
    doc_id: str,
    source: str,
    group: str,
    paragraphs: Sequence[str],
    focus: str = "",
    synonyms: Sequence[str] = (),
    seen: set[str] | None = None,
) -> Document | None:
    sentences: list[str] = []
    paras: list[int] = []
    for p, text in enumerate(paragraphs):
        for sentence in split_sentences(text):
            key = normalize(sentence)
            if not _clean_sentence(sentence) or (seen is not None and key in seen):
                continue
            if seen is not None:
                seen.add(key)
            sentences.append(sentence)
            paras.append(p)
    if len(sentences) < 2:
        return None
    return Document(doc_id, source, group, tuple(sentences), tuple(paras), focus, tuple(synonyms))


def load_medquad(root: Path) -> tuple[list[Document], Lexicons]:
    """MedQuAD documents with answer text, and the drug/condition lexicons of all focuses."""
    docs: list[Document] = []
    drugs: dict[str, None] = {}
    conditions: dict[str, None] = {}
    for file in sorted(root.glob("*/*.xml")):
        try:
            tree = ET.parse(file)
        except ET.ParseError:
            continue
        doc = tree.getroot()
        focus = (doc.findtext("Focus") or "").strip()
        cats = {(e.text or "").strip() for e in doc.iter("Category")}
        cats |= {(e.text or "").strip() for e in doc.iter("SemanticGroup")}
        if "Drug" in cats:
            name = drug_name(focus)
            if name:
                drugs[name] = None
        elif "Disease" in cats or ("Disorders" in cats and "Other" not in cats):
            name = condition_name(focus)
            if name:
                conditions[name] = None
        answers = [
            (a.text or "").replace(" - ", "\n")
            for a in doc.iter("Answer")
            if (a.text or "").strip()
        ]
        if not answers:
            continue
        synonyms = [(s.text or "").strip() for s in doc.iter("Synonym") if (s.text or "").strip()]
        doc_id = f"{file.parent.name.split('_')[0]}_{doc.get('id', file.stem)}"
        group = "medquad:" + (normalize(focus) or doc_id)
        seen: set[str] = set()
        made = _document(doc_id, "medquad", group, answers, focus, synonyms, seen)
        if made:
            docs.append(made)
    return docs, Lexicons(drugs=list(drugs), conditions=list(conditions))


def load_pubmedqa(path: Path) -> list[Document]:
    """PubMedQA abstracts (contexts + long answer) as documents."""
    data = json.loads(path.read_text())
    docs = []
    for pmid in sorted(data):
        row = data[pmid]
        paragraphs = [*row.get("CONTEXTS", []), row.get("LONG_ANSWER", "")]
        made = _document(pmid, "pubmedqa", f"pubmedqa:{pmid}", paragraphs)
        if made:
            docs.append(made)
    return docs


def load_retrieval(path: Path, name: str) -> list[Document]:
    """A retrieval corpus (``doc_id``, ``title``, ``text``): text only, one paragraph per line."""
    docs = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        paragraphs = [p for p in str(row.get("text", "")).split("\n") if p.strip()]
        group = f"{name}:{row['doc_id']}"
        made = _document(str(row["doc_id"]), f"retrieval-{name}", group, paragraphs)
        if made:
            docs.append(made)
    return docs


def _refuse_eval(path: Path) -> None:
    if any(tag in path.stem for tag in _FORBIDDEN):
        raise InputError(f"{path.name} is evaluation-only: not a corpus source")


def load_pair_evidence(path: Path, known: Sequence[Document] = ()) -> list[Document]:
    """Distinct evidence texts of an allowed train pair file (claims and labels unused).

    Evidence texts already present among ``known`` documents (same 8-gram fingerprint, e.g.
    Citation-Integrity evidence = a cited-paper document of the retrieval corpus) are skipped.
    """
    _refuse_eval(path)
    fingerprints: set[str] = set()
    for doc in known:
        words = normalize(" ".join(doc.sentences[:2])).split()
        fingerprints.add(" ".join(words[:8]))
    docs = []
    seen: set[str] = set()
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        evidence = str(row.get("evidence", ""))
        key = normalize(evidence)
        if not key or key in seen:
            continue
        seen.add(key)
        words = key.split()
        starts = range(max(1, len(words) - 7))
        if any(" ".join(words[i : i + 8]) in fingerprints for i in starts):
            continue
        meta = row.get("meta") or {}
        doc_id = str(meta.get("doc_id") or _hash(key))
        name = path.stem.replace("_train", "")
        made = _document(doc_id, f"pairs-{name}", f"{name}:{doc_id}", evidence.split("\n"))
        if made:
            docs.append(made)
    return docs


def load_sources(data_dir: Path) -> tuple[list[Document], Lexicons]:
    """Every allowed source under ``data_dir`` (``../shared/data``); missing ones are skipped."""
    docs: list[Document] = []
    lex = Lexicons()
    medquad = data_dir / "raw" / "medquad"
    if medquad.is_dir():
        mq_docs, lex = load_medquad(medquad)
        docs += mq_docs
    pubmedqa = data_dir / "raw" / "pubmedqa" / "pqal_dev500.json"
    if pubmedqa.is_file():
        docs += load_pubmedqa(pubmedqa)
    retrieval: list[Document] = []
    for name in ("checkcovid", "citint"):
        path = data_dir / "retrieval" / name / "corpus.jsonl"
        if path.is_file():
            retrieval += load_retrieval(path, name)
    docs += retrieval
    for name in TRAIN_PAIR_FILES:
        path = data_dir / "pairs" / f"{name}.jsonl"
        if path.is_file():
            docs += load_pair_evidence(path, retrieval)
    if not docs:
        raise InputError(f"no corpus sources found under {data_dir}")
    return docs, lex


# ---------------------------------------------------------------- boilerplate and idf


def drop_boilerplate(docs: list[Document], max_docs: int = 8) -> list[Document]:
    """Remove sentences repeated (focus name masked) in more than ``max_docs`` documents."""

    def template(doc: Document, sentence: str) -> str:
        text = sentence
        if doc.focus:
            text = re.sub(re.escape(doc.focus), "<f>", text, flags=re.I)
        return normalize(re.sub(r"\d+", "0", text))

    counts: Counter[str] = Counter()
    for doc in docs:
        counts.update({template(doc, s) for s in doc.sentences})
    out = []
    for doc in docs:
        keep = [i for i, s in enumerate(doc.sentences) if counts[template(doc, s)] <= max_docs]
        if len(keep) >= 2:
            out.append(
                Document(
                    doc.doc_id,
                    doc.source,
                    doc.group,
                    tuple(doc.sentences[i] for i in keep),
                    tuple(doc.paras[i] for i in keep),
                    doc.focus,
                    doc.synonyms,
                )
            )
    return out


def document_idf(docs: Sequence[Document]) -> dict[str, float]:
    """Inverse document frequency of content words over ``docs``."""
    df: Counter[str] = Counter()
    for doc in docs:
        df.update(set(content_words(" ".join(doc.sentences))))
    n = len(docs)
    return {w: math.log((n + 1) / (f + 0.5)) for w, f in df.items()}
