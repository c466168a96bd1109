"""``medverify calibrate``: fit a confidence card for the configured judge on labelled
examples, and apply it on the record.

Labelled examples come from the user's pairs (the ``eval pairs`` JSONL format), the
training-allowed data sets (:data:`TRAINING_ALLOWED`, by name), or the clinicians' closed
review items (:func:`reviewed_items`: the claim with the passages the reviewer saw, the
reviewer's final label). The judge, made exactly as ``check`` makes it but without any
card, judges them; :func:`medverify.judge.confidence.fit.fit_categories` fits the card.
:func:`apply_card` saves it under a name in ``$MEDVERIFY_HOME/calibrations`` and records
who applied which card, when, on what data, in the run store's audit log.
"""

from __future__ import annotations

import getpass
import hashlib
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from medverify.config import Config, home
from medverify.errors import InputError
from medverify.evals.pairs import load_pairs, pair_item
from medverify.files import atomic_write_text, data_dir
from medverify.harness import stage_id
from medverify.judge import JUDGES, Judge, JudgeItem, has_trait
from medverify.judge.confidence.card import CardData, ConfidenceCard
from medverify.judge.confidence.fit import Example, fit_categories
from medverify.judge.confidence.signals import verdict_features
from medverify.records import Verdict, package_version, utcnow

TRAINING_ALLOWED = ("checkcovid_train", "citint_train", "scifact_train")
"""The shared data sets whose licence and README allow fitting on them (by name)."""

REVIEW_GOLD = {"FACT": "SUPPORTED", "HALLUCINATION": "CONTRADICTED",
               "COVERAGE_GAP": "NOT_ENOUGH_INFO"}
"""A reviewer's final label as the gold label of the claim against the passages they saw
(JUDGMENT_ERROR and CANNOT_TELL say nothing about the evidence's label: left out)."""

CHUNK = 64  # examples per judge call of an offline judge
MODEL_CHUNK = 4  # ... of a judge that calls a model: a serial local model queues the rest,
# and a call's time budget ([llm] call_budget_s) counts the wait


@dataclass(frozen=True)
class Labelled:
    """One claim with the passages it is judged against and its gold label."""

    item: JudgeItem
    gold: str
    group: str  # evidence text or answer: never on both sides of a fold
    source: str = ""  # the file or "reviews": the card's thresholds must hold on each


def from_pairs(path: Path, limit: int | None = None) -> list[Labelled]:
    """The pairs of one JSONL file (grouped by their evidence text)."""
    return [Labelled(pair_item(p), p.label, _digest(p.evidence), path.stem)
            for p in load_pairs(path, limit)]


def training_set(name: str) -> Path:
    """The file of a training-allowed set (InputError for any other name)."""
    if name not in TRAINING_ALLOWED:
        raise InputError(f"{name!r} may not be fitted on; the sets that allow it: "
                         f"{', '.join(TRAINING_ALLOWED)} (or pass your own pairs file)")
    path = data_dir() / "pairs" / f"{name}.jsonl"
    if not path.is_file():
        raise InputError(f"{path} not found (set MEDVERIFY_DATA to the data folder)")
    return path


def reviewed_items(store_location: Path | str) -> tuple[list[Labelled], Counter[str]]:
    """The closed review items as labelled examples, and what was left out, by reason."""
    from medverify.store.review import ReviewStore
    from medverify.store.runs import RunStore

    out, skipped = [], Counter[str]()
    with RunStore(store_location) as db:
        items = ReviewStore(db).list(status="closed", limit=None)
    for item in items:
        label = item.final_label.value if item.final_label is not None else None
        if label not in REVIEW_GOLD:
            skipped[f"label {label or 'none'}"] += 1
        elif not item.passages:
            skipped["no passages shown"] += 1
        else:
            out.append(Labelled(JudgeItem(claim=item.claim, passages=item.passages),
                                REVIEW_GOLD[label], item.answer_id, "reviews"))
    return out, skipped


