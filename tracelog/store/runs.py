"""Runs as people address and keep them: lookup by id, name or prefix, the listing, one run in full,
and the annotations engineers add to keep many short experiments in order (tags, notes, names, the
hardware a log did not name, removal)."""

from __future__ import annotations

import pandas as pd

from tracelog.errors import TracelogError
from tracelog.store import Store
from tracelog.store.tables import MODEL_OUTPUT_TABLES, RUN_CHILD_TABLES

RUN_LIST_COLUMNS = [
    "run_id",
    "name",
    "framework",
    "gpu_model",
    "nodes",
    "gpus",
    "dp",
    "tp",
    "pp",
    "mbs",
    "gbs",
    "layers",
    "hidden",
    "heads",
    "seq_len",
    "vocab",
    "params",
    "sec_per_it",
    "samples_per_s",
    "tflops_reported",
    "final_loss",
]


def _tag_filter(tags: dict[str, str] | None) -> tuple[str, list[str]]:
    if not tags:
        return "", []
    clauses, params = [], []
    for key, value in tags.items():
        clauses.append("run_id IN (SELECT run_id FROM run_tags WHERE key = ? AND value = ?)")
        params += [key, value]
    return " WHERE " + " AND ".join(clauses), params


def tagged_run_ids(store: Store, tags: dict[str, str]) -> list[int]:
    """Runs carrying every one of `tags` (key = value)."""
    where, params = _tag_filter(tags)
    return [int(r[0]) for r in store.con.execute(f"SELECT run_id FROM runs{where}", params).fetchall()]


def run_label(store: Store, ref: str | int) -> tuple[int, str | None]:
    """The run's id and name, e.g. to ask before removing it."""
    run_id = resolve_run(store, ref)
    return run_id, store.scalar("SELECT name FROM runs WHERE run_id = ?", [run_id])


def runs(store: Store, tags: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per run: configuration and steady-state medians (warm-up excluded; see run_summary)."""
    where, params = _tag_filter(tags)
    cols = ", ".join(RUN_LIST_COLUMNS)
    return store.query(f"SELECT {cols} FROM run_summary{where} ORDER BY run_id", params)


def resolve_run(store: Store, ref: str | int) -> int:
    """A run by id, by unique name, or by a unique prefix of its name; ambiguity lists the candidates."""
    text = str(ref).strip()
    if text.isdigit() and store.scalar("SELECT count(*) FROM runs WHERE run_id = ?", [int(text)]):
        return int(text)
    exact = store.con.execute("SELECT run_id FROM runs WHERE name = ?", [text]).fetchall()
    if len(exact) == 1:
        return int(exact[0][0])
    found = (
        exact
        or store.con.execute(
            "SELECT run_id FROM runs WHERE starts_with(name, ?) ORDER BY run_id", [text]
        ).fetchall()
    )
    if len(found) == 1:
        return int(found[0][0])
    if not found:
        raise TracelogError(f"no run matches {text!r} (by id, name or name prefix); see `tracelog runs`")
    names = store.con.execute(
        f"SELECT run_id, name FROM runs WHERE run_id IN ({', '.join(str(r[0]) for r in found)}) ORDER BY run_id"
    ).fetchall()
    listing = "; ".join(f"{rid}: {name}" for rid, name in names[:20])
    raise TracelogError(f"{text!r} matches {len(found)} runs, name one of them: {listing}")


def show_run(store: Store, ref: str | int) -> dict[str, pd.DataFrame]:
    """One run in full: summary, configuration, tags, parameters, iterations, memory and timers."""
    run_id = resolve_run(store, ref)
    one = [run_id]
    return {
        "summary": store.query("SELECT * FROM run_summary WHERE run_id = ?", one),
        "run": store.query("SELECT * FROM runs WHERE run_id = ?", one),
        "tags": store.query("SELECT key, value FROM run_tags WHERE run_id = ? ORDER BY key", one),
        "params": store.query(
            "SELECT name, value, line_no FROM run_params WHERE run_id = ? ORDER BY line_no", one
        ),
        "iterations": store.query(
            "SELECT iteration, elapsed_s, tflops_reported, samples_per_s, lm_loss, loss_scale, grad_norm, "
            "skipped, nan, warmup, line_no FROM iteration_phase WHERE run_id = ? ORDER BY line_no",
            one,
        ),
        "memory": store.query(
            "SELECT rank, iteration, allocated_mib, max_allocated_mib, reserved_mib, max_reserved_mib, line_no "
            "FROM memory WHERE run_id = ? ORDER BY line_no",
            one,
        ),
        "timers": store.query(
            "SELECT name, count(*) AS lines, median(time_ms) AS median_ms, max(time_ms) AS max_ms "
            "FROM timers WHERE run_id = ? GROUP BY name ORDER BY median_ms DESC",
            one,
        ),
    }


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
        for table in MODEL_OUTPUT_TABLES:
            store.con.execute(f"DELETE FROM {table} WHERE subject_kind = 'run' AND subject_id = ?", [run_id])
        store.con.execute("UPDATE events SET run_id = NULL WHERE run_id = ?", [run_id])
        store.con.execute("DELETE FROM runs WHERE run_id = ?", [run_id])
