"""``medverify kb``: build, search and inspect a knowledge base."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from medverify.cli import main
from medverify.cli._common import config_option, console, executor_option, load_config
from medverify.cli._names import EMBEDDERS, NamesHelpOption
from medverify.config import KBSettings
from medverify.executor import Executor, LocalExecutor, executor_from_spec
from medverify.kb import KnowledgeBase, LoadReport
from medverify.kb.index import INDEX_NAME, INDEX_POLICIES
from medverify.kb.ingest import IngestStats
from medverify.kb.loaders import iter_ctgov, iter_sources
from medverify.records import Passage
from medverify.retrieve import MODES, Retriever

KB_DIR = click.Path(path_type=Path, file_okay=False)


@main.group("kb")
def kb_group() -> None:
    """Build, search and inspect a knowledge base."""


@kb_group.command("ingest")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--kb", "kb_dir", required=True, type=KB_DIR, help="Knowledge base directory.")
@click.option("--embedder", cls=NamesHelpOption, names_from=EMBEDDERS,
              help="Embedder name ({names}) or model directory.")
@click.option("--chunk-tokens", type=click.IntRange(16), help="Tokens per chunk (default 512).")
@click.option("--chunk-overlap", type=click.IntRange(0), help="Overlap in tokens (default 100).")
@click.option("--limit", type=click.IntRange(1), help="Ingest at most N documents.")
@click.option("--format", "fmt", type=click.Choice(["auto", "ctgov"]), default="auto",
              show_default=True,
              help="auto: by file suffix; ctgov: ClinicalTrials.gov API v2 study records, "
              "curated into 15-section summaries (one document per section).")
@click.option("--condition", help="ctgov: keep studies whose conditions, keywords or title "
              "contain this text (case-insensitive).")
@click.option("--results-only", is_flag=True, help="ctgov: keep studies with posted results.")
@click.option("--sample", type=click.IntRange(1), help="ctgov: a seeded sample of N studies.")
@click.option("--seed", type=int, default=0, show_default=True, help="ctgov: sampling seed.")
@executor_option("the chunks are embedded (this process reads, chunks and stores them)")
def ingest(
    paths: tuple[Path, ...],
    kb_dir: Path,
    embedder: str | None,
    chunk_tokens: int | None,
    chunk_overlap: int | None,
    limit: int | None,
    fmt: str,
    condition: str | None,
    results_only: bool,
    sample: int | None,
    seed: int,
    executor_spec: str,
) -> None:
    """Load, chunk, embed and store documents (txt, md, html, pdf, MedQuAD xml, jsonl).

    With --format ctgov, PATHS hold ClinicalTrials.gov API v2 study records (JSON files,
    JSONL, bulk zips), each curated into a 15-section summary (docs/trials.md)."""
    if fmt != "ctgov" and (condition or results_only or sample is not None):
        raise click.UsageError("--condition, --results-only and --sample need --format ctgov")
    given = {
        k: v
        for k, v in {"chunk_tokens": chunk_tokens, "chunk_overlap": chunk_overlap}.items()
        if v is not None
    }
    settings = KBSettings(**given) if given else None  # an existing KB keeps its own
    report = LoadReport()
    executor = executor_from_spec(executor_spec)
    with KnowledgeBase.open_or_create(kb_dir, settings, embedder) as kb:
        documents = (iter_ctgov(paths, report, limit, condition=condition,
                                results_only=results_only, sample=sample, seed=seed)
                     if fmt == "ctgov" else iter_sources(paths, report, limit))
        try:
            stats = _ingest_with_progress(
                kb, documents, None if isinstance(executor, LocalExecutor) else executor)
        finally:
            executor.close()
        summary = kb.stats()
    for skipped in report.skipped[:20]:
        console.print(f"[yellow]skipped[/] {skipped.path}: {skipped.reason}")
    if len(report.skipped) > 20:
        console.print(f"... and {len(report.skipped) - 20} more skipped")
    for warning in report.warnings[:10]:
        console.print(f"[yellow]warning[/] {warning}")
    if len(report.warnings) > 10:
        console.print(f"... and {len(report.warnings) - 10} more warnings")
    if report.files_with_replacements:
        console.print(
            f"{report.replaced_chars} undecodable bytes replaced in "
            f"{report.files_with_replacements} files"
        )
    resumed = f"resumed {stats.documents_resumed}, " if stats.documents_resumed else ""
    click.echo(
        f"added {stats.documents_added} documents ({stats.chunks_added} chunks), "
        f"updated {stats.documents_updated}, unchanged {stats.documents_unchanged}, {resumed}"
        f"skipped {len(report.skipped)} in {stats.seconds:.1f}s; KB now has "
        f"{summary.documents} documents, {summary.chunks} chunks "
        f"[{summary.snapshot_id}]"
    )


def _ingest_with_progress(kb: KnowledgeBase, documents: object,
                          executor: Executor | None = None) -> IngestStats:
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(
        *columns, console=console, transient=True, disable=not console.is_terminal
    ) as bar:
        task = bar.add_task("ingesting", total=None)

        def update(stats: IngestStats) -> None:
            bar.update(
                task,
                description=f"ingesting: {stats.documents_seen} documents, "
                f"{stats.chunks_added} new chunks",
            )

        return kb.ingest(documents, progress=update,  # type: ignore[arg-type]
                         executor=executor)


@kb_group.command("search")
@click.option("--kb", "kb_dir", required=True, type=KB_DIR, help="Knowledge base directory.")
@click.argument("query")
@click.option("-k", "k", type=click.IntRange(1), default=7, show_default=True)
@click.option("--mode", type=click.Choice(MODES), default="hybrid", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print passages as JSON.")
@click.option("--where", "where", multiple=True, metavar="KEY=VALUE",
              help="Only documents whose metadata matches, e.g. nct_id=NCT02210780 "
              "(or doc_id_prefix=NCT02210780#: by document id, through its index), "
              "section='primary outcome results', has_results=true (repeatable: all must "
              "match).")
def search(kb_dir: Path, query: str, k: int, mode: str, as_json: bool,
           where: tuple[str, ...]) -> None:
    """Search the knowledge base (optionally only documents whose metadata matches)."""
    filters = {}
    for item in where:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE", param_hint="--where")
        filters[key.strip()] = value.strip()
    with KnowledgeBase.open(kb_dir) as kb:
        passages = Retriever(kb).search_many(  # type: ignore[arg-type]
            [query], k=k, mode=mode, where=filters or None)[0]
    if as_json:
        click.echo(json.dumps([p.model_dump(mode="json") for p in passages], indent=2))
        return
    if not passages:
        click.echo("no passages found")
    for rank, passage in enumerate(passages, start=1):
        click.echo(_format_passage(rank, passage))


def _format_passage(rank: int, passage: Passage) -> str:
    scores = " ".join(f"{name}={value:.3f}" for name, value in passage.scores.items())
    text = " ".join(passage.text.split())
    snippet = text[:300] + ("..." if len(text) > 300 else "")
    head = f"{rank}. [{passage.id}] {passage.title or ''}".rstrip()
    where = f"   {passage.url}\n" if passage.url else ""
    return f"{head}\n{where}   ({scores})\n   {snippet}\n"


@kb_group.command("stats")
@click.option("--kb", "kb_dir", required=True, type=KB_DIR, help="Knowledge base directory.")
@click.option("--json", "as_json", is_flag=True, help="Print statistics as JSON.")
def stats(kb_dir: Path, as_json: bool) -> None:
    """Show size, settings and snapshot id of a knowledge base."""
    with KnowledgeBase.open(kb_dir) as kb:
        summary = kb.stats()
    if as_json:
        click.echo(summary.model_dump_json(indent=2))
        return
    for name, value in summary.model_dump().items():
        click.echo(f"{name:15} {value}")


@kb_group.command("reindex")
@click.option("--kb", "kb_dir", required=True, type=KB_DIR, help="Knowledge base directory.")
@click.option("--index", "policy", type=click.Choice(INDEX_POLICIES),
              help="Record this vector index in the KB before rebuilding: auto (exact below "
              "100,000 chunks, IVF above), flat, ivf, ivfpq or hnsw. Default: the KB's own.")
@click.option("--nlist", type=click.IntRange(1), help="IVF lists (default ~4 sqrt(chunks)).")
@config_option
def reindex(kb_dir: Path, policy: str | None, nlist: int | None,
            config_path: Path | None) -> None:
    """Rebuild the vector index from the vectors stored in the KB, and on a KB of
    [kb_settings] lexical_postings_from chunks or more the stored lexical postings when
    they are not fresh (docs/scale.md)."""
    settings = load_config(config_path).kb_settings  # its thresholds and search knobs
    started = time.perf_counter()
    with KnowledgeBase.open(kb_dir, settings=settings) as kb:
        spec = kb.rebuild_index(policy, nlist=nlist)
        vectors_s = time.perf_counter() - started
        lexical = kb.follow_lexical()
        summary = kb.stats()
    size = (kb_dir / INDEX_NAME).stat().st_size
    click.echo(f"rebuilt the vector index of {kb_dir} as {spec.describe()} over "
               f"{summary.chunks} chunks in {vectors_s:.1f}s "
               f"({size / 1e6:.1f} MB; policy {summary.index_policy})")
    if lexical is not None:
        click.echo(f"built the lexical postings ({lexical.get('postings', 0)} postings) in "
                   f"{time.perf_counter() - started - vectors_s:.1f}s")
    click.echo(f"lexical postings: {summary.lexical_postings}")
