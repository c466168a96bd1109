"""The bounds of the LIMIT and OFFSET values the stores pass to SQLite and PostgreSQL."""

from __future__ import annotations

SQL_INT_MAX = 2**62
"""The largest LIMIT or OFFSET the stores pass to the database: SQLite and PostgreSQL take
64-bit integers (a larger Python int overflows there), and no table holds 2**62 rows."""


def sql_bound(n: int | None) -> int:
    """``n`` as a LIMIT or OFFSET the database accepts: at least 0, at most
    :data:`SQL_INT_MAX` (None, "no limit": the maximum)."""
    return SQL_INT_MAX if n is None else min(max(0, int(n)), SQL_INT_MAX)
