"""Benchmark studies (SourceCheckup): ask many models medical questions and score their
citations per model and per question source."""
