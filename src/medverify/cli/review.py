"""``medverify review``: the clinician review queue from the command line.

``export`` writes the queue (CSV for spreadsheets, one row per label; JSONL, one item per
line), ``import`` reads labels given elsewhere (columns ``item_id``, ``reviewer``,
``label``, ``correction``, ``source_url``, ``note``; an exported CSV with its label
columns filled in is such a file), ``report`` prints the loop report and ``calibrate``
suggests the built-in judge's thresholds from reviewed labels.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.table import Table

from medverify.cli import main
from medverify.cli._common import config_option, load_config, store_option
from medverify.errors import InputError, MedverifyError
from medverify.files import atomic_write_text
from medverify.kb import KnowledgeBase
from medverify.review import (
    LoopPeriod,
    LoopReport,
    ReviewItem,
    ReviewStatus,
    label_and_teach,
    lesson,
    loop_report,
)
from medverify.store.access import AuditLog
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore

EXPORT_COLUMNS = (
    "item_id", "status", "priority", "topic", "run_id", "answer_id", "question", "claim",
    "category", "evidence_quote", "judge_reason", "final_label", "reviewer", "role", "label",
    "correction", "source_url", "source_passage_id", "note", "labelled_at",
)
IMPORT_COLUMNS = ("item_id", "reviewer", "label", "correction", "source_url",
                  "source_passage_id", "note")
"""What ``review import`` reads from each row (other columns are ignored)."""

_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: Any) -> str:
    """A CSV cell that a spreadsheet shows as text: a leading ``= + - @`` (a formula, in
    text an LLM or a reviewer wrote) is escaped with ``'``, which import removes."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA) else text


def _uncell(value: str | None) -> str | None:
    text = (value or "").strip()
    if text.startswith("'") and text[1:].startswith(_FORMULA):
        text = text[1:]
    return text or None


@main.group()
def review() -> None:
    """The clinician review queue: export it, import labels, report on the loop."""


@review.command("export")
@click.argument("out", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["csv", "jsonl"]), default="csv",
              show_default=True, help="csv: one row per label (an item without labels: one "
              "row with empty label columns, to fill in and import); jsonl: one item, with "
              "its labels, per line.")
@click.option("--status", type=click.Choice([s.value for s in ReviewStatus]),
              help="Only the items in this status (default: all).")
@config_option
@store_option
def export(out: Path, fmt: str, status: str | None, config_path: Path | None,
           store: Path | None) -> None:
    """Write the review items to OUT, highest priority first."""
    config = load_config(config_path, store=store)
    with RunStore(config.store_location) as db:
        items = ReviewStore(db).list(status=status, limit=None)
    if fmt == "jsonl":
        atomic_write_text(out, "".join(item.model_dump_json() + "\n" for item in items))
    else:
        atomic_write_text(out, _csv(items))
    click.echo(f"wrote {len(items)} item(s) to {out}")


