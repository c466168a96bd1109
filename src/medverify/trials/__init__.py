"""ClinicalTrials.gov registry records (API v2 study JSON).

``medverify.trials.reader`` streams studies from files, directories, JSONL and the
registry's bulk zip; ``medverify.trials.synthetic`` makes synthetic records for scale
tests. Import the submodules directly; this package imports nothing eagerly.
"""
