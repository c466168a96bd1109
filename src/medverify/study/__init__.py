"""CHECK's clinical-trial study: 15 questions per trial, answered by each model under three
contexts (title only, the raw registry record, the curated summary) and judged against the
curated summary at paragraph, sentence and claim level.

``records`` (what a run stores), ``questions`` (the 15 questions, the contexts, the evidence
of a trial), ``runner`` (asking and judging, resumable), ``report`` (the paper's tables with
bootstrap CIs). See docs/trials.md.
"""
