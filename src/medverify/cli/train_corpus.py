"""``medverify train corpus``: build the synthetic NLI corpus for the built-in verifier."""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import click

from medverify.cli.train import _data, train


@train.command("corpus")
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=_data(),
    show_default="../shared/data beside the project",
    help="Data folder (raw/medquad, raw/pubmedqa, retrieval/*, pairs/*_train.jsonl).",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    required=True,
    help="Output FILE.jsonl.gz (written atomically).",
)
@click.option("--size", type=int, default=200_000, show_default=True, help="Pairs to build.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--report",
    type=click.Path(path_type=Path),
    default=None,
    help="Write counts, dedup and leakage numbers and timing to this JSON file.",
)
@click.option(
    "--max-words", type=int, default=200, show_default=True, help="Evidence passage limit."
)
@click.option(
    "--no-leakage-check",
    is_flag=True,
    help="Skip the check against the dev/evaluation sets (tests only).",
)
def corpus(
    data_dir: Path,
    out: Path,
    size: int,
    seed: int,
    report: Path | None,
    max_words: int,
    no_leakage_check: bool,
) -> None:
    """Build a (claim, evidence, label) corpus from allowed text (docs/verifier_corpus.md)."""
    from medverify.errors import InputError
    from medverify.verifier.corpus import (
        build_corpus,
        format_count_table,
        load_eval_sets,
        load_sources,
        write_jsonl_gz,
    )

    if not data_dir.is_dir():
        raise InputError(f"data folder not found: {data_dir}")
    if size < 3:
        raise InputError("--size must be at least 3")
    started = time.monotonic()
    docs, lexicons = load_sources(data_dir)
    loaded = time.monotonic() - started
    eval_sets = {} if no_leakage_check else load_eval_sets(data_dir)
    result = build_corpus(
        docs, lexicons, size=size, seed=seed, eval_sets=eval_sets, max_words=max_words
    )
    write_jsonl_gz(result.pairs, out)
    summary = dict(result.report)
    summary["load_seconds"] = round(loaded, 1)
    summary["total_seconds"] = round(time.monotonic() - started, 1)
    summary["peak_rss_mb"] = _peak_rss_mb()
    summary["leakage_checked"] = sorted(eval_sets)
    summary["out"] = str(out)
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps(summary, indent=2) + "\n")
    click.echo(format_count_table(summary))
    keys = ("size", "dropped", "leakage", "total_seconds", "peak_rss_mb")
    click.echo(json.dumps({k: summary[k] for k in keys}, indent=2))


def _peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024, 1)
