"""Run the demo and print docs/demo.md's table: each claim, its planted category, the
built-in judge's category, whether it is confident (and if not, why) and its two maximum
probabilities.

    .venv/bin/python scripts/demo_table.py [--out DIR]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from medverify.demo import ClaimOutcome, run_demo


def row(claim: ClaimOutcome, probabilities: dict[str, float] | None) -> str:
    planted = claim.expected.value if claim.expected else "—"
    if claim.kind and claim.expected and claim.expected.value != "FACT":
        planted += f" ({claim.kind})"
    got = f"**{claim.got.value}**" if claim.agrees else claim.got.value
    sure = ("confident" if claim.confident else
            f"not sure: {claim.not_sure}" if claim.confident is False else "—")
    probs = (f"{probabilities['SUPPORTED']:.2f} / {probabilities['CONTRADICTED']:.2f}"
             if probabilities and "SUPPORTED" in probabilities else "—")
    return f"| {claim.claim} | {planted} | {got} | {sure} | {probs} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = run_demo(args.out or Path(tmp) / "demo")
    probabilities = {
        (r.answer.id, c.claim.id): (c.verdict.probabilities if c.verdict else None)
        for r in result.reports for c in r.results
    }
    planted = [c for c in result.claims if c.expected is not None]
    print(f"judge: {result.judge}; agrees with the planted category on "
          f"{sum(c.agrees for c in planted)} of {len(planted)} claims; confident on "
          f"{sum(1 for c in planted if c.confident)}, of which "
          f"{sum(1 for c in planted if c.confidently_wrong)} disagree\n")
    print("| claim | planted | judge | how sure | max P(S) / P(C) |\n|---|---|---|---|---|")
    for answer in result.answers:
        for claim in answer.claims:
            print(row(claim, probabilities.get((answer.answer_id, claim.claim_id))))


if __name__ == "__main__":
    main()
