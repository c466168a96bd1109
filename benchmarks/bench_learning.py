"""The clinical loop, simulated: do reviewed labels, taught back into the knowledge base,
make the built-in judge escalate less and agree more with the truth on claims it hears
again?

Design (recorded in the results):

* Data: Check-COVID dev (``../shared/data/retrieval/checkcovid``: 207 labelled claims, each
  written against one CORD-19 abstract of a 347-abstract corpus; dev only, used here to
  measure, nothing is trained). ``--claims`` distinct claims are drawn (seeded).
* Knowledge base: the corpus abstracts (MiniLM by default, ``--embedder hash`` for speed)
  minus the abstracts of a seeded ``--held-out`` share of the drawn claims: those claims
  start as coverage gaps (their evidence is not in the KB).
* Stream: ``--batches`` batches of ``--batch-size`` claims; from the second batch on,
  ``--repeat`` of each batch re-asks claims asked before (a chatbot hears the same questions
  again; drawn uniformly from the claims already asked, seeded), the rest are new claims.
  Each claim is one answer (its text), checked with the built-in judge.
* Policy: the default ``[arbitration]`` policy with ``coverage_gap = "ESCALATE"`` (a claim
  the KB does not cover goes to a clinician; JUDGMENT_ERROR and ERROR escalate as always).
* Each batch: :meth:`Checker.run` (recorded in a run store), the escalations queued with
  :func:`medverify.review.items_from_report` into a :class:`ReviewStore`, a simulated
  reviewer labels each item with its gold label (SUPPORTED -> FACT citing the claim's
  evidence; CONTRADICTED -> HALLUCINATION, with no correction because Check-COVID carries
  none, so it teaches nothing; NOT_ENOUGH_INFO -> COVERAGE_GAP, teaching nothing), and
  :func:`medverify.review.teach` adds what the label settled to the KB, and a claim asked
  again after its review is settled by it (``[review] settle``). The control arm runs the
  same stream and labels without ``teach`` and without settling (the loop before issue 30).
  Neither arm queues a claim that already waits for review.
* Check-COVID has no URLs: the simulated reviewer cites ``https://example.org/cord19/<cord
  uid>`` (a stand-in on a reserved domain; never fetched) with the abstract's title as the
  note. A FACT label teaches the claim's own text (what :func:`medverify.review.lesson` does for
  FACT with a source).

A third arm, ``learning+cards`` (issue 42), is the learning arm with ``calibrate
--from-reviews`` after each batch: a confidence card fitted on every closed review item so
far wraps the judge for the next batch (:func:`recalibrated`).

Teaching that must not spread (issue 41) is measured beside this loop by
``benchmarks/bench_near_miss.py``: near-miss claims of taught statements on the demo KB,
0 confident FACT and 0 ACCEPT after teaching (``benchmarks/results/near_miss.md``); this
loop's own targets (labelled claims settle, unrelated claims do not change) are below.

Per batch: claims, escalated share, the judge's agreement with gold (category FACT /
HALLUCINATION / COVERAGE_GAP vs SUPPORTED / CONTRADICTED / NOT_ENOUGH_INFO) overall and on
repeats vs new claims, and the KB documents added.

    .venv/bin/python benchmarks/bench_learning.py [--claims 120] [--batches 5]
        [--batch-size 40] [--repeat 0.5] [--held-out 0.5] [--embedder all-MiniLM-L6-v2|hash]

Writes benchmarks/results/learning.json and learning.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medverify.checker import Checker
from medverify.config import (
    ArbitrationPolicy,
    Config,
    KBSettings,
    RetrievalSettings,
    ReviewSettings,
)
from medverify.evals import calibrate as flow
from medverify.files import data_dir
from medverify.judge.confidence.wrap import CardJudge
from medverify.kb import KnowledgeBase
from medverify.kit import FlowKit
from medverify.records import Answer, Document
from medverify.review import DOC_PREFIX, ReviewLabel, items_from_report, loop_report, teach
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore

ROOT = Path(__file__).resolve().parents[1]
DATA = data_dir() / "retrieval" / "checkcovid"
RESULTS = ROOT / "benchmarks" / "results"
REVIEWER = "simulated-reviewer"
GOLD_CATEGORY = {"SUPPORTED": "FACT", "CONTRADICTED": "HALLUCINATION",
                 "NOT_ENOUGH_INFO": "COVERAGE_GAP"}
REVIEW_LABEL = {"SUPPORTED": ReviewLabel.FACT, "CONTRADICTED": ReviewLabel.HALLUCINATION,
                "NOT_ENOUGH_INFO": ReviewLabel.COVERAGE_GAP}


@dataclass(frozen=True)
class Query:
    id: str
    claim: str
    doc_id: str
    label: str


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def stream(queries: list[Query], batches: int, size: int, repeat: float,
           rng: random.Random) -> list[list[tuple[Query, bool]]]:
    """Batches of (query, is_repeat): the first all new; later ones ``repeat`` re-asked."""
    fresh = list(queries)
    asked: list[Query] = []
    out = []
    for b in range(batches):
        n_repeat = 0 if b == 0 else round(size * repeat)
        batch = [(q, True) for q in (rng.choice(asked) for _ in range(n_repeat))]
        new = fresh[: size - n_repeat]
        del fresh[: len(new)]
        batch += [(q, False) for q in new]
        rng.shuffle(batch)
        asked += new
        out.append(batch)
    return out


def share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def run_arm(name: str, learn: bool, base_kb: Path, work: Path, config: Config,
            batches: list[list[tuple[Query, bool]]], titles: dict[str, str],
            held_out: set[str], recalibrate: bool = False) -> dict[str, Any]:
    kb_dir = work / f"kb-{name}"
    shutil.copytree(base_kb, kb_dir)
    rows: list[dict[str, Any]] = []
    log: list[dict[str, Any]] = []  # every judged claim, for the paired comparisons
    taught: dict[str, int] = {}  # claim text -> batch in which its review was taught
    reviewed: dict[str, list[tuple[int, str]]] = {}  # claim text -> [(batch, label)]
    started = time.perf_counter()
    arm_config = config.model_copy(update={"kb": kb_dir,
                                           "review": ReviewSettings(settle=learn)})
    with KnowledgeBase.open(kb_dir) as kb, RunStore(work / f"runs-{name}.db") as runs:
        queue = ReviewStore(runs)
        checker = Checker.from_config(arm_config, kit=FlowKit(kb=kb))
        try:
            for number, batch in enumerate(batches, start=1):
                answers = [Answer(id=f"b{number}-{i}-{q.id}", text=q.claim)
                           for i, (q, _) in enumerate(batch)]
                reports = asyncio.run(checker.run(answers, store=runs, concurrency=2))
                stats: Counter[str] = Counter()
                for (query, repeated), report in zip(batch, reports, strict=True):
                    kind = "repeat" if repeated else "new"
                    gold = GOLD_CATEGORY[query.label]
                    for result in report.results:
                        log.append(logged(number, report.answer.id, result))
                        count(stats, kind, result.category.value == gold,
                              result.category.value, query.doc_id in held_out)
                    items = items_from_report(report)
                    stats["escalated"] += len(items)
                    stats[f"escalated_{kind}"] += len(items)
                    for item in items:
                        if not queue.add_items([item]):  # the same claim waits already
                            stats["not_queued_twice"] += 1
                            continue
                        label = REVIEW_LABEL[query.label]
                        # every label in order (the same sentence can open two claims with
                        # different gold labels: the most recently closed item settles it)
                        reviewed.setdefault(item.claim.text, []).append((number, label.value))
                        source = (f"https://example.org/cord19/{query.doc_id}"
                                  if label is ReviewLabel.FACT else None)
                        closed = queue.label(item.id, REVIEWER, label, source_url=source,
                                             note=titles.get(query.doc_id) or None)
                        stats["labels"] += 1
                        if learn and teach(closed, kb, queue) is not None:
                            stats["kb_added"] += 1
                            taught.setdefault(item.claim.text, number)
                row = {
                    "batch": number, "answers": len(batch),
                    "repeats": sum(1 for _, r in batch if r),
                    "claims": stats["claims"], "escalated": stats["escalated"],
                    "escalated_share": share(stats["escalated"], stats["claims"]),
                    "escalated_share_repeat": share(stats["escalated_repeat"],
                                                    stats["claims_repeat"]),
                    "escalated_share_new": share(stats["escalated_new"], stats["claims_new"]),
                    "agreement": share(stats["agree"], stats["claims"]),
                    "agreement_repeat": share(stats["agree_repeat"], stats["claims_repeat"]),
                    "agreement_new": share(stats["agree_new"], stats["claims_new"]),
                    "agreement_evidence_left_out": share(stats["agree_gap_doc"],
                                                         stats["claims_gap_doc"]),
                    "claims_repeat": stats["claims_repeat"], "claims_new": stats["claims_new"],
                    "labels": stats["labels"], "kb_added": stats["kb_added"],
                    "not_queued_twice": stats["not_queued_twice"],
                    "categories": {k.removeprefix("category_"): v for k, v in stats.items()
                                   if k.startswith("category_")},
                }
                if recalibrate:
                    row["card"] = recalibrated(checker, arm_config, work / f"runs-{name}.db")
                rows.append(row)
                print(f"{name} batch {number}: {row['claims']} claims, escalated "
                      f"{pct(row['escalated_share'])}, agreement {pct(row['agreement'])} "
                      f"(repeat {pct(row['agreement_repeat'])}, new "
                      f"{pct(row['agreement_new'])}), KB +{row['kb_added']}", flush=True)
        finally:
            asyncio.run(checker.aclose())
        total = loop_report(queue, by="day").total.model_dump(mode="json")
    return {"arm": name, "learn": learn, "settle": learn, "batches": rows,
            "loop_report_total": total, "seconds": round(time.perf_counter() - started, 1),
            "log": log, "taught": taught, "reviewed": reviewed}


def recalibrated(checker: Checker, config: Config, store: Path) -> dict[str, Any]:
    """Issue 42: `calibrate --from-reviews` after a batch: a card fitted on every closed
    review item so far (the plain judge's verdicts on the passages the reviewer saw), put
    around the checker's judge for the next batch. Returns the card's summary."""
    examples, _ = flow.reviewed_items(store)
    plain = flow.plain_judge(config, None)
    verdicts = asyncio.run(flow.judge_all(plain, examples))
    card = flow.fit_card(plain, examples, verdicts, sources=["reviews"], by="bench")
    inner = checker.judge.inner if isinstance(checker.judge, CardJudge) else checker.judge
    checker.judge = CardJudge(inner, card)
    return {"examples": len(examples), "card_id": card.card_id,
            "thresholds": {c: f.threshold for c, f in card.categories.items()},
            "why_none": {c: f.why_none for c, f in card.categories.items() if f.why_none}}


def logged(batch: int, answer_id: str, result: Any) -> dict[str, Any]:
    """One judged claim, for the paired comparisons between the arms."""
    return {"batch": batch, "answer": answer_id, "claim": result.claim.text,
            "category": result.category.value, "confident": result.confident,
            "rule": result.arbitration.rule if result.arbitration else None,
            "docs": [p.doc_id for p in result.passages]}


def count(stats: Counter[str], kind: str, ok: bool, category: str, gap_doc: bool) -> None:
    """Add one judged claim to a batch's tallies."""
    stats["claims"] += 1
    stats[f"claims_{kind}"] += 1
    stats["agree"] += ok
    stats[f"agree_{kind}"] += ok
    stats[f"category_{category}"] += 1
    if gap_doc:
        stats["claims_gap_doc"] += 1
        stats["agree_gap_doc"] += ok


def rechecked_after_review(arm: dict[str, Any]) -> dict[str, Any]:
    """Claims asked again after a reviewer labelled them (any label): how many come back as
    the reviewer's label (issue 30: 100 %), how many by the ``reviewed`` rule, and, of the
    FACT labels with a source (taught), how many are FACT."""
    later = []  # (a check, the latest label given in an earlier batch)
    for c in arm["log"]:
        before = [label for batch, label in arm["reviewed"].get(c["claim"], [])
                  if batch < c["batch"]]
        if before:
            later.append((c, before[-1]))
    taught = [c for c, _ in later if c["claim"] in arm["taught"]]
    return {"rechecked": len(later),
            "matches_reviewer": sum(1 for c, label in later if c["category"] == label),
            "by_reviewed_rule": sum(1 for c, _ in later if c["rule"] == "reviewed"),
            "by_label": dict(Counter(label for _, label in later)),
            "taught_rechecked": len(taught),
            "taught_fact": sum(1 for c in taught if c["category"] == "FACT"),
            "mismatches": sorted({f"{c['claim']} ({c['category']} vs {label})"
                                  for c, label in later if c["category"] != label})[:10]}


def unrelated_flips(learn: dict[str, Any], control: dict[str, Any]) -> dict[str, Any]:
    """Claims not settled by a review and whose evidence in the learning arm holds no taught
    document: how many got a different category than the same claim, same position, in
    the control arm (issue 30: 0)."""
    pairs = [(a, b) for a, b in zip(learn["log"], control["log"], strict=True)
             if a["rule"] != "reviewed"
             and not any(d.startswith(DOC_PREFIX) for d in a["docs"])]
    changed = [(a, b) for a, b in pairs if a["category"] != b["category"]]
    moved = [a for a, b in changed if a["docs"] != b["docs"]]
    with_taught = len(learn["log"]) - len(pairs)
    return {"claims_without_taught_evidence": len(pairs), "changed": len(changed),
            "changed_with_same_evidence": len(changed) - len(moved),
            "changed_with_other_evidence": len(moved),
            "claims_with_taught_evidence": with_taught,
            "examples": [a["claim"] for a, _ in changed[:5]]}


def sure_overturns(arms: list[dict[str, Any]], queries: list[Query]) -> dict[str, Any]:
    """Issue 42: per arm and batch, the share of the judge's **sure** verdicts (``confident``
    true; a claim settled by a review left out: that is the reviewer's label, not a verdict)
    the gold reviewer would overturn (gold category != the judge's), among all of them
    (gold is known for every claim), among those accepted (what spot checks sample) and
    among the ones the ``audit`` rule spot-checked. Returns the rows and their markdown."""
    gold = {q.id: GOLD_CATEGORY[q.label] for q in queries}
    rows = []
    for arm in arms:
        for number in range(1, len(arm["batches"]) + 1):
            sure = [(c, c["category"] != gold[c["answer"].split("-", 2)[2]])
                    for c in arm["log"] if c["batch"] == number and c["confident"] is True
                    and c["rule"] != "reviewed"]
            accepted = [(c, o) for c, o in sure if c["rule"] == "fact"]
            audited = [(c, o) for c, o in sure if c["rule"] == "audit"]
            row: dict[str, Any] = {"arm": arm["arm"], "batch": number, "overturned_examples": [
                f"{c['claim']} ({c['category']}, rule {c['rule']}; gold "
                f"{gold[c['answer'].split('-', 2)[2]]})" for c, o in sure if o]}
            for key, group in (("sure", sure), ("accepted", accepted),
                               ("spot_checked", audited)):
                wrong = sum(o for _, o in group)
                row |= {key: len(group), f"{key}_overturned": wrong,
                        f"{key}_overturned_share": share(wrong, len(group))}
            rows.append(row)
    lines = ["", "## Sure verdicts the gold reviewer would overturn (issue 42)", "",
             "Sure: the verdict is shown as sure (`confident`), claims settled by a review "
             "left out; accepted: the sure ones the policy accepts (rule `fact`, what spot "
             "checks sample); spot-checked: escalated by the `audit` rule "
             "(`[arbitration] audit_share`). Overturned: gold category differs.", "",
             "| arm | batch | sure | overturned | accepted | overturned | spot-checked | "
             "overturned |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['arm']} | {r['batch']} | {r['sure']} | {pct(r['sure_overturned_share'])} "
              f"| {r['accepted']} | {pct(r['accepted_overturned_share'])} | "
              f"{r['spot_checked']} | {r['spot_checked_overturned']} of {r['spot_checked']} |"
              for r in rows]
    lines += ["", "Overturned sure verdicts:", ""] + [
        f"- {r['arm']}, batch {r['batch']}: {e}" for r in rows for e in r["overturned_examples"]]
    cards = [(arm["arm"], b) for arm in arms for b in arm["batches"] if "card" in b]
    if cards:
        lines += ["", "Cards fitted from the closed review items after each batch (arm "
                  "`learning+cards`, used for the next batch):", ""]
        lines += [f"- after batch {b['batch']}: {b['card']['examples']} items, thresholds "
                  f"{b['card']['thresholds']}" for _, b in cards]
    return {"per_batch": rows, "markdown": lines}


def pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def markdown(payload: dict[str, Any]) -> str:
    d = payload["design"]
    lines = [
        "# The clinical loop, simulated (Check-COVID dev, built-in judge)", "",
        f"{d['claims']} distinct claims of Check-COVID dev (seed {d['seed']}); KB: "
        f"{d['kb_documents']} of the {d['corpus_documents']} corpus abstracts "
        f"({d['embedder']} embedder, top_k {d['top_k']}): the abstracts of "
        f"{d['claims_evidence_left_out']} claims ({d['held_out_documents']} abstracts, "
        f"{pct(d['held_out'])} of the claims' documents) left out, so those claims start as "
        f"coverage gaps. Stream: {d['batches']} batches of {d['batch_size']} claims, from "
        f"batch 2 on {pct(d['repeat'])} re-asked (drawn from the claims asked before). Policy: "
        f"default with `coverage_gap = \"ESCALATE\"` (`{d['policy_id']}`). The simulated "
        "reviewer labels every escalated claim with its gold label: SUPPORTED -> FACT citing "
        "a stand-in URL for its abstract (`https://example.org/cord19/<cord uid>`: "
        "Check-COVID has no URLs), which teaches the claim's text; CONTRADICTED -> "
        "HALLUCINATION without a correction (the data has none): nothing taught; "
        "NOT_ENOUGH_INFO -> COVERAGE_GAP: nothing taught. Learning: `review.teach` after "
        "each label, and reviewed claims are settled (`[review] settle`, the default); "
        "control: the same stream and labels, no teaching, no settling (`settle = false`: "
        "the loop before issue 30). Both arms never queue a claim that already waits for "
        "review.", "",
        "Agreement: the judge's category equals the gold one (FACT / HALLUCINATION / "
        "COVERAGE_GAP for SUPPORTED / CONTRADICTED / NOT_ENOUGH_INFO), before review. "
        "Escalated: share of claims queued for review.", "",
    ]
    head = ("| arm | batch | claims (repeat/new) | escalated | esc. repeat | esc. new | "
            "agreement | agr. repeat | agr. new | agr. evidence left out | KB + |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|")
    lines.append(head)
    for arm in payload["arms"]:
        for r in arm["batches"]:
            lines.append(
                f"| {arm['arm']} | {r['batch']} | {r['claims']} ({r['claims_repeat']}/"
                f"{r['claims_new']}) | {pct(r['escalated_share'])} | "
                f"{pct(r['escalated_share_repeat'])} | {pct(r['escalated_share_new'])} | "
                f"{pct(r['agreement'])} | {pct(r['agreement_repeat'])} | "
                f"{pct(r['agreement_new'])} | {pct(r['agreement_evidence_left_out'])} | "
                f"{r['kb_added']} |")
    lines += ["", "## Totals over the stream", "",
              "| arm | claims | escalated | agreement | agreement on repeats | KB documents "
              "added | seconds |", "|---|---|---|---|---|---|---|"]
    for arm in payload["arms"]:
        t = arm["totals"]
        lines.append(f"| {arm['arm']} | {t['claims']} | {pct(t['escalated_share'])} | "
                     f"{pct(t['agreement'])} | {pct(t['agreement_repeat'])} | "
                     f"{t['kb_added']} | {arm['seconds']} |")
    r, f = payload["targets"]["reviewed_then_rechecked"], payload["targets"]["unrelated_flips"]
    lines += ["", "## Issue 30's loop targets", "",
              f"- Claims asked again after a reviewer labelled them: **{r['matches_reviewer']} "
              f"of {r['rechecked']}** come back as the reviewer's label (target: all), "
              f"{r['by_reviewed_rule']} by the `reviewed` rule; labels {r['by_label']}. Of "
              f"those taught (FACT with a source), {r['taught_fact']} of "
              f"{r['taught_rechecked']} are FACT."
              + (f" Mismatches: {r['mismatches']}" if r["mismatches"] else ""),
              f"- Claims not settled by a review and whose evidence holds no taught document: "
              f"**{f['changed']} of {f['claims_without_taught_evidence']}** changed category "
              f"against the same claim in the control arm (target 0): "
              f"{f['changed_with_same_evidence']} with the same passages, "
              f"{f['changed_with_other_evidence']} with other passages; "
              f"{f['claims_with_taught_evidence']} claims were settled or had a taught "
              "document among their passages (teaching may change those)."
              + (f" Changed: {f['examples']}" if f["examples"] else "")]
    lines += ["", "## Reading", "", *payload["reading"], ""]
    return "\n".join(lines)


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def total(key: str) -> int:
        return sum(r[key] for r in rows)

    def weighted(rate: str, base: str) -> float | None:
        n = total(base)
        return sum((r[rate] or 0.0) * r[base] for r in rows) / n if n else None

    return {"claims": total("claims"), "escalated": total("escalated"),
            "escalated_share": share(total("escalated"), total("claims")),
            "agreement": weighted("agreement", "claims"),
            "agreement_repeat": weighted("agreement_repeat", "claims_repeat"),
            "kb_added": total("kb_added")}


def reading(arms: list[dict[str, Any]]) -> list[str]:
    learn, control = arms[:2]
    out = []
    for arm in arms:
        t, cats = arm["totals"], Counter()
        for row in arm["batches"]:
            cats.update(row["categories"])
        out.append(f"- {arm['arm']}: {t['claims']} claims, escalated {pct(t['escalated_share'])}, "
                   f"agreement {pct(t['agreement'])}, KB +{t['kb_added']}; the judge's "
                   "categories: " + ", ".join(f"{k} {v}" for k, v in sorted(cats.items()))
                   + ". HALLUCINATION is flagged, not escalated, by this policy: those claims "
                   "never reach the reviewer, so nothing is learned from them.")
    for a, b in zip(learn["batches"], control["batches"], strict=True):
        if a["batch"] == 1:
            continue
        out.append(f"- batch {a['batch']}: escalated {pct(a['escalated_share'])} with "
                   f"learning vs {pct(b['escalated_share'])} without; agreement on repeats "
                   f"{pct(a['agreement_repeat'])} vs {pct(b['agreement_repeat'])}; on new "
                   f"claims {pct(a['agreement_new'])} vs {pct(b['agreement_new'])}.")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--claims", type=int, default=120, help="distinct claims drawn")
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=40)
    parser.add_argument("--repeat", type=float, default=0.5)
    parser.add_argument("--held-out", type=float, default=0.5,
                        help="share of the drawn claims' abstracts left out of the KB")
    parser.add_argument("--embedder", default="all-MiniLM-L6-v2")
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    queries = [Query(q["id"], q["query"], q["relevant"][0], q["label"])
               for q in read_jsonl(DATA / "queries_dev.jsonl")]
    rng.shuffle(queries)
    queries = queries[: args.claims]
    corpus = read_jsonl(DATA / "corpus.jsonl")
    titles = {d["doc_id"]: d.get("title") or "" for d in corpus}
    docs_of_claims = sorted({q.doc_id for q in queries})
    held_out = set(rng.sample(docs_of_claims, round(len(docs_of_claims) * args.held_out)))
    batches = stream(queries, args.batches, args.batch_size, args.repeat, rng)
    policy = ArbitrationPolicy(coverage_gap="ESCALATE")
    with tempfile.TemporaryDirectory(prefix="bench-learning-") as tmp:
        work = Path(tmp)
        config = Config(judge="builtin", decomposer="rules", store=work / "unused.db",
                        kb_settings=KBSettings(embedder=args.embedder),
                        retrieval=RetrievalSettings(top_k=args.top_k), arbitration=policy)
        started = time.perf_counter()
        kept = [Document(doc_id=d["doc_id"], title=d.get("title") or None, text=d["text"],
                         source="check-covid") for d in corpus if d["doc_id"] not in held_out]
        with KnowledgeBase.create(work / "kb-base", embedder=args.embedder) as kb:
            kb.ingest(kept)
        build_s = time.perf_counter() - started
        print(f"KB: {len(kept)} abstracts in {build_s:.1f} s", flush=True)
        arms = [run_arm(name, learn, work / "kb-base", work, config, batches, titles,
                        held_out, recalibrate) for name, learn, recalibrate in (
                            ("learning", True, False), ("control", False, False),
                            ("learning+cards", True, True))]
    from medverify.arbitration import policy_id

    for arm in arms:
        arm["totals"] = totals(arm["batches"])
    targets = {"reviewed_then_rechecked": rechecked_after_review(arms[0]),
               "unrelated_flips": unrelated_flips(arms[0], arms[1])}
    sure = sure_overturns(arms, queries)
    for arm in arms:
        arm.pop("log")
    payload = {
        "design": {
            "data": "Check-COVID dev (retrieval/checkcovid: queries_dev + corpus)",
            "claims": len(queries), "seed": args.seed, "batches": args.batches,
            "batch_size": args.batch_size, "repeat": args.repeat, "held_out": args.held_out,
            "held_out_documents": len(held_out),
            "claims_evidence_left_out": sum(1 for q in queries if q.doc_id in held_out),
            "corpus_documents": len(corpus), "kb_documents": len(kept),
            "embedder": args.embedder, "top_k": args.top_k, "judge": "builtin",
            "decomposer": "rules", "policy": policy.model_dump(mode="json"),
            "policy_id": policy_id(policy), "kb_build_seconds": round(build_s, 1),
            "gold_labels": dict(Counter(q.label for q in queries)),
            "reviewer": "gold label; SUPPORTED -> FACT + stand-in source URL "
                        "https://example.org/cord19/<cord uid> (teaches the claim text); "
                        "CONTRADICTED -> HALLUCINATION, no correction (none in the data); "
                        "NOT_ENOUGH_INFO -> COVERAGE_GAP",
        },
        "arms": arms,
        "targets": targets,
        "reading": reading(arms),
        "sure_verdicts": sure["per_batch"],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "learning.json").write_text(json.dumps(payload, indent=2) + "\n")
    text = markdown(payload) + "\n".join(sure["markdown"]) + "\n"
    (RESULTS / "learning.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
