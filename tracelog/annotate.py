"""Tags, notes, names and removal of runs: how engineers keep many short experiments in order."""

from __future__ import annotations

from tracelog.store import Store

RUN_CHILD_TABLES = ("iterations", "iteration_metrics", "memory", "timers", "run_params", "run_tags")


def tag(store: Store, run_id: int, tags: dict[str, str]) -> None:
    with store.transaction():
        for key, value in tags.items():
            store.con.execute("INSERT OR REPLACE INTO run_tags VALUES (?, ?, ?)", [run_id, key, value])


def untag(store: Store, run_id: int, keys: list[str]) -> int:
    """Remove tags by key; returns how many were removed."""
    with store.transaction():
        removed = 0
        for key in keys:
            row = store.con.execute(
                "DELETE FROM run_tags WHERE run_id = ? AND key = ? RETURNING key", [run_id, key]
            ).fetchall()
            removed += len(row)
    return removed


def note(store: Store, run_id: int, text: str) -> None:
    """Append a line to the run's notes (lab notes accumulate; nothing is overwritten)."""
    store.con.execute(
        "UPDATE runs SET notes = CASE WHEN notes IS NULL OR notes = '' THEN ? ELSE notes || chr(10) || ? END "
        "WHERE run_id = ?",
        [text, text, run_id],
    )


def rename(store: Store, run_id: int, name: str) -> None:
    store.con.execute("UPDATE runs SET name = ? WHERE run_id = ?", [name, run_id])


def set_columns(store: Store, run_id: int, values: dict[str, object]) -> None:
    """Set hardware columns of a run (gpu_model, fabric, nodes, gpus_per_node); the GPU count follows
    from nodes × GPUs per node where the log did not state it."""
    allowed = {"gpu_model", "fabric", "nodes", "gpus_per_node"}
    assert set(values) <= allowed, set(values) - allowed
    with store.transaction():
        sets = ", ".join(f'"{k}" = ?' for k in values)
        store.con.execute(f"UPDATE runs SET {sets} WHERE run_id = ?", [*values.values(), run_id])
        store.con.execute(
            "UPDATE runs SET gpus = coalesce(gpus, nodes * gpus_per_node) WHERE run_id = ?", [run_id]
        )


def remove(store: Store, run_id: int) -> None:
    """Delete a run and every row that belongs to it, including the model's outputs about it."""
    with store.transaction():
        for table in RUN_CHILD_TABLES:
            store.con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
        for table in ("predictions", "comparisons", "flags"):
            store.con.execute(f"DELETE FROM {table} WHERE subject_kind = 'run' AND subject_id = ?", [run_id])
        store.con.execute("UPDATE events SET run_id = NULL WHERE run_id = ?", [run_id])
        store.con.execute("DELETE FROM runs WHERE run_id = ?", [run_id])
