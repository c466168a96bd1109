"""Measurements on labelled data: how well a component does against known answers.

* :mod:`~medverify.evals.retrieval`: retrieval (recall@k, MRR) -- ``medverify eval
  retrieval``;
* :mod:`~medverify.evals.pairs`: claim/evidence pairs (accuracy, macro-F1 of one judge) --
  ``medverify eval pairs``;
* :mod:`~medverify.evals.judges` and :mod:`~medverify.evals.judges_report`: several judges
  side by side on the same sampled pairs -- ``medverify eval judges``;
* :mod:`~medverify.evals.confidence`: precision and coverage of confident verdicts;
* :mod:`~medverify.evals.arbitration`: arbitration policies on labelled, judged claims.

The flows that check answers live elsewhere (:mod:`medverify.checker`, ``audit``,
``factcheck``, ``bench``); the per-flow ``evaluate`` modules score one flow's own output.
"""
