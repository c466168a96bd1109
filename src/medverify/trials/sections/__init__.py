"""The builders of the curated summary's sections, one module per section or per group of
sections that share their machinery (:mod:`.description`, :mod:`.treatment`,
:mod:`.participants`, :mod:`.outcomes`, :mod:`.results`, :mod:`.adverse_events`,
:mod:`.baseline`). :data:`BUILDERS` lists them in
:data:`~medverify.trials.summary.ALL_SECTIONS` order; each takes a study record and returns
the section's sentences."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from medverify.trials.sections.adverse_events import other_events, safety, serious_events
from medverify.trials.sections.baseline import baseline
from medverify.trials.sections.description import condition, definition, design
from medverify.trials.sections.outcomes import primary_outcome, secondary_outcomes
from medverify.trials.sections.participants import eligibility
from medverify.trials.sections.results import (
    primary_analysis,
    primary_results,
    secondary_methods,
    secondary_results,
)
from medverify.trials.sections.treatment import arms, interventions
from medverify.trials.summary import Sentence

BUILDERS: tuple[Callable[[dict[str, Any]], list[Sentence]], ...] = (
    definition, condition, design, interventions, arms, eligibility,
    primary_outcome, primary_analysis, primary_results, secondary_outcomes,
    secondary_methods, secondary_results, serious_events, other_events, safety, baseline,
)
"""One builder per section, in :data:`~medverify.trials.summary.ALL_SECTIONS` order."""