def _csv(items: list[ReviewItem]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(EXPORT_COLUMNS)
    for item in items:
        base = [item.id, item.status.value, f"{item.priority:.4f}", item.topic, item.run_id,
                item.answer_id, item.question, item.claim.text, item.category,
                item.evidence_quote, item.judge_reason,
                item.final_label.value if item.final_label else None]
        labels = item.labels or [None]
        for label in labels:
            tail = ([label.reviewer, label.role.value, label.label.value, label.correction,
                     label.source_url, label.source_passage_id, label.note,
                     label.created_at.isoformat()] if label is not None else [None] * 8)
            writer.writerow([_cell(v) for v in (*base, *tail)])
    return buffer.getvalue()


def _rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a CSV or JSONL file (JSONL: ``.jsonl`` or ``.json`` names)."""
    try:
        text = path.read_text("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    if path.suffix.lower() in (".jsonl", ".json"):
        rows: list[dict[str, Any]] = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{number}: not JSON ({exc.msg})") from None
            rows.append(row if isinstance(row, dict) else {"_error": "not a JSON object"})
        return rows
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in ("item_id", "reviewer", "label") if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(f"{path} has no column {', '.join(missing)}: the columns are "
                         + ", ".join(IMPORT_COLUMNS))
    return list(reader)


@review.command("import")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option("--kb", "kb_path", type=click.Path(path_type=Path, file_okay=False),
              help="Knowledge base to teach the corrections of items the labels close "
              "(default: the configured one).")
@click.option("--teach/--no-teach", "teach_kb", default=True, show_default=True,
              help="Add what closed items settle to the knowledge base.")
@config_option
@store_option
def import_labels(file: Path, kb_path: Path | None, teach_kb: bool, config_path: Path | None,
                  store: Path | None) -> None:
    """Record labels given elsewhere, from a CSV or JSONL FILE.

    Each row: item_id, reviewer, label (FACT, HALLUCINATION, JUDGMENT_ERROR, COVERAGE_GAP,
    CANNOT_TELL), and optionally correction, source_url, source_passage_id, note. Rows
    without a label are skipped; a row that is refused (unknown item, closed item, a label
    the reviewer gave before, an invalid value) is reported and the others go on. Exits 1
    when some row was refused."""
    config = load_config(config_path, store=store, kb=kb_path)
    rows = _rows(file)
    kb = KnowledgeBase.open(config.kb) if teach_kb and config.kb is not None else None
    try:
        with RunStore(config.store_location) as db:
            done = _import_rows(ReviewStore(db), rows, kb,
                                first=2 if file.suffix.lower() == ".csv" else 1)
            AuditLog(db).record(None, "review.import", target=str(file),
                                detail=f"cli: {done.added} label(s), {len(done.refused)} "
                                "refused")
    finally:
        if kb is not None:
            kb.close()
    click.echo(f"imported {done.added} label(s) from {file}; {done.skipped} row(s) without a "
               f"label skipped; {len(done.refused)} refused")
    if done.taught:
        click.echo(f"taught the knowledge base {done.taught} reviewed statement(s)")
    if done.untaught:
        why = "no knowledge base is configured (--kb DIR)" if teach_kb else "--no-teach"
        click.echo(f"{done.untaught} closed item(s) have a reviewed statement to teach; not "
                   f"taught: {why}")
    for line in done.refused:
        click.echo(line, err=True)
    if done.refused:
        sys.exit(1)


@dataclass
class _Imported:
    """What ``review import`` did with the rows of a file."""

    added: int = 0
    skipped: int = 0  # rows without a label
    taught: int = 0
    untaught: int = 0  # closed items with something to teach, and no KB to teach
    refused: list[str] = field(default_factory=list)


def _import_rows(queue: ReviewStore, rows: list[dict[str, Any]], kb: KnowledgeBase | None,
                 *, first: int) -> _Imported:
    """Label (and teach, when ``kb`` is given) from each row, numbered from ``first``."""
    done = _Imported()
    for number, row in enumerate(rows, start=first):
        problem = row.get("_error")
        values = {c: _uncell(str(row[c])) if row.get(c) is not None else None
                  for c in IMPORT_COLUMNS}
        if problem is None and not values["label"]:
            done.skipped += 1
            continue
        try:
            if problem is not None:
                raise InputError(problem)
            if not values["item_id"]:
                raise InputError("no item_id")
            item, change = label_and_teach(
                queue, values["item_id"] or "", values["reviewer"] or "",
                (values["label"] or "").upper(), kb=kb, correction=values["correction"],
                source_url=values["source_url"],
                source_passage_id=values["source_passage_id"], note=values["note"])
        except MedverifyError as exc:
            done.refused.append(f"row {number}: {exc}")
            continue
        done.added += 1
        if change is not None:
            done.taught += 1
        elif kb is None and lesson(item) is not None:
            done.untaught += 1
    return done


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _row(period: LoopPeriod) -> list[str]:
    return [period.period, str(period.claims_checked), str(period.escalated),
            _rate(period.escalation_rate), str(period.labels), str(period.items_closed),
            _rate(period.judge_agreement), str(period.kb_added), str(period.kb_reverted)]


def loop_table(report: LoopReport) -> Table:
    """The loop report as a table: rate = escalated / claims checked; judge = the share of
    final labels that agree with the judge's category; KB +/-: documents taught, reverted."""
    table = Table(title=f"clinical loop by {report.by}", box=box.SIMPLE)
    for name in ("period", "claims", "escalated", "rate", "labels", "closed", "judge",
                 "KB +", "KB -"):
        table.add_column(name, no_wrap=True, justify="left" if name == "period" else "right")
    for period in report.periods:
        table.add_row(*_row(period))
    table.add_section()
    table.add_row(*_row(report.total))
    return table


@review.command("report")
@click.option("--by", type=click.Choice(["day", "week", "month"]), default="week",
              show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@config_option
@store_option
def report(by: str, as_json: bool, config_path: Path | None, store: Path | None) -> None:
    """The clinical loop per period: claims checked and escalated, labels, items closed,
    agreement of the final labels with the judge, KB documents added and reverted."""
    config = load_config(config_path, store=store)
    with RunStore(config.store_location) as db:
        result = loop_report(ReviewStore(db), by=by)  # type: ignore[arg-type]
    if as_json:
        click.echo(result.model_dump_json(indent=2))
        return
    console = Console()
    console.print(loop_table(result))
    queue = ", ".join(f"{n} {status}" for status, n in result.queue.items())
    console.print("rate: escalated / claims checked; judge: final labels that agree with the "
                  "judge's category; KB +/-: documents taught and reverted")
    console.print(f"queue now: {queue}")


CALIBRATION_GOLD = {"FACT": "SUPPORTED", "HALLUCINATION": "CONTRADICTED",
                    "COVERAGE_GAP": "NOT_ENOUGH_INFO"}
MIN_CALIBRATION_ITEMS = 30


def calibration_rows(items: list[ReviewItem]) -> tuple[list[list[float]], list[str],
                                                       dict[str, int]]:
    """(probability rows, gold labels, skipped by reason) of the closed items that can
    calibrate the built-in judge: those judged against exactly one passage, whose recorded
    probabilities are then that passage's (the judge's threshold rule is per passage; a
    claim's probabilities are the maxima over its passages, and its label does not say
    which passage decides), with a final label FACT, HALLUCINATION or COVERAGE_GAP."""
    from medverify.verifier.model import LABELS

    rows: list[list[float]] = []
    gold: list[str] = []
    skipped: dict[str, int] = {}

    def skip(reason: str) -> None:
        skipped[reason] = skipped.get(reason, 0) + 1

    for item in items:
        final = item.final_label.value if item.final_label is not None else None
        if item.status is not ReviewStatus.CLOSED or final is None:
            skip("not closed")
        elif final not in CALIBRATION_GOLD:
            skip(f"final label {final}")
        elif not all(label in item.probabilities for label in LABELS):
            skip("no built-in judge probabilities")
        elif len(item.passages) != 1:
            skip("judged against several passages")
        else:
            rows.append([float(item.probabilities[label]) for label in LABELS])
            gold.append(CALIBRATION_GOLD[final])
    return rows, gold, skipped


@review.command("calibrate")
@click.option("--min-items", type=click.IntRange(min=1), default=MIN_CALIBRATION_ITEMS,
              show_default=True, help="Fewest usable items to suggest thresholds from.")
@config_option
@store_option
def calibrate_cmd(min_items: int, config_path: Path | None, store: Path | None) -> None:
    """Suggest support/contradict thresholds for the built-in judge from reviewed labels.

    The verifier's own calibration (the grid that maximises the 3-way macro-F1, as after
    training) runs on closed items judged against exactly one passage: only for those do
    the recorded probabilities say what the per-passage rule saw. Reviewed items are the
    escalated claims, not a sample of all claims: treat the suggestion as a check of the
    shipped thresholds, not a replacement. Exits 1 when too few items can be used."""
    import numpy as np

    from medverify.verifier.infer import label_pairs
    from medverify.verifier.metrics import classification_metrics
    from medverify.verifier.model import LABELS
    from medverify.verifier.train import calibrate

    config = load_config(config_path, store=store)
    with RunStore(config.store_location) as db:
        items = ReviewStore(db).list(status=ReviewStatus.CLOSED, limit=None)
    rows, gold, skipped = calibration_rows(items)
    shown = ", ".join(f"{reason} {n}" for reason, n in sorted(skipped.items())) or "none"
    click.echo(f"{len(items)} closed item(s); usable: {len(rows)}; skipped: {shown}")
    present = sorted(set(gold))
    if len(rows) < min_items or len(present) < 2:
        click.echo(f"not enough to calibrate: need at least {min_items} usable items with "
                   f"two or more labels (got {len(rows)}: {', '.join(present) or 'none'})",
                   err=True)
        sys.exit(1)
    probs = np.array(rows, dtype=np.float64)
    current = {key: value for key, value in (
        ("support", _recorded(items, "threshold_support")),
        ("contradict", _recorded(items, "threshold_contradict"))) if value is not None}
    suggested, f1 = calibrate(probs, gold)
    if len(current) == 2:
        now = classification_metrics(gold, label_pairs(probs, current), LABELS)["macro_f1"]
        click.echo(f"current:   support {current['support']:.3f}, contradict "
                   f"{current['contradict']:.3f} (macro-F1 {now:.3f} on these items)")
    click.echo(f"suggested: support {suggested['support']:.3f}, contradict "
               f"{suggested['contradict']:.3f} (macro-F1 {f1:.3f} on these items; fitted on "
               "them, so optimistic)")
    click.echo("to use them: [judge_settings] support_threshold / contradict_threshold. "
               "Reviewed items are escalated claims, not a random sample.")


def _recorded(items: list[ReviewItem], key: str) -> float | None:
    """The threshold the judge recorded with most of the items (None: none recorded)."""
    from collections import Counter

    seen = Counter(float(item.probabilities[key]) for item in items
                   if key in item.probabilities)
    return seen.most_common(1)[0][0] if seen else None
