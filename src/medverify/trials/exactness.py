"""Checks that a curated summary (:mod:`medverify.trials.curate`) keeps its guarantees, for
the tests and ``benchmarks/bench_trials_summaries.py``:

* **exact** (:func:`sentence_problems`): every pointer names a filled field of the record
  whose value (as text, enum or label, :func:`~medverify.trials.summary.forms`) occurs in
  its sentence, and every number in a sentence is a number of a field that sentence points
  to. The one exception is the note ending a capped list: its counts (``"<shown> of <all>
  ... are shown; the other <n>"``) must be the length of the list its first pointer names,
  the items of it the section shows, and their difference.
* **complete** (:func:`cut_lists`): every list of :data:`LISTS` the record fills is shown
  whole (each item referenced by a pointer) or ends with a note, once its parent item is
  shown.
* **serious adverse events** (:func:`missing_serious_events`): every term is in the serious
  section, and each group's sentence names every term with participants affected in it.
* **dates** (:func:`dates_as_actual`): a date the registry marks estimated or anticipated, or
  leaves untyped, is never written as having happened.

:func:`audit` runs all four on one record and its summary.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from medverify.trials.sections.adverse_events import affected_any
from medverify.trials.summary import (
    AE,
    BASELINE,
    STATUS,
    Section,
    Sentence,
    TrialSummary,
    forms,
    pointer,
    resolve,
)

NUMBER = re.compile(r"[-+]?(?:\d+(?:[.,]\d+)*|\.\d+)(?:[eE][-+]?\d+)?%?")
NOTE = re.compile(r"^(\d+) of (\d+) .+? are shown; the other (\d+) ")
ACTUAL_WORDING = re.compile(r"\b(?:It started on|It reached primary completion on|It ended on|"
                            r"It was completed on)\b")
_INDEX = re.compile(r"/\d+(?=/|$)")

_P = "/protocolSection"
_MEASURE = "/resultsSection/outcomeMeasuresModule/outcomeMeasures"
_FLOW = "/resultsSection/participantFlowModule/periods"
_BASE = pointer(BASELINE)
_AE = pointer(AE)
LISTS: tuple[str, ...] = (
    f"{_P}/conditionsModule/conditions", f"{_P}/conditionsModule/keywords",
    "/derivedSection/conditionBrowseModule/meshes",
    f"{_P}/armsInterventionsModule/interventions",
    f"{_P}/armsInterventionsModule/interventions/*/otherNames",
    f"{_P}/armsInterventionsModule/armGroups",
    f"{_P}/armsInterventionsModule/armGroups/*/interventionNames",
    f"{_P}/designModule/phases",
    f"{_P}/outcomesModule/primaryOutcomes", f"{_P}/outcomesModule/secondaryOutcomes",
    f"{_P}/outcomesModule/otherOutcomes",
    _MEASURE, f"{_MEASURE}/*/denoms", f"{_MEASURE}/*/denoms/*/counts",
    f"{_MEASURE}/*/classes", f"{_MEASURE}/*/classes/*/categories",
    f"{_MEASURE}/*/classes/*/categories/*/measurements", f"{_MEASURE}/*/classes/*/denoms",
    f"{_MEASURE}/*/classes/*/denoms/*/counts", f"{_MEASURE}/*/analyses",
    _FLOW, f"{_FLOW}/*/milestones", f"{_FLOW}/*/milestones/*/achievements",
    f"{_FLOW}/*/dropWithdraws", f"{_FLOW}/*/dropWithdraws/*/reasons",
    f"{_AE}/eventGroups", f"{_AE}/seriousEvents", f"{_AE}/seriousEvents/*/stats",
    f"{_AE}/otherEvents", f"{_AE}/otherEvents/*/stats",
    f"{_BASE}/denoms", f"{_BASE}/denoms/*/counts", f"{_BASE}/measures",
    f"{_BASE}/measures/*/classes", f"{_BASE}/measures/*/classes/*/categories",
    f"{_BASE}/measures/*/classes/*/categories/*/measurements",
)
"""The lists a summary enumerates (``*``: every index). Not here: a baseline measure's or
class's denominators, written only where they differ from the module's."""


def numbers(text: str) -> list[str]:
    """The number tokens of a text (``3``, ``-2.13``, ``<0.0001`` -> ``0.0001``, ``5%`` ->
    ``5``)."""
    return [n.rstrip("%").lstrip("+") for n in NUMBER.findall(text)]


def is_note(study: dict[str, Any], sentence: Sentence) -> bool:
    """Whether a sentence is the note ending a capped list."""
    if not sentence.pointers or not NOTE.match(sentence.text):
        return False
    try:
        return isinstance(resolve(study, sentence.pointers[0]), list)
    except KeyError:
        return False


def shown_items(study: dict[str, Any], section: Section) -> dict[str, set[int]]:
    """Per list pointer, the indexes of its items the section's sentences (notes excepted)
    point into."""
    shown: dict[str, set[int]] = {}
    for sentence in section.sentences:
        if not is_note(study, sentence):
            _add_items(shown, sentence.pointers)
    return shown


def _add_items(shown: dict[str, set[int]], pointers: list[str]) -> None:
    for ref in pointers:
        for found in _INDEX.finditer(ref):
            shown.setdefault(ref[:found.start()], set()).add(int(ref[found.start() + 1:
                                                                     found.end()]))


def sentence_problems(study: dict[str, Any], sentence: Sentence,
                      shown: dict[str, set[int]] | None = None) -> list[str]:
    """What breaks the exactness guarantee in one sentence (see the module docstring);
    ``shown``: the section's :func:`shown_items`, to check a note's count of shown items."""
    problems: list[str] = []
    text, refs = sentence.text, sentence.pointers
    if is_note(study, sentence):
        match = NOTE.match(text)
        assert match is not None
        kept, total, rest = (int(g) for g in match.groups())
        items = resolve(study, refs[0])
        if total != len(items) or kept + rest != total:
            problems.append(f"note counts {kept}/{total}/{rest} do not fit the {len(items)} "
                            f"items of {refs[0]}")
        if shown is not None and kept != len(shown.get(refs[0], ())):
            problems.append(f"note says {kept} shown; the section shows "
                            f"{len(shown.get(refs[0], ()))} of {refs[0]}")
        text, refs = text[match.end():], refs[1:]
    allowed: set[str] = set()
    for ref in refs:
        try:
            value = resolve(study, ref)
        except KeyError:
            problems.append(f"pointer {ref} names no field")
            continue
        if value is None or value == "" or isinstance(value, dict | list):
            problems.append(f"pointer {ref} names no filled scalar")
            continue
        if isinstance(value, bool):
            continue
        written = forms(value)
        if not any(form in sentence.text for form in written):
            problems.append(f"{ref}: {written[0]!r} not in the sentence")
        for form in written:
            allowed.update(numbers(form))
    problems += [f"number {n} is in no field the sentence points to"
                 for n in numbers(text) if n not in allowed]
    return problems


def _expand(study: dict[str, Any], pattern: str) -> Iterator[str]:
    """The concrete pointers of a :data:`LISTS` pattern that name a list in the record."""
    head, star, tail = pattern.partition("/*")
    try:
        node = resolve(study, head)
    except KeyError:
        return
    if not star:
        if isinstance(node, list):
            yield head
        return
    for i in range(len(node) if isinstance(node, list) else 0):
        yield from _expand(study, f"{head}/{i}{tail}")


def cut_lists(study: dict[str, Any], summary: TrialSummary) -> list[str]:
    """Lists of :data:`LISTS` the summary shows in part without a note (a list under an item
    the summary does not show, or only names in a note, is that item's list's business)."""
    shown: dict[str, set[int]] = {}
    noted: set[str] = set()
    for section in summary.sections:
        for sentence in section.sentences:
            if is_note(study, sentence):
                noted.add(sentence.pointers[0])
            else:
                _add_items(shown, sentence.pointers)
    cut = []
    for pattern in LISTS:
        for ref in _expand(study, pattern):
            parent = ref.rsplit("/", 1)[0]
            owner, _, index = parent.rpartition("/")
            if "*" in pattern and int(index) not in shown.get(owner, set()):
                continue
            items = resolve(study, ref)
            if len(shown.get(ref, set())) < len(items) and ref not in noted:
                cut.append(f"{ref}: {len(shown.get(ref, set()))} of {len(items)} shown, "
                           "no note")
    return cut


def missing_serious_events(study: dict[str, Any], summary: TrialSummary) -> list[str]:
    """Serious adverse event terms absent from the serious section, and (term, group) pairs
    with participants affected that the group's sentence does not name."""
    try:
        events = resolve(study, f"{_AE}/seriousEvents")
        groups = resolve(study, f"{_AE}/eventGroups")
    except KeyError:
        return []
    section = summary.section("serious adverse events").sentences
    pointed = {ref for s in section for ref in s.pointers}
    by_group = {s.pointers[0]: set(s.pointers) for s in section if s.pointers}
    index = {g.get("id"): i for i, g in enumerate(groups or []) if isinstance(g, dict)}
    missing = []
    for e, event in enumerate(events or []):
        if f"{_AE}/seriousEvents/{e}/term" not in pointed:
            missing.append(f"serious event {e} ({event.get('term')!r}) not in the summary")
        for s, stat in enumerate(event.get("stats") or []):
            if not affected_any(stat) or stat.get("groupId") not in index:
                continue
            group = f"{_AE}/eventGroups/{index[stat['groupId']]}"
            named = by_group.get(f"{group}/title", set()) | by_group.get(f"{group}/id", set())
            if f"{_AE}/seriousEvents/{e}/stats/{s}/numAffected" not in named:
                missing.append(f"serious event {e} ({event.get('term')!r}) missing from "
                               f"group {stat['groupId']}'s sentence")
    return missing


