"""Confidence cards: how sure any judge's verdicts are, learned from labelled examples.

A judge says FACT, HALLUCINATION or COVERAGE_GAP; a *card* says how often that was right.
``medverify calibrate`` (the flow in :mod:`medverify.evals.calibrate`) judges labelled
examples (a user's pairs, the dev sets that allow it, or the clinicians' closed review
items), reads what each verdict carries about how sure its judge was
(:mod:`.signals`: the judge's probabilities, the LLM judge's log-prob and agreement
signals, quote and exact-check results, the claim's coverage by its evidence), and fits per
category the probability that the category is right (:mod:`.fit`). A category gets a
*confident threshold* only where its precision holds, with one-sided 95 % Wilson
confidence, in grouped cross-validation, and where the verdicts above it are at least as
precise as those below; otherwise none of its verdicts is ever presented as sure.

The card (:mod:`.card`) records the judge and prompt it was fitted for, the data's hash,
size and date, and the precision each category reached.
:func:`medverify.judge.build.create_judge` wraps the configured judge with the card named
in ``[judge_settings] calibration`` (:mod:`.wrap`); a card fitted for another judge gives
a warning and no confidence.
"""

from medverify.judge.confidence.card import (
    CARD_KIND,
    CategoryFit,
    ConfidenceCard,
    card_names,
    load_card,
    resolve_card,
)

__all__ = ["CARD_KIND", "CategoryFit", "ConfidenceCard", "card_names", "load_card",
           "resolve_card"]
