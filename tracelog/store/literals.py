"""Text written into an SQL statement as a string literal, where the statement takes no parameter
(`ATTACH`, `COPY ... TO`, `CREATE SECRET`, a path in `glob()`), or where binding one would cost an import
(`store.literal`)."""

from __future__ import annotations


def quoted(text: str) -> str:
    """`text` as the inside of a single-quoted SQL string: each quote doubled (standard SQL; DuckDB reads
    no backslash escapes in a plain string literal)."""
    return text.replace("'", "''")
