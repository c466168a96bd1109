"""The fact-check-and-correct report: a self-contained HTML page and a terminal summary.

The page shows the question, the initial answer (and the chunks it was generated from),
every fact with each round's verdict and rewrite, every answer version as a word-level
diff against the previous one, the final answer sentence by sentence with the chunk and
document each sentence traces to, the tokens per stage against the initial answer, and
the provenance. Answers, evidence and model output are untrusted text: the template is
autoescaped, diffs are built from escaped pieces, only http(s) URLs become links, and the
page carries no script at all (its CSP forbids scripts).
"""

from __future__ import annotations

import difflib
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import jinja2
from markupsafe import Markup, escape
from rich.console import Console
from rich.table import Table
from rich.text import Text

from medverify.factcheck.records import (
    AnswerVersion,
    Fact,
    FactCheckReport,
    FactStep,
    FactTrace,
    FactVerdict,
    Rewrite,
    SentenceLink,
    TraceCandidate,
)
from medverify.files import atomic_write_text
from medverify.records import Passage
from medverify.report.nodes import scalar_text, to_node
from medverify.report.view import counted_lines, percent, safe_url, shorten, total_usage


@dataclass(frozen=True)
class VerdictStyle:
    """How a fact verdict is shown: word, symbol, colour (never colour alone)."""

    verdict: FactVerdict
    symbol: str
    css: str
    rich: str
    description: str

    @property
    def label(self) -> str:
        return self.verdict.value


VERDICT_STYLES: dict[FactVerdict, VerdictStyle] = {s.verdict: s for s in (
    VerdictStyle(FactVerdict.TRUE, "✓", "fact", "bold green",
                 "Supported by the evidence (FACT)."),
    VerdictStyle(FactVerdict.FALSE, "✗", "hallucination", "bold red",
                 "Contradicted by the evidence (HALLUCINATION)."),
    VerdictStyle(FactVerdict.UNVERIFIABLE, "?", "gap", "bold blue",
                 "Not settled: the evidence neither supports nor contradicts it "
                 "(COVERAGE_GAP), or it both supports and contradicts it (JUDGMENT_ERROR)."),
    VerdictStyle(FactVerdict.ERROR, "!", "error", "bold magenta",
                 "The judge failed: not a verdict, never rewritten."),
)}

REWRITE_LABELS = {
    "llm": "LLM rewrite",
    "extractive": "extractive correction (the contradicting evidence sentence, not a rewrite)",
}
FINAL_MODE_LABELS = {
    "llm": "rewritten by the model to include the corrected facts",
    "extractive": "offline: false facts replaced by the evidence sentences that contradict "
                  "them (extractive correction, no model)",
    "unchanged": "unchanged: no fact needed a correction",
}
VERSION_MODE_LABELS = {
    "initial": "initial answer", "facts": "corrected facts", "llm": "rewritten by the model",
    "extractive": "extractive correction", "unchanged": "unchanged",
}

_TOKENS = re.compile(r"\s+|[^\s]+")


# -- word-level diffs ---------------------------------------------------------------------


def _tokens(text: str) -> list[str]:
    return _TOKENS.findall(text)


def word_diff(old: str, new: str) -> Markup:
    """``new`` against ``old``, word by word: deletions in ``<del>``, insertions in
    ``<ins>``, everything escaped."""
    a, b = _tokens(old), _tokens(new)
    out: list[str] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            out.append(escape("".join(a[i1:i2])))
            continue
        if i2 > i1:
            out.append(Markup("<del>{}</del>").format("".join(a[i1:i2])))
        if i2 > i1 and j2 > j1:
            out.append(" ")  # a replacement: keep the old and new words apart on screen
        if j2 > j1:
            out.append(Markup("<ins>{}</ins>").format("".join(b[j1:j2])))
    return Markup("").join(out)


# -- views ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PassageRef:
    """A passage with its number on the page (anchor ``passage-N``) and safe link."""

    number: int
    passage: Passage
    url: str | None

    @property
    def anchor(self) -> str:
        return f"passage-{self.number}"


@dataclass(frozen=True)
class StepView:
    step: FactStep
    style: VerdictStyle
    passages: list[PassageRef]
    rewrite_label: str | None
    evidence: PassageRef | None


@dataclass(frozen=True)
class CandidateView:
    candidate: TraceCandidate
    ref: PassageRef | None
    best: bool


@dataclass(frozen=True)
class FactView:
    number: int
    fact: Fact
    initial: VerdictStyle
    final: VerdictStyle
    steps: list[StepView]
    diff: Markup | None
    trace: FactTrace | None
    candidates: list[CandidateView] = field(default_factory=list)

    @property
    def anchor(self) -> str:
        return f"fact-{self.number}"


