"""Training data: the allowed train splits, a group-level held-out split, synthetic pairs.

Allowed for training: ``checkcovid_train``, ``citint_train``, ``scifact_train`` and pairs this
module generates (evidence-swap NOT_ENOUGH_INFO from those same train rows; MedQuAD sentence
perturbations). Dev/eval files are never read here.
"""

from __future__ import annotations

import json
import random
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel

from medverify.errors import InputError
from medverify.verifier.windows import best_window, content_words, make_windows, sentence_spans

TRAIN_FILES = ("checkcovid_train", "citint_train", "scifact_train")
_FORBIDDEN = ("_dev", "_val", "healthver", "covidfact", "expertqa")


class Pair(BaseModel):
    """One claim/evidence pair with its gold label and the group it may not be split across."""

    id: str
    dataset: str
    claim: str
    evidence: str
    label: str
    group: str
    source: str = "real"
    anchor: str | None = None
    doc: str = ""


class Example(BaseModel):
    """One training input: claim, one evidence window, label."""

    claim: str
    window: str
    label: str
    dataset: str
    source: str


def load_pairs(path: Path) -> list[Pair]:
    """Read a pairs jsonl file (3-way rows only), refusing evaluation-only files."""
    if any(tag in path.stem for tag in _FORBIDDEN):
        raise InputError(f"{path.name} is evaluation-only and may not be used for training")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [_to_pair(row) for row in rows if row.get("labels") == "3-way"]


def _to_pair(row: dict) -> Pair:
    meta = row.get("meta") or {}
    dataset = row["dataset"]
    if dataset == "check-covid":
        group = "cc:" + row["id"].rsplit("_", 1)[0]
    elif dataset == "citation-integrity":
        group = "ci:" + str(meta.get("doc_id", row["id"]))
    else:
        group = "sf:" + row["claim"].strip().lower()
    anchor = " ".join(meta.get("rationale") or []) or None
    return Pair(
        id=row["id"],
        dataset=dataset,
        claim=row["claim"],
        evidence=row["evidence"],
        label=row["label"],
        group=group,
        anchor=anchor,
        doc=str(meta.get("doc_id", "")),
    )


def merge_groups(pairs: list[Pair]) -> list[Pair]:
    """Join groups that share an evidence text (so no evidence is on both sides of the split)."""
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    for pair in pairs:
        parent[find(pair.group)] = find("ev:" + pair.evidence[:200])
    return [pair.model_copy(update={"group": find(pair.group)}) for pair in pairs]


def split_holdout(pairs: list[Pair], frac: float, seed: int) -> tuple[list[Pair], list[Pair]]:
    """Group-level split per dataset: about ``frac`` of each dataset's rows go to validation."""
    pairs = merge_groups(pairs)
    train: list[Pair] = []
    val: list[Pair] = []
    for dataset in sorted({p.dataset for p in pairs}):
        rows = [p for p in pairs if p.dataset == dataset]
        groups = sorted({p.group for p in rows})
        random.Random(f"{seed}:{dataset}").shuffle(groups)
        chosen: set[str] = set()
        count = 0
        for group in groups:
            if count >= frac * len(rows):
                break
            chosen.add(group)
            count += sum(p.group == group for p in rows)
        train += [p for p in rows if p.group not in chosen]
        val += [p for p in rows if p.group in chosen]
    return train, val


