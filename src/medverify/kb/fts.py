"""Full-text query text for the FTS5 table: terms of untrusted text, made inert.

What goes into a ``chunks_fts MATCH`` expression, and the words counted per chunk in the
``terms`` table (whose document frequencies let a query on a large KB skip very common
words). The bm25 scores themselves come from SQLite (see ``KnowledgeBase.lexical_candidates``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

MAX_QUERY_TERMS = 32
LEXICAL_BUDGET = 5000  # postings a lexical query may touch before common terms are dropped

# Very common English words: dropped from lexical queries (they match nearly every chunk
# and only cost time); kept when a query has nothing else.
_STOPWORD_TEXT = """
a an and are as at be been but by can could did do does for from had has have how i if in
into is it its may might of on or should so than that the their them then there these they
this those to was were what when where which while who whom why will with would you your
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_WORD = re.compile(r"\w+", re.UNICODE)


def query_terms(text: str) -> list[str]:
    """Lower-cased word terms of a query, deduplicated, stopwords dropped (unless that
    leaves nothing)."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))
    return ([w for w in words if w not in STOPWORDS] or words)[:MAX_QUERY_TERMS]


def fts_match(terms: Sequence[str]) -> str | None:
    """An FTS5 MATCH expression: each term double-quoted, joined by OR.

    Terms are runs of word characters, so once quoted nothing in them can act as FTS5
    syntax: operators (AND, OR, NOT, NEAR), column filters, ``*``, ``^`` and quotes in
    untrusted text are inert. None when there are no terms.
    """
    return " OR ".join(f'"{t}"' for t in terms) or None


def fts_query(text: str) -> str | None:
    """The MATCH expression for untrusted query text (see :func:`fts_match`)."""
    return fts_match(query_terms(text))


def select_terms(terms: Sequence[str], df: dict[str, int], budget: int) -> list[str]:
    """The rarest terms whose summed document frequency fits ``budget`` (at least one).

    bm25 work grows with the rows a query matches, and very common words match most rows
    while adding almost nothing to the score (their idf is near zero), so on large KBs
    they are dropped first. On small KBs everything fits and the query is exact.
    """
    ranked = sorted(terms, key=lambda t: df.get(t, 0))
    chosen, spent = [], 0
    for term in ranked:
        cost = df.get(term, 0)
        if chosen and spent + cost > budget:
            break
        chosen.append(term)
        spent += cost
    return [t for t in terms if t in set(chosen)]


def chunk_terms(title: str | None, text: str) -> set[str]:
    """The words a chunk counts in the ``terms`` table (its title's and its text's)."""
    return {w.lower() for w in _WORD.findall(f"{title or ''} {text}")}
