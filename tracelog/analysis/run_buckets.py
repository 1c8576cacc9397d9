"""Each run's logged lines summed up per bucket of line numbers, kept between refreshes (schema 017).

The steady-state medians, the model's inputs and the health rules read aggregates of a run's lines over a
range of them: the whole run, its steady part after the warm-up cut, the drift rule's first and last
fifths. Read from `iterations`, each refresh of a grown 1.76 M-line run sorted and summed every line again
(the medians alone 0.5 s). Here a run's lines are summed once per bucket of `BUCKET_LINES` line numbers:
`iteration_buckets` holds each bucket's aggregates (`PARTIALS`: counts, sums, first and last lines, ...),
`iteration_values` its lines counted per combination of the figures whose medians are taken (`FIGURES`,
read by `analysis.run_values`). Any range of lines is then the buckets inside it and the lines of the one or
two buckets it cuts (`analysis.run_ranges`), and a median over it is exact: printed figures take few
distinct values (sec/it printed in ms to one decimal: 801 in the 1.76 M lines of the benchmark's log).

A refresh sums again, for each run, the bucket of the last line it summed and those after it: a log that
grew costs its new lines and one bucket. `run_progress` (rule `RULE`) keeps that line; a row rewritten
below it moves it back (`store.progress.rewind`), and a merge or a parse from the first byte drops the
buckets with the rest of what a refresh keeps (`store.tables.DERIVED_RUN_TABLES`), so the sums are always
those of the rows as they are. The NaN lines of a run depend on its precision (`NAN_LINES`): a run whose
precision changed since is summed again from its first line.
"""

from __future__ import annotations

from tracelog.analysis.scope import Scope
from tracelog.store import Store, progress

RULE = "buckets"
BUCKET_LINES = 16384
"""Line numbers per bucket. A range reads the lines of the buckets it cuts (two at most), and a median the
buckets' counts per value. On a log of a few lines per iteration (1.76 M iterations in 5.3 M lines: 323
buckets, about 5,400 iteration lines in each) the refresh after 5 % growth reads three cut buckets,
whatever the run's length; 16,384 took its CPU from 0.58 to 0.49 s against 65,536 (schema 017's size;
the cut buckets' lines 0.17 to 0.07 s), where 8,192 saved no more: the counts summed between kept sums
(`run_values`) grow as the buckets shrink. A store summed at another size is summed again (schema 019)."""

NO_SCALER = "coalesce(precision IN ('bf16', 'fp32'), false)"
"""A run without an fp16 loss scaler, by its precision (see `NAN_LINES`)."""

NAN_LINES = (
    "CASE WHEN NOT isfinite(lm_loss) OR (NOT isfinite(grad_norm) AND (skipped = 0 OR (skipped IS NULL AND "
    "(lm_loss IS NULL OR lm_loss = 0 OR no_scaler)))) THEN greatest(coalesce(nan, 0), 1) ELSE coalesce(nan, 0) END"
)
"""NaN iterations a line stands for: the framework's count, and at least one where the loss is not finite, or
the grad norm is not finite on a step that was not skipped. Megatron-DeepSpeed under bf16 prints `grad
norm: nan` with no loss and `number of nan iterations: 0` (bigscience-workshop/Megatron-DeepSpeed#396): its
count checks only the loss it reduced. A non-finite grad norm on a skipped step is the fp16 loss scaler's
overflow, which the skipped count tells. A log that keeps no skip count (the Hugging Face Trainer) prints
the scaler's overflow as `'grad_norm': nan` beside a finite loss, so there it is a NaN only where no scaler
runs (`no_scaler`: the run's precision is bf16 or fp32) or the loss beside it is missing or exactly 0 (a
model whose weights went NaN: AnswerDotAI/ModernBERT#233)."""

