"""Hallucination risk without a database: token log-probability features and a
stacking classifier (CHECK)."""