def dates_as_actual(study: dict[str, Any], summary: TrialSummary) -> dict[str, list[str]]:
    """Date sentences that write an estimated/anticipated (``estimated``) or untyped
    (``untyped``) date as having happened, or that do not say what the date is."""
    found: dict[str, list[str]] = {"estimated": [], "untyped": []}
    for key in ("startDateStruct", "primaryCompletionDateStruct", "completionDateStruct"):
        try:
            struct = resolve(study, f"{pointer(STATUS)}/{key}")
        except KeyError:
            continue
        kind = struct.get("type") if isinstance(struct, dict) else None
        if kind == "ACTUAL":
            continue
        ref = f"{pointer(STATUS)}/{key}/date"
        for section in summary.sections:
            for sentence in section.sentences:
                if ref not in sentence.pointers:
                    continue
                said = (("estimated" in sentence.text or "anticipated" in sentence.text)
                        if kind in ("ESTIMATED", "ANTICIPATED")
                        else "does not say" in sentence.text)
                if ACTUAL_WORDING.search(sentence.text) or not said:
                    found["estimated" if kind in ("ESTIMATED", "ANTICIPATED")
                          else "untyped"].append(f"{key} ({kind}): {sentence.text}")
    return found


def audit(study: dict[str, Any], summary: TrialSummary) -> dict[str, list[str]]:
    """Every check of this module on one record: ``inexact`` (sentence problems), ``cut``,
    ``serious_missing``, ``estimated_as_actual`` and ``untyped_as_actual``."""
    inexact = []
    for section in summary.sections:
        shown = shown_items(study, section)
        for sentence in section.sentences:
            inexact += [f"{section.name}: {p}" for p in sentence_problems(study, sentence,
                                                                          shown)]
    dates = dates_as_actual(study, summary)
    return {"inexact": inexact, "cut": cut_lists(study, summary),
            "serious_missing": missing_serious_events(study, summary),
            "estimated_as_actual": dates["estimated"], "untyped_as_actual": dates["untyped"]}