LOSS_LEFT_OUT = (
    "lm_loss IS NULL AND coalesce(skipped, 0) = 0 AND nan_lines = 0 AND learning_rate IS NOT NULL "
    "AND (loss_scale IS NOT NULL OR grad_norm IS NOT NULL OR skipped IS NOT NULL)"
)
"""A line without its loss, on a step not skipped: Megatron prints each loss only when its average is above
0 (megatron/training/training.py `training_log`: `if avg > 0.0`), so a NaN loss leaves its line without one,
the only sign of it where the NaN count is not kept (Megatron-DeepSpeed#434). Read as a NaN iteration in a
Megatron run that prints its loss on other lines, and only from a line that printed what Megatron prints on
either side of the loss (the learning rate before it; the loss scale, grad norm or skipped count after): a
line cut short (a log wrapped at a fixed width, a paste) left its loss out by accident."""

UPDATING = "coalesce(skipped, 0) = 0 AND coalesce(learning_rate, 1) <> 0"
"""A line of steps that updated the weights: not skipped, not at a learning rate of 0 (rules/learning.py)."""
DRIFT_LINE = "elapsed_s > 0 AND coalesce(skipped, 0) = 0"
"""A line the sec/it drift rule reads."""
RATE_LINE = "learning_rate IS NOT NULL AND coalesce(skipped, 0) = 0"
"""A line the zero-learning-rate rule reads: it prints a rate, on a step not skipped."""

LINE_KINDS: dict[str, str] = {
    "clean": "coalesce(skipped, 0) = 0 AND coalesce(nan, 0) = 0",
    "with_loss": "lm_loss IS NOT NULL",
    "skipping": "coalesce(skipped, 0) > 0",
    "scaled": "loss_scale > 0",
    "nan": "nan_lines > 0",
    "left_out": LOSS_LEFT_OUT,
    "rate": RATE_LINE,
    "rate_zero_norm": f"{RATE_LINE} AND grad_norm = 0",
    "rate_finite_loss": f"{RATE_LINE} AND isfinite(lm_loss)",
    "zero_norm": f"grad_norm = 0 AND {UPDATING}",
    "drift": DRIFT_LINE,
}
"""The kinds of line a partial aggregate reads alone, by name."""

