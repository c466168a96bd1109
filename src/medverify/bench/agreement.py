"""Agreement of the audit's judge with human labels on claim-source pairs.

The study owner draws a sample of judged claim-source pairs (:func:`sample_pairs`),
stratified by model and by the judge's verdict, and exports it for clinicians as a
*blinded* CSV (:func:`export_blinded`): question, statement, the source URL and the
passages the judge saw, an empty ``label`` column, and no model name or verdict. The key
that ties each opaque ``pair_id`` back to its answer, claim, source, model and verdict is
kept apart (``labels/key-<seed>-<n>.jsonl``). Filled CSVs come back through
:func:`import_labels` into ``labels/labels.jsonl`` (one :class:`HumanLabel` per pair and
annotator); :func:`load_agreement` scores the judge against the annotators' majority
label with :func:`medverify.audit.evaluate.score_codes` (Cohen's kappa, agreement,
balanced accuracy, bootstrap CIs), overall and per model.

A pair's id depends only on (answer id, claim id, source id), so labels from several
samples, annotators and files combine, and :func:`import_annotations` can add labels from
any annotation file that names its pairs by answer (or question), statement and URL.
"""

from __future__ import annotations

import csv
import hashlib
import io
import random
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path

import numpy as np
from pydantic import Field

from medverify.audit.cited_urls import normalize_url
from medverify.audit.evaluate import AgreementScores, score_codes
from medverify.audit.metrics import group_value
from medverify.audit.records import AnswerAudit, PairJudgement
from medverify.bench.layout import RunLayout
from medverify.errors import InputError
from medverify.files import atomic_write_text, read_records
from medverify.records import Record, Source, utcnow

CSV_COLUMNS = ("pair_id", "question", "statement", "source_url", "source_excerpt", "label",
               "notes")
LABELS_FILE = "labels.jsonl"
EXCERPT_CHARS = 4000
FALLBACK_CHARS = 1500
PASSAGE_JOINER = "\n[...]\n"
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")

SUPPORTED_WORDS = frozenset({"supported", "support", "supports", "yes", "y", "1", "true", "t",
                             "s"})
NOT_SUPPORTED_WORDS = frozenset({"not supported", "not_supported", "not-supported",
                                 "notsupported", "unsupported", "no", "n", "0", "false", "f",
                                 "ns", "u"})
SKIP_WORDS = frozenset({"", "unsure", "unclear", "unknown", "?", "skip", "n/a", "na",
                        "don't know", "dont know", "idk"})


class PairSample(Record):
    """One sampled claim-source pair: what the annotator sees and (kept in the key file
    only) which answer, claim, source and model it came from and the judge's verdict."""

    pair_id: str
    answer_id: str
    claim_id: str
    source_id: str
    model: str
    question: str = ""
    statement: str
    source_url: str = ""
    source_excerpt: str = ""
    judge_supported: bool
    judge_category: str = ""


class HumanLabel(Record):
    """One annotator's label of one pair (``labels/labels.jsonl``; the last line per pair
    and annotator wins)."""

    pair_id: str
    annotator: str
    supported: bool
    raw_label: str = ""
    notes: str | None = None
    source_file: str = ""
    imported_at: datetime = Field(default_factory=utcnow)


class LabelImport(Record):
    """What importing one file did: every row is counted, none silently dropped."""

    path: str
    annotator: str
    rows: int = 0
    imported: int = 0
    supported: int = 0
    not_supported: int = 0
    skipped: int = 0  # empty or "unsure" labels
    unrecognized: int = 0  # labels that are neither supported, not supported nor unsure
    unknown_pairs: int = 0  # pair ids (or statement/URL rows) not in any sample key
    duplicates: int = 0  # rows repeating a pair (the last one wins)
    encoding: str = "utf-8"
    problems: list[str] = Field(default_factory=list)


class AgreementResult(Record):
    """Judge-human agreement with the counts behind it (``load_agreement`` returns the
    first two fields). ``n_ties``: pairs whose annotators split evenly (skipped);
    ``n_unmatched``: labelled pairs not found among the audits' scored pairs."""

    overall: AgreementScores | None = None
    by_model: dict[str, AgreementScores] = Field(default_factory=dict)
    n_labels: int = 0
    n_pairs: int = 0
    n_annotators: int = 0
    n_ties: int = 0
    n_unmatched: int = 0
    inter_annotator: dict[str, AgreementScores] = Field(default_factory=dict)


