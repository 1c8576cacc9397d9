"""Which sources still owe the refresh of their predictions and flags, and which refresh failed.

Every command that opens the store for writing first redoes an owed refresh. Asking whether one is owed
is a query of the store alone, here, so that a reading command loads the model (and with it pandas,
0.4 s of start-up) only when there is something to redo.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracelog.store import Store


def pending_sources(store: Store) -> list[int]:
    """Sources whose refresh failed or never ran (a kill during it), oldest first; none in a read-only
    store, which is left as it is. A writable store was brought to the newest schema when it opened, so
    the column is there without asking the catalog (a DuckLake catalog answers each question from
    PostgreSQL: 0.08 s of what `tracelog runs` cost on one)."""
    if store.read_only or (
        not store.lake and store.scalar("SELECT current_setting('access_mode')") == "read_only"
    ):
        return []
    rows = store.con.execute("SELECT source_id FROM sources WHERE refresh_pending ORDER BY source_id")
    return [int(source_id) for (source_id,) in rows.fetchall()]


def refresh_errors(store: Store) -> list[tuple[str, str]]:
    """(path, what failed) of every file whose predictions and flags could not be refreshed (none in a
    read-only store older than the column)."""
    if store.read_only and "refresh_error" not in store.columns("sources"):
        return []
    return store.con.execute(
        "SELECT path, refresh_error FROM sources WHERE refresh_error IS NOT NULL ORDER BY source_id"
    ).fetchall()
