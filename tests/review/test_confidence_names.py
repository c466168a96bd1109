"""Issue 43: one confidence per claim, named for what it is, and the item page's caption
written from the rule that decided.

The arbitration inputs carry the judge's raw probability as ``judge_probability`` (never
``confidence``, which is the verdict's calibrated probability) and ``confident`` as a
boolean; runs and review items stored in the old shape still load and show. The item page
says how the judge decided from the verdict, so a FACT whose contradiction probability is
past the threshold is never captioned as if no passage contradicted it."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from medverify.arbitration import arbitrate
from medverify.config import ArbitrationPolicy
from medverify.records import (
    Analysis,
    Answer,
    Arbitration,
    CheckFinding,
    CheckKind,
    Claim,
    ClaimResult,
    Passage,
    Report,
    Verdict,
)
from medverify.report.html import render_html
from medverify.report.metrics import compute_metrics
from medverify.report.terminal import summary_lines
from medverify.review import ReviewItem, items_from_report
from medverify.service import item_page, ui
from medverify.service.item_view import decision_caption, input_rows
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore

OLD_INPUTS = {"category": "FACT", "risk": None, "confidence": 0.98, "confident": 0.0,
              "not_sure": "P(supported)=0.11, below the 0.81 needed", "clinical": "drug"}
"""The inputs as runs recorded them before issue 43."""
HOSTILE = "<script>window.__pwned=1</script>"


def _fact(contradiction: float = 0.54) -> ClaimResult:
    """A FACT supported by p1 (0.57) while p2 reaches ``contradiction`` but is about
    something else: the built-in judge's reasons, as it writes them."""
    claim = Claim(id="c1", text="Metformin is the first medicine for type 2 diabetes.")
    passages = [Passage(id="p1", doc_id="d1", title="Metformin",
                        text="Metformin is the first medicine for type 2 diabetes."),
                Passage(id="p2", doc_id="d2", title="Insulin " + HOSTILE,
                        text="Insulin pens are kept cold.")]
    raw = {"passages": {"p1": {"SUPPORTED": 0.57, "CONTRADICTED": 0.1, "NOT_ENOUGH_INFO": 0.33},
                        "p2": {"SUPPORTED": 0.02, "CONTRADICTED": contradiction,
                               "NOT_ENOUGH_INFO": 0.44}}}
    verdict = Verdict(
        claim_id="c1",
        factual=Analysis(holds=True, passage_id="p1", reason="P(supported)=0.57 in passage "
                         "'Metformin' (at or above the threshold 0.25)"),
        counterfactual=Analysis(holds=False, passage_id="p2", reason=(
            f"P(contradicted)={contradiction:.2f} in passage 'Insulin {HOSTILE}' (at or above "
            "the threshold 0.35), but the passage is about something else (it holds 10% of "
            "the claim's key content)")),
        probabilities={"SUPPORTED": 0.57, "CONTRADICTED": contradiction,
                       "NOT_ENOUGH_INFO": 0.44, "threshold_support": 0.25,
                       "threshold_contradict": 0.35},
        raw_output=json.dumps(raw), confidence=0.11, confident=False,
        not_sure="P(supported)=0.11, below the 0.81 needed for 70% precision")
    return ClaimResult.from_verdict(claim, passages, verdict)


def _item(result: ClaimResult) -> ReviewItem:
    report = Report(answer=Answer(id="a1", text=result.claim.text, question="What first?"),
                    results=[result], metrics=compute_metrics([result]), run_id="run1")
    [item] = items_from_report(report, policy=ArbitrationPolicy(not_sure="ESCALATE"))
    return item


def _render(item: ReviewItem) -> str:
    return ui._environment().get_template("item.html.j2").render(
        nonce="n", session=None, csrf="t", done=None, **item_page.item_context(item, None))


