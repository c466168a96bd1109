"""Built-in judge: the shipped cross-encoder verifier, offline, no model calls.

Every (claim, passage) pair of a call is scored in one batched ``predict``; long passages
are split into windows by the verifier and aggregated there. Each passage is first decided on
its own with the rule the thresholds were calibrated for (``medverify.verifier.label_pairs``): it
supports the claim if P(SUPPORTED) >= the support threshold, contradicts it if
P(CONTRADICTED) >= the contradict threshold, and when both pass, the larger of the two wins
(one passage cannot do both). Then, per claim:

- ``factual.holds``        = some passage supports the claim
- ``counterfactual.holds`` = some passage contradicts the claim

so the four CHECK categories follow from ``verdict_rules.categorize`` exactly as for the LLM
judge: JUDGMENT_ERROR means two passages disagree. The thresholds are the ones calibrated
with the verifier (recorded in its metadata) unless overridden. A failure of the verifier
makes Verdicts with ``error`` set, never a category. The sentence a verdict quotes is chosen
by :mod:`medverify.judge.quotes`.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from medverify.errors import ConfigError, MedverifyError
from medverify.judge import JudgeItem
from medverify.judge.calibration import (
    Calibration,
    Family,
    family_for,
    load_calibration,
    pair_features,
)
from medverify.judge.checks import find_conflicts
from medverify.judge.decide import (
    Outcome,
    PassageScore,
    assess,
    off_support_findings,
    outcome_from_passages,
    states_claim,
    veto_analysis,
)
from medverify.judge.evidence import quote_in_passage
from medverify.judge.quotes import best_sentence, is_verbatim
from medverify.records import Analysis, Passage, Verdict
from medverify.terms import MIN_RELEVANCE, STRONG_RELEVANCE, key_terms, relevance
from medverify.verdict_rules import passage_label

if TYPE_CHECKING:
    from medverify.config import Config
    from medverify.llm.facade import Model

log = logging.getLogger(__name__)

LABELS = ("SUPPORTED", "CONTRADICTED", "NOT_ENOUGH_INFO")
SUPPORTED, CONTRADICTED = 0, 1
ONE_WINDOW_WORDS = 120  # passages this short fit in one verifier window with the claim
VERBATIM = np.array([1.0, 0.0, 0.0], dtype=np.float32)  # the probabilities of a verbatim claim



class VerifierLike(Protocol):
    """What the judge needs from a verifier (``medverify.verifier.Verifier`` or a fake)."""

    id: str
    thresholds: dict[str, float]

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray: ...


@dataclass(frozen=True)
class ClaimScores:
    """Per-passage probabilities of one claim (rows in ``LABELS`` order), or the error."""

    item: JudgeItem
    probs: np.ndarray | None = None
    error: str | None = None
    verbatim: tuple[bool, ...] = ()  # per passage: the claim is stated in it word for word

    def best(self, label: int) -> tuple[float, Passage | None]:
        """The largest probability of ``label`` over the passages, and its passage."""
        if self.probs is None or not len(self.probs):
            return 0.0, None
        row = int(np.argmax(self.probs[:, label]))
        return float(self.probs[row, label]), self.item.passages[row]

    def maxima(self) -> dict[str, float]:
        if self.probs is None or not len(self.probs):
            return dict.fromkeys(LABELS, 0.0)
        return {name: float(self.probs[:, i].max()) for i, name in enumerate(LABELS)}


def load_verifier(path: str | Path | None = None) -> VerifierLike:
    """The shipped verifier (or the one at ``path``), loaded once per process."""
    try:
        from medverify.verifier import get_verifier
    except ImportError as exc:
        raise ConfigError(f"the built-in verifier is not installed ({exc})") from exc
    try:
        return get_verifier(path)
    except (MedverifyError, OSError, ValueError, RuntimeError, KeyError) as exc:
        raise ConfigError(
            f"cannot load the built-in verifier: {exc}. The built-in judge needs the verifier "
            "weights shipped in medverify/verifier/weights/ (or [judge_settings] verifier); "
            "pass --model SPEC to use the LLM judge instead"
        ) from exc


class BuiltinJudge:
    """Judge claims with the built-in verifier (see the module docstring)."""

    name = "builtin"
    prompt_version: str | None = None
    offline = True  # never calls a model (medverify.judge.declares)
    fails_trial_study = True  # measured: docs/trials.md, benchmarks/results/trials_offline.md

    def __init__(
        self,
        verifier: VerifierLike | None = None,
        *,
        path: str | Path | None = None,
        support_threshold: float | None = None,
        contradict_threshold: float | None = None,
        batch_size: int = 32,
        quotes: bool = True,
        calibration: Calibration | str | Path | None = None,
        family: str | None = "general",
        checks: bool = True,
    ) -> None:
        self.verifier = verifier if verifier is not None else load_verifier(path)
        self.quotes = quotes  # off: no quote, no second pass over long passages (eval)
        thresholds = self.verifier.thresholds
        self.support_threshold = _threshold(support_threshold, thresholds, "support")
        self.contradict_threshold = _threshold(contradict_threshold, thresholds, "contradict")
        self.batch_size = batch_size
        self.checks = checks  # the exact checks (judge.checks) on supporting passages
        self.auto_family = family == "auto"  # per data set in eval pairs, else general
        self.family = _family(_scores_id(self.verifier), calibration,
                              "general" if self.auto_family else family)
        self._calibration = calibration
        self._lock = threading.Lock()

    @property
    def calibration(self) -> str | None:
        """The calibration family in use (None: verdicts carry no confidence)."""
        return self.family.name if self.family is not None else None

    def with_family(self, name: str) -> BuiltinJudge:
        """The same judge (same loaded verifier) with another calibration family."""
        other = copy.copy(self)
        other.family = _family(_scores_id(self.verifier), self._calibration, name)
        other.auto_family = False
        return other

    def for_dataset(self, dataset: str | None) -> BuiltinJudge:
        """With family ``auto``: this judge with the family fitted for ``dataset``
        ("checkcovid_dev" -> checkcovid), or the pooled one for a set with no training data
        of its own (``eval pairs``). Otherwise the judge itself."""
        if not self.auto_family or self.family is None:
            return self
        calibration = (self._calibration if isinstance(self._calibration, Calibration)
                       else load_calibration(self._calibration,
                                             scores_id=_scores_id(self.verifier)))
        return self.with_family(family_for(dataset, calibration))

    @classmethod
    def config_options(cls, config: Config, model: Model | None = None) -> dict[str, Any]:
        """Constructor options from ``[judge_settings]`` (the model is not used)."""
        settings = config.judge_settings
        return {
            "path": settings.verifier,
            "support_threshold": settings.support_threshold,
            "contradict_threshold": settings.contradict_threshold,
            "batch_size": settings.batch_size,
            "calibration": _family_file(settings.calibration),
            "family": settings.calibration_family,
            "checks": settings.exact_checks,
            "quotes": settings.quotes,
        }

    @classmethod
    def from_config(cls, config: Config, model: Model | None = None) -> BuiltinJudge:
        """The registry factory (runs offline: the model is not used)."""
        return cls(**cls.config_options(config, model))

    @property
    def judge_id(self) -> str:
        return f"builtin:{_scores_id(self.verifier)}"

    async def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        return [verdict for _, verdict in await self.judge_scored(items)]

    async def judge_scored(self, items: Sequence[JudgeItem]) -> list[tuple[ClaimScores, Verdict]]:
        """Verdicts with the probabilities behind them (the cascade routes on those).

        The work runs on one long-lived thread per process (:func:`verifier_thread`), off
        the event loop: torch keeps one OpenMP team and the allocator one arena for it,
        where the event loop's default executor would hand each call to any of its threads
        (several times slower in exploratory timings of per-window scoring)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            verifier_thread(), lambda: [(s, self.verdict(s)) for s in self.score(items)])

    def score(self, items: Sequence[JudgeItem]) -> list[ClaimScores]:
        """Probabilities for every (claim, passage) pair, in one batched predict call."""
        pairs = [(item.claim.text, p.text) for item in items for p in item.passages]
        if not pairs:
            return [ClaimScores(item, np.zeros((0, 3), dtype=np.float32)) for item in items]
        try:
            with self._lock:  # one predict at a time: it already uses every core
                probs = np.asarray(self.verifier.predict(pairs, batch_size=self.batch_size))
            _check_shape(probs, len(pairs))
        except Exception as exc:  # a failed model is an ERROR verdict, never a category
            error = f"built-in verifier failed: {type(exc).__name__}: {exc}"
            log.warning(error)
            return [ClaimScores(item, error=error) for item in items]
        probs = probs.copy()
        verbatim = [is_verbatim(claim, text) for claim, text in pairs]
        probs[np.asarray(verbatim, dtype=bool)] = VERBATIM
        out, start = [], 0
        for item in items:
            end = start + len(item.passages)
            out.append(ClaimScores(item, probs[start:end], verbatim=tuple(verbatim[start:end])))
            start = end
        return out

    def verdict(self, scores: ClaimScores) -> Verdict:
        """The Verdict of one claim from its per-passage scores (:mod:`judge.decide`)."""
        item = scores.item
        base = {
            "claim_id": item.claim.id,
            "passage_ids": [p.id for p in item.passages],
            "judge": self.judge_id,
        }
        if scores.error is not None:
            return Verdict(**base, error=scores.error)
        if not item.passages:
            reason = "no evidence passage was retrieved for this claim"
            no = Analysis(holds=False, reason=reason)
            return Verdict(**base, factual=no, counterfactual=no.model_copy(),
                           confident=True if self.calibration else None)
        rows = self.passage_scores(scores)
        outcome = outcome_from_passages(rows, self._strong_at())
        factual = (veto_analysis(outcome.vetoed) if outcome.vetoed is not None
                   else self._analysis(scores, rows, outcome.support, SUPPORTED))
        verdict = Verdict(
            **base,
            factual=factual,
            counterfactual=self._analysis(scores, rows, outcome.contradict, CONTRADICTED),
            probabilities=self._probabilities(scores),
            raw_output=_raw(scores),
            findings=[f for row in rows for f in row.findings],
        )
        return self._assess(verdict, outcome, rows, item.claim.text)

    def passage_scores(self, scores: ClaimScores) -> list[PassageScore]:
        """Each passage's probabilities, relevance, statement flag and exact-check
        findings for this claim (see :mod:`medverify.judge.decide`)."""
        assert scores.probs is not None
        claim = scores.item.claim.text
        terms = key_terms(claim)
        thresholds = (self.support_threshold, self.contradict_threshold)
        rows = []
        flags = scores.verbatim or (False,) * len(scores.item.passages)
        for passage, raw, verbatim in zip(scores.item.passages, scores.probs, flags,
                                          strict=True):
            label = passage_label(raw, thresholds)
            row = PassageScore(passage=passage, raw=[float(x) for x in raw], calibrated=None,
                               label=label, relevance=relevance(terms, passage.text),
                               states_claim=states_claim(claim, passage.text,
                                                         verbatim=verbatim),
                               verbatim=verbatim)
            # checked: every passage that would support the claim (a veto removes its
            # support), and every passage on the claim's point (its findings tell
            # arbitration the claim is likely wrong, even when that passage does not count)
            if self.checks and (row.states_claim or label == SUPPORTED):
                row.findings = find_conflicts(claim, passage.text, passage.id)
            elif self.checks and row.relevance >= STRONG_RELEVANCE:
                row.findings = off_support_findings(
                    claim, passage.text, find_conflicts(claim, passage.text, passage.id))
            if self.family is not None:
                features = pair_features(claim, passage.text, raw, verbatim=verbatim)
                row.calibrated = [float(x) for x in self.family.probabilities(
                    np.asarray([features]))[0]]
            rows.append(row)
        return rows

    def _analysis(self, scores: ClaimScores, rows: list[PassageScore],
                  chosen: PassageScore | None, label: int) -> Analysis:
        threshold = self.support_threshold if label == SUPPORTED else self.contradict_threshold
        holds = chosen is not None
        row = chosen or max(rows, key=lambda r: r.raw[label])
        p, passage = row.raw[label], row.passage
        name = "supported" if label == SUPPORTED else "contradicted"
        digits = 2 if round(p, 2) != round(threshold, 2) else 3  # never "0.40 below 0.40"
        reason = (
            f"P({name})={p:.{digits}f} in passage {_describe(passage)} "
            f"({'at or above' if p >= threshold else 'below'} the threshold "
            f"{threshold:.{digits}f})"
        )
        if not holds and p >= threshold:
            reason += self._why_not(row, label)
        if label == SUPPORTED and holds and row.states_claim:
            how = "verbatim" if row.verbatim else "nearly word for word"
            reason = f"the claim is stated {how} in passage {_describe(passage)}"
        if holds and row.reviewed(label):
            reason += " (a clinician-reviewed document)"
        wanted = holds and self.quotes
        quote = self._quote(scores.item.claim.text, passage, label) if wanted else None
        return Analysis(
            holds=holds,
            passage_id=passage.id,
            quote=quote,
            quote_found=quote_in_passage(quote, passage) if quote else None,
            reason=reason,
        )

    @staticmethod
    def _why_not(row: PassageScore, label: int) -> str:
        if label == CONTRADICTED and row.relevance < MIN_RELEVANCE:
            return (f", but the passage is about something else (it holds "
                    f"{row.relevance:.0%} of the claim's key content)")
        if row.label is not None and row.label != label:
            other = "supported" if label == CONTRADICTED else "contradicted"
            return f", but that passage {other} the claim more strongly"
        return ", but the other side's evidence outweighs or outranks it"

    def _strong_at(self) -> tuple[float | None, float | None] | None:
        """The calibrated probabilities at which a passage is strong evidence."""
        if self.family is None:
            return None
        return self.family.threshold("FACT"), self.family.threshold("HALLUCINATION")

    def _assess(self, verdict: Verdict, outcome: Outcome, rows: list[PassageScore],
                claim: str) -> Verdict:
        """The verdict with its confidence and, when it is not confident, why."""
        if self.family is None:
            return verdict
        confidence, doubts = assess(verdict.category, outcome, rows, self.family,
                                    claim_negated=key_terms(claim).negated, claim=claim)
        return verdict.model_copy(update={
            "confidence": None if confidence is None else round(confidence, 4),
            "confident": not doubts, "not_sure": "; ".join(doubts) or None})

    def _quote(self, claim: str, passage: Passage, label: int) -> str | None:
        region = self._deciding_window(claim, passage, label)
        return best_sentence(claim, passage.text, within=region)

    def _deciding_window(self, claim: str, passage: Passage, label: int) -> str | None:
        windows = getattr(self.verifier, "predict_windows", None)
        if windows is None or len(passage.text.split()) <= ONE_WINDOW_WORDS:
            return None  # a short passage is one window: every sentence competes
        try:
            with self._lock:
                scored = windows(claim, passage.text)
        except Exception as exc:  # the quote is a convenience: fall back to all sentences
            log.debug("predict_windows failed: %s", exc)
            return None
        if not scored:
            return None
        return str(max(scored, key=lambda w: float(w[1][label]))[0])

    def _probabilities(self, scores: ClaimScores) -> dict[str, float]:
        out = {label: round(p, 4) for label, p in scores.maxima().items()}
        out["threshold_support"] = self.support_threshold
        out["threshold_contradict"] = self.contradict_threshold
        return out


