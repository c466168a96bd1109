"""The leakage check: exact and near duplicates of the dev/evaluation texts, which are read
here (:func:`load_eval_sets`) and nowhere else in the corpus builder."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from medverify.verifier.corpus.text import normalize

EVAL_PAIR_FILES = (
    "checkcovid_dev",
    "citint_dev",
    "healthver_dev",
    "covidfact_train",
    "covidfact_dev",
    "expertqa_val",
)


class LeakageIndex:
    """Exact (normalised text) and near (word 8-gram overlap) duplicates of evaluation texts."""

    def __init__(
        self, eval_sets: dict[str, Sequence[str]], n: int = 8, threshold: float = 0.8
    ) -> None:
        self.n = n
        self.threshold = threshold
        self.names = list(eval_sets)
        self.exact: dict[str, list[int]] = {}
        self.grams: dict[str, list[int]] = {}
        self.sizes: list[int] = []
        self.owner: list[int] = []
        for s, name in enumerate(self.names):
            for text in dict.fromkeys(eval_sets[name]):
                key = normalize(text)
                if not key:
                    continue
                self.exact.setdefault(key, []).append(s)
                grams = self._grams(key)
                index = len(self.sizes)
                self.sizes.append(len(grams))
                self.owner.append(s)
                for g in grams:
                    self.grams.setdefault(g, []).append(index)
        self._cache: dict[str, dict[str, str]] = {}

    def _grams(self, key: str) -> set[str]:
        words = key.split()
        return {" ".join(words[i : i + self.n]) for i in range(len(words) - self.n + 1)}

    def check(self, text: str) -> dict[str, str]:
        """``{eval set: "exact" | "near"}`` for the sets ``text`` duplicates (empty if none)."""
        key = normalize(text)
        if key in self._cache:
            return self._cache[key]
        hits: dict[str, str] = {self.names[s]: "exact" for s in self.exact.get(key, [])}
        grams = self._grams(key)
        if grams:
            counts: Counter[int] = Counter()
            for g in grams:
                found = self.grams.get(g)
                if found:
                    counts.update(found)
            for index, count in counts.items():
                if count >= self.threshold * min(len(grams), self.sizes[index]):
                    hits.setdefault(self.names[self.owner[index]], "near")
        if len(self._cache) < 500_000:
            self._cache[key] = hits
        return hits


def load_eval_sets(data_dir: Path) -> dict[str, list[str]]:
    """Claims and evidence texts of every dev/evaluation set (for the leakage check only)."""
    sets: dict[str, list[str]] = {}
    for name in EVAL_PAIR_FILES:
        path = data_dir / "pairs" / f"{name}.jsonl"
        if not path.is_file():
            continue
        texts: list[str] = []
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                texts += [str(row.get("claim", "")), str(row.get("evidence", ""))]
        sets[name] = texts
    path = data_dir / "answers" / "expertqa_val.jsonl"
    if path.is_file():
        claims: list[str] = []
        for line in path.read_text().splitlines():
            if line.strip():
                claims += [str(c.get("claim", "")) for c in json.loads(line).get("claims", [])]
        sets["answers/expertqa_val"] = claims
    return sets
