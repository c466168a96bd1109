"""Judges side by side: several judges on the same seeded sample of labelled pairs.

``medverify eval judges`` judges a seeded sample of each pairs file with each judge
(``builtin``, ``cascade=MODEL``, ``llm=MODEL``, ``llm-scored=MODEL``, plugins) and scores
them the same way as ``eval pairs`` (per-class precision and recall, macro-F1, confident
FACT precision and coverage, confusion matrices), adding what a comparison needs:

- **bootstrap 95 % intervals** of macro-F1 and of FACT precision (pairs resampled with a
  fixed seed), so two judges whose intervals overlap are not called different;
- **seconds and tokens per pair** for each judge (tokens from the model facade's ledger;
  cached calls cost none, so a rerun reports the first run's tokens, kept in the verdicts
  file);
- **the cascade's cost-vs-quality curve**: for the built-in judge and each model judge
  measured on the same pairs, the pairs the built-in judge is least sure of are sent to the
  model judge, share by share (not-confident verdicts first, lowest confidence first), and
  macro-F1 and FACT precision are traced against the share sent.

Every verdict is appended to ``OUT/verdicts/<judge>/<set>.jsonl`` as soon as its chunk is
judged, so a killed run resumes where it stopped and a finished one is re-scored for free.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from medverify.config import Config
from medverify.errors import InputError
from medverify.evals.pairs import (
    ERROR,
    JUDGMENT_ERROR,
    THREE_WAY,
    TWO_WAY,
    Pair,
    PairScores,
    judge_chunk,
    load_pairs,
    pairs_judge,
    pairs_model,
    predicted_label,
    score_pairs,
)
from medverify.files import append_record, read_records, record_json
from medverify.harness import stage_id
from medverify.judge import declares
from medverify.records import Usage, Verdict, utcnow
from medverify.stats import bootstrap_metric

CHUNK = 8  # pairs judged between two appends to the verdicts file
BOOTSTRAP = 1000
SHARES = tuple(round(i / 20, 2) for i in range(21))


class JudgeEntry(BaseModel):
    """One judge to compare: a registry name and, for judges that call one, a model spec."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    model: str | None = None

    @property
    def label(self) -> str:
        return f"{self.name}={self.model}" if self.model else self.name

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "_", self.label)[:120]


def parse_judge(text: str) -> JudgeEntry:
    """``NAME`` or ``NAME=MODEL_SPEC`` (e.g. ``llm-scored=local:qwen2.5-0.5b``)."""
    name, _, model = text.strip().partition("=")
    if not name:
        raise InputError(f"judge {text!r}: expected NAME or NAME=MODEL_SPEC")
    return JudgeEntry(name=name, model=model.strip() or None)


class JudgedPair(BaseModel):
    """One pair's verdict in a verdicts file, with what it cost."""

    model_config = ConfigDict(extra="forbid")

    pair_id: str
    verdict: Verdict | None
    seconds: float
    tokens: int = 0


class Interval(BaseModel):
    model_config = ConfigDict(extra="forbid")

    value: float | None
    low: float | None = None
    high: float | None = None


class JudgeOnSet(BaseModel):
    """One judge on one set: the ``eval pairs`` scores plus intervals and costs."""

    model_config = ConfigDict(extra="forbid")

    judge: str
    judge_id: str
    set: str
    scores: PairScores
    macro_f1: Interval
    fact_precision: Interval  # of every FACT verdict
    confident_fact_precision: float | None
    confident_fact_coverage: float | None
    seconds_per_pair: float
    tokens_per_pair: float


class CascadePoint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    share_sent: float
    macro_f1: float | None
    fact_precision: float | None


class CascadeCurve(BaseModel):
    model_config = ConfigDict(extra="forbid")

    set: str
    second: str
    points: list[CascadePoint]
    gain_kept_at_30: float | None  # (F1 at <= 30 % sent - builtin) / (second - builtin)


