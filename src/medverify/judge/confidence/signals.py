"""What a verdict carries about how sure its judge was, as a fixed feature vector.

The same features for every judge, so that one fitting rule serves the built-in judge, the
LLM judges, the cascade and plugins. A judge that reports nothing on a feature gets its
neutral value (a probability of 0.5, full agreement), and a card fitted on that judge
learns that the feature says nothing. The order of :data:`FEATURES` is part of a card:
a card fitted on other features is refused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from medverify.judge.calibration import lexical_features
from medverify.records import Category, Passage, Verdict
from medverify.terms import key_terms

FEATURES: tuple[str, ...] = (
    "logit_p_supported",  # the judge's probability that the evidence supports the claim
    "logit_p_contradicted",  # ... that it contradicts it
    "has_probability",  # 1: the judge reported one of the two (else both are neutral)
    "agreement",  # the share of self-consistency samples that agree (1: not sampled)
    "logit_own_confidence",  # the judge's own calibrated confidence (0: none)
    "quote_verified",  # the deciding analysis rests on a checked quote found in its passage
    "log_findings",  # how many differences the exact checks found
    "log_passages",  # how many passages the verdict was given
    "key_content_in_passage",  # the most of the claim's key content one passage holds
    "key_content_in_best_sentence",  # ... one sentence holds
    "claim_number_missing",  # a number of the claim is in no passage
    "negation_differs",  # the best sentence is negated where the claim is not, or back
    "log_claim_words",
    "claim_hedged",
)
"""The features of one verdict, in order."""

_CLIP = 1e-4


def logit(p: float) -> float:
    """The log-odds of ``p``, clipped away from 0 and 1."""
    p = min(max(float(p), _CLIP), 1 - _CLIP)
    return math.log(p / (1 - p))


def judge_probabilities(verdict: Verdict) -> tuple[float | None, float | None]:
    """The judge's own P(supported) and P(contradicted): from log-prob signals (the LLM
    judge) or its probabilities (the built-in and scored judges); None where it gave none."""
    signals, probs = verdict.signals or {}, verdict.probabilities or {}
    supported = signals.get("p_supported", probs.get("SUPPORTED"))
    contradicted = signals.get("p_contradicted", probs.get("CONTRADICTED"))
    return supported, contradicted


def verdict_features(claim: str, passages: Sequence[Passage], verdict: Verdict
                     ) -> list[float]:
    """The :data:`FEATURES` of one verdict on ``claim`` with the passages it was given."""
    supported, contradicted = judge_probabilities(verdict)
    own = verdict.confidence
    lexical = [lexical_features(claim, p.text) for p in passages] or [(0.0, 0.0, 1.0, 0.0)]
    best = max(lexical, key=lambda f: (f[1], f[0]))
    claim_terms = key_terms(claim)
    return [
        logit(0.5 if supported is None else supported),
        logit(0.5 if contradicted is None else contradicted),
        float(supported is not None or contradicted is not None),
        float((verdict.signals or {}).get("agreement", 1.0)),
        0.0 if own is None else logit(own),
        float(_quote_verified(verdict)),
        math.log1p(len(verdict.findings)),
        math.log1p(len(passages)),
        max(f[0] for f in lexical),
        best[1],
        min(f[2] for f in lexical),
        best[3],
        math.log1p(len(claim.split())),
        float(claim_terms.hedged),
    ]


def _quote_verified(verdict: Verdict) -> bool:
    """Whether the analysis that decided the category rests on a quote that was checked
    and counts (only judges that must quote, the LLM judge, check theirs; the built-in
    judge's quote is a display aid and never sets this)."""
    category = verdict.category
    deciding = (verdict.factual if category == Category.FACT else
                verdict.counterfactual if category == Category.HALLUCINATION else None)
    return bool(deciding is not None and deciding.verified is True and not deciding.vetoed)