# --- pairs -------------------------------------------------------------------------------


def pair_id(answer_id: str, claim_id: str, source_id: str, statement: str = "",
            url: str = "") -> str:
    """An opaque, stable id of one claim-source pair (reveals neither model nor verdict).
    The statement and URL are part of it, so labels never attach to a different pair that
    reuses the ids (a study run again with ``--fresh``)."""
    key = f"medverify-pair\x00{answer_id}\x00{claim_id}\x00{source_id}\x00{statement}\x00{url}"
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    return "p" + digest[:12]


def _excerpt(pair: PairJudgement, source: Source) -> str:
    text = PASSAGE_JOINER.join(p.text.strip() for p in pair.passages if p.text.strip())
    if not text:
        text = (source.text or "").strip()[:FALLBACK_CHARS]
    return text[:EXCERPT_CHARS]


def _scored_pairs(audit: AnswerAudit) -> Iterator[PairSample]:
    sources = {s.id: s for s in audit.answer.sources}
    model = group_value(audit.answer.meta, "model")
    for claim in audit.claims:
        for pair in claim.pairs:
            source = sources.get(pair.source_id)
            if pair.supported is None or source is None or not source.valid:
                continue
            yield PairSample(
                pair_id=pair_id(audit.answer.id, claim.claim.id, pair.source_id,
                                claim.claim.text, source.url or ""),
                answer_id=audit.answer.id, claim_id=claim.claim.id, source_id=pair.source_id,
                model=model, question=audit.answer.question or "", statement=claim.claim.text,
                source_url=source.url or "", source_excerpt=_excerpt(pair, source),
                judge_supported=pair.supported, judge_category=pair.verdict.category.value)


def scored_pairs(audits: Sequence[AnswerAudit]) -> list[PairSample]:
    """Every judged claim-source pair with a valid source and a verdict, in audit order."""
    return [sample for audit in audits for sample in _scored_pairs(audit)]


def _interleave(groups: list[list[PairSample]], n: int) -> list[PairSample]:
    chosen: list[PairSample] = []
    for depth in range(max((len(g) for g in groups), default=0)):
        chosen.extend(g[depth] for g in groups if depth < len(g))
        if len(chosen) >= n:
            break
    return chosen[:n]


def sample_pairs(audits: Sequence[AnswerAudit], n: int, *, seed: int = 0,
                 stratify: bool = True) -> list[PairSample]:
    """``n`` scored pairs (all of them when there are fewer), deterministic for a seed.

    Stratified: the strata (model x judge verdict) take turns, each in a seeded random
    order, so every model and both verdicts are represented as evenly as the pairs allow.
    """
    if n < 1:
        raise InputError(f"the sample size must be at least 1 (got {n})")
    rng = random.Random(seed)
    pairs = scored_pairs(audits)
    if not stratify:
        rng.shuffle(pairs)
        return pairs[:n]
    strata: dict[tuple[str, bool], list[PairSample]] = {}
    for pair in pairs:
        strata.setdefault((pair.model, pair.judge_supported), []).append(pair)
    groups = [strata[key] for key in sorted(strata)]
    for group in groups:
        rng.shuffle(group)
    rng.shuffle(groups)  # when n < strata, which strata get a pair is left to chance
    return _interleave(groups, n)


# --- blinded export ----------------------------------------------------------------------


def defuse_cell(value: str) -> str:
    """A cell a spreadsheet shows as text: a leading ``= + - @`` (or tab, CR) would start
    a formula, so such a cell gets a leading apostrophe."""
    return "'" + value if value.startswith(FORMULA_STARTS) else value


def blinded_csv(samples: Sequence[PairSample], *, seed: int = 0) -> str:
    """The annotators' CSV text (with a UTF-8 byte-order mark for Excel), rows shuffled."""
    rows = list(samples)
    random.Random(f"blind-{seed}").shuffle(rows)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    for s in rows:
        cells = (s.pair_id, s.question, s.statement, s.source_url, s.source_excerpt, "", "")
        writer.writerow([defuse_cell(c) for c in cells])
    return "\ufeff" + buffer.getvalue()