PARTIAL_SPECS: tuple[tuple[str, str, str, str | None, str], ...] = (
    # (column, aggregate, its argument, the kind of line it reads (None: every line), how buckets add up)
    ("lines", "count", "*", None, "sum(lines)"),
    ("first_line", "min", "line_no", None, "min(first_line)"),
    ("last_line", "max", "line_no", None, "max(last_line)"),
    ("clean_line", "min", "line_no", "clean", "min(clean_line)"),
    ("first_iteration", "min", "iteration", None, "min(first_iteration)"),
    ("last_iteration", "max", "iteration", None, "max(last_iteration)"),
    ("loss_line", "max", "line_no", "with_loss", "max(loss_line)"),
    ("final_loss", "arg_max", "lm_loss, line_no", "with_loss", "arg_max(final_loss, loss_line)"),
    ("losses", "count", "lm_loss", None, "sum(losses)"),
    ("skipped", "sum", "coalesce(skipped, 0)", None, "sum(skipped)"),
    ("nan", "sum", "coalesce(nan, 0)", None, "sum(nan)"),
    (
        "first_elapsed",
        "arg_min",
        "CASE WHEN elapsed_s IS NULL THEN 0 ELSE 1 END, line_no",
        None,
        "arg_min(first_elapsed, first_line)",
    ),
    (
        "first_rate",
        "arg_min",
        "CASE WHEN global_batch_size / elapsed_s IS NULL THEN 0 ELSE 1 END, line_no",
        None,
        "arg_min(first_rate, first_line)",
    ),
    ("first_skip", "min", "iteration", "skipping", "min(first_skip)"),
    ("first_skip_line", "min", "line_no", "skipping", "min(first_skip_line)"),
    ("top_scale", "max", "loss_scale", None, "max(top_scale)"),
    ("scale_top", "max", "loss_scale", "scaled", "max(scale_top)"),
    ("scale_low", "min", "loss_scale", "scaled", "min(scale_low)"),
    ("nan_lines", "sum", "nan_lines", None, "sum(nan_lines)"),
    ("first_nan", "min", "iteration", "nan", "min(first_nan)"),
    ("first_nan_line", "min", "line_no", "nan", "min(first_nan_line)"),
    ("left_out", "count", "*", "left_out", "sum(left_out)"),
    ("first_left", "min", "iteration", "left_out", "min(first_left)"),
    ("first_left_line", "min", "line_no", "left_out", "min(first_left_line)"),
    ("zl_lines", "count", "*", "rate", "sum(zl_lines)"),
    ("zl_first_line", "min", "line_no", "rate", "min(zl_first_line)"),
    ("zl_last_line", "max", "line_no", "rate", "max(zl_last_line)"),
    ("zl_first_it", "min", "iteration", "rate", "min(zl_first_it)"),
    ("zl_last_it", "max", "iteration", "rate", "max(zl_last_it)"),
    ("zl_zero_norms", "count", "*", "rate_zero_norm", "sum(zl_zero_norms)"),
    ("zl_norms", "count", "grad_norm", "rate", "sum(zl_norms)"),
    ("zl_low", "min", "lm_loss", "rate_finite_loss", "min(zl_low)"),
    ("zl_high", "max", "lm_loss", "rate_finite_loss", "max(zl_high)"),
    ("zl_all_zero", "bool_and", "learning_rate = 0", "rate", "bool_and(zl_all_zero)"),
    ("zero_norms", "count", "*", "zero_norm", "sum(zero_norms)"),
    ("drift_lines", "count", "*", "drift", "sum(drift_lines)"),
    ("elapsed_lines", "count", "elapsed_s", None, "sum(elapsed_lines)"),
    ("samples_lines", "count", "samples_per_s", None, "sum(samples_lines)"),
    ("rate_lines", "count", "global_batch_size / elapsed_s", None, "sum(rate_lines)"),
    ("tflops_lines", "count", "tflops_reported", None, "sum(tflops_lines)"),
    ("tflop_lines", "count", "tflops_reported * elapsed_s", None, "sum(tflop_lines)"),
)
"""What `iteration_buckets` keeps per bucket, read by `run_ranges` over any range of lines."""

PARTIALS: tuple[tuple[str, str, str], ...] = tuple(
    (name, f"{function}({argument})" + (f" FILTER ({LINE_KINDS[kind]})" if kind else ""), combine)
    for name, function, argument, kind, combine in PARTIAL_SPECS
)
"""(column, its aggregate over a bucket's lines, how the buckets of a range add up): the definition, which
`partials_sql` reads; the refresh computes the same by `partial_columns`."""

FIGURES = ("elapsed_s", "unskipped", "samples_per_s", "global_batch_size", "tflops_reported")
FIGURES_SQL = (
    "elapsed_s, coalesce(skipped, 0) = 0 AS unskipped, samples_per_s, global_batch_size, tflops_reported"
)
"""The figures of a line that the medians read (a skipped step: the drift rule leaves it out)."""

COUNTED_COLUMNS = "run_id, line_no, elapsed_s, skipped, samples_per_s, global_batch_size, tflops_reported"
"""The columns of `iterations` that `bucket_counts_sql` reads."""


LINES_SQL = """
SELECT l.*, {NAN_LINES} AS nan_lines
FROM (
    SELECT i.*, p.no_scaler, i.line_no // {B} AS bucket
    FROM ({rows}) i LEFT JOIN (SELECT run_id, {NO_SCALER} AS no_scaler FROM runs) p USING (run_id)
) l
"""
"""Lines as the partial aggregates read them: with their bucket, the run's `no_scaler` and `nan_lines`."""


def lines_sql(rows: str) -> str:
    return LINES_SQL.format(NAN_LINES=NAN_LINES, B=BUCKET_LINES, NO_SCALER=NO_SCALER, rows=rows)


