"""Scripted models under test for the clinical-trial study, and a rule-based judge.

Each :class:`TrialAnswerer` reads the answer prompt (``prompts/trial_answer``): which
context it was shown (the fence header ``trial-title``, ``trial-json`` or
``trial-summary``), the context text, and the question (one of the 15). Its habit:

``grounded``      copies the question's section from the summary; from the JSON record it
                  rebuilds the summary (when the record is whole) and misreads one number
                  in one answer of three; with the title only it writes the title back and
                  adds invented specifics (a sample size, a response rate, a p-value).
``confabulating`` like ``grounded`` but changes every number it copies, from any context.
``unreliable``    one request in five fails (a provider error), one in seven is empty;
                  otherwise ``grounded``.

Everything is deterministic: choices depend on the prompt text only. These are scripts
that exercise the study's machinery; they say nothing about how a real model behaves.

:class:`NumberJudge` is an in-process judge for tests and the offline example: a unit is
supported when its content words and numbers all occur in one passage, contradicted when
a passage sentence shares most of its content words but none of its numbers where both
have some (a changed number), otherwise neither (a coverage gap).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from medverify.errors import ProviderError
from medverify.llm.base import ChatRequest
from medverify.records import Analysis, Verdict
from medverify.study.questions import QUESTIONS, summary_text
from medverify.testing.fake_provider import ScriptedProvider, register_fake
from medverify.text import sentence_spans
from medverify.trials.curate import curate

HABITS = ("grounded", "confabulating", "unreliable")
_FENCE = re.compile(r"<<<(F[0-9a-f]{12}) (trial-title|trial-json|trial-summary)>>>\n(.*?)\n"
                    r"<<<END \1>>>", re.DOTALL)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_WORD = re.compile(r"[a-z][a-z\-]{3,}")
_SECTION_LINE = re.compile(r"^(\d{1,2})\. [^:]+: (.*)$")


def _hash(text: str) -> int:
    return int(hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12], 16)


def read_prompt(request: ChatRequest) -> tuple[str, str, int | None]:
    """(context kind, context text, question number) of an answer prompt."""
    prompt = request.messages[-1].content
    found = _FENCE.search(prompt)
    kind, text = (found.group(2), found.group(3)) if found else ("", "")
    question = prompt.rsplit("QUESTION:", 1)[-1].strip()
    number = next((q.number for q in QUESTIONS if q.text == question), None)
    return kind, text, number


def section_from_summary(text: str, number: int) -> str:
    for line in text.splitlines():
        match = _SECTION_LINE.match(line)
        if match and int(match.group(1)) == number:
            return match.group(2)
    return ""


def _first_sentences(text: str, n: int = 3) -> str:
    spans = sentence_spans(text)
    return " ".join(text[a:b].strip() for a, b in spans[:n]) if spans else text


def change_numbers(text: str, salt: str, every: bool = True) -> str:
    """``text`` with its numbers changed (all, or just the first); years stay."""
    count = 0

    def repl(match: re.Match[str]) -> str:
        nonlocal count
        value = match.group(0)
        if "." not in value and 1900 <= int(value) <= 2100:
            return value
        count += 1
        if not every and count > 1:
            return value
        bump = 1 + _hash(salt + value + str(count)) % 9
        if "." in value:
            whole, frac = value.split(".")
            return f"{int(whole) + bump}.{frac}"
        return str(int(value) + bump)

    return _NUMBER.sub(repl, text)


def _invented(title: str, number: int, salt: str) -> str:
    h = _hash(salt)
    n, rate, p = 80 + h % 400, 20 + h % 60, (h % 40 + 1) / 1000
    made_up = (
        f"Enrollment: {n} participants.",
        f"The objective response rate was {rate}% versus {rate // 2}% (p-value {p:.3f}).",
        f"Serious adverse events affected {rate // 3} participants.",
        f"Participants were randomized 1:1 across {2 + h % 30} sites.",
    )
    return f"The trial, {title}, was studied. " + made_up[number % len(made_up)]


class TrialAnswerer:
    """A reply function for :class:`ScriptedProvider` with one of :data:`HABITS`."""

    def __init__(self, habit: str) -> None:
        if habit not in HABITS:
            raise ValueError(f"unknown habit {habit!r}; use one of {', '.join(HABITS)}")
        self.habit = habit

    def __call__(self, request: ChatRequest) -> str:
        prompt = request.messages[-1].content
        kind, text, number = read_prompt(request)
        h = _hash(prompt)
        if self.habit == "unreliable":
            if h % 5 == 0:
                raise ProviderError("scripted outage", status=503, retryable=False)
            if h % 7 == 0:
                return ""
        if number is None:
            return "I cannot tell which question this is."
        salt = f"{self.habit}:{number}:{text[:200]}"
        if kind == "trial-summary":
            answer = _first_sentences(section_from_summary(text, number))
        elif kind == "trial-json":
            answer = self._from_json(text, number, salt)
        else:
            answer = _invented(text, number, salt)
        if self.habit == "confabulating":
            answer = change_numbers(answer, salt)
        return answer

    def _from_json(self, text: str, number: int, salt: str) -> str:
        try:
            record: Any = json.loads(text)
        except ValueError:  # the record was cut to the context budget
            return _invented(_title_of(text), number, salt)
        if not isinstance(record, dict):
            return _invented("", number, salt)
        answer = _first_sentences(section_from_summary(summary_text(curate(record)), number))
        if _hash(salt) % 3 == 0:
            answer = change_numbers(answer, salt, every=False)
        return answer


def _title_of(json_text: str) -> str:
    found = re.search(r'"briefTitle":\s*"([^"]{1,300})"', json_text)
    return found.group(1) if found else "this trial"


def register_trial_models(habits: Sequence[str] = HABITS, prefix: str = "trial-") \
        -> dict[str, str]:
    """Register one scripted model per habit as ``fake:<prefix><habit>``; returns
    {label: spec}."""
    specs = {}
    for habit in habits:
        name = f"{prefix}{habit}"
        register_fake(name, ScriptedProvider(TrialAnswerer(habit), name=name))
        specs[habit] = f"fake:{name}"
    return specs


# -- a rule-based judge --------------------------------------------------------------------


def _content(text: str) -> tuple[set[str], set[str]]:
    """Word stems (first 6 letters) and numbers of a text."""
    lower = text.lower()
    return {w[:6] for w in _WORD.findall(lower)}, set(_NUMBER.findall(lower))


class NumberJudge:
    """A deterministic judge for tests and the offline example (see the module doc): each
    sentence of a unit is checked; the unit is supported when every sentence is, and
    contradicted when any sentence is."""

    name = "numbers"
    prompt_version = None
    judge_id = "test:numbers"

    async def judge(self, items: Sequence[Any]) -> list[Verdict]:
        return [self._verdict(item) for item in items]

    def _verdict(self, item: Any) -> Verdict:
        text = item.claim.text
        spans = sentence_spans(text) or [(0, len(text))]
        supported, contradicted, passage_id = True, False, None
        for a, b in spans:
            ok, against, where = self._sentence(text[a:b], item.passages)
            supported = supported and ok
            if against:
                contradicted, passage_id = True, where
            elif ok and passage_id is None:
                passage_id = where
        return Verdict(claim_id=item.claim.id, passage_ids=[p.id for p in item.passages],
                       factual=Analysis(holds=supported, passage_id=passage_id
                                        if supported else None),
                       counterfactual=Analysis(holds=contradicted, passage_id=passage_id
                                               if contradicted else None),
                       judge=self.judge_id)

    @staticmethod
    def _sentence(text: str, passages: Sequence[Any]) -> tuple[bool, bool, str | None]:
        words, numbers = _content(text)
        if not words:
            return True, False, None
        for passage in passages:
            p_words, p_numbers = _content(passage.text)
            if words <= p_words | {"trial", "study"} and numbers <= p_numbers:
                return True, False, passage.id
        for passage in passages:
            for a, b in sentence_spans(passage.text):
                s_words, s_numbers = _content(passage.text[a:b])
                overlap = len(words & s_words) / len(words)
                if overlap >= 0.5 and numbers and s_numbers and not numbers <= s_numbers:
                    return False, True, passage.id
        return False, False, None


# -- small registry records ----------------------------------------------------------------


Arm = tuple[str, str, str]  # (label, arm type, drug)


def make_record(nct_id: str, title: str, *, condition: str = "Non-small Cell Lung Cancer",
                drug: str = "Examplimab", enrolled: int = 120, responders: tuple[int, int] =
                (18, 31), at_risk: tuple[int, int] = (60, 60), serious: tuple[int, int] =
                (4, 9), with_results: bool = True) -> dict[str, Any]:
    """A small but complete ClinicalTrials.gov API v2 study record (made up, for tests and
    examples that must run without the registry samples): two arms, one primary outcome
    with a statistical analysis, one secondary outcome, serious and other adverse events."""
    arms: list[Arm] = [("Placebo", "PLACEBO_COMPARATOR", "Placebo"), (drug, "EXPERIMENTAL", drug)]
    record: dict[str, Any] = {
        "protocolSection": _protocol_section(nct_id, title, condition, drug, enrolled, arms),
        "hasResults": with_results,
    }
    if not with_results:
        return record
    groups = [{"id": f"OG00{i}", "title": label} for i, (label, _, _) in enumerate(arms)]
    record["resultsSection"] = {
        "participantFlowModule": _participant_flow(arms, at_risk),
        "outcomeMeasuresModule": _outcome_measures(groups, responders, at_risk),
        "adverseEventsModule": _adverse_events(arms, serious, at_risk),
    }
    return record


def _protocol_section(nct_id: str, title: str, condition: str, drug: str, enrolled: int,
                      arms: list[Arm]) -> dict[str, Any]:
    return {
        "identificationModule": {"nctId": nct_id, "briefTitle": title},
        "statusModule": {"overallStatus": "COMPLETED",
                         "startDateStruct": {"date": "2019-03"},
                         "completionDateStruct": {"date": "2022-11"}},
        "sponsorCollaboratorsModule": {"leadSponsor": {"name": "Example Oncology"}},
        "descriptionModule": {"briefSummary": f"This study compares {drug} with placebo "
                              f"in adults with {condition.lower()}."},
        "conditionsModule": {"conditions": [condition], "keywords": ["immunotherapy"]},
        "designModule": {"studyType": "INTERVENTIONAL", "phases": ["PHASE2"],
                         "designInfo": {"allocation": "RANDOMIZED",
                                        "interventionModel": "PARALLEL",
                                        "primaryPurpose": "TREATMENT",
                                        "maskingInfo": {"masking": "DOUBLE"}},
                         "enrollmentInfo": {"count": enrolled, "type": "ACTUAL"}},
        "armsInterventionsModule": {
            "armGroups": [{"label": label, "type": kind, "interventionNames": [f"Drug: {d}"]}
                          for label, kind, d in arms],
            "interventions": [{"type": "DRUG", "name": d,
                               "description": f"{d} 10 mg/kg intravenously every 3 weeks"}
                              for _, _, d in arms],
        },
        "outcomesModule": {
            "primaryOutcomes": [{"measure": "Objective Response Rate",
                                 "timeFrame": "Up to 24 months"}],
            "secondaryOutcomes": [{"measure": "Progression-free Survival",
                                   "timeFrame": "Up to 36 months"}],
        },
        "eligibilityModule": {"sex": "ALL", "minimumAge": "18 Years",
                              "healthyVolunteers": False,
                              "eligibilityCriteria": "Inclusion Criteria:\n* ECOG 0-1\n\n"
                              "Exclusion Criteria:\n* Active autoimmune disease"},
    }


def _participant_flow(arms: list[Arm], at_risk: tuple[int, int]) -> dict[str, Any]:
    return {
        "groups": [{"id": f"FG00{i}", "title": label} for i, (label, _, _) in
                   enumerate(arms)],
        "periods": [{"title": "Overall Study", "milestones": [
            {"type": "STARTED", "achievements": [
                {"groupId": f"FG00{i}", "numSubjects": str(n)}
                for i, n in enumerate(at_risk)]},
            {"type": "COMPLETED", "achievements": [
                {"groupId": f"FG00{i}", "numSubjects": str(n - 5)}
                for i, n in enumerate(at_risk)]}]}],
    }


def _outcome_measures(groups: list[dict[str, str]], responders: tuple[int, int],
                      at_risk: tuple[int, int]) -> dict[str, Any]:
    return {"outcomeMeasures": [
        {"type": "PRIMARY", "title": "Objective Response Rate", "paramType": "NUMBER",
         "unitOfMeasure": "participants", "timeFrame": "Up to 24 months",
         "groups": groups,
         "denoms": [{"units": "Participants", "counts": [
             {"groupId": g["id"], "value": str(n)} for g, n in zip(groups, at_risk,
                                                                  strict=True)]}],
         "classes": [{"categories": [{"measurements": [
             {"groupId": g["id"], "value": str(n)} for g, n in zip(groups, responders,
                                                                  strict=True)]}]}],
         "analyses": [{"groupIds": [g["id"] for g in groups],
                       "statisticalMethod": "Cochran-Mantel-Haenszel",
                       "paramType": "Odds Ratio (OR)", "paramValue": "2.41",
                       "ciPctValue": "95", "ciNumSides": "TWO_SIDED",
                       "ciLowerLimit": "1.12", "ciUpperLimit": "5.19",
                       "pValue": "0.021"}]},
        {"type": "SECONDARY", "title": "Progression-free Survival", "paramType": "MEDIAN",
         "dispersionType": "95% Confidence Interval", "unitOfMeasure": "months",
         "timeFrame": "Up to 36 months", "groups": groups,
         "classes": [{"categories": [{"measurements": [
             {"groupId": "OG000", "value": "4.2", "lowerLimit": "3.1",
              "upperLimit": "5.6"},
             {"groupId": "OG001", "value": "7.9", "lowerLimit": "6.0",
              "upperLimit": "9.8"}]}]}]},
    ]}


def _adverse_events(arms: list[Arm], serious: tuple[int, int],
                    at_risk: tuple[int, int]) -> dict[str, Any]:
    return {
        "frequencyThreshold": "5", "timeFrame": "Up to 36 months",
        "eventGroups": [{"id": f"EG00{i}", "title": label, "seriousNumAffected": s,
                         "seriousNumAtRisk": n, "otherNumAffected": n // 2,
                         "otherNumAtRisk": n, "deathsNumAffected": 1, "deathsNumAtRisk": n}
                        for i, ((label, _, _), s, n) in enumerate(zip(arms, serious,
                                                                      at_risk, strict=True))],
        "seriousEvents": [{"term": "Pneumonitis", "organSystem": "Respiratory disorders",
                           "stats": [{"groupId": f"EG00{i}", "numAffected": s,
                                      "numAtRisk": n} for i, (s, n) in
                                     enumerate(zip(serious, at_risk, strict=True))]}],
        "otherEvents": [{"term": "Fatigue", "organSystem": "General disorders",
                         "stats": [{"groupId": f"EG00{i}", "numAffected": n // 3,
                                    "numAtRisk": n} for i, n in enumerate(at_risk)]}],
    }