def sample_paths(layout: RunLayout, n: int, seed: int) -> tuple[Path, Path]:
    return (layout.labels / f"sample-{seed}-{n}.csv", layout.labels / f"key-{seed}-{n}.jsonl")


def export_blinded(layout: RunLayout, audits: Sequence[AnswerAudit], n: int, *,
                   seed: int = 0) -> tuple[Path, Path]:
    """Write the blinded CSV of ``n`` sampled pairs and its key; returns (csv, key).

    Raises InputError when there is no scored pair, or when the CSV already exists with
    other content (it may hold labels: nothing is overwritten).
    """
    samples = sample_pairs(audits, n, seed=seed)
    if not samples:
        raise InputError("no claim-source pair with a valid source and a judge verdict to "
                         "sample: run the audit first")
    csv_path, key_path = sample_paths(layout, n, seed)
    text = blinded_csv(samples, seed=seed)
    if csv_path.is_file() and csv_path.read_bytes() != text.encode("utf-8"):
        raise InputError(f"{csv_path} already exists with other content (labels?): move it "
                         "away or choose another --seed or sample size")
    key = "".join(s.model_dump_json() + "\n" for s in samples)
    atomic_write_text(key_path, key)
    atomic_write_text(csv_path, text)
    return csv_path, key_path


def load_keys(layout: RunLayout) -> dict[str, PairSample]:
    """pair_id -> sampled pair, over every key file of the run."""
    keys: dict[str, PairSample] = {}
    for path in sorted(layout.labels.glob("key-*.jsonl")):
        for sample in read_records(path, PairSample, repair=False):
            keys[sample.pair_id] = sample
    return keys


# --- reading filled files ----------------------------------------------------------------


def parse_label(raw: str) -> bool | None:
    """True (supported), False (not supported) or None (no label: empty or unsure).

    Raises ValueError for anything else."""
    text = " ".join(raw.strip().lstrip("'").strip().casefold().split())
    if text in SUPPORTED_WORDS:
        return True
    if text in NOT_SUPPORTED_WORDS:
        return False
    if text in SKIP_WORDS:
        return None
    raise ValueError(f"unrecognized label {raw.strip()!r}")


def _decode(data: bytes) -> tuple[str, str]:
    try:
        return data.decode("utf-8-sig"), "utf-8"
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace"), "windows-1252"


def _delimiter(header: str) -> str:
    counts = {d: header.count(d) for d in (",", ";", "\t")}
    return max(counts, key=lambda d: counts[d]) if any(counts.values()) else ","


def read_table(path: Path) -> tuple[list[str], list[dict[str, str]], str]:
    """The column names (lower case), rows and encoding of a CSV: comma, semicolon or tab
    separated; UTF-8 with or without BOM, else windows-1252."""
    try:
        text, encoding = _decode(path.read_bytes())
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    lines = text.splitlines()
    if not lines:
        raise InputError(f"{path} is empty")
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=_delimiter(lines[0]))
    header = [h.strip().lstrip("\ufeff").casefold() for h in next(reader)]
    rows = [dict(zip(header, (c.strip() for c in row), strict=False))
            for row in reader if any(c.strip() for c in row)]
    return header, rows, encoding


def _require(path: Path, header: list[str], columns: Iterable[str]) -> None:
    missing = [c for c in columns if c not in header]
    if missing:
        raise InputError(f"{path} has no column {', '.join(missing)}; found "
                         f"{', '.join(h for h in header if h) or 'none'}")