@dataclass(frozen=True)
class VersionView:
    number: int
    version: AnswerVersion
    mode: str
    diff: Markup | None
    changed: bool


@dataclass(frozen=True)
class SentenceView:
    link: SentenceLink
    facts: list[FactView]
    ref: PassageRef | None
    url: str | None


def passage_refs(report: FactCheckReport) -> dict[str, PassageRef]:
    """Every passage of the report, numbered: the RAG chunks first, then the evidence."""
    chunks = report.rag.chunks if report.rag else []
    unique = {p.id: p for p in [*chunks, *report.passages.values()]}
    return {pid: PassageRef(n, p, safe_url(p.url)) for n, (pid, p) in enumerate(unique.items(), 1)}


def _rewrite_label(rewrite: Rewrite | None) -> str | None:
    return REWRITE_LABELS[rewrite.mode] if rewrite is not None else None


def _step_view(step: FactStep, refs: Mapping[str, PassageRef]) -> StepView:
    evidence_id = step.rewrite.evidence_passage_id if step.rewrite else None
    return StepView(step, VERDICT_STYLES[step.verdict],
                    [refs[i] for i in step.passage_ids if i in refs],
                    _rewrite_label(step.rewrite), refs.get(evidence_id) if evidence_id else None)


def _candidates(trace: FactTrace | None, refs: Mapping[str, PassageRef]) -> list[CandidateView]:
    if trace is None:
        return []
    return [CandidateView(c, refs.get(c.passage_id), c.passage_id == trace.best_passage_id)
            for c in trace.candidates]


def fact_view(number: int, fact: Fact, refs: Mapping[str, PassageRef]) -> FactView:
    changed = fact.final_text != fact.claim.text
    return FactView(
        number=number, fact=fact,
        initial=VERDICT_STYLES[fact.initial_verdict], final=VERDICT_STYLES[fact.final_verdict],
        steps=[_step_view(s, refs) for s in fact.steps],
        diff=word_diff(fact.claim.text, fact.final_text) if changed else None,
        trace=fact.trace, candidates=_candidates(fact.trace, refs),
    )


def version_views(versions: Sequence[AnswerVersion]) -> list[VersionView]:
    """Each version with its diff against the previous one (none for the first)."""
    views = []
    for n, version in enumerate(versions, 1):
        previous = versions[n - 2].text if n > 1 else None
        diff = word_diff(previous, version.text) if previous is not None else None
        views.append(VersionView(n, version, VERSION_MODE_LABELS.get(version.mode, version.mode),
                                 diff, previous is not None and previous != version.text))
    return views


def sentence_views(report: FactCheckReport, facts: Sequence[FactView],
                   refs: Mapping[str, PassageRef]) -> list[SentenceView]:
    by_id = {f.fact.id: f for f in facts}
    views = []
    for link in report.sentences:
        ref = refs.get(link.passage_id) if link.passage_id else None
        views.append(SentenceView(link, [by_id[i] for i in link.fact_ids if i in by_id], ref,
                                  safe_url(link.url)))
    return views


@dataclass(frozen=True)
class StageTokens:
    stage: str
    tokens: int
    share: float | None  # of the initial answer's tokens


def stage_tokens(report: FactCheckReport) -> list[StageTokens]:
    base = report.tokens.initial_answer_tokens
    return [StageTokens(stage, n, n / base if base else None)
            for stage, n in report.tokens.per_stage.items()]


def _ratio_text(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}×"


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    loader = jinja2.FileSystemLoader(Path(__file__).parents[1] / "report" / "templates")
    env = jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters.update(percent=percent, ratio=_ratio_text, scalar=scalar_text, shorten=shorten)
    return env


def render_factcheck_html(report: FactCheckReport) -> str:
    """The fact-check report as one self-contained HTML page."""
    refs = passage_refs(report)
    facts = [fact_view(n, f, refs) for n, f in enumerate(report.facts, 1)]
    chunk_refs = [refs[c.id] for c in report.rag.chunks] if report.rag else []
    return _environment().get_template("factcheck.html.j2").render(
        report=report, counts=report.counts(), facts=facts,
        styles=list(VERDICT_STYLES.values()),
        versions=version_views(report.versions),
        sentences=sentence_views(report, facts, refs),
        final_mode=FINAL_MODE_LABELS[report.final_mode],
        chunks=chunk_refs, passages=list(refs.values()),
        stage_tokens=stage_tokens(report), total=total_usage(report.usage),
        config=to_node(report.config) if report.config else None,
    )


