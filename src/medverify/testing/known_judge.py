"""A judge of known quality, for testing calibration: it knows the gold label of every
claim and is right with probability ``accuracy`` (decided by a hash of the claim id and the
seed, so reruns agree). Like an LLM judge with log-probs it reports how probable its
true/false answers were (``Verdict.signals``): informative, not perfect, drawn for a right
verdict from ``right_p`` and for a wrong one from ``wrong_p`` (uniform ranges).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from medverify.judge import JudgeItem
from medverify.records import Analysis, Verdict

LABELS = ("SUPPORTED", "CONTRADICTED", "NOT_ENOUGH_INFO")


class KnownQualityJudge:
    """Right on a share ``accuracy`` of the claims in ``gold`` (claim id -> 3-way label;
    2-way NOT_SUPPORTED counts as CONTRADICTED); a claim without gold is ERROR."""

    name = "known-quality"
    prompt_version: str | None = "known/v1"
    offline = True

    def __init__(self, gold: Mapping[str, str], accuracy: float = 0.85, seed: int = 0,
                 right_p: tuple[float, float] = (0.55, 1.0),
                 wrong_p: tuple[float, float] = (0.5, 0.8)) -> None:
        self.gold = {k: ("CONTRADICTED" if v == "NOT_SUPPORTED" else v) for k, v in gold.items()}
        self.accuracy, self.seed = accuracy, seed
        self.right_p, self.wrong_p = right_p, wrong_p

    @property
    def judge_id(self) -> str:
        return f"known-quality:{self.accuracy:.2f}:{self.seed}"

    async def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        return [self.verdict(item) for item in items]

    def verdict(self, item: JudgeItem) -> Verdict:
        gold = self.gold.get(item.claim.id)
        base = {"claim_id": item.claim.id, "passage_ids": [p.id for p in item.passages],
                "judge": self.judge_id, "prompt_version": self.prompt_version}
        if gold is None:
            return Verdict(**base, error="no gold label for this claim")
        right = self._draw(item.claim.id, "right") < self.accuracy
        label = gold if right else self._other(item.claim.id, gold)
        low, high = self.right_p if right else self.wrong_p
        p = low + (high - low) * self._draw(item.claim.id, "p")
        p_s = p if label == "SUPPORTED" else 1 - p
        p_c = p if label == "CONTRADICTED" else 1 - p
        passage = item.passages[0].id if item.passages else None
        factual = Analysis(holds=label == "SUPPORTED",
                           passage_id=passage if label == "SUPPORTED" else None)
        counter = Analysis(holds=label == "CONTRADICTED",
                           passage_id=passage if label == "CONTRADICTED" else None)
        return Verdict(**base, factual=factual, counterfactual=counter,
                       signals={"p_supported": round(p_s, 6), "p_contradicted": round(p_c, 6)})

    def _draw(self, claim_id: str, what: str) -> float:
        digest = hashlib.sha256(f"{self.seed}:{what}:{claim_id}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def _other(self, claim_id: str, gold: str) -> str:
        others = [label for label in LABELS if label != gold]
        return others[int(self._draw(claim_id, "other") * len(others))]