def test_the_inputs_name_the_raw_probability_and_confident_is_a_boolean() -> None:
    decided = arbitrate(_fact(), ArbitrationPolicy())
    assert decided.inputs["judge_probability"] == 0.57  # the judge's raw P(SUPPORTED)
    assert "confidence" not in decided.inputs
    assert decided.inputs["confident"] is False
    again = Arbitration.model_validate_json(decided.model_dump_json())
    assert again.inputs["confident"] is False and again.inputs["judge_probability"] == 0.57


def test_an_old_stored_run_loads_with_the_new_names(tmp_path: Path) -> None:
    result = _fact()
    result = result.decided(arbitrate(result, ArbitrationPolicy()))
    with RunStore(tmp_path / "runs.db") as store:
        run_id = store.start_run(kind="check", config={}, models={}, prompt_versions={},
                                 kb_snapshot=None)
        store.save_answer(run_id, 0, Answer(id="a1", text=result.claim.text), [result])
    old = {"decision": "FLAG", "rule": "not_sure_clinical", "policy": "arbitration/v1+0",
           "inputs": OLD_INPUTS}
    with sqlite3.connect(tmp_path / "runs.db") as db:
        db.execute("UPDATE claims SET arbitration = ?", (json.dumps(old),))
    with RunStore(tmp_path / "runs.db") as store:
        [report] = store.reports(run_id)
    inputs = report.results[0].arbitration.inputs  # type: ignore[union-attr]
    assert inputs["judge_probability"] == 0.98 and "confidence" not in inputs
    assert inputs["confident"] is False
    html = render_html(report)
    assert "judge probability 0.98" in html and "confidence 0.98" not in html
    assert "· confident no" in html


def test_an_old_stored_review_item_loads_and_shows(tmp_path: Path) -> None:
    item = _item(_fact())
    with RunStore(tmp_path / "runs.db") as store:
        ReviewStore(store).add_items([item])
    body = json.loads(item.model_dump_json(exclude={"labels", "status", "assignee",
                                                    "final_label", "closed_at", "analyses"}))
    body["arbitration"]["inputs"] = OLD_INPUTS
    with sqlite3.connect(tmp_path / "runs.db") as db:
        db.execute("UPDATE review_items SET item = ?", (json.dumps(body),))
    with RunStore(tmp_path / "runs.db") as store:
        stored = ReviewStore(store).get(item.id)
    inputs = stored.arbitration["inputs"]
    assert inputs["judge_probability"] == 0.98 and inputs["confident"] is False
    assert stored.analyses == {}  # queued before the analyses were kept
    assert item_page.item_verdict(stored).not_sure
    html = _render(stored)
    decided = html[html.index('id="how-decided"'):]
    decided = decided[:decided.index("</div>")]
    # without the judge's own reason, the page says which passages passed and that the
    # reason is not recorded; never that no passage contradicted it
    assert ("Passage p2 reached contradiction 0.54 (threshold 0.35) but did not count "
            "against the FACT: the judge&#39;s reason was not recorded with this item.") in (
        decided)


def test_the_input_rows_say_what_each_number_is() -> None:
    rows = {r.name: r for r in input_rows({"judge_probability": 0.98, "confident": True,
                                           "risk": None, "not_sure": "x"})}
    assert rows["judge probability"].value == "0.98"
    assert "not the verdict's confidence" in rows["judge probability"].meaning
    assert rows["confident"].value == "yes" and rows["risk"].value == "–"
    assert "not_sure" not in rows and "not sure" not in rows


