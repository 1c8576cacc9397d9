"""Runs as people address and keep them: lookup by id, name or prefix, the listing, one run in full,
and the annotations engineers add to keep many short experiments in order (tags, notes, names, the
hardware a log did not name, removal)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracelog.errors import TracelogError
from tracelog.store import Store, lake, literal
from tracelog.store.flags import flags_sql
from tracelog.store.rows import Rows
from tracelog.store.tables import HARDWARE_SQL, MODEL_OUTPUT_TABLES, RUN_CHILD_TABLES

if TYPE_CHECKING:
    import pandas as pd

RUN_LIST_COLUMNS = [
    # most useful first: a table cut to the terminal's width keeps the left of this list
    "run_id",
    "name",
    "gpu_model",
    "gpus",
    "sec_per_it",
    "sec_per_it_predicted",
    "tflops_reported",
    "tflops_predicted",
    "final_loss",
    "dp",
    "tp",
    "pp",
    "mbs",
    "gbs",
    "samples_per_s",
    "params",
    "nodes",
    "framework",
    "layers",
    "hidden",
    "heads",
    "seq_len",
    "vocab",
]
CHECKPOINT_ITERATION_SQL = (
    "try_cast(regexp_extract(text, '(?:iteration\\s+|checkpoint-|global[ _]step\\s*)(\\d+)', 1) AS BIGINT)"
)
"""The iteration a checkpoint event names (Megatron's `successfully saved checkpoint from iteration N`,
`... loaded checkpoint from PATH ... at iteration N`; the Hugging Face Trainer's `Saving model checkpoint
to out/checkpoint-N` and `Continuing training from global step N`; DeepSpeed's `global_stepN`), over `events.text`."""
PREDICTED_SQL = """
LEFT JOIN (
    SELECT subject_id AS run_id,
           first(predicted ORDER BY formula NULLS FIRST) FILTER (metric = 'sec_per_it') AS sec_per_it_predicted,
           first(predicted ORDER BY formula NULLS FIRST) FILTER (metric = 'tflops_per_gpu') AS tflops_predicted
    FROM comparisons WHERE subject_kind = 'run' GROUP BY subject_id
) p USING (run_id)
"""


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


def runs(store: Store, tags: dict[str, str] | None = None, *, rows: bool = False) -> pd.DataFrame | Rows:
    """One row per run: configuration and steady-state medians (warm-up excluded; see run_summary); as
    plain `Rows` with `rows` (for a table printed without pandas)."""
    where, params = _tag_filter(tags)
    cols = ", ".join(RUN_LIST_COLUMNS)
    fetch = store.rows if rows else store.query
    return fetch(f"SELECT {cols} FROM run_summary {PREDICTED_SQL}{where} ORDER BY run_id", params)


def resolve_run(store: Store, ref: str | int) -> int:
    """A run by id, by unique name, or by a unique prefix of its name; ambiguity lists the candidates."""
    text = str(ref).strip()
    if text.isdigit() and store.scalar(f"SELECT count(*) FROM runs WHERE run_id = {literal(int(text))}"):
        return int(text)
    exact = store.con.execute(f"SELECT run_id FROM runs WHERE name = {literal(text)}").fetchall()
    if len(exact) == 1:
        return int(exact[0][0])
    found = (
        exact
        or store.con.execute(
            f"SELECT run_id FROM runs WHERE starts_with(name, {literal(text)}) ORDER BY run_id"
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


SPARK = "▁▂▃▄▅▆▇█"
TREND_POINTS = 48
TREND_SQL = """
WITH span AS (SELECT min(line_no) AS lo, max(line_no) - min(line_no) + 1 AS width FROM iterations WHERE run_id = $run),
buckets AS (
    SELECT (i.line_no - span.lo) * $points // span.width AS b, avg(i.elapsed_s) AS sec_per_it,
           avg(i.lm_loss) FILTER (isfinite(i.lm_loss)) AS lm_loss, avg(i.tflops_reported) AS tflops,
           min(i.iteration) AS first_it, max(i.iteration) AS last_it
    FROM iterations i, span WHERE i.run_id = $run GROUP BY b
)
SELECT b, sec_per_it, lm_loss, tflops, first_it, last_it FROM buckets ORDER BY b
"""


# The validation and test losses Megatron prints every eval interval (`iteration_metrics`), bucketed the
# same way over the lines that hold them; their perplexities are left to the table.
SCORED_TREND_SQL = """
WITH scored AS (
    SELECT key, iteration, value, line_no FROM iteration_metrics
    WHERE run_id = $run AND (starts_with(key, 'validation ') OR starts_with(key, 'test '))
      AND NOT suffix(key, ' PPL') AND isfinite(value)
),
span AS (SELECT key, min(line_no) AS lo, max(line_no) - min(line_no) + 1 AS width FROM scored GROUP BY key)
SELECT key, (s.line_no - span.lo) * $points // span.width AS b, avg(value) AS value,
       min(iteration) AS first_it, max(iteration) AS last_it
FROM scored s JOIN span USING (key) GROUP BY key, b ORDER BY key DESC, b
"""


def sparkline(values: list[float | None]) -> str:
    """Values as block characters from lowest to highest; a gap where a value is missing."""
    known = [v for v in values if v is not None and v == v]
    if not known:
        return ""
    lo, hi = min(known), max(known)
    scale = (len(SPARK) - 1) / (hi - lo) if hi > lo else 0.0
    return "".join(" " if v is None or v != v else SPARK[round((v - lo) * scale)] for v in values)


def trend(store: Store, run_id: int, points: int = TREND_POINTS) -> list[dict[str, Any]]:
    """sec/it, loss and TFLOP/s over the run in `points` buckets of its log lines (aggregated in DuckDB,
    so it costs the same for a thousand iterations or millions): first, last, lowest, highest, sparkline."""

    def sql(text: str) -> Rows:
        return store.rows(text.replace("$points", str(int(points))).replace("$run", str(int(run_id))))

    buckets = sql(TREND_SQL)
    rows = []
    for column, label in (("sec_per_it", "sec/it"), ("lm_loss", "lm loss"), ("tflops", "TFLOP/s")):
        values = [None if v is None or v != v else float(v) for v in buckets.column(column)]
        rows.extend(_trend_row(label, values, buckets.column("first_it"), buckets.column("last_it")))
    scored = sql(SCORED_TREND_SQL)
    for key in dict.fromkeys(scored.column("key")):
        mine = [i for i, k in enumerate(scored.column("key")) if k == key]
        rows.extend(
            _trend_row(
                str(key),
                [float(scored.column("value")[i]) for i in mine],
                [scored.column("first_it")[i] for i in mine],
                [scored.column("last_it")[i] for i in mine],
            )
        )
    return rows


def _trend_row(
    label: str, values: list[float | None], first: list[Any], last: list[Any]
) -> list[dict[str, Any]]:
    known = [v for v in values if v is not None]
    if not known:
        return []
    return [
        {
            "metric": label,
            "first": known[0],
            "last": known[-1],
            "lowest": min(known),
            "highest": max(known),
            "over iterations": sparkline(values),
            "from": int(min(v for v in first if v is not None)),
            "to": int(max(v for v in last if v is not None)),
        }
    ]


def show_run(
    store: Store, ref: str | int, *, iterations: bool = False, limit: int | None = None, rows: bool = False
) -> dict[str, pd.DataFrame] | dict[str, Rows]:
    """One run: summary, configuration, tags, the user's notes, parameters, the trend of sec/it, loss and
    TFLOP/s, timers, peak memory per rank and flags, each aggregated in DuckDB so a run of millions of iterations shows
    as fast as a short one. With `iterations`, its iteration lines too (the first `limit` when given);
    with `rows`, each part as plain `Rows`."""
    run_id = resolve_run(store, ref)
    run = literal(run_id)  # not bound: see `literal`
    fetch = store.rows if rows else store.query
    trend_rows = trend(store, run_id)
    if rows:
        trend_part: Any = Rows.from_records(trend_rows)
    else:
        import pandas as pd  # the library's DataFrames; a printed table does without

        trend_part = pd.DataFrame(trend_rows)
    parts = {
        "summary": fetch(f"SELECT * FROM run_summary WHERE run_id = {run}"),
        "run": fetch(f"SELECT * FROM runs WHERE run_id = {run}"),
        "hardware": fetch(HARDWARE_SQL.format(table="run_hardware", id_col="run_id", id=run)),
        "tags": fetch(f"SELECT key, value FROM run_tags WHERE run_id = {run} ORDER BY key"),
        "notes": fetch(f"SELECT notes FROM runs WHERE run_id = {run} AND coalesce(notes, '') <> ''"),
        "params": fetch(f"SELECT name, value, line_no FROM run_params WHERE run_id = {run} ORDER BY line_no"),
        "trend": trend_part,
        "timers": fetch(
            "SELECT name, count(*) AS lines, median(time_ms) AS median_ms, max(time_ms) AS max_ms "
            f"FROM timers WHERE run_id = {run} GROUP BY name ORDER BY median_ms DESC"
        ),
        "checkpoints": fetch(
            f"SELECT kind, count(*) AS lines, arg_max({CHECKPOINT_ITERATION_SQL}, line_no) AS last_iteration, "
            f"max(line_no) AS last_line FROM events WHERE run_id = {run} "
            "AND kind IN ('checkpoint_saved', 'checkpoint_loaded') GROUP BY kind ORDER BY kind DESC"
        ),
        "memory": fetch(
            "SELECT rank, count(*) AS reports, max(max_allocated_mib) AS max_allocated_mib, "
            "max(max_reserved_mib) AS max_reserved_mib, arg_max(iteration, max_reserved_mib) AS at_iteration, "
            f"arg_max(line_no, max_reserved_mib) AS line_no FROM memory WHERE run_id = {run} "
            "GROUP BY rank ORDER BY max_reserved_mib DESC NULLS LAST, rank"
        ),
        "flags": fetch(
            flags_sql(
                f"f.subject_kind = 'run' AND f.subject_id = {run}",
                "f.severity, f.rule, f.row_ref, f.measured, f.expected, f.ratio, f.message, f.hint",
            )
        ),
    }
    if iterations:
        parts["iterations"] = fetch(
            "SELECT iteration, elapsed_s, tflops_reported, samples_per_s, lm_loss, loss_scale, grad_norm, "
            f"skipped, nan, warmup, line_no FROM iteration_marks WHERE run_id = {run} ORDER BY line_no"
            + (f" LIMIT {int(limit)}" if limit is not None else "")
        )
    return parts


@lake.retried
def tag(store: Store, run_id: int, tags: dict[str, str]) -> None:
    with store.transaction():
        set_tags(store, run_id, tags)


def set_tags(store: Store, run_id: int, tags: dict[str, str]) -> None:
    """A tag replaces the one of its key (delete, then insert: a DuckLake store has no keys to upsert on)."""
    for key, value in tags.items():
        store.con.execute("DELETE FROM run_tags WHERE run_id = ? AND key = ?", [run_id, key])
        store.con.execute("INSERT INTO run_tags VALUES (?, ?, ?)", [run_id, key, value])


@lake.retried
def untag(store: Store, run_id: int, keys: list[str]) -> int:
    """Remove tags by key; returns how many were removed."""
    with store.transaction():
        removed = 0
        for key in keys:
            found = store.scalar("SELECT count(*) FROM run_tags WHERE run_id = ? AND key = ?", [run_id, key])
            if found:
                store.con.execute("DELETE FROM run_tags WHERE run_id = ? AND key = ?", [run_id, key])
                removed += int(found)
    return removed


@lake.retried
def note(store: Store, run_id: int, text: str) -> None:
    """Append a line to the run's notes (lab notes accumulate; nothing is overwritten)."""
    with store.transaction():
        store.con.execute(
            "UPDATE runs SET notes = CASE WHEN notes IS NULL OR notes = '' THEN ? ELSE notes || chr(10) || ? "
            "END WHERE run_id = ?",
            [text, text, run_id],
        )


@lake.retried
def rename(store: Store, run_id: int, name: str) -> None:
    with store.transaction():
        store.con.execute("UPDATE runs SET name = ? WHERE run_id = ?", [name, run_id])


@lake.retried
def set_shape(store: Store, run_id: int, columns: dict[str, object], params: dict[str, str]) -> None:
    """The user's word on what a run trained (`tracelog set --model`), in a transaction of its own."""
    with store.transaction():
        set_shape_in(store, run_id, columns, params)


def set_shape_in(store: Store, run_id: int, columns: dict[str, object], params: dict[str, str]) -> None:
    """The user's word on what a run trained (`set --model`, `ingest --model`): its shape columns, and the
    run parameters that say what its blocks are built of, each replacing what the log printed under that
    name. What an earlier lookup of the log's own checkpoint name derived (the parameters written on the
    line of its `shape_from`) goes first: it described another checkpoint."""
    store.con.execute(
        """
        DELETE FROM run_params WHERE run_id = $run AND name IN (SELECT unnest($derived))
          AND line_no IN (SELECT line_no FROM run_params WHERE run_id = $run AND name = 'shape_from')
        """,
        {"run": run_id, "derived": list(DERIVED_PARAMS)},
    )
    sets = ", ".join(f'"{k}" = ?' for k in columns)
    store.con.execute(f"UPDATE runs SET {sets} WHERE run_id = ?", [*columns.values(), run_id])
    for name, value in params.items():
        store.con.execute("DELETE FROM run_params WHERE run_id = ? AND name = ?", [run_id, name])
        store.con.execute("INSERT INTO run_params VALUES (?, ?, ?, NULL)", [run_id, name, value])


DERIVED_PARAMS = (
    "shape_from",
    "position_embedding_type",
    "normalization",
    "add_bias_linear",
    "untie_embeddings_and_output_weights",
    "kv_channels",
)
"""The run parameters a checkpoint's lookup writes (`parsers.checkpoints.shape_params`)."""


@lake.retried
def set_columns(store: Store, run_id: int, values: dict[str, object]) -> None:
    """Set hardware columns of a run (gpu_model, fabric, nodes, GPUs and NICs per node); the GPU count follows
    from nodes × GPUs per node where the log did not state it."""
    with store.transaction():
        set_columns_in(store, run_id, values)


def set_columns_in(store: Store, run_id: int, values: dict[str, object]) -> None:
    """`set_columns` inside the caller's transaction."""
    allowed = {"gpu_model", "fabric", "nodes", "gpus_per_node", "nics_per_node"}
    assert set(values) <= allowed, set(values) - allowed
    sets = ", ".join(f'"{k}" = ?' for k in values)
    store.con.execute(f"UPDATE runs SET {sets} WHERE run_id = ?", [*values.values(), run_id])
    store.con.execute(
        "UPDATE runs SET gpus = coalesce(gpus, nodes * gpus_per_node) WHERE run_id = ?", [run_id]
    )


@lake.retried
def remove(store: Store, run_id: int) -> None:
    """Delete a run and every row that belongs to it, including the model's outputs about it."""
    with store.transaction():
        for table in RUN_CHILD_TABLES:
            store.con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
        for table in MODEL_OUTPUT_TABLES:
            store.con.execute(f"DELETE FROM {table} WHERE subject_kind = 'run' AND subject_id = ?", [run_id])
        store.con.execute("UPDATE events SET run_id = NULL WHERE run_id = ?", [run_id])
        source_id = store.scalar("SELECT source_id FROM runs WHERE run_id = ?", [run_id])
        store.con.execute("DELETE FROM runs WHERE run_id = ?", [run_id])
        # A source left with no run and no bench goes too (its unparsed lines and events with it), so the
        # file can be ingested again without --force.
        orphan = "NOT EXISTS (SELECT 1 FROM runs WHERE source_id = $s) AND NOT EXISTS (SELECT 1 FROM benches WHERE source_id = $s)"
        for table in ("unparsed", "events", "sources"):
            store.con.execute(f"DELETE FROM {table} WHERE source_id = $s AND {orphan}", {"s": source_id})