async def judge_all(judge: Judge, examples: Sequence[Labelled],
                    progress: Callable[[int], None] | None = None) -> list[Verdict]:
    """The judge's verdicts on every example, in chunks (one per example, in order)."""
    verdicts: list[Verdict] = []
    size = CHUNK if has_trait(judge, "offline") else MODEL_CHUNK
    for start in range(0, len(examples), size):
        chunk = [e.item for e in examples[start:start + size]]
        verdicts += await judge.judge(chunk)
        if progress is not None:
            progress(len(chunk))
    return verdicts


def plain_judge(config: Config, model: object) -> Judge:
    """The configured judge without any confidence card: what a card is fitted on. The
    built-in judge skips its display quote (no feature reads it, and it costs a second pass
    over long passages)."""
    settings = config.judge_settings.model_copy(update={"quotes": False})
    return JUDGES.create(config.judge_name,
                         config.model_copy(update={"judge_settings": settings}), model)


def fit_card(judge: Judge, examples: Sequence[Labelled], verdicts: Sequence[Verdict], *,
             sources: list[str], folds: int = 5, targets: dict[str, float] | None = None,
             by: str | None = None) -> ConfidenceCard:
    """The card of ``judge`` fitted on its ``verdicts`` of ``examples``."""
    rows = [Example(verdict_features(e.item.claim.text, e.item.passages, v), v.category,
                    e.gold, e.group, e.source) for e, v in zip(examples, verdicts, strict=True)]
    errors = sum(v.error is not None for v in verdicts)
    data = CardData(sha256=data_hash(examples), rows=len(examples), sources=sources,
                    labels=dict(Counter(e.gold for e in examples)),
                    created_at=utcnow().isoformat(timespec="seconds"),
                    created_by=by or _user())
    return ConfidenceCard(
        judge=stage_id(judge), prompt=judge.prompt_version, medverify=package_version(),
        folds=folds, data=data, categories=fit_categories(rows, folds, targets),
        notes=f"{errors} of {len(verdicts)} verdicts were ERROR (left out of every category)")


def data_hash(examples: Sequence[Labelled]) -> str:
    """SHA-256 of the examples as judged: claims, passages and gold labels, in order."""
    digest = hashlib.sha256()
    for e in examples:
        row = [e.item.claim.text, [p.text for p in e.item.passages], e.gold]
        digest.update(json.dumps(row, ensure_ascii=False).encode() + b"\n")
    return digest.hexdigest()


def apply_card(card: ConfidenceCard, name: str, store_location: Path | str,
               by: str | None = None) -> Path:
    """Save ``card`` as ``$MEDVERIFY_HOME/calibrations/NAME.json`` and record who applied it,
    when and on what data in the run store's audit log (action ``calibration.apply``)."""
    from medverify.store.access import AuditLog
    from medverify.store.runs import RunStore

    if not name or not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise InputError(f"a card name is letters, digits, '-', '_' and '.', not {name!r}")
    path = home() / "calibrations" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, card.model_dump_json(indent=1) + "\n")
    detail = json.dumps({"name": name, "by": by or _user(), **card.summary()})
    with RunStore(store_location) as db:
        AuditLog(db).record(None, "calibration.apply", target=card.card_id, detail=detail)
    return path


def card_note(config: Config) -> str | None:
    """One line on the confidence card in use, for ``eval pairs`` and ``eval judges`` (None
    without one): the sure/not-sure figures they print are the card's."""
    from medverify.judge.confidence.card import resolve_card

    card = resolve_card(config.judge_settings.calibration)
    if card is None:
        return None
    return (f"confidence card {card.card_id}: fitted for {card.judge} on {card.data.rows} "
            f"examples (sha256 {card.data.sha256[:12]}, {card.data.created_at}); verdicts of "
            "other judges get no confidence from it")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