_THREAD: ThreadPoolExecutor | None = None
_THREAD_LOCK = threading.Lock()


def verifier_thread() -> ThreadPoolExecutor:
    """The process's one thread for the built-in verifier's work (created on first use)."""
    global _THREAD
    with _THREAD_LOCK:
        if _THREAD is None:
            _THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="medverify-verifier")
        return _THREAD


def _scores_id(verifier: Any) -> str:
    """What the verifier's scores are (its weights, and its arithmetic where that is not
    the one the shipped calibration was fitted on): a calibration is matched against it."""
    return str(getattr(verifier, "scores_id", verifier.id))


def _family(verifier_id: str, calibration: Calibration | str | Path | None,
            name: str | None) -> Family | None:
    """The calibration family for this verifier, or None (no name given, or a calibration
    fitted for another verifier: its probabilities would mean nothing here)."""
    if name is None:
        return None
    loaded = calibration if isinstance(calibration, Calibration) else load_calibration(
        calibration, scores_id=verifier_id)
    if loaded.verifier != verifier_id:
        log.info("judge calibration %s is for verifier %s, not %s: no confidence given",
                 loaded.version, loaded.verifier, verifier_id)
        return None
    return loaded.family(name)


def _family_file(value: str | None) -> str | None:
    """``[judge_settings] calibration`` when it is a built-in judge calibration file; None
    (the shipped one) when unset or when it names a confidence card (a card is applied
    around the judge by :func:`medverify.judge.build.create_judge`)."""
    if value is None or not Path(value).expanduser().is_file():
        return None
    from medverify.judge.confidence.card import is_card_file

    return None if is_card_file(Path(value).expanduser()) else value


def _threshold(override: float | None, thresholds: dict[str, float], key: str) -> float:
    if override is not None:
        return float(override)
    if key not in thresholds:
        raise ConfigError(f"the verifier records no {key!r} threshold; pass one explicitly")
    return float(thresholds[key])


def _check_shape(probs: np.ndarray, n: int) -> None:
    if probs.shape != (n, len(LABELS)):
        raise ValueError(f"expected probabilities of shape ({n}, 3), got {probs.shape}")
    if not np.all(np.isfinite(probs)):
        raise ValueError("the verifier returned non-finite probabilities")


def _describe(passage: Passage) -> str:
    return repr(passage.title or passage.doc_id)


def _raw(scores: ClaimScores) -> str:
    """Per-passage probabilities as JSON: the judge's raw output, kept in the run store."""
    assert scores.probs is not None
    rows: dict[str, Any] = {
        p.id: dict(zip(LABELS, (round(float(x), 4) for x in row), strict=True))
        for p, row in zip(scores.item.passages, scores.probs, strict=True)
    }
    return json.dumps({"passages": rows}, ensure_ascii=False)
