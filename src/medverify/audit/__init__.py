"""Citation audit (SourceCheckup, Wu et al., Nat. Commun. 2025): does each cited source
support each statement of an answer?

Stages, one module each: ``inputs`` (read the audit JSONL, extract URLs), the safe
fetcher in :mod:`medverify.sources`, ``select`` (best passages of a source per claim),
``verify`` (judge every claim x source pair), ``metrics`` (validity, statement- and
response-level support, unused sources, bootstrap CIs, breakdowns), ``urls`` (URL
analysis), ``cleanup`` (SourceCleanup), ``runner`` (the whole audit, outputs) and
``evaluate`` (agreement with gold labels).
"""
