"""A deterministic stand-in for the built-in verifier, for tests of the judges (no weights).

``LexicalVerifier`` scores a (claim, evidence) pair from word overlap: the share of the
claim's content words found in the evidence becomes P(SUPPORTED), and a number in the claim
that the evidence does not contain (when the evidence has numbers) shifts that mass to
P(CONTRADICTED). It is a fake with the verifier's interface, not a model of anything.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

_WORD = re.compile(r"[a-z]{3,}")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _content(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


class LexicalVerifier:
    """Same ``predict`` / ``predict_windows`` interface as ``medverify.verifier.Verifier``."""

    def __init__(
        self,
        *,
        id: str = "lexical-fake",
        support: float = 0.6,
        contradict: float = 0.6,
        window_words: int = 60,
    ) -> None:
        self.id = id
        self.thresholds = {"support": support, "contradict": contradict}
        self.max_tokens = 256
        self.window_words = window_words
        self.calls: list[int] = []

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
        self.calls.append(len(pairs))
        return np.asarray([self._one(c, e) for c, e in pairs], dtype=np.float32).reshape(-1, 3)

    def predict_windows(self, claim: str, evidence: str) -> list[tuple[str, np.ndarray]]:
        words = evidence.split()
        step = self.window_words
        windows = [" ".join(words[i : i + step]) for i in range(0, max(len(words), 1), step)]
        return [(w, np.asarray(self._one(claim, w), dtype=np.float32)) for w in windows]

    def _one(self, claim: str, evidence: str) -> list[float]:
        words = _content(claim)
        overlap = len(words & _content(evidence)) / max(len(words), 1)
        claim_numbers = set(_NUMBER.findall(claim))
        evidence_numbers = set(_NUMBER.findall(evidence))
        clash = bool(claim_numbers - evidence_numbers) and bool(evidence_numbers)
        support = 0.05 if clash else 0.9 * overlap
        contradict = 0.9 * overlap if clash else 0.05
        return [support, contradict, max(0.0, 1.0 - support - contradict)]


class FailingVerifier(LexicalVerifier):
    """A verifier whose ``predict`` always raises (for error-path tests)."""

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
        raise RuntimeError("out of memory")


class TableVerifier:
    """Returns fixed probabilities per (claim, passage text) and counts predict calls."""

    id = "table"

    def __init__(
        self,
        table: dict[tuple[str, str], list[float]],
        *,
        support: float = 0.5,
        contradict: float = 0.6,
    ) -> None:
        self.thresholds = {"support": support, "contradict": contradict}
        self.table = table
        self.calls: list[int] = []

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
        self.calls.append(len(pairs))
        return np.asarray([self.table[p] for p in pairs], dtype=np.float32).reshape(-1, 3)
