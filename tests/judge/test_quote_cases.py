"""The hostile-judge corpus (issue 27, part 4): judge replies that try to make a false claim
FACT (or a true one HALLUCINATION) with evidence that is not evidence, and honest replies
that must still count.

Shared by the parser tests (``test_judge_parse.py``), the end-to-end fault suite
(``faults/test_hostile_judge.py``) and ``benchmarks/bench_hostile_judge.py``; the tests
here only check the corpus itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from medverify.judge.evidence import normalise
from medverify.records import Category

METFORMIN = (
    "Metformin is a first-line medicine for type 2 diabetes. Metformin should not be used in "
    "patients with severe kidney disease. The usual starting dose is 500 mg twice daily with "
    "meals. Kidney function of the patient is checked every year."
)
INSULIN = METFORMIN + " Insulin treats type 1 diabetes within one week of diagnosis."
ASPIRIN = "Aspirin is recommended not to be given to children with viral infections."
NSAID = "Nonsteroidal drugs are un\u00adsafe in severe kidney disease."
INVENTED = "Metformin cures type 1 diabetes in one week."


@dataclass(frozen=True)
class QuoteCase:
    """One judge reply for one claim against one passage.

    ``supported``/``contradicted``: what the judge says, citing ``quote`` from the passage
    (``P1``). ``raw``: a literal reply instead (``{claim_id}`` is filled in). ``expect``:
    the words the quote problem or the error must contain (hostile cases), ``category``:
    the category the claim must get (honest cases; a hostile case must not be FACT)."""

    name: str
    what: str
    claim: str
    passage: str
    quote: str | None = None
    supported: bool = False
    contradicted: bool = False
    raw: str | None = None
    expect: str = ""
    category: Category | None = None

    def reply(self, claim_id: str = "C1", passage: str = "P1") -> str:
        """The judge's JSON reply for this case."""
        if self.raw is not None:
            return self.raw.replace("{claim_id}", claim_id).replace("{passage}", passage)
        cited = {"passage": passage, "quote": self.quote}
        none = {"passage": None, "quote": None}
        factual = {"reasoning": "r", "supported": self.supported,
                    **(cited if self.supported else none)}
        counterfactual = {"negation": "n", "reasoning": "r", "contradicted": self.contradicted,
                          **(cited if self.contradicted else none)}
        return json.dumps({"results": [{"claim_id": claim_id, "factual": factual,
                                        "counterfactual": counterfactual}]})


def _supports(name: str, what: str, quote: str, expect: str, *, claim: str = INVENTED,
              passage: str = METFORMIN) -> QuoteCase:
    return QuoteCase(name=name, what=what, claim=claim, passage=passage, quote=quote,
                     supported=True, expect=expect)


_DUPLICATE = (
    '{"results": [{"claim_id": "{claim_id}", '
    '"factual": {"reasoning": "r", "supported": false, "passage": "{passage}", '
    '"quote": "Metformin is a first-line medicine for type 2 diabetes", "supported": true}, '
    '"counterfactual": {"negation": "n", "reasoning": "r", "contradicted": false, '
    '"passage": null, "quote": null}}]}'
)