def write_factcheck_html(path: str | os.PathLike[str], report: FactCheckReport) -> Path:
    """Write the report's HTML page to ``path`` atomically; returns the path."""
    return atomic_write_text(path, render_factcheck_html(report))


# -- terminal -------------------------------------------------------------------------------

TEXT_WIDTH = 90


def _verdict_text(verdict: FactVerdict) -> Text:
    style = VERDICT_STYLES[verdict]
    return Text(f"{style.symbol} {verdict.value}", style=style.rich)


def _rounds_text(fact: Fact) -> Text:
    text = Text()
    for n, step in enumerate(fact.steps):
        if n:
            text.append(" → ")
        text.append_text(_verdict_text(step.verdict))
    return text


def _final_cell(fact: Fact) -> Text:
    if fact.final_text == fact.claim.text:
        return Text("(unchanged)", style="dim")
    modes = {s.rewrite.mode for s in fact.steps if s.rewrite and s.rewrite.after}
    tag = " [extractive]" if modes == {"extractive"} else ""
    return Text(shorten(fact.final_text, TEXT_WIDTH) + tag)


def facts_table(report: FactCheckReport) -> Table:
    """One row per fact: verdict of each round, initial text, final text."""
    table = Table(title="Atomic facts", title_justify="left")
    table.add_column("id", style="bold", no_wrap=True)
    table.add_column("rounds", no_wrap=True)
    table.add_column("fact", overflow="fold", ratio=3)
    table.add_column("final text", overflow="fold", ratio=3)
    for fact in report.facts:  # untrusted text: Text cells, never console markup
        table.add_row(Text(fact.id), _rounds_text(fact),
                      Text(shorten(fact.claim.text, TEXT_WIDTH)), _final_cell(fact))
    return table


def _counts_line(report: FactCheckReport) -> Text:
    counts = report.counts()
    text = Text(f"Facts: {counts['facts']}; initially ")
    for n, verdict in enumerate(FactVerdict):
        text.append(", " if n else "")
        text.append(f"{verdict.value} {counts.get('initial_' + verdict.value, 0)}",
                    style=VERDICT_STYLES[verdict].rich)
    text.append(f"; corrected {counts['corrected']}; finally TRUE "
                f"{counts.get('final_TRUE', 0)} in {report.rounds_run} round(s)")
    return text


def _token_lines(report: FactCheckReport) -> list[Text]:
    tokens = report.tokens
    if not tokens.per_stage and not tokens.check_tokens:
        return [Text("Tokens: no model calls recorded", style="dim")]
    base = ("unknown" if tokens.initial_answer_tokens is None
            else f"{tokens.initial_answer_tokens:,}")
    lines = [Text.assemble("Tokens: ", (f"{tokens.check_tokens:,}", "bold"),
                           f" to check and correct; initial answer {base}; ratio ",
                           (_ratio_text(tokens.ratio), "bold"))]
    lines += [Text(f"  {stage}: {n:,}") for stage, n in tokens.per_stage.items()]
    return lines


def print_factcheck(report: FactCheckReport, console: Console | None = None) -> None:
    """Print the facts table, the final answer and the token summary to ``console``.

    All text from the report is printed as plain text, never parsed as rich markup."""
    console = console or Console()
    if report.question:
        console.print(Text.assemble(("Question: ", "bold"), report.question))
    if report.facts:
        console.print(facts_table(report))
    else:
        console.print(Text("No atomic facts were extracted from this answer.", style="dim"))
    console.print(_counts_line(report))
    console.print(Text.assemble(("Final answer", "bold"),
                                f" ({FINAL_MODE_LABELS[report.final_mode]}):"))
    console.print(Text(report.final_answer))
    for line in _token_lines(report):
        console.print(line)
    for line in error_lines(report):
        console.print(line)


def _fact_error(fact: Fact) -> str:
    for step in reversed(fact.steps):
        if step.verdict == FactVerdict.ERROR:
            verdict_error = step.judge_verdict.error if step.judge_verdict else None
            return verdict_error or "no cause recorded"
    return "no check was recorded for this fact"


def error_lines(report: FactCheckReport) -> list[Text]:
    """Each distinct cause of the run's errors and of facts that ended in ERROR, once,
    with its count."""
    facts = Counter(_fact_error(f) for f in report.facts if f.final_verdict == FactVerdict.ERROR)
    return [Text(line, style="bold magenta" if n == 0 else "")
            for title, causes in (("Run errors", Counter(report.errors)), ("Fact errors", facts))
            for n, line in enumerate(counted_lines(title, causes))]
