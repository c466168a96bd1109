"""``medverify risk``: hallucination risk from token log-probabilities, no knowledge base.

    medverify risk data kb RUN --out examples.jsonl            # labels from a check run
    medverify risk data synthetic facts.jsonl -m SPEC --out false.jsonl
    medverify risk data reviews --merge examples.jsonl --out all.jsonl  # + clinicians' labels
    medverify risk features examples.jsonl --scorer hf:/models/a --scorer hf:/models/b \
        --out features.jsonl
    medverify risk train features.jsonl --out classifier/
    medverify risk eval classifier/ features.jsonl
    medverify risk score --classifier classifier/ answer.txt [--question Q]
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import numpy as np
from rich.console import Console
from rich.table import Table

from medverify.cli import main
from medverify.cli._common import (
    config_option,
    console,
    counting_bar,
    executor_option,
    load_config,
    store_option,
)
from medverify.config import Config
from medverify.errors import InputError
from medverify.risk.feature_sets import CHOICES as FEATURE_SET_CHOICES
from medverify.risk.records import FeatureExample, FeatureSchema, RiskLabel, RiskMetrics

if TYPE_CHECKING:
    from medverify.executor import Executor


@main.group()
def risk() -> None:
    """Hallucination risk without a knowledge base (token log-probability features)."""


# -- training data ----------------------------------------------------------------------


@risk.group()
def data() -> None:
    """Labelled examples for training: from a check run, the review queue, or synthetic
    false text."""


@data.command("kb")
@click.argument("run_id", metavar="RUN")
@click.option("--out", required=True, type=click.Path(path_type=Path, dir_okay=False))
@store_option
@config_option
def data_kb(run_id: str, out: Path, store: Path | None, config_path: Path | None) -> None:
    """Claims the knowledge-base judge labelled FACT or HALLUCINATION in check run RUN."""
    from medverify.risk.data import collect_labels, write_examples
    from medverify.store.runs import RunStore

    config = load_config(config_path, store=store)
    with RunStore(config.store_location) as runs:
        reports = runs.reports(run_id)
    harvest = collect_labels(reports)
    write_examples(out, harvest.examples)
    skipped = ", ".join(f"{k} {v}" for k, v in harvest.skipped.items()) or "none"
    console.print(f"wrote {len(harvest.examples)} examples to {out} (skipped: {skipped})")


@data.command("reviews")
@click.option("--out", required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--merge", "merge_file", type=click.Path(path_type=Path, exists=True,
              dir_okay=False), metavar="EXAMPLES.jsonl",
              help="Examples to add the reviewed ones to (e.g. from `risk data kb`): the "
              "judge's example of a claim a clinician settled is left out (the reviewed "
              "label, when FACT or HALLUCINATION, stands instead).")
@store_option
@config_option
def data_reviews(out: Path, merge_file: Path | None, store: Path | None,
                 config_path: Path | None) -> None:
    """Claims clinicians settled FACT or HALLUCINATION in the review queue, as examples
    (then `risk features` and `risk train` as for any examples). Items not closed, and those
    closed JUDGMENT_ERROR, COVERAGE_GAP or CANNOT_TELL, are skipped and counted."""
    from medverify.review import ReviewStatus, judged_example_id, risk_examples
    from medverify.risk.data import read_examples, write_examples
    from medverify.store.review import ReviewStore
    from medverify.store.runs import RunStore

    config = load_config(config_path, store=store)
    with RunStore(config.store_location) as runs:
        items = ReviewStore(runs).list(limit=None)
    examples, skipped = risk_examples(items)
    replaced = 0
    if merge_file is not None:
        reviewed = {judged_example_id(item) for item in items
                    if item.status is ReviewStatus.CLOSED}
        base = read_examples(merge_file)
        kept = [e for e in base if e.id not in reviewed]
        replaced = len(base) - len(kept)
        ids = {e.id for e in kept}
        examples = kept + [e for e in examples if e.id not in ids]
    write_examples(out, examples)
    shown = ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())) or "none"
    merged = (f"; merged with {merge_file}: {replaced} judge example(s) of claims a "
              "clinician settled left out" if merge_file is not None else "")
    console.print(f"wrote {len(examples)} examples to {out} (reviewed items skipped: "
                  f"{shown}){merged}")


@data.command("synthetic")
@click.argument("input_file", metavar="FACTS.jsonl", type=click.Path(path_type=Path,
                exists=True, dir_okay=False))
@click.option("--model", "-m", "model_spec", required=True, help="Generator model spec.")
@click.option("--out", required=True, type=click.Path(path_type=Path, dir_okay=False))
@config_option
def data_synthetic(input_file: Path, model_spec: str, out: Path,
                   config_path: Path | None) -> None:
    """Rewrite FACT examples into plausible false text with an LLM (provenance kept)."""
    from medverify.risk.data import read_examples, write_examples

    config = load_config(config_path)
    facts = [e for e in read_examples(input_file) if e.label == RiskLabel.FACT]
    made, rejects = asyncio.run(_synthetic(config, model_spec, facts))
    write_examples(out, made)
    console.print(f"wrote {len(made)} synthetic HALLUCINATION examples to {out} "
                  f"({rejects} rejected: unparseable, unchanged or off-length output)")


async def _synthetic(config: Config, spec: str, facts: list[Any]) -> tuple[list[Any], int]:
    from medverify.llm.facade import model_from_config
    from medverify.risk.data import CounterfactualGenerator

    async with model_from_config(config, spec) as model:
        generator = CounterfactualGenerator(model)
        made = await generator.generate(facts)
        return made, len(generator.rejects)


# -- features ---------------------------------------------------------------------------


def schema_path(features: Path) -> Path:
    return features.with_name(features.name + ".schema.json")


@risk.command("features")
@click.argument("input_file", metavar="EXAMPLES.jsonl", type=click.Path(path_type=Path,
                exists=True, dir_okay=False))
@click.option("--scorer", "scorers", multiple=True, required=True, metavar="SPEC",
              help="Log-probability scorer (repeatable): hf:/path/to/model, "
              "vllm:MODEL@URL, openai-compatible:MODEL@URL.")
@click.option("--out", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="Feature file (JSONL); its schema goes to OUT.schema.json.")
@click.option("--rephrasings", type=click.IntRange(0, 10), default=0, show_default=True,
              help="Also score each text under N rephrased questions (needs --model).")
@click.option("--model", "-m", "rephraser", help="Model spec that rephrases questions.")
@executor_option("the features are computed")
@config_option
def features_cmd(input_file: Path, scorers: tuple[str, ...], out: Path, rephrasings: int,
                 rephraser: str | None, executor_spec: str, config_path: Path | None) -> None:
    """Force-decode every example's text through each scorer and write its features
    (granularity: the example's text as the answer to its question). With --executor ray,
    each block of examples is a Ray task; the file written is the same."""
    from medverify.executor import LocalExecutor, executor_from_spec
    from medverify.files import atomic_write_text, write_records
    from medverify.risk.data import read_examples
    from medverify.risk.stage import partial_path

    if rephrasings and not rephraser:
        raise click.UsageError("--rephrasings needs --model SPEC to rephrase the questions")
    config = load_config(config_path, risk={"rephrasings": rephrasings})
    examples = read_examples(input_file)
    if not examples:
        raise InputError(f"no example in {input_file}")
    executor = executor_from_spec(executor_spec)
    if isinstance(executor, LocalExecutor):
        lines, schema, resumed = asyncio.run(
            _features(config, list(scorers), examples, rephraser, input_file, out))
    else:
        try:
            lines, schema, resumed = _features_on(executor, config, list(scorers), examples,
                                                  rephraser, input_file, out)
        finally:
            executor.close()
    write_records(out, lines)
    atomic_write_text(schema_path(out), schema.model_dump_json(indent=2) + "\n")
    partial_path(out).unlink(missing_ok=True)
    from medverify.risk.stage import all_failed

    failed = sum(1 for line in lines if all_failed(line.row, len(schema.scorers)))
    console.print(f"wrote features of {len(lines)} examples ({len(schema.names)} features, "
                  f"{failed} with no usable trace) to {out}"
                  + (f"; {resumed} resumed from an interrupted run" if resumed else ""))


async def _features(config: Config, scorers: list[str], examples: list[Any],
                    rephraser_spec: str | None, input_file: Path,
                    out: Path) -> tuple[list[FeatureExample], FeatureSchema, int]:
    from medverify.llm.facade import get_model
    from medverify.risk.stage import RiskStage, feature_blocks

    rephraser = get_model(rephraser_spec, config.llm) if rephraser_spec else None
    try:
        stage = RiskStage.from_config(config, scorers=scorers, rephraser=rephraser)
        key = _resume_key(stage, input_file, rephraser_spec)
        with counting_bar("risk features", len(examples)) as advance:
            lines, resumed = await feature_blocks(stage, examples, out, key=key,
                                                  progress=advance)
        return lines, stage.schema, resumed
    finally:
        if rephraser is not None:
            await rephraser.aclose()


def _features_on(executor: Executor, config: Config, scorers: list[str], examples: list[Any],
                 rephraser_spec: str | None, input_file: Path,
                 out: Path) -> tuple[list[FeatureExample], FeatureSchema, int]:
    """:func:`_features` with the blocks computed on ``executor``: the stage made here
    gives the schema and the resume key only (local models are loaded by the workers)."""
    from medverify.llm.facade import get_model
    from medverify.risk.stage import FeatureBlockTask, RiskStage, feature_blocks_on

    rephraser = get_model(rephraser_spec, config.llm) if rephraser_spec else None
    try:
        stage = RiskStage.from_config(config, scorers=scorers, rephraser=rephraser)
    finally:
        if rephraser is not None:
            asyncio.run(rephraser.aclose())
    key = _resume_key(stage, input_file, rephraser_spec)
    task = FeatureBlockTask.for_config(config, scorers, rephraser_spec)
    with counting_bar(f"risk features ({executor.name})", len(examples)) as advance:
        lines, resumed = feature_blocks_on(executor, task, examples, out, key=key,
                                           progress=advance)
    return lines, stage.schema, resumed


def _resume_key(stage: Any, input_file: Path, rephraser: str | None) -> str:
    """What a feature file's rows depend on: the input, the scorers, the schema and the
    rephrasing settings (a partial file for anything else is not resumed)."""
    from medverify.risk.stage import FEATURE_BLOCK

    parts = [hashlib.sha256(input_file.read_bytes()).hexdigest(),
             *[s.id for s in stage.scorers], stage.schema.version, str(stage.rephrasings),
             rephraser or "", str(FEATURE_BLOCK)]
    return hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()


def read_features(path: Path) -> tuple[list[FeatureExample], FeatureSchema, str]:
    """A feature file, its schema and the sha256 of the file."""
    from medverify.files import read_records

    if not schema_path(path).is_file():
        raise InputError(f"{schema_path(path)} not found: feature files come with their "
                         "schema (medverify risk features)")
    schema = FeatureSchema.model_validate_json(schema_path(path).read_text("utf-8"))
    warnings: list[str] = []
    rows = read_records(path, FeatureExample, warnings, repair=False)
    for warning in warnings:
        console.print(f"warning: {warning}", style="yellow")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return rows, schema, digest


def _labelled(examples: list[FeatureExample]) -> tuple[list[FeatureExample], np.ndarray]:
    chosen = [e for e in examples if e.label is not None]
    y = np.array([e.label == RiskLabel.HALLUCINATION for e in chosen], dtype=int)
    return chosen, y


# -- train / eval -----------------------------------------------------------------------


@risk.command("train")
@click.argument("features_file", metavar="FEATURES.jsonl", type=click.Path(path_type=Path,
                exists=True, dir_okay=False))
@click.option("--out", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="Directory for the classifier (model, card.json, plots).")
@click.option("--seed", default=0, show_default=True)
@click.option("--trees", default=100, show_default=True, type=click.IntRange(min=1),
              help="Trees of the random forest and XGBoost.")
@click.option("--feature-set", default="auto", show_default=True,
              type=click.Choice(FEATURE_SET_CHOICES),
              help="Columns the classifier reads. auto: the feature family set with the best "
              "cross-validation AUC, folds grouped by --group-by, on this file only; all: "
              "every feature (docs/risk.md).")
@click.option("--group-by", default="question_id", show_default=True,
              help="Provenance field that groups related examples (a statement and its edited "
              "copy): a group never sits on both sides of a split. Examples without it are "
              "their own group; '' splits by example.")
def train_cmd(features_file: Path, out: Path, seed: int, trees: int, feature_set: str,
              group_by: str) -> None:
    """Train the stacking classifier (random forest, logistic regression, XGBoost;
    logistic-regression meta-learner) on an 80/20 split (by group) and save it."""
    from medverify.risk import feature_sets
    from medverify.risk.classifier import feature_matrix
    from medverify.risk.persist import save
    from medverify.risk.training import train_classifier

    examples, schema, digest = read_features(features_file)
    chosen, y = _labelled(examples)
    x = feature_matrix([e.row for e in chosen], schema)
    groups = [e.provenance.get(group_by) or e.id for e in chosen] if group_by else None
    if feature_set == "auto":
        selection = feature_sets.choose(x, y, groups or [e.id for e in chosen], schema.names)
    else:
        selection = feature_sets.named(schema.names, feature_set)
    trained_on = {"file": features_file.name, "examples": len(chosen),
                  "group_by": group_by or None}
    trained = train_classifier(x, y, schema, seed=seed, data_sha256=digest, n_estimators=trees,
                               selection=selection, groups=groups, trained_on=trained_on)
    save(trained, out)
    print_metrics(trained.card.training_metrics(), Console())
    console.print(f"feature set: {selection.name} ({len(selection.columns)} of "
                  f"{len(schema.names)} features)" + (
                      f"; grouped {selection.folds}-fold CV AUC: " + ", ".join(
                          f"{k} {v}" for k, v in selection.cv_auc.items())
                      if selection.cv_auc else "") + (f" ({selection.note})"
                                                        if selection.note else ""))
    console.print(f"classifier: {out} (card.json, model.joblib, plots/*.svg)")


@risk.command("eval")
@click.argument("classifier_dir", metavar="CLASSIFIER", type=click.Path(path_type=Path,
                file_okay=False))
@click.argument("features_file", metavar="FEATURES.jsonl", type=click.Path(path_type=Path,
                exists=True, dir_okay=False))
def eval_cmd(classifier_dir: Path, features_file: Path) -> None:
    """Score a labelled feature file with a trained classifier: AUC, report, confusion."""
    from medverify.risk.classifier import predict_proba
    from medverify.risk.persist import load_classifier
    from medverify.risk.training import evaluate

    loaded = load_classifier(classifier_dir)
    examples, schema, _ = read_features(features_file)
    chosen, y = _labelled(examples)
    if len(set(y.tolist())) < 2:
        raise InputError("evaluation needs labelled examples of both classes")
    proba = np.array(predict_proba(loaded, [e.row for e in chosen], schema=schema))
    print_metrics(evaluate(y, proba), Console())


@risk.command("classifiers")
def classifiers_cmd() -> None:
    """The classifiers shipped with medverify: their scorers, feature set and what they were
    trained on (pass the name to --classifier or [risk] classifier)."""
    from medverify.risk.persist import read_card, shipped_classifiers

    table = Table(title="Shipped risk classifiers", title_justify="left")
    for column in ("name", "scorers", "feature set", "trained on", "held-out AUC [95% CI]"):
        table.add_column(column)
    for name, folder in shipped_classifiers().items():
        card, _ = read_card(folder)
        held = card.trained_on.get("held_out_test") or {}
        table.add_row(name, "\n".join(card.schema_.scorers),
                      f"{card.feature_selection.get('name', 'all')} "
                      f"({len(card.model_columns())} features)",
                      f"{card.trained_on.get('dataset', '?')}: {card.n_train} examples, "
                      f"{card.trained_on.get('dtype', 'float32')}",
                      f"{held['roc_auc']} {held.get('ci95')} ({held.get('questions')} "
                      "questions)" if "roc_auc" in held else "-")
    console.print(table)


def print_metrics(metrics: RiskMetrics, out: Console) -> None:
    table = Table(title="Hallucination classifier (test split)", title_justify="left")
    for column in ("measure", "value"):
        table.add_column(column)
    for name, value in metrics.roc_auc.model_dump().items():
        if isinstance(value, float):
            table.add_row(f"ROC AUC ({name})", f"{value:.3f}")
    for key in ("accuracy", "majority_baseline_accuracy"):
        value = getattr(metrics, key)
        if isinstance(value, float):
            table.add_row(key.replace("_", " "), f"{value:.3f}")
    out.print(table)
    confusion = metrics.confusion_matrix.model_dump()
    out.print(f"confusion (rows true FACT/HALLUCINATION, columns predicted): {confusion}")


# -- score ------------------------------------------------------------------------------


@risk.command("score")
@click.argument("input_file", metavar="[FILE|-]", required=False, default="-")
@click.option("--classifier", "classifier_dir", type=click.Path(path_type=Path,
              file_okay=False), help="Trained classifier: a directory or the name of a shipped "
              "one (`risk classifiers`) [default: [risk] classifier].")
@click.option("--question", "-q", help="The question the answer responds to.")
@click.option("--granularity", type=click.Choice(["claim", "sentence", "answer"]),
              default="claim", show_default=True, help="What gets one probability.")
@click.option("--model", "-m", "rephraser", help="Model spec that rephrases the question "
              "(needed when the classifier was trained with rephrasing features).")
@config_option
def score_cmd(input_file: str, classifier_dir: Path | None, question: str | None,
              granularity: str, rephraser: str | None, config_path: Path | None) -> None:
    """The hallucination probability of each claim (or sentence, or the whole answer),
    from the log-probabilities of the classifier's scorers; no knowledge base."""
    if input_file != "-" and not Path(input_file).is_file():
        raise InputError(f"no such file: {input_file}")
    raw = sys.stdin.buffer.read() if input_file == "-" else Path(input_file).read_bytes()
    text = raw.decode("utf-8", errors="replace")
    if not text.strip():
        raise InputError("the answer is empty: nothing to score")
    config = load_config(config_path)
    scores = asyncio.run(_score(config, classifier_dir, text, question, granularity,
                                rephraser))
    table = Table(title=f"Hallucination risk ({granularity})", title_justify="left")
    table.add_column("#")
    table.add_column("text")
    table.add_column("P(hallucination)", justify="right")
    for n, item in enumerate(scores, 1):
        shown = f"{item.probability:.2f}" if item.probability is not None else \
            f"error: {item.error}"
        table.add_row(str(n), item.text, shown)
    Console().print(table)


async def _score(config: Config, classifier_dir: Path | None, text: str,
                 question: str | None, granularity: str, rephraser_spec: str | None,
                 ) -> list[Any]:
    from medverify.llm.facade import get_model
    from medverify.risk.stage import RiskStage, units

    rephraser = get_model(rephraser_spec, config.llm) if rephraser_spec else None
    try:
        stage = RiskStage.from_config(config, classifier=classifier_dir, need_classifier=True,
                                      rephraser=rephraser)
        return await stage.score(await units(text, question, granularity))
    finally:
        if rephraser is not None:
            await rephraser.aclose()