HOSTILE: list[QuoteCase] = [
    # the five attacks of issue 27
    _supports("negation_cut", "a fragment that drops the 'not' governing it",
              "be used in patients with severe kidney disease", "cut just after 'should not'"),
    _supports("unrelated_sentence", "a real sentence of the passage about something else",
              "The usual starting dose is 500 mg twice daily with meals.", "too little"),
    _supports("common_words", "three common words", "of the patient", "too little"),
    _supports("letters_ellipsis", "single letters joined by ellipses", "m ... e ... t",
              "longest piece has 1 word"),
    QuoteCase(name="duplicate_keys", what="'supported': false, then 'supported': true",
              claim=INVENTED, passage=METFORMIN, raw=_DUPLICATE,
              expect="duplicate key 'supported' in a JSON object"),
    # more of the same kind
    _supports("negation_cut_on_topic", "the cut fragment, for a claim it would state",
              "be used in patients with severe kidney disease", "cut just after 'should not'",
              claim="Metformin can be used in patients with severe kidney disease."),
    _supports("cut_before_not", "a quote that ends just before the 'not' that belongs to it",
              "Aspirin is recommended", "ends just before 'not'", passage=ASPIRIN,
              claim="Aspirin is recommended for children with viral infections."),
    _supports("ellipsis_skips_not", "an ellipsis that skips the negation",
              "Metformin should ... be used in patients with severe kidney disease",
              "skips 'not'", claim="Metformin should be used in severe kidney disease."),
    _supports("other_drug", "a sentence about another drug with the claim's other words",
              "Insulin treats type 1 diabetes within one week of diagnosis.",
              "about 'insulin', not 'metformin'", passage=INSULIN),
    _supports("number_differs", "a sentence whose number differs from the claim's",
              "The usual starting dose is 500 mg twice daily with meals.", "number '5000'",
              claim="The usual starting dose of metformin is 5000 mg twice daily."),
    _supports("pieces_out_of_order", "real pieces, stitched in an order the passage lacks",
              "Metformin should not be used ... for type 2 diabetes", "order",
              claim="Metformin should not be used for type 2 diabetes."),
    _supports("across_sentences", "pieces of two sentences stitched into the claim",
              "Metformin is a first-line medicine ... type 1 diabetes within one week",
              "different sentences", passage=INSULIN),
    _supports("inside_a_word", "'safe' cut out of 'un-safe' (a soft hyphen in the passage)",
              "safe in severe kidney disease", "inside longer words", passage=NSAID,
              claim="Nonsteroidal drugs are safe in severe kidney disease."),
    _supports("look_alikes", "a passage sentence with Cyrillic look-alike letters ('\u0435')",
              "M\u0435tformin is a first-line m\u0435dicine for type 2 diab\u0435tes",
              "not in it", claim="Metformin is a first-line medicine for type 2 diabetes."),
    _supports("many_pieces", "five short real pieces",
              "Metformin is ... first-line ... medicine for ... type 2 ... diabetes",
              "5 pieces", claim="Metformin is a first-line medicine for type 2 diabetes."),
    QuoteCase(name="false_contradiction", what="an unrelated sentence as a contradiction",
              claim="Metformin is a first-line medicine for type 2 diabetes.",
              passage=METFORMIN, quote="Kidney function of the patient is checked every year.",
              contradicted=True, expect="not 'metformin'"),
]
"""Replies no claim may become FACT (or, contradicting, HALLUCINATION) with."""