class _Collector:
    """Counts rows while collecting one label per pair (the last one wins)."""

    def __init__(self, report: LabelImport) -> None:
        self.report = report
        self.labels: dict[str, HumanLabel] = {}

    def add(self, where: str, ids: Sequence[str], row: dict[str, str]) -> None:
        report = self.report
        report.rows += 1
        if not ids:
            report.unknown_pairs += 1
            self.problem(f"{where}: pair not found in the run's samples or audits")
            return
        raw = row.get("label", "")
        try:
            supported = parse_label(raw)
        except ValueError as exc:
            report.unrecognized += 1
            self.problem(f"{where}: {exc} (use supported / not supported, or leave empty)")
            return
        if supported is None:
            report.skipped += 1
            return
        for pid in ids:
            self.put(where, pid, supported, raw, row)

    def put(self, where: str, pid: str, supported: bool, raw: str, row: dict[str, str]) -> None:
        if pid in self.labels:
            self.report.duplicates += 1
            self.problem(f"{where}: repeats pair {pid} (this later row wins)")
        self.labels[pid] = HumanLabel(
            pair_id=pid, annotator=self.report.annotator, supported=supported,
            raw_label=raw.strip(), notes=row.get("notes") or None, source_file=self.report.path)

    def problem(self, message: str) -> None:
        if len(self.report.problems) < 100:
            self.report.problems.append(message)

    def finish(self, layout: RunLayout) -> LabelImport:
        labels = list(self.labels.values())
        if labels:
            layout.labels.mkdir(parents=True, exist_ok=True)
            with (layout.labels / LABELS_FILE).open("a", encoding="utf-8") as handle:
                handle.writelines(label.model_dump_json() + "\n" for label in labels)
        report = self.report
        report.imported = len(labels)
        report.supported = sum(label.supported for label in labels)
        report.not_supported = report.imported - report.supported
        return report


def _annotator(path: Path, rows: list[dict[str, str]], annotator: str | None) -> str:
    if annotator:
        return annotator
    named = {r.get("annotator", "") for r in rows} - {""}
    return named.pop() if len(named) == 1 else path.stem


def import_labels(layout: RunLayout, csv_path: Path, *,
                  annotator: str | None = None) -> LabelImport:
    """Read a filled blinded CSV into ``labels/labels.jsonl`` (appended); returns counts.

    Labels: supported / yes / 1 / true / S and not supported / unsupported / no / 0 /
    false / N (any case); empty or unsure rows are skipped and counted. The annotator is
    ``annotator``, else the file's single ``annotator`` column value, else the file name.
    """
    keys = load_keys(layout)
    if not keys:
        raise InputError(f"{layout.labels} has no sample key: export a blinded sample first "
                         "(`medverify bench labels export`)")
    header, rows, encoding = read_table(csv_path)
    _require(csv_path, header, ("pair_id", "label"))
    collector = _Collector(LabelImport(path=str(csv_path), encoding=encoding,
                                       annotator=_annotator(csv_path, rows, annotator)))
    for number, row in enumerate(rows, 2):
        pid = row.get("pair_id", "").lstrip("'")
        collector.add(f"row {number}", [pid] if pid in keys else [], row)
    return collector.finish(layout)


def _pair_index(audits: Sequence[AnswerAudit]) -> dict[tuple[str, str, str], list[str]]:
    """(answer id or question, statement, URL) -> pair ids, all normalised."""
    index: dict[tuple[str, str, str], list[str]] = {}
    for sample in scored_pairs(audits):
        statement = " ".join(sample.statement.casefold().split())
        url = normalize_url(sample.source_url) or sample.source_url
        for owner in (sample.answer_id, " ".join(sample.question.casefold().split())):
            index.setdefault((owner, statement, url), []).append(sample.pair_id)
    return index


def _row_pairs(row: dict[str, str], index: dict[tuple[str, str, str], list[str]]) -> list[str]:
    owner = row.get("answer_id") or " ".join(row.get("question", "").casefold().split())
    statement = " ".join(row.get("statement", "").lstrip("'").casefold().split())
    raw_url = row.get("source_url", "").lstrip("'")
    url = normalize_url(raw_url) or raw_url
    return index.get((owner, statement, url), [])


def import_annotations(layout: RunLayout, path: Path, audits: Sequence[AnswerAudit], *,
                       annotator: str | None = None) -> LabelImport:
    """Labels from any annotation CSV with columns ``answer_id`` (or ``question``),
    ``statement``, ``source_url`` and ``label``, matched to the audits' scored pairs
    (statement and URL compared normalised). A row naming a question matches that
    statement-URL pair in every model's answer to it."""
    header, rows, encoding = read_table(path)
    owner = "answer_id" if "answer_id" in header else "question"
    _require(path, header, (owner, "statement", "source_url", "label"))
    index = _pair_index(audits)
    collector = _Collector(LabelImport(path=str(path), encoding=encoding,
                                       annotator=_annotator(path, rows, annotator)))
    for number, row in enumerate(rows, 2):
        collector.add(f"row {number}", _row_pairs(row, index), row)
    return collector.finish(layout)