def swap_nei(pairs: list[Pair], count: int, seed: int) -> list[Pair]:
    """NOT_ENOUGH_INFO pairs: a claim with the most similar evidence of a *different* group."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    if count <= 0 or len(pairs) < 2:
        return []
    evidences = sorted({p.evidence for p in pairs})
    vectorizer = TfidfVectorizer(stop_words="english", sublinear_tf=True).fit(evidences)
    ev_matrix = vectorizer.transform(evidences)
    owners: dict[str, set[str]] = {}
    for p in pairs:
        owners.setdefault(p.evidence, set()).update({p.group, p.doc} - {""})
    chosen = random.Random(seed).sample(pairs, min(count, len(pairs)))
    sims = (vectorizer.transform([p.claim for p in chosen]) @ ev_matrix.T).toarray()
    out = []
    for pair, row in zip(chosen, sims, strict=True):
        for index in row.argsort()[::-1]:
            if not owners[evidences[index]] & ({pair.group, pair.doc} - {""}):
                out.append(_swapped(pair, evidences[index]))
                break
    return out


def _swapped(pair: Pair, evidence: str) -> Pair:
    return pair.model_copy(
        update={
            "id": pair.id + ":swap",
            "evidence": evidence,
            "label": "NOT_ENOUGH_INFO",
            "source": "swap",
            "anchor": None,
        }
    )


def to_examples(
    tokenizer: object, pairs: Iterable[Pair], max_tokens: int, nei_extra: int = 0
) -> list[Example]:
    """Training windows: per pair the rationale's (Check-COVID) or best-overlap window.

    A NOT_ENOUGH_INFO pair whose evidence needs several windows also contributes up to
    ``nei_extra`` of its other windows (every window of such evidence lacks the answer, and
    inference takes the most decisive window, so each must stay undecided).
    """
    out = []
    for pair in pairs:
        windows = make_windows(tokenizer, pair.claim, pair.evidence, max_tokens)
        window = best_window(pair.claim, windows, pair.anchor)
        chosen = [window]
        if pair.label == "NOT_ENOUGH_INFO" and nei_extra > 0:
            chosen += [w for w in windows if w != window][:nei_extra]
        out.extend(
            Example(
                claim=pair.claim,
                window=text,
                label=pair.label,
                dataset=pair.dataset,
                source=pair.source,
            )
            for text in chosen
        )
    return out


# ---------------------------------------------------------------- MedQuAD perturbations

_ANTONYMS = {
    "increase": "decrease",
    "increases": "decreases",
    "increased": "decreased",
    "higher": "lower",
    "more": "less",
    "common": "rare",
    "before": "after",
    "children": "adults",
    "men": "women",
    "always": "never",
    "benign": "malignant",
    "dominant": "recessive",
    "acute": "chronic",
    "often": "rarely",
    "early": "late",
}
_ANTONYMS.update({v: k for k, v in list(_ANTONYMS.items())})
_NEGATABLE = re.compile(r"\b(is|are|was|were|can|will|should|does|do)\b(?! not)")
_NEGATED = re.compile(r"\b(is|are|was|were|does|do|can|will|should) not\b")
_NUMBER = re.compile(r"\b\d+\b")


def perturb(sentence: str, rng: random.Random) -> str | None:
    """A contradicting variant of ``sentence`` (negation, antonym or number swap), or None."""
    edits = []
    if _NEGATED.search(sentence):
        edits.append(lambda s: _NEGATED.sub(lambda m: m.group(1), s, count=1))
    elif _NEGATABLE.search(sentence):
        edits.append(lambda s: _NEGATABLE.sub(lambda m: _negate(m.group(1)), s, count=1))
    words = [w for w in re.findall(r"[A-Za-z]+", sentence) if w.lower() in _ANTONYMS]
    if words:
        word = rng.choice(words)
        edits.append(lambda s: re.sub(rf"\b{word}\b", _ANTONYMS[word.lower()], s, count=1))
    if _NUMBER.search(sentence):
        edits.append(lambda s: _NUMBER.sub(lambda m: str(int(m.group()) * 2 + 3), s, count=1))
    if not edits:
        return None
    changed = rng.choice(edits)(sentence)
    return changed if changed != sentence else None


def _negate(verb: str) -> str:
    return "cannot" if verb == "can" else f"{verb} not"


def medquad_answers(root: Path, n_docs: int, seed: int) -> list[list[str]]:
    """Answers (as lists of sentences) of ``n_docs`` MedQuAD documents, sampled with ``seed``."""
    files = sorted(root.glob("*/*.xml"))
    docs = []
    for file in random.Random(seed).sample(files, min(n_docs, len(files))):
        try:
            tree = ET.parse(file)
        except ET.ParseError:
            continue
        answers = [_sentences(a.text or "") for a in tree.iter("Answer")]
        answers = [a for a in answers if len(a) >= 3]
        if len(answers) >= 2:
            docs.append(answers)
    return docs


def _sentences(text: str) -> list[str]:
    text = re.sub(r"\s+", " ", text.replace(" - ", ". ")).strip()
    return [text[a:b].strip() for a, b in sentence_spans(text) if 6 <= len(text[a:b].split()) <= 45]


def medquad_pairs(root: Path, n_docs: int, seed: int) -> list[Pair]:
    """SUPPORTED (verbatim sentence), CONTRADICTED (perturbed) and NEI (other answer) pairs."""
    rng = random.Random(seed)
    out: list[Pair] = []
    for d, answers in enumerate(medquad_answers(root, n_docs, seed)):
        first, other = rng.sample(range(len(answers)), 2)
        sents = answers[first]
        i = rng.randrange(len(sents))
        evidence = " ".join(sents[max(0, i - 2) : i + 3])
        claim = rng.choice(answers[other])
        group = f"mq:{d}"
        out.append(_mq(group, "S", sents[i], evidence, "SUPPORTED"))
        changed = perturb(sents[i], rng)
        if changed:
            out.append(_mq(group, "C", changed, evidence, "CONTRADICTED"))
        if len(content_words(claim) & content_words(evidence)) < 0.5 * len(content_words(claim)):
            out.append(_mq(group, "N", claim, evidence, "NOT_ENOUGH_INFO"))
    return out


def _mq(group: str, tag: str, claim: str, evidence: str, label: str) -> Pair:
    return Pair(
        id=f"{group}:{tag}",
        dataset="medquad-synthetic",
        claim=claim,
        evidence=evidence,
        label=label,
        group=group,
        source="medquad",
    )