def partials_sql(lines: str, keys: str = "run_id, bucket") -> str:
    """Each group's `PARTIALS` over `lines` (a relation of `lines_sql`), grouped by `keys`."""
    columns = ", ".join(f"{aggregate} AS {name}" for name, aggregate, _ in PARTIALS)
    return f"SELECT {keys}, {columns} FROM ({lines}) GROUP BY {keys}"


def partial_columns(lines: str, keys: str = "run_id, bucket", extra: str = "") -> str:
    """`partials_sql`, as the refresh computes it: each kind of line a column of `lines` first, and each
    aggregate of some kind of line taken over `CASE WHEN <kind> THEN <argument> END`, which is NULL on the
    other lines. The aggregates skip NULLs (`arg_min` and `arg_max` a NULL key), so the values are those of
    the FILTER clauses; DuckDB 1.5 evaluates a FILTER's condition once per aggregate, and its 40 aggregates
    over a grown run's 100,000 new lines took 22-41 ms against 10-12 ms so. `extra`: more columns."""
    kinds = ", ".join(f"({condition}) AS is_{kind}" for kind, condition in LINE_KINDS.items())
    columns = ", ".join(
        f"{_over_kind(function, argument, kind)} AS {name}"
        for name, function, argument, kind, _ in PARTIAL_SPECS
    )
    return f"SELECT {keys}, {extra}{columns} FROM (SELECT *, {kinds} FROM ({lines})) GROUP BY {keys}"


def _over_kind(function: str, argument: str, kind: str | None) -> str:
    if kind is None:
        return f"{function}({argument})"
    if argument == "*":
        return f"{function}(CASE WHEN is_{kind} THEN 1 END)"
    if function in ("arg_min", "arg_max"):  # the key NULL off the kind: the row is skipped
        value, key = argument.split(", ")
        return f"{function}({value}, CASE WHEN is_{kind} THEN {key} END)"
    return f"{function}(CASE WHEN is_{kind} THEN {argument} END)"


def bucket_counts_sql(rows: str) -> str:
    """`iteration_values` rows of `rows` (iteration rows with at least `run_id, line_no` and the figures)."""
    figures = ", ".join(FIGURES)
    return (
        f"SELECT run_id, line_no // {BUCKET_LINES} AS bucket, {figures}, count(*) AS lines "
        f"FROM (SELECT run_id, line_no, {FIGURES_SQL} FROM ({rows})) GROUP BY run_id, bucket, {figures}"
    )


def rows_from(starts: dict[int, int | None], columns: str = "*", where: str = "TRUE") -> str:
    """SQL of the iteration rows of the runs in `starts` from their start line on (None: all of them). A
    start past the first bucket is a branch of its own with a literal range, which lets DuckDB skip the
    row groups before it (a range joined from a table, or an OR of ranges, reads the whole run); nearer
    starts (a short run, a refresh of every run) are one join."""
    whole = sorted(run for run, start in starts.items() if start is None)
    near = {run: start for run, start in starts.items() if start is not None and start < BUCKET_LINES}
    far = {run: start for run, start in starts.items() if start is not None and start >= BUCKET_LINES}
    sources = [f"(SELECT * FROM iterations WHERE run_id IN ({', '.join(map(str, whole))}))"] if whole else []
    if near:
        pairs = ", ".join(f"({int(run)}, {int(start)})" for run, start in sorted(near.items()))
        sources.append(
            f"(SELECT i.* FROM iterations i JOIN (VALUES {pairs}) s(run, start) "
            "ON i.run_id = s.run AND i.line_no >= s.start)"
        )
    sources += [
        f"(SELECT * FROM iterations WHERE run_id = {int(run)} AND line_no >= {int(start)})"
        for run, start in sorted(far.items())
    ]
    if not sources:
        return f"SELECT {columns} FROM iterations WHERE FALSE"
    return " UNION ALL ".join(f"SELECT {columns} FROM {source} WHERE {where}" for source in sources)


