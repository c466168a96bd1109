"""Exact checks that read numbers and frequencies as people write them (issue 41, item 2):
word and digit dose counts ("a single dose" vs "two doses"), frequencies ("once weekly" vs
"once daily"), frequency words ("rarely" vs "common"), directions ("speeds up" vs
"slowed") and entity swaps (another disease, organism or vaccine), on the issue's demo
cases, on templates (property style), and on the committed benchmark pairs
(``benchmarks/data/exact_words_pairs.jsonl``), so that the measured targets cannot
regress."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from medverify.judge.checks import conflicts, find_conflicts
from medverify.judge.checks.counts import rate
from medverify.judge.checks.entities import LEXICON, entities
from medverify.judge.checks.frequency import frequencies
from medverify.judge.checks.quantities import quantities
from medverify.judge.checks.text import parse
from medverify.records import CheckFinding, CheckKind

NUMBER, DIRECTION = CheckKind.NUMBER, CheckKind.DIRECTION
FREQUENCY, ENTITY = CheckKind.FREQUENCY, CheckKind.ENTITY
ROOT = Path(__file__).resolve().parents[2]
PAIRS = ROOT / "benchmarks" / "data" / "exact_words_pairs.jsonl"


def found(claim: str, passage: str) -> list[CheckFinding]:
    return conflicts(claim, passage, "kb:1#0")


def of_kind(findings: list[CheckFinding], kind: CheckKind) -> list[CheckFinding]:
    return [f for f in findings if f.kind == kind]


# ------------------------------------------------------------------- the issue's demo cases

SHINGLES = (
    "In May 2006, the U.S. Food and Drug Administration approved a vaccine (Zostavax) to "
    "prevent shingles in people age 60 and older. The vaccine is designed to boost the "
    "immune system and protect older adults from getting shingles later on. There is no "
    "maximum age for getting the vaccine, and only a single dose is recommended.")
RABIES = (
    "Small mammals such as squirrels, rats, mice, hamsters, guinea pigs, gerbils, chipmunks, "
    "rabbits, and hares are almost never found to be infected with rabies and have not been "
    "known to cause rabies among humans in the United States.")
RABIES_RARELY = (
    "Small rodents such as squirrels, hamsters, guinea pigs, gerbils, chipmunks, rats, and "
    "mice, and lagomorphs like rabbits and hares rarely are found to be infected with rabies.")
HYPOTHYROIDISM = (
    "Hypothyroidism has many symptoms that can vary from person to person. Some common "
    "symptoms of hypothyroidism are\n- fatigue  - weight gain  - a puffy face  - cold "
    "intolerance  - joint and muscle pain  - constipation  - dry skin  - depression  - "
    "slowed heart rate\nHowever, hypothyroidism develops slowly.")

ISSUE_CASES = [
    # (claim, passage, kind, veto, words in the reason)
    ("Two doses of the shingles vaccine are recommended.", SHINGLES, NUMBER, True,
     ("Two doses", "a single dose")),
    ("2 doses of the shingles vaccine are recommended.", SHINGLES, NUMBER, True,
     ("2 doses", "a single dose")),
    ("Three doses of the shingles vaccine are recommended.", SHINGLES, NUMBER, True,
     ("Three doses", "a single dose")),
    ("Squirrels, hamsters and rabbits are a common cause of rabies.", RABIES, FREQUENCY, True,
     ("common", "almost never")),
    ("Squirrels, hamsters and rabbits are a common cause of rabies.", RABIES_RARELY,
     FREQUENCY, True, ("common", "rarely")),
    ("Hypothyroidism typically speeds up the heart rate.", HYPOTHYROIDISM, DIRECTION, True,
     ("speeds up", "slowed")),
    ("Fatigue, weight loss and a puffy face are symptoms.", HYPOTHYROIDISM, DIRECTION, True,
     ("weight loss", "weight gain")),
    ("Shingles vaccine protects against chickenpox in adults over 60.", SHINGLES, ENTITY,
     False, ("chickenpox", "shingles")),
    ("The shingles vaccine protects older adults from getting chickenpox later on.", SHINGLES,
     ENTITY, True, ("chickenpox", "shingles")),
    ("Take the tablets once daily with food.", "Take the tablets twice daily with food.",
     NUMBER, True, ("once daily", "twice daily")),
    ("Take the tablets once weekly.", "Take the tablets once daily with food.", NUMBER, True,
     ("once weekly", "once daily")),
    ("Take the tablets every 12 hours.", "Take the tablets once a day with food.", NUMBER,
     True, ("every 12 hours", "once a day")),
]


@pytest.mark.parametrize(("claim", "passage", "kind", "veto", "says"), ISSUE_CASES)
def test_the_issue_cases_give_a_finding(claim: str, passage: str, kind: CheckKind,
                                        veto: bool, says: tuple[str, str]) -> None:
    mine = of_kind(found(claim, passage), kind)
    assert mine, found(claim, passage)
    assert mine[0].veto is veto
    assert mine[0].reason == f"the claim says {mine[0].claim_says}; the passage says " \
                             f"{mine[0].passage_says}"
    assert says[0] in mine[0].claim_says and says[1] in mine[0].passage_says


@pytest.mark.parametrize(("claim", "passage"), [
    ("Only a single dose of the shingles vaccine is recommended.", SHINGLES),
    ("Only one dose of the vaccine is recommended.", SHINGLES),
    ("Small mammals such as squirrels and rabbits are rarely found to be infected with "
     "rabies.", RABIES),
    ("Squirrels and rabbits are seldom found to be infected with rabies.", RABIES_RARELY),
    ("Hypothyroidism can cause a slowed heart rate.", HYPOTHYROIDISM),
    ("Weight gain is a common symptom of hypothyroidism.", HYPOTHYROIDISM),
    ("A vaccine called Zostavax was approved to prevent shingles in people age 60 and older.",
     SHINGLES),
    ("Take the tablets every 12 hours.", "Take the tablets twice a day with food."),
    ("Take the tablets every 8 hours.", "Take the tablets three times a day with food."),
    ("Take the tablets four times a day.", "Take the tablets every 4 to 6 hours."),
    ("Take the tablets once a day.", "Take the tablets daily with food."),
])
def test_what_the_passage_says_gives_no_finding(claim: str, passage: str) -> None:
    assert found(claim, passage) == []


def test_almost_never_is_a_frequency_not_a_negation() -> None:
    claim = "Small mammals such as squirrels and rabbits are rarely infected with rabies."
    assert not [f for f in found(claim, RABIES) if f.kind == CheckKind.NEGATION]


# ------------------------------------------------------------------------ reading words

@pytest.mark.parametrize(("text", "expected"), [
    ("Only a single dose is recommended.", [(1.0, "count:dose")]),
    ("Get a one-time dose of the vaccine.", [(1.0, "count:dose")]),
    ("The vaccine cut the risk by about half.", [(50.0, "percent")]),
    ("The pill is taken daily.", [(1.0, "freq/day")]),
    ("Walk every day.", [(1.0, "freq/day")]),
    ("Give it every other day.", [(2.0, "interval")]),
    ("Urine is collected on each day of the test.", []),
    ("It disrupts daily life.", []),
    ("Take it twice daily.", [(2.0, "freq/day")]),
    ("It was a single-blind trial.", []),
])
def test_counts_and_frequencies_in_words(text: str, expected: list[tuple[float, str]]) -> None:
    got = [(q.written, q.dim) for q in quantities(parse(text))
           if not q.dim.startswith("count:") or q.dim == "count:dose"]
    assert got == expected


def test_rates_are_times_per_day() -> None:
    assert rate("freq/day", 2.0) == 2.0
    assert rate("freq/week", 7.0) == 1.0
    assert rate("interval", 0.5) == 2.0  # every 12 hours
    assert rate("time", 3.0) is None


@pytest.mark.parametrize(("text", "levels"), [
    ("It is rarely fatal.", [1]),
    ("It is almost never fatal.", [1]),
    ("It is not uncommon.", [3]),
    ("It is not always fatal.", [2]),
    ("It is the most common cause.", [3]),
    ("It is more common in women.", []),
    ("He had a common cold.", []),
    ("They have little in common.", []),
    ("It is usually mild and sometimes severe.", [3, 2]),
])
def test_frequency_words_and_their_levels(text: str, levels: list[int]) -> None:
    doc = parse(text)
    assert [f.level for f in frequencies(doc, 0, len(doc.toks))] == levels


@pytest.mark.parametrize(("text", "names"), [
    ("The shingles vaccine (Zostavax) works.", [{"shingles vaccine"},
                                               {"zostavax", "shingles vaccine"}]),
    ("It prevents chickenpox, also called varicella.", [{"chickenpox"}, {"chickenpox"}]),
    ("Hepatitis B and hepatitis C differ.", [{"hepatitis b"}, {"hepatitis c"}]),
    ("Risk of breast, liver and pancreatic cancer.", [{"breast cancer"}, {"liver cancer"},
                                                     {"pancreatic cancer"}]),
    ("SARS-CoV-2 causes COVID-19.", [{"covid"}, {"covid"}]),
    ("A CAT scan was done.", []),
])
def test_entity_names(text: str, names: list[set[str]]) -> None:
    assert [set(e.names) for e in entities(parse(text))] == names


# ------------------------------------------------------------------- property style

NUMBER_WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 10), st.integers(1, 10), st.booleans(), st.booleans())
def test_dose_counts_differ_exactly_when_the_numbers_do(claim_n: int, passage_n: int,
                                                        claim_digits: bool,
                                                        passage_digits: bool) -> None:
    def count(n: int, digits: bool) -> str:
        noun = "dose" if n == 1 else "doses"
        return f"{n if digits else NUMBER_WORDS[n - 1]} {noun}"

    claim = f"Children need {count(claim_n, claim_digits)} of the measles vaccine."
    passage = f"Children need {count(passage_n, passage_digits)} of the measles vaccine."
    mine = of_kind(found(claim, passage), NUMBER)
    assert bool(mine) is (claim_n != passage_n)
    assert all(f.veto for f in mine)


PERIODS = [("once daily", 1.0), ("twice daily", 2.0), ("three times a day", 3.0),
           ("once weekly", 1 / 7), ("every 12 hours", 2.0), ("every 8 hours", 3.0),
           ("once a month", 12 / 365.25), ("every other day", 0.5)]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(PERIODS), st.sampled_from(PERIODS))
def test_dosing_frequencies_differ_exactly_when_the_rates_do(claim: tuple[str, float],
                                                             passage: tuple[str, float]) -> None:
    findings = found(f"The drug is taken {claim[0]} with food.",
                     f"The drug is taken {passage[0]} with food.")
    same = abs(claim[1] - passage[1]) <= 0.1 * max(claim[1], passage[1])
    assert bool(of_kind(findings, NUMBER)) is not same


RARE_SIDE = ["rarely", "seldom", "infrequently", "almost never", "hardly ever"]
COMMON_SIDE = ["often", "frequently", "commonly", "usually", "typically", "almost always",
               "always"]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(RARE_SIDE + COMMON_SIDE), st.sampled_from(RARE_SIDE + COMMON_SIDE))
def test_frequency_words_conflict_across_the_scale(claim_word: str, passage_word: str) -> None:
    claim = f"The infection {claim_word} spreads to the lungs in older patients."
    passage = f"The infection {passage_word} spreads to the lungs in older patients."
    mine = of_kind(found(claim, passage), FREQUENCY)
    across = (claim_word in RARE_SIDE) != (passage_word in RARE_SIDE)
    assert bool(mine) is across
    assert all(f.veto for f in mine)


DIRECTION_PAIRS = [("speeds up", "slows"), ("raises", "lowers"), ("increases", "decreases"),
                   ("speeds up", "slows down")]


@pytest.mark.parametrize(("up", "down"), DIRECTION_PAIRS)
def test_direction_words_both_ways(up: str, down: str) -> None:
    for claim, passage in ((up, down), (down, up)):
        findings = found(f"Caffeine {claim} the heart rate in adults.",
                         f"Caffeine {passage} the heart rate in adults.")
        assert [f.veto for f in of_kind(findings, DIRECTION)] == [True]
    assert found(f"Caffeine {up} the heart rate.", f"Caffeine {up} the heart rate.") == []


DISEASES = sorted({names for kind, names in LEXICON.values() if kind == "disease"
                   and len(names) == 1}, key=sorted)[:40]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(DISEASES), st.sampled_from(DISEASES))
def test_a_swapped_disease_is_found(claim_names: frozenset[str],
                                    passage_names: frozenset[str]) -> None:
    claim_name, passage_name = next(iter(claim_names)), next(iter(passage_names))
    claim = f"Regular exercise lowers the risk of {claim_name} in older adults."
    passage = f"Regular exercise lowers the risk of {passage_name} in older adults."
    mine = of_kind(found(claim, passage), ENTITY)
    assert bool(mine) is (claim_names != passage_names)
    assert all(f.veto for f in mine)  # "risk of X": the same neighbouring word


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=80), st.text(max_size=200))
def test_the_new_checks_never_raise(claim: str, passage: str) -> None:
    find_conflicts(claim + " rarely two doses of flu vaccine speeds up", passage + " often")


# ------------------------------------------------------------------- the benchmark pairs

def _pairs() -> list[dict[str, str]]:
    return [json.loads(line) for line in PAIRS.read_text("utf-8").splitlines() if line]


def _measure(split: str) -> tuple[list[str], list[str], int, int, int]:
    missed, false, mismatches, matches, false_vetoes = [], [], 0, 0, 0
    for row in _pairs():
        if row["split"] != split:
            continue
        findings = find_conflicts(row["claim"], row["passage"], row["id"])
        if row["label"] == "mismatch":
            mismatches += 1
            if not findings:
                missed.append(row["id"])
        else:
            matches += 1
            if findings:
                false.append(row["id"])
            false_vetoes += any(f.veto for f in findings)
    return missed, false, mismatches, matches, false_vetoes


def test_the_benchmark_pairs_are_enough() -> None:
    rows = _pairs()
    assert sum(r["label"] == "mismatch" for r in rows) >= 60
    assert sum(r["label"] == "match" for r in rows) >= 60
    assert {r["kind"] for r in rows} == {"number", "frequency", "direction", "entity"}


def test_every_planted_mismatch_of_the_dev_pairs_has_a_finding() -> None:
    missed, false, mismatches, matches, false_vetoes = _measure("dev")
    assert mismatches >= 60 and matches >= 60
    assert missed == []
    assert 1 - len(false) / matches >= 0.95, false
    assert false_vetoes == 0


@pytest.mark.parametrize(("split", "at_least"), [("held-out", 21), ("held-out-2", 20)])
def test_the_held_out_pairs_do_not_regress(split: str, at_least: int) -> None:
    """held-out: 18 of 25 mismatches found when first measured, 21 after fixes for three of
    its misses; held-out-2 (written after those fixes): 20 of 23. No finding on any match."""
    missed, false, mismatches, matches, false_vetoes = _measure(split)
    assert mismatches - len(missed) >= at_least, missed
    assert 1 - len(false) / matches >= 0.95, false
    assert false_vetoes == 0
