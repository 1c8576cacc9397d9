"""A query's result as plain rows, for the commands that print it.

`tracelog runs`, `flags`, `show` and `sql` print a screenful of rows and exit. Building a pandas
DataFrame for that meant importing pandas, about half of what such a command cost (0.4-0.5 s of a
second on a 2-core machine). A notebook still gets DataFrames (the library's functions return
`Store.query`'s frame), and so does a command printing csv, json or markdown, whose output pandas
writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb

NUMERIC_TYPES = (
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "BIGINT",
    "HUGEINT",
    "UTINYINT",
    "USMALLINT",
    "UINTEGER",
    "UBIGINT",
    "UHUGEINT",
    "FLOAT",
    "DOUBLE",
    "DECIMAL",
    "BOOLEAN",
)
"""DuckDB's numeric types (and BOOLEAN, which pandas counts as numeric too): printed right-aligned."""


def is_numeric_type(type_name: str) -> bool:
    return type_name.split("(", 1)[0].strip().upper() in NUMERIC_TYPES


@dataclass(frozen=True)
class Rows:
    columns: list[str]
    numeric: list[bool]
    data: list[tuple[Any, ...]]

    @classmethod
    def fetch(cls, cursor: duckdb.DuckDBPyConnection) -> Rows:
        """Every row of an executed statement, with its columns' names and whether each is numeric."""
        description = cursor.description or []
        return cls(
            [d[0] for d in description],
            [is_numeric_type(str(d[1])) for d in description],
            cursor.fetchall() if description else [],
        )

    @classmethod
    def from_records(cls, records: Sequence[dict[str, Any]]) -> Rows:
        """Rows from dicts of one shape (the first's keys)."""
        names = list(records[0]) if records else []
        data = [tuple(r.get(c) for c in names) for r in records]
        numeric = [
            all(isinstance(row[i], int | float) for row in data if row[i] is not None) and bool(data)
            for i in range(len(names))
        ]
        return cls(names, numeric, data)

    def __len__(self) -> int:
        return len(self.data)

    def column(self, name: str) -> list[Any]:
        i = self.columns.index(name)
        return [row[i] for row in self.data]

    def select(self, names: Sequence[str]) -> Rows:
        index = [self.columns.index(n) for n in names]
        return Rows(
            list(names), [self.numeric[i] for i in index], [tuple(row[i] for i in index) for row in self.data]
        )

    def head(self, n: int) -> Rows:
        return Rows(self.columns, self.numeric, self.data[:n])

    def fields(self) -> Rows:
        """The first row as (field, value) pairs: one record read down the screen instead of across."""
        first = self.data[0] if self.data else (None,) * len(self.columns)
        return Rows(["field", "value"], [False, False], list(zip(self.columns, first, strict=True)))
