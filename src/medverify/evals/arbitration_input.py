"""The input of ``medverify eval arbitration``: claim/evidence pairs to judge (with the
risk classifier's probability per pair, when a line carries ``risk``), or the claims of an
earlier ``eval arbitration --json`` output (judged before), as
:class:`~medverify.evals.arbitration.LabelledClaim` s.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from medverify.errors import InputError
from medverify.evals.arbitration import LabelledClaim, labelled_claim
from medverify.evals.pairs import Pair, judge_pairs, load_pairs
from medverify.judge import Judge


@dataclass
class Source:
    """One input file: pairs to judge (with their risks), or claims judged before."""

    path: Path
    pairs: list[Pair]
    risks: list[float | None]
    judged: list[LabelledClaim]


def read_source(path: str | Path, limit: int | None = None) -> Source:
    """Pairs JSONL (``risk`` read from each line when present) or the JSON of an earlier
    ``eval arbitration --json`` (its ``claims``)."""
    path = Path(path)
    if path.suffix.lower() == ".json":
        return Source(path, [], [], _judged_claims(path, limit))
    pairs = load_pairs(path, limit)
    return Source(path, pairs, _risks(path, len(pairs)), [])


def _judged_claims(path: Path, limit: int | None) -> list[LabelledClaim]:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("claims"), list):
        raise InputError(
            f"{path} holds no judged claims: pass claim/evidence pairs (JSONL) or the JSON of "
            "`medverify eval arbitration --json` (`eval pairs --json` keeps no per-pair verdicts)")
    try:
        claims = [LabelledClaim.model_validate(c) for c in data["claims"][:limit]]
    except ValidationError as exc:
        raise InputError(f"{path}: bad judged claim ({exc.errors()[0]['msg']})") from exc
    if not claims:
        raise InputError(f"{path} has no judged claims")
    return claims


def _risks(path: Path, n: int) -> list[float | None]:
    """Each pair's ``risk`` (the same non-blank lines :func:`load_pairs` read)."""
    risks: list[float | None] = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if len(risks) >= n:
                break
            if line.strip():
                value = json.loads(line).get("risk")
                if value is not None and not (isinstance(value, int | float)
                                              and 0 <= value <= 1):
                    raise InputError(f"{path}: risk {value!r} is not a probability")
                risks.append(None if value is None else float(value))
    return risks


async def judge_sources(sources: Sequence[Source], judge: Judge | None,
                        progress: Callable[[int], None] | None = None) -> list[LabelledClaim]:
    """Every source's labelled claims, judging the pairs (claims judged before as they are;
    ``judge`` may be None when no source has pairs)."""
    out: list[LabelledClaim] = []
    for source in sources:
        if source.pairs:
            if judge is None:
                raise InputError(f"{source.path} holds pairs to judge, and no judge was given")
            verdicts = await judge_pairs(judge, source.pairs, progress)
            out += [labelled_claim(p, v, r)
                    for p, v, r in zip(source.pairs, verdicts, source.risks, strict=True)]
        out += source.judged
    return out
