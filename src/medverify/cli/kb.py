"""``medverify kb``: build, search and inspect a knowledge base.

Names from the corpus (document ids, titles, URLs, file paths, passage text) are printed
through :func:`medverify.text.printable` (and escaped for rich markup where rich prints
them): a file name cannot forge output lines, send terminal escape sequences or style text.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from medverify.cli import main
from medverify.cli._common import config_option, console, executor_option, load_config
from medverify.cli._names import EMBEDDERS, NamesHelpOption
from medverify.config import KBSettings
from medverify.executor import Executor, LocalExecutor, executor_from_spec
from medverify.kb import KBStats, KnowledgeBase, LoadReport, sample_kb_path
from medverify.kb.index import INDEX_NAME, INDEX_POLICIES
from medverify.kb.ingest_batches import IngestStats
from medverify.kb.loaders import iter_ctgov, iter_sources
from medverify.kb.lock import WRITER_WAIT_S
from medverify.kb.postgres import PostgresKB
from medverify.records import Passage
from medverify.retrieve import MODES, Retriever
from medverify.text import printable

KB_DIR = click.Path(path_type=Path, file_okay=False)
WAIT = click.option(
    "--wait", type=click.FloatRange(0), default=WRITER_WAIT_S, show_default=True,
    metavar="SECONDS", help="How long to wait while another process writes this KB (an "
    "ingest, a removal, a reindex) before giving up; 0: give up at once.")


SHIPPED = "shipped"  # --sample without a number: the MedQuAD sample shipped with medverify
SAMPLE_KB = "./kb"  # where --sample builds its KB when --kb is not given
LARGE_FILES = 2_000  # inputs of more files than this get a warning with the time they take
LARGE_MB = 50.0  # ... and so do inputs of more megabytes than this (XML files aside)
# The default embedder's rates (all-MiniLM-L6-v2, fp32, 2 CPU cores, load average ~3.5),
# measured by benchmarks/bench_quickstart_kb.py (benchmarks/results/quickstart_kb.md):
# MedQuAD XML files per second (half of them hold no answer), MB of plain text per second
# (the shipped sample's JSONL), and chunks per second of short texts (MedQuAD answers), the
# least a file costs. The warning adds XML files at the first rate to the other files at
# the second, but at least one chunk each at the third.
FILES_PER_S = 9.17
MB_PER_S = 0.0129
CHUNKS_PER_S = 12.6
SAMPLE_NOTE = ("300 documents, 1,697 chunks: 4.5 minutes with the default embedder on 2 CPU "
               "cores")


class _SampleType(click.ParamType):
    """``--sample``: no value (the shipped MedQuAD sample) or a number of ctgov studies."""

    name = "[N]"

    def convert(self, value: object, param: click.Parameter | None,
                ctx: click.Context | None) -> int | str:
        if value == SHIPPED or (isinstance(value, int) and value >= 1):
            return value  # type: ignore[return-value]
        try:
            number = int(str(value))
        except ValueError:
            self.fail(f"{value!r} is not a number: --sample N (with --format ctgov) takes a "
                      "number of studies; --sample alone ingests the shipped MedQuAD sample "
                      "and takes no PATHS", param, ctx)
        if number < 1:
            self.fail(f"{number} is not >= 1", param, ctx)
        return number


@main.group("kb")
def kb_group() -> None:
    """Build, search and inspect a knowledge base."""


@kb_group.command("ingest")
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option("--kb", "kb_dir", callback=lambda ctx, param, value: _kb_location(value),
              metavar="DIRECTORY|URL",
              help=f"Knowledge base directory (required with PATHS; with --sample: "
              f"{SAMPLE_KB}), or a postgresql://USER:PASSWORD@HOST:PORT/DB URL: the KB on "
              "PostgreSQL that several replicas share (docs/scale.md).")
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
@click.option("--sample", type=_SampleType(), is_flag=False, flag_value=SHIPPED,
              help="Alone, without PATHS: ingest the MedQuAD sample shipped with medverify "
              f"({SAMPLE_NOTE}). With N and --format ctgov: a seeded sample of N studies.")
@click.option("--seed", type=int, default=0, show_default=True, help="ctgov: sampling seed.")
@executor_option("the chunks are embedded (this process reads, chunks and stores them)")
@WAIT
def ingest(
    paths: tuple[Path, ...],
    kb_dir: Path | str | None,
    embedder: str | None,
    chunk_tokens: int | None,
    chunk_overlap: int | None,
    limit: int | None,
    fmt: str,
    condition: str | None,
    results_only: bool,
    sample: int | str | None,
    seed: int,
    executor_spec: str,
    wait: float,
) -> None:
    """Load, chunk, embed and store documents (txt, md, html, pdf, MedQuAD xml, jsonl).

    With --sample and no PATHS it ingests the MedQuAD sample shipped with medverify (a first
    KB in minutes). With --format ctgov, PATHS hold ClinicalTrials.gov API v2 study records
    (JSON files, JSONL, bulk zips), each curated into a 15-section summary (docs/trials.md).
    Inputs of more than 2,000 files or 50 MB (XML aside) get a warning with the time they
    will take. One process writes a KB at a time: a second ingest waits (--wait)."""
    started = time.perf_counter()
    paths, kb_dir, ct_sample = _sources(paths, kb_dir, fmt, sample)
    if fmt != "ctgov" and (condition or results_only):
        raise click.UsageError("--condition and --results-only need --format ctgov")
    settings = _chunk_settings(chunk_tokens, chunk_overlap)
    watch = None if sample == SHIPPED else _warn_if_large(paths, limit, fmt)
    report = LoadReport()
    executor = executor_from_spec(executor_spec)
    with _open_for_ingest(kb_dir, settings, embedder, wait) as kb:
        documents = (iter_ctgov(paths, report, limit, condition=condition,
                                results_only=results_only, sample=ct_sample, seed=seed)
                     if fmt == "ctgov" else iter_sources(paths, report, limit))
        if watch is not None:
            watch.report = report
        try:
            stats = _ingest_with_progress(
                kb, documents, None if isinstance(executor, LocalExecutor) else executor,
                watch)
        finally:
            executor.close()
        summary = kb.stats()
    _print_load_report(report)
    _print_ingested(stats, len(report.skipped), summary)
    if sample == SHIPPED:
        _print_sample_built(kb_dir, time.perf_counter() - started, summary.embedder_id)


def _open_for_ingest(kb_dir: Path | str, settings: KBSettings | None, embedder: str | None,
                     wait: float) -> KnowledgeBase | PostgresKB:
    """The KB directory (created if new; a writer waits ``wait`` s for another), or the KB
    on PostgreSQL at a URL (its writers take its advisory lock, one after another)."""
    if isinstance(kb_dir, str):
        base = (settings or KBSettings()).model_copy(
            update={"embedder": embedder} if embedder else {})
        return PostgresKB.open(kb_dir, base)
    kb = KnowledgeBase.open_or_create(kb_dir, settings, embedder, wait=wait)
    kb.writer_wait = wait
    return kb


def _chunk_settings(chunk_tokens: int | None, chunk_overlap: int | None) -> KBSettings | None:
    """The chunk settings given on the command line (None when neither is: an existing KB
    keeps its own, a new one takes the defaults)."""
    given = {
        k: v
        for k, v in {"chunk_tokens": chunk_tokens, "chunk_overlap": chunk_overlap}.items()
        if v is not None
    }
    return KBSettings(**given) if given else None


def _print_ingested(stats: IngestStats, skipped: int, summary: KBStats) -> None:
    """One line: what the ingest did, and what the KB now holds."""
    resumed = f"resumed {stats.documents_resumed}, " if stats.documents_resumed else ""
    click.echo(
        f"added {stats.documents_added} documents ({stats.chunks_added} chunks), "
        f"updated {stats.documents_updated}, unchanged {stats.documents_unchanged}, {resumed}"
        f"skipped {skipped} in {stats.seconds:.1f}s; KB now has "
        f"{summary.documents} documents, {summary.chunks} chunks "
        f"[{summary.snapshot_id}]"
    )


def _print_sample_built(kb_dir: Path | str, seconds: float, embedder_id: str) -> None:
    click.echo(f"built {kb_dir} from the shipped MedQuAD sample in {seconds:.1f}s (embedder "
               f"{embedder_id}, model loading included); try: medverify kb search --kb "
               f"{kb_dir} \"symptoms of Fabry disease\"")


def _kb_location(value: str | None) -> Path | str | None:
    """``--kb`` of ``kb ingest``: a directory, or a PostgreSQL URL (kept as text)."""
    if value is None or value.startswith(("postgresql://", "postgres://")):
        return value
    return Path(value)


def _sources(paths: tuple[Path, ...], kb_dir: Path | str | None, fmt: str,
             sample: int | str | None) -> tuple[tuple[Path, ...], Path | str, int | None]:
    """(paths, KB directory, ctgov sample size) from the arguments, or a usage error."""
    if sample == SHIPPED:
        if paths or fmt == "ctgov":
            raise click.UsageError(
                "--sample without a number ingests the MedQuAD sample shipped with "
                "medverify and takes no PATHS; with --format ctgov give it a number "
                "(--sample N)")
        return (sample_kb_path(),), kb_dir or Path(SAMPLE_KB), None
    if not paths:
        raise click.UsageError("give PATHS to ingest, or --sample for the MedQuAD sample "
                               "shipped with medverify")
    if kb_dir is None:
        raise click.UsageError("Missing option '--kb' (the knowledge base directory).")
    if sample is not None and fmt != "ctgov":
        raise click.UsageError("--sample N needs --format ctgov (--sample alone, without "
                               "PATHS, ingests the shipped MedQuAD sample)")
    return paths, kb_dir, sample if isinstance(sample, int) else None


def _print_load_report(report: LoadReport) -> None:
    for skipped in report.skipped[:20]:
        console.print(f"[yellow]skipped[/] {_shown(skipped.path)}: {_shown(skipped.reason)}")
    if len(report.skipped) > 20:
        console.print(f"... and {len(report.skipped) - 20} more skipped")
    for warning in report.warnings[:10]:
        console.print(f"[yellow]warning[/] {_shown(warning)}")
    if len(report.warnings) > 10:
        console.print(f"... and {len(report.warnings) - 10} more warnings")
    if report.files_with_replacements:
        console.print(
            f"{report.replaced_chars} undecodable bytes replaced in "
            f"{report.files_with_replacements} files"
        )


def _shown(name: str) -> str:
    """A name from the corpus as rich prints it: control characters escaped, and no
    markup (``[red]`` in a file name is text)."""
    return escape(printable(name))


def _input_files(paths: tuple[Path, ...]) -> list[tuple[int, bool]]:
    """(bytes, is XML) of each file an ingest of PATHS reads, in the loaders' order
    (directories sorted, hidden files skipped)."""
    found: list[Path] = []
    for root in paths:
        found += [root] if root.is_file() else sorted(
            p for p in root.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in
                                       p.relative_to(root).parts))
    return [(p.stat().st_size, p.suffix.lower() == ".xml") for p in found]


def estimate_seconds(files: int, xml: int, other_bytes: int) -> float:
    """Seconds the default embedder takes on 2 cores, at the measured rates above."""
    others = files - xml
    return xml / FILES_PER_S + max(others / CHUNKS_PER_S, other_bytes / 1e6 / MB_PER_S)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _warn_if_large(paths: tuple[Path, ...], limit: int | None,
                   fmt: str) -> _RateWatch | None:
    """Warn (and go on) when PATHS are large: how long the default embedder will take and
    how to start smaller. Returns a watch that measures the real rate, or None."""
    if fmt == "ctgov" or (limit is not None and limit <= LARGE_FILES):
        return None
    sizes = _input_files(paths)
    files, xml = len(sizes), sum(1 for _, is_xml in sizes if is_xml)
    other_bytes = sum(size for size, is_xml in sizes if not is_xml)
    if files <= LARGE_FILES and other_bytes <= LARGE_MB * 1e6:
        return None
    plural = "s" if files != 1 else ""
    console.print(
        f"[yellow]warning[/] this ingest reads {files:,} file{plural} ({xml:,} XML, "
        f"{other_bytes / 1e6:,.1f} MB of others): with the default embedder on 2 CPU cores "
        f"that takes about {_duration(estimate_seconds(files, xml, other_bytes))} (from the "
        "rates benchmarks/bench_quickstart_kb.py measured: "
        f"{FILES_PER_S} MedQuAD XML files/s, {MB_PER_S} MB/s of text; longer on a busier "
        "machine). To start smaller: --limit N (the first N documents), a subfolder, or "
        "--sample (the shipped MedQuAD sample, no PATHS). It goes on; Ctrl-C stops it and "
        "the same command resumes it.")
    return _RateWatch([size for size, _ in sizes])


class _RateWatch:
    """Prints, once the second batch of chunks is committed, how long the rest will take
    at the rate of input bytes read between the first two commits (the embedding sets the
    pace from then on)."""

    def __init__(self, sizes: list[int]) -> None:
        self.read = [0]  # bytes in the first n files, n = 0..len(sizes)
        for size in sizes:
            self.read.append(self.read[-1] + size)
        self.report: LoadReport | None = None  # set once the loaders have one
        self.marks: list[tuple[float, int]] = []
        self.chunks = 0

    def __call__(self, stats: IngestStats) -> None:
        if self.report is None or len(self.marks) >= 2 or stats.chunks_added == self.chunks:
            return
        self.chunks = stats.chunks_added
        self.marks.append((time.perf_counter(), min(self.report.files, len(self.read) - 1)))
        if len(self.marks) < 2:
            return
        (first_at, first), (now, files) = self.marks
        done, total = self.read[files], self.read[-1]
        if done <= self.read[first] or files >= len(self.read) - 1:
            return
        rate = (done - self.read[first]) / max(now - first_at, 1e-9)
        console.print(
            f"measured: {rate / 1e6:,.3f} MB/s of input over the last batch ({files:,} of "
            f"{len(self.read) - 1:,} files, {done / 1e6:,.1f} of {total / 1e6:,.1f} MB read); "
            f"the rest takes about {_duration((total - done) / rate)} at this rate")


def _ingest_with_progress(kb: KnowledgeBase | PostgresKB, documents: object,
                          executor: Executor | None = None,
                          watch: _RateWatch | None = None) -> IngestStats:
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
            if watch is not None:
                watch(stats)

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
    """A hit as plain text (click.echo: no markup): its id and title on one line, the URL,
    the scores, a snippet; every name through :func:`printable`."""
    scores = " ".join(f"{name}={value:.3f}" for name, value in passage.scores.items())
    text = " ".join(passage.text.split())
    snippet = printable(text[:300]) + ("..." if len(text) > 300 else "")
    head = f"{rank}. [{printable(passage.id)}] {printable(passage.title or '')}".rstrip()
    where = f"   {printable(passage.url)}\n" if passage.url else ""
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
              "100,000 chunks, HNSW above), flat, ivf, ivfpq or hnsw. Default: the KB's own.")
@click.option("--nlist", type=click.IntRange(1), help="IVF lists (default ~4 sqrt(chunks)).")
@config_option
@WAIT
def reindex(kb_dir: Path, policy: str | None, nlist: int | None,
            config_path: Path | None, wait: float) -> None:
    """Rebuild the vector index from the vectors stored in the KB, and on a KB of
    [kb_settings] lexical_postings_from chunks or more the stored lexical postings when
    they are not fresh (docs/scale.md)."""
    settings = load_config(config_path).kb_settings  # its thresholds and search knobs
    started = time.perf_counter()
    with KnowledgeBase.open(kb_dir, settings=settings) as kb:
        kb.writer_wait = wait
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
