"""The report of a clinical-trial study, computed from its run directory alone.

For each model x context x granularity, the share of judged units in each CHECK category
(FACT, HALLUCINATION, COVERAGE_GAP, JUDGMENT_ERROR) over the *scored* units: a unit the
judge failed on (ERROR) is unscored and counted apart, never folded into a category. The
95 % intervals are percentile intervals of a bootstrap over trials (a trial's units are
resampled together: units of one trial are not independent). Contrasts between contexts
(e.g. hallucination share with the title minus with the summary) use the same resamples,
so they are paired by trial. Also: the share of answers with at least one hallucinated
unit, a per-question breakdown (which of the 15 questions hallucinate most), and examples.

``finish(run_dir, config)`` writes ``summary.json``, ``report.md`` and one SVG chart per
model and granularity; ``medverify trials report RUN`` calls it without any model. A study
whose judge declares ``fails_trial_study`` (the built-in judge) carries
:data:`JUDGE_WARNING` first in ``warnings`` and atop ``report.md``.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from medverify.audit.records import Estimate
from medverify.bench.plots import grouped_bars
from medverify.config import Config
from medverify.files import atomic_write_text
from medverify.records import Category
from medverify.stats import bootstrap_weights, percentile_ci
from medverify.study.records import (
    AnswerJudgment,
    AnswerStatus,
    Context,
    Granularity,
    StudyManifest,
    StudyTrial,
    TrialAnswer,
    read_run,
    text_sha256,
)

SCORED = (Category.FACT, Category.HALLUCINATION, Category.COVERAGE_GAP,
          Category.JUDGMENT_ERROR)
LABELS = {Category.FACT: "Factuality", Category.HALLUCINATION: "Hallucinations",
          Category.COVERAGE_GAP: "Coverage gap", Category.JUDGMENT_ERROR: "Judgment error"}
ANY_HALLUCINATION = "answers_with_hallucination"
FAILS_STUDY = "fails_trial_study"  # the judge trait (medverify.judge.declares)
JUDGE_WARNING = (
    "the built-in judge cannot grade this study: its labels here do not measure "
    "hallucination. On the sample records with scripted answers it labelled FACT 81.9 % of "
    "title-only answers, each of which invents a specific the title does not give, and "
    "40.9 % of the invented sentences themselves (target: at most 20 %; "
    "benchmarks/results/trials_offline.md); at claim level it found 7 of 107 changed numbers "
    "(benchmarks/results/trials_study_builtin.md, measured before the claim-level rule). "
    "Use an LLM judge (--judge-model SPEC). Why, and the numbers: docs/trials.md, "
    "'The 15-question study', 'Measured'.")


def judge_warnings(judge_fails_study: bool) -> list[str]:
    """The study's warnings about its judge (a judge that declares ``fails_trial_study``)."""
    return [JUDGE_WARNING] if judge_fails_study else []


class _Cell:
    """Per-trial counts of one model x context x granularity."""

    def __init__(self, n_trials: int) -> None:
        self.counts = {c: np.zeros(n_trials) for c in (*SCORED, Category.ERROR)}
        self.answers = np.zeros(n_trials)  # judged answers (with units)
        self.flagged = np.zeros(n_trials)  # answers with >= 1 hallucinated unit
        self.failed = 0  # answers that could not be cut into units

    @property
    def scored(self) -> np.ndarray:
        return sum(self.counts[c] for c in SCORED)  # type: ignore[return-value]


def _estimate(num: np.ndarray, den: np.ndarray, weights: np.ndarray) -> Estimate:
    total = float(den.sum())
    if total == 0:
        return Estimate(n=0, reason="no scored unit")
    return Estimate(value=float(num.sum()) / total,
                    ci=percentile_ci(_resampled(num, den, weights)), n=int(total))