def update(store: Store, scope: Scope) -> None:
    """Bring the buckets of every run in scope up to its last line."""
    con = store.con
    runs = f"SELECT run_id FROM runs WHERE {scope.runs}"
    # a run summed under another precision than its own now is summed again from its first line
    rescaled = (
        f"EXISTS (SELECT 1 FROM iteration_buckets b WHERE b.run_id = r.run_id "
        f"AND b.no_scaler IS DISTINCT FROM {NO_SCALER.replace('precision', 'r.precision')})"
    )
    marks, unmarked = progress.read(con, RULE, scope.runs, stale=None if scope.new else rescaled)
    starts: dict[int, int | None] = {
        **{run: (checked + 1) // BUCKET_LINES * BUCKET_LINES for run, (checked, _) in marks.items()},
        **dict.fromkeys(unmarked),
    }
    for run in _changed_below(store, starts):
        starts[run] = None
    if not scope.new:
        for table in ("iteration_buckets", "iteration_values"):
            _delete_from(store, table, starts)
        _delete_from(store, "iteration_value_sums", starts, after=True)
    lines = lines_sql(rows_from(starts))
    columns = ", ".join(name for name, _, _ in PARTIALS)
    con.execute(
        f"INSERT INTO iteration_buckets (run_id, bucket, no_scaler, {columns}) "
        + partial_columns(lines, extra="any_value(no_scaler), ")
    )
    con.execute("INSERT INTO iteration_values " + bucket_counts_sql(rows_from(starts, COUNTED_COLUMNS)))
    if not scope.new:
        con.execute(f"DELETE FROM run_progress WHERE rule = '{RULE}' AND run_id IN ({runs})")
    con.execute(
        f"""
        INSERT INTO run_progress
        SELECT run_id, '{RULE}', max(last_line), max(last_line), NULL FROM iteration_buckets
        WHERE run_id IN ({runs}) GROUP BY run_id ORDER BY run_id
        """
    )


def _changed_below(store: Store, starts: dict[int, int | None]) -> list[int]:
    """Runs whose rows before their start line are not those their buckets summed: the count differs (rows
    deleted, added or moved there behind the refresh's back, by SQL of a user's). One column counted."""
    kept = {run: start for run, start in starts.items() if start}
    if not kept:
        return []
    counts = " UNION ALL ".join(
        f"SELECT {run} AS run_id, count(*) AS n FROM iterations WHERE run_id = {run} AND line_no < {start}"
        for run, start in kept.items()
    )
    sums = (
        "SELECT run_id, sum(lines) AS n FROM iteration_buckets b JOIN (VALUES "
        + ", ".join(f"({run}, {start // BUCKET_LINES})" for run, start in kept.items())
        + ") s(run_id, bucket) USING (run_id) WHERE b.bucket < s.bucket GROUP BY run_id"
    )
    return [
        int(run)
        for (run,) in store.con.execute(
            f"SELECT c.run_id FROM ({counts}) c LEFT JOIN ({sums}) s USING (run_id) WHERE c.n <> coalesce(s.n, 0)"
        ).fetchall()
    ]


def _delete_from(store: Store, table: str, starts: dict[int, int | None], after: bool = False) -> None:
    """A table's rows of the buckets summed again: all of a run's that starts from its first line (`after`:
    the rows of the buckets after the first summed again, sums of the buckets before them)."""
    whole = [run for run, start in starts.items() if start is None]
    if whole:
        store.con.execute(f"DELETE FROM {table} WHERE run_id IN ({', '.join(map(str, whole))})")
    tails = ", ".join(
        f"({int(run)}, {int(start) // BUCKET_LINES})" for run, start in starts.items() if start is not None
    )
    if tails:
        store.con.execute(
            f"DELETE FROM {table} t USING (VALUES {tails}) s(run_id, bucket) "
            f"WHERE t.run_id = s.run_id AND t.bucket {'>' if after else '>='} s.bucket"
        )