class JudgesEval(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sample: int | None
    seed: int
    results: list[JudgeOnSet]
    cascades: list[CascadeCurve] = Field(default_factory=list)
    created_at: str = Field(default_factory=lambda: utcnow().isoformat())


def sample_pairs(path: Path, n: int | None, seed: int) -> list[Pair]:
    """``n`` pairs of the file drawn with ``seed`` (all of them when ``n`` is None or
    larger), in file order; the same file, ``n`` and seed give the same pairs."""
    pairs = load_pairs(path)
    if n is None or n >= len(pairs):
        return pairs
    chosen = set(random.Random(f"{seed}:{path.stem}").sample(range(len(pairs)), n))
    return [p for i, p in enumerate(pairs) if i in chosen]


async def run_judge(entry: JudgeEntry, set_name: str, pairs: Sequence[Pair], out: Path,
                    config: Config, progress: Callable[[int], None] | None = None
                    ) -> tuple[str, list[JudgedPair]]:
    """Judge the pairs not yet in ``out/verdicts/<judge>/<set>.jsonl``; returns the
    judge's id and every pair's record (earlier runs' included)."""
    path = out / "verdicts" / entry.slug / f"{set_name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    done = {r.pair_id: r for r in read_records(path, JudgedPair, key=lambda r: r.pair_id)}
    todo = [p for p in pairs if p.id not in done]
    judge_config = config.model_copy(update={"judge": entry.name, "model": entry.model})
    model = pairs_model(judge_config)
    judge = pairs_judge(judge_config, model)
    try:
        with path.open("a", encoding="utf-8") as handle:
            for start in range(0, len(todo), CHUNK):
                chunk = todo[start:start + CHUNK]
                before = model.usage.total() if model is not None else Usage()
                started = time.perf_counter()
                verdicts = await judge_chunk(judge, chunk)
                seconds = (time.perf_counter() - started) / len(chunk)
                tokens = _tokens(model.usage.total() if model else Usage(), before) // len(chunk)
                for pair, verdict in zip(chunk, verdicts, strict=True):
                    record = JudgedPair(pair_id=pair.id, verdict=verdict, seconds=seconds,
                                        tokens=tokens)
                    append_record(handle, record)
                    done[pair.id] = record
                if progress is not None:
                    progress(len(chunk))
    finally:
        if model is not None:
            await model.aclose()
    return stage_id(judge), [done[p.id] for p in pairs if p.id in done]


def _tokens(after: Usage, before: Usage) -> int:
    return (after.prompt_tokens + after.completion_tokens
            - before.prompt_tokens - before.completion_tokens)


def score_judge(entry: JudgeEntry, judge_id: str, set_name: str, pairs: Sequence[Pair],
                judged: Sequence[JudgedPair], seed: int) -> JudgeOnSet:
    """Scores of one judge on one set, with bootstrap intervals."""
    verdicts = [j.verdict for j in judged]
    seconds = sum(j.seconds for j in judged)
    scores = score_pairs(set_name, pairs, verdicts, seconds)
    gold = [p.label for p in pairs]
    predicted = [predicted_label(v) if v is not None else ERROR for v in verdicts]
    fact = scores.confidence.categories.get("FACT") if scores.confidence else None
    return JudgeOnSet(
        judge=entry.label, judge_id=judge_id, set=set_name, scores=scores,
        macro_f1=bootstrap(gold, predicted, macro_f1, seed),
        fact_precision=bootstrap(gold, predicted, fact_precision, seed),
        confident_fact_precision=fact.precision if fact else None,
        confident_fact_coverage=fact.coverage if fact else None,
        seconds_per_pair=seconds / len(judged) if judged else 0.0,
        tokens_per_pair=sum(j.tokens for j in judged) / len(judged) if judged else 0.0)


def macro_f1(gold: Sequence[str], predicted: Sequence[str]) -> float | None:
    """Macro-F1 over the labels present in gold. Errors and judgment errors count as wrong
    here, unlike ``eval pairs``, which drops them: a comparison must not reward a judge for
    failing. On a 2-way set (SUPPORTED / NOT_SUPPORTED) CONTRADICTED and NOT_ENOUGH_INFO
    predictions fold into NOT_SUPPORTED."""
    if set(gold) <= set(TWO_WAY):
        predicted = [p if p in (*TWO_WAY, ERROR, JUDGMENT_ERROR) or p not in THREE_WAY
                     else "NOT_SUPPORTED" for p in predicted]
    labels = [lab for lab in dict.fromkeys((*THREE_WAY, *TWO_WAY)) if lab in set(gold)]
    if not labels:
        return None
    f1s = []
    for label in labels:
        tp = sum(1 for g, p in zip(gold, predicted, strict=True) if g == p == label)
        fp = sum(1 for g, p in zip(gold, predicted, strict=True) if p == label != g)
        fn = sum(1 for g, p in zip(gold, predicted, strict=True) if g == label != p)
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return sum(f1s) / len(f1s)


def fact_precision(gold: Sequence[str], predicted: Sequence[str]) -> float | None:
    """The share of SUPPORTED among the pairs called SUPPORTED (FACT)."""
    called = [g for g, p in zip(gold, predicted, strict=True) if p == "SUPPORTED"]
    return sum(1 for g in called if g == "SUPPORTED") / len(called) if called else None


def bootstrap(gold: Sequence[str], predicted: Sequence[str],
              metric: Callable[[Sequence[str], Sequence[str]], float | None], seed: int,
              rounds: int = BOOTSTRAP) -> Interval:
    """``metric`` with a percentile bootstrap 95 % interval (pairs resampled)."""
    value = metric(gold, predicted)
    if value is None:
        return Interval(value=value)
    ci = bootstrap_metric(gold, predicted, metric, seed, rounds)
    if ci is None:  # under two pairs, or no resample gave a value
        return Interval(value=value)
    return Interval(value=round(value, 4), low=round(ci[0], 4), high=round(ci[1], 4))


def cascade_curve(set_name: str, second: str, pairs: Sequence[Pair],
                  first: Sequence[JudgedPair], other: Sequence[JudgedPair],
                  shares: Sequence[float] = SHARES) -> CascadeCurve:
    """Macro-F1 and FACT precision when the share ``s`` of pairs the first (built-in) judge
    is least sure of goes to ``other`` (not-confident first, then by confidence)."""
    gold = [p.label for p in pairs]
    own = [_label(j.verdict) for j in first]
    theirs = [_label(j.verdict) for j in other]
    order = sorted(range(len(pairs)), key=lambda i: _sureness(first[i].verdict))
    points = []
    for share in shares:
        sent = set(order[: round(share * len(pairs))])
        mixed = [theirs[i] if i in sent else own[i] for i in range(len(pairs))]
        points.append(CascadePoint(share_sent=share, macro_f1=_round(macro_f1(gold, mixed)),
                                   fact_precision=_round(fact_precision(gold, mixed))))
    return CascadeCurve(set=set_name, second=second, points=points,
                        gain_kept_at_30=_gain_kept(points))


def _label(verdict: Verdict | None) -> str:
    return predicted_label(verdict) if verdict is not None else ERROR


def _sureness(verdict: Verdict | None) -> tuple[int, float]:
    if verdict is None or not verdict.ok:
        return (0, 0.0)
    return (1 if verdict.confident else 0, verdict.confidence or 0.0)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _gain_kept(points: Sequence[CascadePoint]) -> float | None:
    """The share of the full second judge's macro-F1 gain over the first that the best
    point sending at most 30 % keeps (None when the second judge gains nothing)."""
    base, full = points[0].macro_f1, points[-1].macro_f1
    if base is None or full is None or full <= base:
        return None
    best = max((p.macro_f1 for p in points if p.share_sent <= 0.3 and p.macro_f1 is not None),
               default=base)
    return round((best - base) / (full - base), 4)


async def evaluate_judges(entries: Sequence[JudgeEntry], files: Sequence[Path], out: Path,
                          config: Config, *, sample: int | None, seed: int,
                          progress: Callable[[str], None] | None = None) -> JudgesEval:
    """Every judge on every file's sample (resumable); scores, intervals, cascade curves."""
    results: list[JudgeOnSet] = []
    cascades: list[CascadeCurve] = []
    for path in files:
        pairs = sample_pairs(path, sample, seed)
        judged: dict[str, list[JudgedPair]] = {}
        for entry in entries:
            if progress is not None:
                progress(f"{entry.label} on {path.stem} ({len(pairs)} pairs)")
            judge_id, records = await run_judge(entry, path.stem, pairs, out, config)
            judged[entry.label] = records
            results.append(score_judge(entry, judge_id, path.stem, pairs, records, seed))
        cascades += _cascades(path.stem, pairs, entries, judged)
    report = JudgesEval(sample=sample, seed=seed, results=results, cascades=cascades)
    (out / "judges.json").write_text(record_json(report) + "\n", "utf-8")
    return report


def _cascades(set_name: str, pairs: Sequence[Pair], entries: Sequence[JudgeEntry],
              judged: dict[str, list[JudgedPair]]) -> list[CascadeCurve]:
    if "builtin" not in judged:
        return []
    return [cascade_curve(set_name, e.label, pairs, judged["builtin"], judged[e.label])
            for e in entries if e.model and not declares(e.name, "composite")
            and len(judged[e.label]) == len(pairs) == len(judged["builtin"])]
