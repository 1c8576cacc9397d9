"""One training job seen through several files: its text log and its TensorBoard event files.

A job's stdout and its event files carry the same iterations; ingesting both must give one run. A new run
is the same as an earlier one when either side comes from a format that describes a run another file
also describes (`formats`, the event files) and

- both come from such files in one folder (TensorBoard's own definition of a run: a folder of event
  files, one per restart of the writer), or
- they share at least `MIN_SHARED_ITERATIONS` iteration numbers and every shared loss is equal within
  `LOSS_RTOL`.

The new run's rows then join the earlier run: a shared iteration fills only what the earlier row lacks,
other rows are added, configuration columns fill the earlier run's NULLs, and the new run's row goes.
Merging twice gives the same rows, so ingesting the events again (`--force`) is safe. A file re-read
after it grew loses the rows merged into its run from other files; ingest those again with `--force`.
"""

from __future__ import annotations

from pathlib import Path

from tracelog.store import Store, literal
from tracelog.store.tables import DERIVED_RUN_TABLES, MODEL_OUTPUT_TABLES

# Three points: two runs with one or two equal losses by chance (the first iterations of runs with the
# same seed and data) are not the same job; at three, every logged loss interval agrees.
MIN_SHARED_ITERATIONS = 3
# Megatron prints `lm loss` as %.6E (7 significant digits: relative error under 5e-7) and event files
# hold float32 (under 6e-8); 1e-5 admits both and no loss of another job.
LOSS_RTOL = 1e-5
# Rows of the same thing: the columns that name a row within its run.
ROW_KEYS = {
    "iterations": ("iteration", "rank"),
    "iteration_metrics": ("iteration", "key"),
    "timers": ("iteration", "name", "rank"),
    "memory": ("iteration", "rank"),
    "run_params": ("name",),
    "run_tags": ("key",),
}
RUN_KEEP = ("run_id", "source_id", "run_key", "name", "notes", "line_start", "line_end")


def may_match(store: Store, file_format: str, formats: set[str]) -> bool:
    """Whether a file of `file_format` can share a run with anything stored: it is of `formats`, or a
    file of `formats` is stored. Asked once per file, before `same_run` for each of its runs: a text log's
    ingest costs no join when no event files are stored (and in a DuckLake store each question is a round
    of catalog queries)."""
    if file_format in formats:
        return True
    if not formats:
        return False
    listed = ", ".join(literal(f) for f in sorted(formats))
    return bool(store.scalar(f"SELECT count(*) FROM sources WHERE format IN ({listed})"))


def same_run(store: Store, run_id: int, formats: set[str]) -> int | None:
    """The earlier run that `run_id` describes too, or None (callers ask `may_match` first)."""
    mine = store.con.execute(
        "SELECT s.format, s.path FROM runs r JOIN sources s USING (source_id) WHERE r.run_id = ?", [run_id]
    ).fetchone()
    if mine is None:
        return None
    my_format, my_path = mine
    if my_format in formats and my_path != "-":
        folder = Path(my_path).resolve().parent
        for other, path in store.con.execute(
            "SELECT r.run_id, s.path FROM runs r JOIN sources s USING (source_id) "
            "WHERE s.format = ? AND r.run_id <> ? AND s.path <> '-' ORDER BY r.run_id",
            [my_format, run_id],
        ).fetchall():
            if Path(path).resolve().parent == folder:
                return int(other)
    row = store.con.execute(
        """
        SELECT i.run_id
        FROM iterations i
        JOIN (SELECT iteration, lm_loss FROM iterations WHERE run_id = $run AND lm_loss IS NOT NULL) m
          USING (iteration)
        JOIN runs r ON r.run_id = i.run_id
        JOIN sources s ON s.source_id = r.source_id
        WHERE i.run_id <> $run AND i.lm_loss IS NOT NULL AND (s.format IN $formats OR $mine_matches)
        GROUP BY i.run_id
        HAVING count(DISTINCT i.iteration) >= $min_shared
           AND bool_and((isnan(i.lm_loss) AND isnan(m.lm_loss))
                        OR abs(i.lm_loss - m.lm_loss) <= $rtol * abs(m.lm_loss))
        ORDER BY count(DISTINCT i.iteration) DESC, i.run_id
        LIMIT 1
        """,
        {
            "run": run_id,
            "formats": sorted(formats) or [""],
            "mine_matches": my_format in formats,
            "min_shared": MIN_SHARED_ITERATIONS,
            "rtol": LOSS_RTOL,
        },
    ).fetchone()
    return int(row[0]) if row else None


def merge_run(store: Store, run_id: int, into: int) -> None:
    """Move `run_id`'s rows into run `into` (see the module's docstring) and remove run `run_id`."""
    con = store.con
    for table, keys in ROW_KEYS.items():
        columns = store.columns(table)
        match = " AND ".join(f"t.{k} IS NOT DISTINCT FROM n.{k}" for k in keys)
        fill = [c for c in columns if c not in ("run_id", *keys)]
        if fill and table == "iterations":
            sets = ", ".join(f"{c} = coalesce(t.{c}, n.{c})" for c in fill)
            con.execute(
                f"UPDATE {table} t SET {sets} FROM {table} n WHERE t.run_id = $into AND n.run_id = $run AND {match}",
                {"into": into, "run": run_id},
            )
        con.execute(
            f"UPDATE {table} n SET run_id = $into WHERE n.run_id = $run "
            f"AND NOT EXISTS (SELECT 1 FROM {table} t WHERE t.run_id = $into AND {match})",
            {"into": into, "run": run_id},
        )
        con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
    fill = [c for c in store.columns("runs") if c not in RUN_KEEP]
    sets = ", ".join(f'"{c}" = coalesce(t."{c}", n."{c}")' for c in fill)
    con.execute(
        f"UPDATE runs t SET {sets} FROM runs n WHERE t.run_id = $into AND n.run_id = $run",
        {"into": into, "run": run_id},
    )
    for table in MODEL_OUTPUT_TABLES:
        con.execute(f"DELETE FROM {table} WHERE subject_kind = 'run' AND subject_id = ?", [run_id])
    for table in DERIVED_RUN_TABLES:  # `into` gained rows anywhere in its run: its checks start again
        con.execute(f"DELETE FROM {table} WHERE run_id IN (?, ?)", [run_id, into])
    con.execute("DELETE FROM runs WHERE run_id = ?", [run_id])