# --- agreement ---------------------------------------------------------------------------


def load_labels(layout: RunLayout, warnings: list[str] | None = None) -> list[HumanLabel]:
    """The imported labels, the last one per (pair, annotator)."""
    return read_records(layout.labels / LABELS_FILE, HumanLabel, warnings,
                        key=lambda label: (label.pair_id, label.annotator))


def consensus(labels: Sequence[HumanLabel]) -> tuple[dict[str, bool], list[str]]:
    """pair_id -> majority label over annotators, and the pairs whose annotators tie."""
    votes: dict[str, Counter[bool]] = {}
    for label in labels:
        votes.setdefault(label.pair_id, Counter())[label.supported] += 1
    majority = {pid: c[True] > c[False] for pid, c in votes.items() if c[True] != c[False]}
    return majority, sorted(pid for pid in votes if pid not in majority)


def _codes(gold: dict[str, bool], judged: dict[str, PairSample],
           pids: Iterable[str]) -> np.ndarray:
    """2 * human + judge per pair (1 = supported), as ``score_codes`` expects."""
    return np.asarray([2 * int(gold[p]) + int(judged[p].judge_supported) for p in pids],
                      dtype=float)


def _inter_annotator(labels: Sequence[HumanLabel], n_boot: int,
                     seed: int) -> dict[str, AgreementScores]:
    by_annotator: dict[str, dict[str, bool]] = {}
    for label in labels:
        by_annotator.setdefault(label.annotator, {})[label.pair_id] = label.supported
    names = sorted(by_annotator)
    scores: dict[str, AgreementScores] = {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            shared = sorted(set(by_annotator[a]) & set(by_annotator[b]))
            if shared:
                codes = np.asarray([2 * by_annotator[a][p] + by_annotator[b][p] for p in shared],
                                   dtype=float)
                scores[f"{a} vs {b}"] = score_codes(codes, 0, n_boot=n_boot, seed=seed)
    return scores


def agreement_details(layout: RunLayout, audits: Sequence[AnswerAudit], *,
                      n_boot: int = 2000, seed: int = 0) -> AgreementResult:
    """Judge (the audits' current verdicts) versus the annotators' majority label.

    Tied pairs and labelled pairs no longer scored in the audits count as unscored."""
    labels = load_labels(layout)
    if not labels:
        return AgreementResult()
    gold, ties = consensus(labels)
    judged = {s.pair_id: s for s in scored_pairs(audits)}
    matched = sorted(p for p in gold if p in judged)
    unmatched = len(gold) - len(matched) + sum(p not in judged for p in ties)

    def scores(pids: list[str], unscored: int) -> AgreementScores:
        return score_codes(_codes(gold, judged, pids), unscored, n_boot=n_boot, seed=seed)

    models = sorted({judged[p].model for p in matched})
    return AgreementResult(
        overall=scores(matched, len(ties) + len(gold) - len(matched)),
        by_model={m: scores([p for p in matched if judged[p].model == m],
                            sum(p in judged and judged[p].model == m for p in ties))
                  for m in models},
        n_labels=len(labels), n_pairs=len(gold) + len(ties),
        n_annotators=len({label.annotator for label in labels}),
        n_ties=len(ties), n_unmatched=unmatched,
        inter_annotator=_inter_annotator(labels, n_boot, seed),
    )


def load_agreement(layout: RunLayout, audits: Sequence[AnswerAudit], *, n_boot: int = 2000,
                   seed: int = 0) -> tuple[AgreementScores | None, dict[str, AgreementScores]]:
    """Overall and per-model agreement of the judge with the human labels (None and {}
    when no label was imported). See :func:`agreement_details` for the counts."""
    result = agreement_details(layout, audits, n_boot=n_boot, seed=seed)
    return result.overall, result.by_model
