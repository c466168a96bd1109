"""The scored LLM judge: CHECK's two analyses as two Yes/No questions, read from the model's
option log-probabilities instead of generated JSON.

For each (claim, passage) the model is asked, at the end of one shared prompt
(``prompts/judge_scored``), the factual question ("can the claim be deduced from the
passage?") and the counterfactual one ("can its negation?"), with one reply token and the
top log-probabilities. ``P(yes)`` of a pass is ``p(Yes) / (p(Yes) + p(No))`` over the
answer tokens spelled yes / no (any case, leading space). A pass whose top tokens hold
neither is an ERROR, never a guess.

Small instruct models answer Yes (or No) to almost everything, so the raw ``P(yes)`` is not
a decision. A **prior correction fitted on training-allowed pairs** turns the two pass
log-odds, with the built-in judge's lexical features (:func:`pair_features`), into
calibrated (S, C, N) probabilities: a multinomial logistic regression per model and prompt
(``judge/llm_calibration.json``, fitted by ``scripts/calibrate_llm_judge.py``), with
confident thresholds chosen by the same Wilson rule as the built-in judge's. Without a
calibration for the model in use, the raw rule applies (a pass holds at ``P(yes) >= 0.5``)
and no verdict is confident.

Claim level: the passage with the highest P(S) decides support and the one with the
highest P(C) decides contradiction; the verdict then passes the exact checks
(:func:`check_verdict`). One model call per pass per passage; the local provider and
servers with prefix caching compute the shared prompt once.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from medverify.errors import ConfigError, MedverifyError
from medverify.judge import JudgeItem
from medverify.judge.calibration import Family
from medverify.judge.decide import check_verdict
from medverify.judge.llm import PromptedModelJudge
from medverify.llm.facade import Model
from medverify.prompts import Prompt, load_prompt
from medverify.prompts.untrusted import fence_id, fenced
from medverify.records import Analysis, Passage, Verdict
from medverify.terms import coverage, key_terms

if TYPE_CHECKING:
    pass

STAGE = "judge"
PASSES = ("factual", "counterfactual")
LABELS = ("SUPPORTED", "CONTRADICTED", "NOT_ENOUGH_INFO")
CATEGORY_OF = {"SUPPORTED": "FACT", "CONTRADICTED": "HALLUCINATION",
               "NOT_ENOUGH_INFO": "COVERAGE_GAP"}
FEATURES = ("logit_factual_yes", "logit_counterfactual_yes", "coverage", "numbers_missing",
            "log_claim_words")
SHIPPED = Path(__file__).with_name("llm_calibration.json")
TOP_LOGPROBS = 20
_CLIP = 1e-4


class LLMCalibration(BaseModel):
    """Prior corrections for one model and prompt (a :class:`Family` over :data:`FEATURES`)."""

    model_config = ConfigDict(extra="forbid")

    model: str  # the provider id (local models: name + the GGUF's sha256 prefix)
    prompt: str
    features: list[str]
    family: Family
    notes: str = ""


def load_llm_calibrations(path: str | Path | None = None) -> list[LLMCalibration]:
    """The calibrations in ``path`` (default: the shipped file; missing: none)."""
    file = Path(path) if path else SHIPPED
    if not file.is_file():
        return []
    try:
        data = json.loads(file.read_text("utf-8"))
        entries = [LLMCalibration.model_validate(e) for e in data.get("calibrations", [])]
    except (OSError, ValueError, AttributeError) as exc:
        raise ConfigError(f"cannot read the LLM judge calibration {file}: {exc}") from exc
    return [e for e in entries if tuple(e.features) == FEATURES]


def yes_probability(top: Sequence[tuple[str, float]]) -> float | None:
    """``p(yes) / (p(yes) + p(no))`` over the answer tokens spelled yes / no, or None when
    the alternatives hold neither."""
    mass = {"yes": 0.0, "no": 0.0}
    for token, logprob in top:
        word = token.strip().strip(".,:!\"'").lower()
        if word in mass:
            mass[word] += math.exp(logprob)
    total = mass["yes"] + mass["no"]
    return mass["yes"] / total if total > 0 else None


def features(claim: str, passage: str, p_factual: float, p_counter: float) -> list[float]:
    """The :data:`FEATURES` of one pair: the two passes' log-odds and lexical content."""
    ck = key_terms(claim)
    passage_terms = key_terms(passage)
    return [_logit(p_factual), _logit(p_counter), coverage(ck, passage_terms),
            float(bool(ck.numbers) and not ck.numbers <= passage_terms.numbers),
            math.log1p(len(claim.split()))]