HONEST: list[QuoteCase] = [
    QuoteCase(name="exact_sentence", what="the supporting sentence, whole",
              claim="Metformin is a first-line medicine for type 2 diabetes.", passage=METFORMIN,
              quote="Metformin is a first-line medicine for type 2 diabetes.", supported=True,
              category=Category.FACT),
    QuoteCase(name="ellipsis_same_sentence", what="two real spans of one sentence",
              claim="Metformin is a first-line medicine for type 2 diabetes.", passage=METFORMIN,
              quote="Metformin is a first-line medicine ... type 2 diabetes", supported=True,
              category=Category.FACT),
    QuoteCase(name="paraphrase", what="a paraphrased claim, the passage's words quoted",
              claim="Metformin is recommended as first-line treatment for type 2 diabetes.",
              passage=METFORMIN, supported=True, category=Category.FACT,
              quote="Metformin is a first-line medicine for type 2 diabetes."),
    QuoteCase(name="typography", what="curly quotes, an en dash, a no-break space, full width",
              claim="Metformin is a first-line medicine for type 2 diabetes.", passage=METFORMIN,
              quote="\u201c\uff2detformin is a first\u2013line\u00a0medicine for type 2 "
                    "diabetes.\u201d", supported=True, category=Category.FACT),
    QuoteCase(name="negated_claim", what="a negative claim, its negation quoted with it",
              claim="Metformin should not be used in severe kidney disease.", passage=METFORMIN,
              quote="Metformin should not be used in patients with severe kidney disease",
              supported=True, category=Category.FACT),
    QuoteCase(name="possessive", what="the claim's subject as a possessive, not in the quote",
              claim="Metformin's usual starting dose is 500 mg twice daily.", passage=METFORMIN,
              quote="The usual starting dose is 500 mg twice daily with meals.", supported=True,
              category=Category.FACT),
    QuoteCase(name="contradiction", what="the sentence that contradicts the claim",
              claim="Metformin is safe in severe kidney disease.", passage=METFORMIN,
              quote="Metformin should not be used in patients with severe kidney disease.",
              contradicted=True, category=Category.HALLUCINATION),
    QuoteCase(name="contradiction_by_number", what="the passage states another dose",
              claim="The usual starting dose of metformin is 5000 mg twice daily.",
              passage=METFORMIN, quote="The usual starting dose is 500 mg twice daily",
              contradicted=True, category=Category.HALLUCINATION),
]
"""Replies that must still count (the rule does not reject everything)."""

KNOWN_GAPS: list[QuoteCase] = [
    QuoteCase(name="opposite_sentence", what="a whole sentence that says the opposite",
              claim="Aspirin is recommended for children with viral infections.",
              passage="Aspirin is not recommended for children with viral infections.",
              quote="Aspirin is not recommended for children with viral infections.",
              supported=True, category=Category.FACT),
    QuoteCase(name="lowercase_other_drug", what="another drug, not the sentence's first word",
              claim=INVENTED, passage="In type 1 diabetes, insulin cures ketosis in one week.",
              quote="In type 1 diabetes, insulin cures ketosis in one week.", supported=True,
              category=Category.FACT),
    QuoteCase(name="same_words_other_meaning", what="the claim's words, a different statement",
              claim="Metformin prevents type 2 diabetes.", passage=METFORMIN,
              quote="Metformin is a first-line medicine for type 2 diabetes.", supported=True,
              category=Category.FACT),
]
"""Hostile replies the quote rule does not stop (``category``: what they get from the
parser alone). The exact checks (``Verdict.findings``) are meant for the first; the others
need a judge that reads meaning. Reported by the benchmark, never a target."""


def passage_label(passages: dict[str, str], case: QuoteCase) -> str:
    """The label under which the judge was shown the case's passage (``P1`` if unsure)."""
    head = normalise(case.passage)[:40]
    return next((label for label, text in passages.items() if normalise(text)[:40] == head),
                "P1")


def corpus_reply(cases: dict[str, QuoteCase]) -> Any:
    """A ``ScriptedProvider`` reply function answering every judge prompt by its claim's
    case (claims are matched by text; ``cases`` maps claim text to case)."""
    from medverify.testing.judge import _user_text, prompt_blocks

    def reply(request: Any) -> str:
        passages, claims = prompt_blocks(_user_text(request))  # a retry's prompt included
        [(label, text)] = claims.items()
        case = cases[text.strip()]
        return case.reply(label, passage_label(passages, case))

    return reply


def test_the_corpus_is_big_enough_and_named_once() -> None:
    names = [c.name for c in HOSTILE + HONEST + KNOWN_GAPS]
    assert len(HOSTILE) >= 10 and len(HONEST) >= 3 and len(set(names)) == len(names)
    assert all(c.expect for c in HOSTILE) and all(c.category for c in HONEST)


def test_every_reply_is_json_shaped_for_the_judge() -> None:
    for case in HOSTILE + HONEST:
        if case.raw is None:
            data = json.loads(case.reply("C7", "P3"))
            assert data["results"][0]["claim_id"] == "C7"
