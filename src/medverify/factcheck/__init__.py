"""Atomic fact-checking and correction of RAG answers (Vladika et al. 2025)."""