def _resampled(num: np.ndarray, den: np.ndarray, weights: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return (weights @ num) / (weights @ den)


def current_judgments(answers: Sequence[TrialAnswer],
                      judgments: Sequence[AnswerJudgment]) -> dict[tuple[str, str],
                                                                   AnswerJudgment]:
    """The judgments of the answers as they are now (a judgment of an earlier answer text,
    e.g. an ERROR answer asked again, is left out)."""
    sha = {a.id: text_sha256(a.answer) for a in answers if a.status is AnswerStatus.OK}
    return {j.key: j for j in judgments if sha.get(j.answer_id) == j.answer_sha256}


def summarize(manifest: StudyManifest, answers: Sequence[TrialAnswer],
              judgments: Sequence[AnswerJudgment], *, n_boot: int = 2000, seed: int = 0,
              n_examples: int = 3, records: Sequence[StudyTrial] = ()) -> dict[str, Any]:
    """The study's summary (``summary.json``) from its records (see the module doc)."""
    trials = list(manifest.trials)
    models = [m.label for m in manifest.models]
    contexts = [c.value for c in manifest.contexts]
    grans = [g.value for g in manifest.granularities]
    wanted = {(m, t, q.number, c) for m in models for t in trials for q in manifest.questions
              for c in contexts}
    answers = [a for a in answers if a.key in wanted]
    asked = _asked(answers)
    cells = {(m, c, g): _Cell(len(trials)) for m in models for c in contexts for g in grans}
    example_gran = _example_granularity(grans)
    per_question, examples = _tally(answers, current_judgments(answers, judgments), cells,
                                    {t: i for i, t in enumerate(trials)}, example_gran)
    weights = bootstrap_weights(len(trials), n_boot, np.random.default_rng(seed)) \
        if trials else np.zeros((0, 0))
    return {
        "run_id": manifest.run_id,
        "models": [m.model_dump() for m in manifest.models],
        "contexts": contexts, "granularities": grans,
        "n_trials": len(trials), "n_questions": len(manifest.questions),
        "judge": manifest.judge, "decomposer": manifest.decomposer,
        "json_chars": manifest.json_chars, "selection": manifest.selection,
        "bootstrap": {"resamples": n_boot, "seed": seed, "unit": "trial"},
        "answers": [{"model": m, "context": c, **{k: asked[(m, c)][k] for k in
                                                  ("ok", "empty", "error", "json_cut",
                                                   "prompt_tokens", "completion_tokens")},
                     "expected": len(trials) * len(manifest.questions)}
                    for m in models for c in contexts],
        "rates": _rates(cells, weights),
        "contrasts": _contrasts(cells, models, grans, contexts, weights),
        "per_question": _question_rows(manifest, per_question, (models, contexts, grans)),
        "examples": [{"model": m, "context": c, "granularity": example_gran, **e}
                     for (m, c), found in sorted(examples.items()) for e in found[:n_examples]],
        "curation_problems": {t.nct_id: t.summary.problems for t in records
                              if t.summary.problems},
    }


def _asked(answers: Sequence[TrialAnswer]) -> dict[tuple[str, str], Counter[str]]:
    """Per (model, context): answers by status, JSON contexts cut, tokens."""
    asked: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for a in answers:
        counter = asked[(a.model, a.context.value)]
        counter[a.status.value] += 1
        counter["json_cut"] += a.context_truncated
        counter["prompt_tokens"] += a.prompt_tokens or 0
        counter["completion_tokens"] += a.completion_tokens or 0
    return asked


_PerQuestion = dict[tuple[str, str, str, int], Counter[str]]
_Examples = dict[tuple[str, str], list[dict[str, Any]]]


def _tally(answers: Sequence[TrialAnswer], judged: dict[tuple[str, str], AnswerJudgment],
           cells: dict[tuple[str, str, str], _Cell], index: dict[str, int],
           example_gran: str) -> tuple[_PerQuestion, _Examples]:
    """Count the judged units into ``cells`` (by trial); returns the unit counts per
    question and the hallucinated units at ``example_gran``, per (model, context)."""
    by_id = {a.id: a for a in answers}
    grans = {g for _, _, g in cells}
    per_question: _PerQuestion = defaultdict(Counter)
    examples: _Examples = defaultdict(list)
    for (answer_id, gran), judgment in sorted(judged.items()):
        answer = by_id.get(answer_id)
        if answer is None or gran not in grans:
            continue
        cell = cells[(answer.model, answer.context.value, gran)]
        t = index[answer.nct_id]
        if not judgment.units:
            cell.failed += 1
            continue
        cell.answers[t] += 1
        hallucinated = False
        pq = per_question[(answer.model, answer.context.value, gran, answer.question)]
        for unit in judgment.units:
            cell.counts[unit.category][t] += 1
            pq[unit.category.value] += 1
            if unit.category is Category.HALLUCINATION:
                hallucinated = True
                if gran == example_gran:
                    examples[(answer.model, answer.context.value)].append({
                        "nct_id": answer.nct_id, "question": answer.question,
                        "unit": unit.text, "sections": unit.sections,
                        "evidence_section": unit.evidence_section,
                        "evidence_quote": unit.evidence_quote,
                    })
        cell.flagged[t] += hallucinated
    return per_question, examples


def _rates(cells: dict[tuple[str, str, str], _Cell],
           weights: np.ndarray) -> list[dict[str, Any]]:
    """Per model x context x granularity: the share of each label, with bootstrap CIs."""
    rates = []
    for (m, c, g), cell in cells.items():
        scored = cell.scored
        rates.append({
            "model": m, "context": c, "granularity": g,
            "answers_judged": int(cell.answers.sum()), "answers_without_units": cell.failed,
            "units_scored": int(scored.sum()),
            "units_unscored": int(cell.counts[Category.ERROR].sum()),
            "categories": {cat.value: _estimate(cell.counts[cat], scored, weights).model_dump()
                           for cat in SCORED},
            ANY_HALLUCINATION: _estimate(cell.flagged, cell.answers, weights).model_dump(),
        })
    return rates


def _contrasts(cells: dict[tuple[str, str, str], _Cell], models: Sequence[str],
               grans: Sequence[str], contexts: Sequence[str],
               weights: np.ndarray) -> list[dict[str, Any]]:
    """Hallucination and fact shares of two contexts compared, paired by trial."""
    contrasts = []
    for m in models:
        for g in grans:
            for a, b in _context_pairs(contexts):
                ca, cb = cells[(m, a, g)], cells[(m, b, g)]
                if ca.scored.sum() == 0 or cb.scored.sum() == 0:
                    continue
                for cat in (Category.HALLUCINATION, Category.FACT):
                    diff = _resampled(ca.counts[cat], ca.scored, weights) - \
                        _resampled(cb.counts[cat], cb.scored, weights)
                    value = float(ca.counts[cat].sum() / ca.scored.sum()
                                  - cb.counts[cat].sum() / cb.scored.sum())
                    contrasts.append({"model": m, "granularity": g, "category": cat.value,
                                      "a": a, "b": b, "difference": value,
                                      "ci": percentile_ci(diff)})
    return contrasts


def _question_rows(manifest: StudyManifest, per_question: _PerQuestion,
                   axes: tuple[list[str], list[str], list[str]]) -> list[dict[str, Any]]:
    """Per question x model x context x granularity (``axes``: the last three): the share
    of each label among its scored units."""
    models, contexts, grans = axes
    questions = []
    for q in manifest.questions:
        for m in models:
            for c in contexts:
                for g in grans:
                    counter = per_question.get((m, c, g, q.number), Counter())
                    scored = sum(counter[cat.value] for cat in SCORED)
                    questions.append({
                        "question": q.number, "name": q.name, "model": m, "context": c,
                        "granularity": g, "units_scored": scored,
                        "units_unscored": counter[Category.ERROR.value],
                        "rates": {cat.value: (counter[cat.value] / scored if scored else None)
                                  for cat in SCORED},
                    })
    return questions


def _example_granularity(grans: Sequence[str]) -> str:
    for g in (Granularity.CLAIM.value, Granularity.SENTENCE.value, Granularity.PARAGRAPH.value):
        if g in grans:
            return g
    return grans[0] if grans else ""


def _context_pairs(contexts: Sequence[str]) -> list[tuple[str, str]]:
    """(worse, better) pairs in the paper's order: title vs summary, json vs summary,
    title vs json (those whose contexts both ran)."""
    order = [(Context.TITLE.value, Context.SUMMARY.value),
             (Context.JSON.value, Context.SUMMARY.value),
             (Context.TITLE.value, Context.JSON.value)]
    return [(a, b) for a, b in order if a in contexts and b in contexts]


# -- rendering -------------------------------------------------------------------------


def pct(estimate: dict[str, Any] | None, ci: bool = True) -> str:
    if not estimate or estimate.get("value") is None:
        return "n/a"
    text = f"{100 * estimate['value']:.1f}%"
    if ci and estimate.get("ci"):
        low, high = estimate["ci"]
        text += f" ({100 * low:.1f}-{100 * high:.1f})"
    return text


def _cell(text: object) -> str:
    """Text safe inside a markdown table cell (model and page text are untrusted)."""
    return " ".join(str(text).split()).replace("|", "\\|").replace("<", "&lt;") \
        .replace(">", "&gt;")


def markdown(summary: dict[str, Any], warnings: Sequence[str] = ()) -> str:
    """``report.md``; ``warnings`` (the judge's first, then problems reading the run
    directory) stand above the tables."""
    lines = ["# Clinical-trial study (CHECK's 15 questions)", ""]
    specs = ", ".join(f"{_cell(m['label'])} (`{_cell(m['spec'])}`)" for m in summary["models"])
    lines += [
        f"{summary['n_trials']} trials x {summary['n_questions']} questions x "
        f"{len(summary['contexts'])} contexts ({', '.join(summary['contexts'])}), "
        f"models: {specs}. Answers judged against the curated summaries by "
        f"`{_cell(summary['judge'])}`"
        + (f", claims cut by `{_cell(summary['decomposer'])}`" if summary["decomposer"] else "")
        + f". Shares are of scored units; 95 % CIs from {summary['bootstrap']['resamples']:,} "
        "bootstrap resamples of trials. Unscored units (judge failures) are counted apart.", ""]
    lines += [f"> **Warning**: {_cell(w)}\n" for w in warnings]
    if any(m["spec"].startswith("fake:") for m in summary["models"]):
        lines += ["**Scripted models** (`fake:` specs) answered this study: its numbers show "
                  "what the machinery measures, not how any real language model behaves.", ""]
    lines += ["## Answers", "", "| model | context | answered | empty | failed (asked again "
              "on rerun) | JSON context cut | tokens in / out |", "|---|---|---|---|---|---|---|"]
    for row in summary["answers"]:
        lines.append(f"| {_cell(row['model'])} | {row['context']} | {row['ok']} of "
                     f"{row['expected']} | {row['empty']} | {row['error']} | "
                     f"{row['json_cut'] if row['context'] == 'json' else '-'} | "
                     f"{row['prompt_tokens']:,} / {row['completion_tokens']:,} |")
    lines += _rate_tables(summary) + _contrast_table(summary) + _question_tables(summary)
    lines += _example_lines(summary)
    problems = summary.get("curation_problems") or {}
    if problems:
        lines += ["", "## Curation problems", "",
                  f"{len(problems)} trial record(s) have result rows naming a group their "
                  "module does not list; those rows are in the summaries without a group "
                  "title:", ""]
        lines += [f"- {nct}: {_cell('; '.join(found))}" for nct, found in problems.items()]
    return "\n".join(lines) + "\n"


def _rate_tables(summary: dict[str, Any]) -> list[str]:
    """One table of label shares per granularity."""
    lines: list[str] = []
    for gran in summary["granularities"]:
        lines += ["", f"## Label distribution, {gran} level", "",
                  "| model | context | " + " | ".join(LABELS.values())
                  + " | answers with a hallucination | scored units | unscored |",
                  "|---|---|" + "---|" * (len(LABELS) + 3)]
        for row in summary["rates"]:
            if row["granularity"] != gran:
                continue
            cats = " | ".join(pct(row["categories"][c.value]) for c in SCORED)
            lines.append(f"| {_cell(row['model'])} | {row['context']} | {cats} | "
                         f"{pct(row[ANY_HALLUCINATION])} | {row['units_scored']} | "
                         f"{row['units_unscored']} |")
    return lines


def _contrast_table(summary: dict[str, Any]) -> list[str]:
    """The contexts compared, paired by trial (nothing when no pair was scored)."""
    if not summary["contrasts"]:
        return []
    lines = ["", "## Contexts compared (paired by trial)", "",
             "| model | level | share of | context A | context B | A - B (95 % CI) |",
             "|---|---|---|---|---|---|"]
    for c in summary["contrasts"]:
        ci = c["ci"]
        interval = f" ({100 * ci[0]:+.1f} to {100 * ci[1]:+.1f})" if ci else ""
        lines.append(f"| {_cell(c['model'])} | {c['granularity']} | "
                     f"{LABELS[Category(c['category'])].lower()} | {c['a']} | {c['b']} | "
                     f"{100 * c['difference']:+.1f} pts{interval} |")
    return lines


def _example_lines(summary: dict[str, Any]) -> list[str]:
    """The hallucinated units shown as examples, with their evidence when quoted."""
    if not summary["examples"]:
        return []
    lines = ["", f"## Examples of hallucinated units ({summary['examples'][0]['granularity']}"
             " level)", ""]
    for e in summary["examples"]:
        quote = ""
        if e.get("evidence_quote"):
            quote = (f" Evidence ({_cell(e['evidence_section'])}): "
                     f"\"{_cell(e['evidence_quote'])}\"")
        lines.append(f"- {_cell(e['model'])}, {e['context']}, {e['nct_id']} Q{e['question']}: "
                     f"\"{_cell(e['unit'])}\".{quote}")
    return lines


def _question_tables(summary: dict[str, Any]) -> list[str]:
    gran = summary["granularities"][0]
    contexts = summary["contexts"]
    lines = ["", f"## Per question ({gran} level): hallucination share, factuality share", ""]
    rows = [r for r in summary["per_question"] if r["granularity"] == gran]
    for model in [m["label"] for m in summary["models"]]:
        lines += [f"**{_cell(model)}**", "",
                  "| # | question | " + " | ".join(contexts) + " |",
                  "|---|---|" + "---|" * len(contexts)]
        by_q: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
        for r in rows:
            if r["model"] == model:
                by_q[r["question"]][r["context"]] = r
        for number in sorted(by_q):
            cells = []
            for c in contexts:
                r = by_q[number].get(c)
                if not r or not r["units_scored"]:
                    cells.append("n/a")
                    continue
                h, f = r["rates"][Category.HALLUCINATION.value], r["rates"][Category.FACT.value]
                cells.append(f"H {100 * h:.0f}% · F {100 * f:.0f}% (n={r['units_scored']})")
            name = next(iter(by_q[number].values()))["name"]
            lines.append(f"| {number} | {_cell(name)} | " + " | ".join(cells) + " |")
        lines.append("")
        for c in contexts:
            worst = most_hallucinated([r for r in rows if r["model"] == model
                                       and r["context"] == c])
            if worst:
                lines.append(f"Most hallucinated with the {c} context: " + ", ".join(
                    f"Q{r['question']} {_cell(r['name'])} "
                    f"({100 * r['rates'][Category.HALLUCINATION.value]:.0f}%)" for r in worst))
                lines.append("")
    return lines


def most_hallucinated(rows: Sequence[dict[str, Any]], n: int = 3) -> list[dict[str, Any]]:
    """The ``n`` questions with the highest hallucination share (ties: question order),
    among those with a hallucination."""
    hit = [r for r in rows if r["units_scored"]
           and (r["rates"][Category.HALLUCINATION.value] or 0) > 0]
    return sorted(hit, key=lambda r: (-r["rates"][Category.HALLUCINATION.value],
                                      r["question"]))[:n]


def charts(summary: dict[str, Any]) -> dict[str, str]:
    """One SVG per model and granularity: category shares by context, with CIs."""
    out = {}
    for n, model in enumerate(m["label"] for m in summary["models"]):
        for gran in summary["granularities"]:
            values = {}
            for row in summary["rates"]:
                if row["model"] != model or row["granularity"] != gran:
                    continue
                for cat in SCORED:
                    values[(row["context"], LABELS[cat])] = Estimate(
                        **row["categories"][cat.value])
            out[f"chart-{n + 1}-{gran}.svg"] = grouped_bars(
                list(summary["contexts"]), list(LABELS.values()), values,
                title=f"{model}: labels by context ({gran} level)")
    return out


def finish(root: Path, config: Config) -> dict[str, Any]:
    """Compute and write the study's summary, report and charts from its run directory."""
    warnings: list[str] = []
    manifest, trials, answers, judgments = read_run(root, warnings)
    settings = config.trials
    summary = summarize(manifest, answers, judgments, n_boot=settings.bootstrap,
                        seed=settings.seed, n_examples=settings.examples, records=trials)
    summary["warnings"] = judge_warnings(manifest.judge_fails_study) + warnings
    atomic_write_text(root / "summary.json", json.dumps(summary, indent=2) + "\n")
    atomic_write_text(root / "report.md", markdown(summary, summary["warnings"]))
    for name, svg in charts(summary).items():
        atomic_write_text(root / name, svg)
    return summary