def _logit(p: float) -> float:
    p = min(max(p, _CLIP), 1 - _CLIP)
    return math.log(p / (1 - p))


class ScoredLLMJudge(PromptedModelJudge):
    """Judge claims with a chat model's Yes/No option probabilities (see module doc)."""

    name = "llm-scored"
    needs_model = True  # medverify.judge.declares
    second_stage = True  # a cascade may send it the claims it does not settle
    claims_per_call = 1  # one claim per call (the cascade's call count uses it)
    # its "not sure" comes only from its prior correction's thresholds: a confidence card
    # (medverify.judge.confidence) replaces them
    card_replaces_calibration = True

    def __init__(self, model: Model, *, max_passages: int = 3, max_passage_chars: int = 2000,
                 calibration: LLMCalibration | str | None = "shipped",
                 prompt_version: str | None = None) -> None:
        self.model = model
        self.max_passages = max_passages
        self.max_passage_chars = max_passage_chars
        self.prompt: Prompt = load_prompt("judge_scored", prompt_version)
        if set(self.prompt.questions) != set(PASSES):
            raise ConfigError(f"prompt {self.prompt.id} needs '# question factual' and "
                              "'# question counterfactual' sections")
        self.calibration = (self._shipped() if calibration == "shipped" else
                            None if isinstance(calibration, str) else calibration)

    def _shipped(self) -> LLMCalibration | None:
        return next((c for c in load_llm_calibrations() if c.model == self.model.id
                     and c.prompt == self.prompt.id), None)

    @property
    def judge_id(self) -> str:
        calibrated = "+calibrated" if self.calibration is not None else ""
        return f"llm-scored:{self.model.spec}{calibrated}"

    async def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        if getattr(self.model.provider, "serial", False):  # one at a time: prefix reuse
            return [await self._judge_item(item) for item in items]
        return list(await asyncio.gather(*(self._judge_item(item) for item in items)))

    async def _judge_item(self, item: JudgeItem) -> Verdict:
        passages = item.passages[: self.max_passages]
        if not passages:
            reason = "no evidence passage was retrieved for this claim"
            none = Analysis(holds=False, reason=reason)
            return Verdict(claim_id=item.claim.id, factual=none, counterfactual=none,
                           judge=self.judge_id)
        try:
            scored = [await self.score_pair(item.claim.text, p) for p in passages]
        except MedverifyError as exc:
            return Verdict(claim_id=item.claim.id, passage_ids=[p.id for p in passages],
                           judge=self.judge_id, prompt_version=self.prompt_version,
                           error=f"judge call failed: {exc}")
        return self._decide(item, passages, scored)

    async def score_pair(self, claim: str, passage: Passage) -> tuple[float, float]:
        """``P(yes)`` of the factual and the counterfactual pass for one pair (both calls
        share their prompt up to the question). Raises ParseError-like MedverifyError when a
        reply holds neither answer."""
        text = passage.text[: self.max_passage_chars]
        fence = fence_id([text, claim])
        values = {"fence": fence, "passage": fenced(fence, "P1", text),
                  "claim": fenced(fence, "C1", claim)}
        out = []
        for name in PASSES:
            messages = self.prompt.render(**values, question=self.prompt.questions[name])
            completion = await self.model.complete(messages, stage=STAGE, max_tokens=1,
                                                   top_logprobs=TOP_LOGPROBS)
            first = completion.logprobs[0].top if completion.logprobs else []
            p = yes_probability([(t.token, t.logprob) for t in first])
            if p is None:
                raise _NoAnswer(f"the {name} reply {completion.text[:40]!r} is neither Yes "
                                "nor No, and neither is among its top tokens")
            out.append(p)
        return out[0], out[1]

    def probabilities(self, claim: str, passage: Passage, p_f: float, p_c: float
                      ) -> np.ndarray:
        """Calibrated (S, C, N) for one pair; without calibration the raw two-pass rule's
        probabilities (support, contradiction, neither) normalised."""
        if self.calibration is not None:
            x = np.asarray([features(claim, passage.text, p_f, p_c)])
            return self.calibration.family.probabilities(x)[0]
        raw = np.asarray([p_f * (1 - p_c), p_c * (1 - p_f), (1 - p_f) * (1 - p_c)]) + 1e-9
        return raw / raw.sum()

    def _decide(self, item: JudgeItem, passages: list[Passage],
                scored: list[tuple[float, float]]) -> Verdict:
        probs = [self.probabilities(item.claim.text, p, f, c)
                 for p, (f, c) in zip(passages, scored, strict=True)]
        best_s = max(range(len(probs)), key=lambda i: probs[i][0])
        best_c = max(range(len(probs)), key=lambda i: probs[i][1])
        factual = self._analysis(probs[best_s], 0, passages[best_s], scored[best_s], "support")
        counter = self._analysis(probs[best_c], 1, passages[best_c], scored[best_c],
                                 "contradiction")
        label = _label(factual.holds, counter.holds)
        deciding = probs[best_c] if label == "CONTRADICTED" else probs[best_s]
        confidence = float(deciding[LABELS.index(label)])
        raw = json.dumps({"passages": [
            {"id": p.id, "factual_yes": round(f, 6), "counterfactual_yes": round(c, 6)}
            for p, (f, c) in zip(passages, scored, strict=True)]})
        verdict = Verdict(
            claim_id=item.claim.id, passage_ids=[p.id for p in passages], factual=factual,
            counterfactual=counter, judge=self.judge_id, prompt_version=self.prompt_version,
            raw_output=raw, confidence=confidence,
            probabilities={k: round(float(v), 6) for k, v in
                           zip(LABELS, probs[best_c if label == "CONTRADICTED" else best_s],
                               strict=True)},
            **self._sureness(label, confidence))
        return check_verdict(verdict, item.claim.text, passages)

    def _analysis(self, probs: np.ndarray, column: int, passage: Passage,
                  scored: tuple[float, float], what: str) -> Analysis:
        holds = int(np.argmax(probs)) == column
        reason = (f"P({what}) {probs[column]:.2f} (model P(yes): factual {scored[0]:.2f}, "
                  f"counterfactual {scored[1]:.2f}"
                  + (", prior-corrected)" if self.calibration is not None else ", raw)"))
        return Analysis(holds=holds, passage_id=passage.id if holds else None, reason=reason)

    def _sureness(self, label: str, confidence: float) -> dict[str, Any]:
        if self.calibration is None:
            return {"confident": False,
                    "not_sure": f"no calibration for {self.model.id} with {self.prompt.id}"}
        threshold = self.calibration.family.threshold(CATEGORY_OF[label])
        if threshold is not None and confidence >= threshold:
            return {"confident": True}
        return {"confident": False, "not_sure": (
            f"calibrated probability {confidence:.2f} is below the confident threshold "
            f"{threshold:.2f}" if threshold is not None else
            f"{CATEGORY_OF[label]} is never confident for this model")}


def _label(supported: bool, contradicted: bool) -> str:
    if supported:
        return "SUPPORTED"
    return "CONTRADICTED" if contradicted else "NOT_ENOUGH_INFO"


class _NoAnswer(MedverifyError):
    """The model's reply to a Yes/No pass holds neither answer."""