def test_a_fact_past_the_contradiction_threshold_is_not_captioned_as_uncontradicted() -> None:
    item = _item(_fact(0.54))
    assert item.analyses["contradiction"].startswith("P(contradicted)=0.54")
    html = _render(item)
    decided = html[html.index('id="how-decided"'):]
    decided = decided[:decided.index("</div>")]
    assert "FACT needs" not in html and "none with contradiction" not in html
    assert ("FACT (deciding passage p1): P(supported)=0.57 in passage &#39;Metformin&#39; "
            "(at or above the threshold 0.25).") in decided
    assert ("Not contradiction: P(contradicted)=0.54 in passage &#39;Insulin &lt;script&gt;"
            "window.__pwned=1&lt;/script&gt;&#39; (at or above the threshold 0.35), but the "
            "passage is about something else") in decided
    assert "Not sure: P(supported)=0.11, below the 0.81 needed" in decided
    assert "support ≥ 0.25, contradiction ≥ 0.35" in decided
    assert HOSTILE not in html
    # the judge's raw probability and the calibrated confidence are not both "confidence"
    inputs = html[html.index('id="inputs"'):]
    assert ">judge probability</span> 0.57" in inputs[:inputs.index("</p>")]


def test_the_caption_names_each_veto_and_gives_no_thresholds_for_a_judge_without() -> None:
    finding = CheckFinding(kind=CheckKind.NUMBER, veto=True, passage_id="p3",
                           claim_says="every 2 years", passage_says="every 10 years",
                           reason="the claim says every 2 years; the passage says every 10")
    item = _item(_fact()).model_copy(update={
        "findings": [finding], "probabilities": {"SUPPORTED": 0.57}})
    lines = decision_caption(item, None)
    assert ("An exact check vetoed the support of passage p3: the claim says every 2 years; "
            "the passage says every 10.") in lines
    assert not any("Thresholds" in line for line in lines)
    assert not any(line.startswith("Not sure") for line in lines)


def _old_item(**extra: Any) -> ReviewItem:
    fields: dict[str, Any] = {
        "id": "rv-old", "answer_id": "a1", "answer_text": "X.", "claim": Claim(id="c1",
                                                                               text="X."),
        "category": "FACT", "probabilities": {"threshold_support": 0.25,
                                              "threshold_contradict": 0.35},
        "passage_probabilities": {"p1": {"SUPPORTED": 0.57, "CONTRADICTED": 0.54}},
        "judge_reason": "P(supported)=0.57 in passage 'A'", "created_at": datetime.now(UTC)}
    fields.update(extra)
    return ReviewItem(**fields)


def test_an_old_item_past_both_thresholds_counts_for_the_larger() -> None:
    lines = decision_caption(_old_item(), None)
    assert ("Passage p1 reached contradiction 0.54 (threshold 0.35) but did not count "
            "against the FACT: it passed both thresholds and counts for the larger.") in lines
    below = decision_caption(_old_item(passage_probabilities={
        "p1": {"SUPPORTED": 0.57, "CONTRADICTED": 0.2}}), None)
    assert not any("contradiction 0.2" in line for line in below)


def test_the_terminal_says_once_what_the_confident_percentage_is() -> None:
    result = _fact().model_copy(update={"confident": True, "confidence": 0.93,
                                        "not_sure": None})
    report = Report(answer=Answer(id="a1", text=result.claim.text), results=[result],
                    metrics=compute_metrics([result]))
    legend = [str(line) for line in summary_lines(report) if "calibrated" in str(line)]
    assert legend == ["confident, N%: the verdict's calibrated confidence, the probability "
                      "that its category is right"]
    unsure = report.model_copy(update={"results": [_fact()]})
    assert not any("calibrated" in str(line) for line in summary_lines(unsure))


def test_a_coverage_gap_caption_gives_both_analyses() -> None:
    item = _item(_fact()).model_copy(update={
        "category": "COVERAGE_GAP", "judge_reason": "P(supported)=0.12 in passage 'A' "
        "(below the threshold 0.25)", "analyses": {
            "support": "P(supported)=0.12 in passage 'A' (below the threshold 0.25)",
            "contradiction": "P(contradicted)=0.20 in passage 'B' (below the threshold 0.35)"}})
    lines = decision_caption(item, None)
    assert lines[0].startswith("COVERAGE_GAP (deciding passage p1): P(supported)=0.12")
    assert "Not contradiction: P(contradicted)=0.20 in passage 'B' (below the threshold " \
        "0.35)." in lines
