"""A refresh's figures of each run over ranges of its lines, from its buckets (`run_buckets`).

A range is the lines of a run after one line and up to another (`lo` excluded, `hi` included, either
open): the whole run, its warm-up lines (up to `warmup_end`), its steady lines (after it), its lines after
the first, and the drift rule's first and last fifths of the steady lines it reads. Its aggregates are
those of the buckets inside it added up (`run_buckets.PARTIALS`) with those of its own lines in the one or
two buckets it cuts, read from `iterations` bucket by bucket (`EDGES`, with a literal range each, so that
DuckDB reads those row groups only); its lines per value of a figure likewise (`run_values`), and a median
over them is the value at the middle positions, taken by DuckDB's own `median` so that it is the number
`median` over the lines gives, to the bit.

Where a range ends is found the same way: the warm-up cut is the line at position ceil(5 % of the logged
lines) (or, where later, the last line before the first clean one), a fifth of the drift rule ends at a
position among the steady lines it reads; each is in the bucket where the counts of the buckets before it
reach that position, and is found among that bucket's lines. So a refresh reads the run's buckets and a
few buckets of its lines, however long it is: on a grown run of 1.76 M lines, the lines it gained, one
bucket summed again, and some 66,000 lines of the three buckets its ranges cut.

`prepare` makes, for the runs in scope and for the length of a refresh: `CUTS` (each run's line count,
first clean line and warm-up end, as `iteration_marks` marks them), `MARKS` (the marks over that cut, for
what still reads lines), `PARTS` (the aggregates per run and range) and `VALUES` (the lines per value per
run, range and series). `medians_sql` takes the median of each group of `VALUES` rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from tracelog.analysis import run_buckets, run_values
from tracelog.analysis.run_buckets import DRIFT_LINE, PARTIALS, lines_sql
from tracelog.analysis.scope import Scope
from tracelog.store import Store

CUTS = "refresh_warmup_cuts"
MARKS = "refresh_iteration_marks"
EDGES = "refresh_edges"
RANGES = "refresh_ranges"
PARTS = "refresh_parts"
VALUES = "refresh_values"
MEDIANS = "refresh_medians"
TEMPORARY = (
    MARKS,
    CUTS,
    EDGES,
    RANGES,
    PARTS,
    VALUES,
    MEDIANS,
    run_values.TUPLES,
    "refresh_positions",
    "refresh_wanted",
    "refresh_inner",
    "refresh_sums",
)
"""What `prepare` makes; `drop` removes it (a view first)."""

STEADY_SERIES = ("elapsed", "samples", "rate", "tflops", "tflop")
FALLBACK_SERIES = {
    "elapsed": ("all", "later"),
    "rate": ("all", "later"),
    "tflops": ("all",),
    "tflop": ("all",),
}
"""Series read over the whole run, or after its first line, only where its steady lines have none."""


def prepare(store: Store, scope: Scope) -> Scope:
    """The scope with its runs' buckets brought up to date and their ranges' figures made (see the module)."""
    if scope.prepared:
        return scope
    run_buckets.update(store, scope)
    con = store.con
    B = run_buckets.BUCKET_LINES
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE refresh_positions AS
        WITH runs AS (
            SELECT run_id, CAST(sum(lines) AS BIGINT) AS logged, min(first_line) AS first_line,
                   max(last_line) AS last_line, min(clean_line) AS first_clean_line
            FROM iteration_buckets WHERE {scope.runs} GROUP BY run_id
        ),
        counted AS (
            SELECT run_id, bucket, lines, sum(lines) OVER (PARTITION BY run_id ORDER BY bucket) AS upto
            FROM iteration_buckets WHERE {scope.runs}
        )
        -- the warm-up cut's position, ceil(5 %) of the logged lines (schema 014's iteration_marks), and
        -- the bucket it falls in
        SELECT r.*, w.k, c.bucket AS k_bucket, w.k - (c.upto - c.lines) AS k_in
        FROM runs r JOIN (SELECT run_id, CAST(ceil(logged * 0.05) AS BIGINT) AS k FROM runs) w USING (run_id)
        JOIN counted c ON c.run_id = r.run_id AND c.upto >= w.k AND c.upto - c.lines < w.k
        """
    )
    positions = con.execute(
        "SELECT run_id, first_line, last_line, k_bucket, first_clean_line FROM refresh_positions"
    ).fetchall()
    edges = _Edges(store, {run: (first, last) for run, first, last, _, _ in positions})
    # the bucket of the warm-up cut's position, and that of the first clean line where a line comes before it
    edges.load(
        (run, bucket)
        for run, first, _, k_bucket, clean in positions
        for bucket in (k_bucket, *(() if clean is None or clean == first else (clean // B,)))
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {CUTS} AS
        WITH kth AS (
            SELECT run_id, line_no FROM (
                SELECT e.run_id, e.line_no, p.k_in, row_number() OVER (PARTITION BY e.run_id ORDER BY e.line_no) AS n
                FROM {EDGES} e JOIN refresh_positions p ON p.run_id = e.run_id AND e.bucket = p.k_bucket
            ) WHERE n = k_in
        ),
        -- the last line before the first clean one: warm-up too
        unclean AS (
            SELECT p.run_id, greatest(
                (SELECT max(b.last_line) FROM iteration_buckets b
                 WHERE b.run_id = p.run_id AND b.bucket < p.first_clean_line // {B}),
                (SELECT max(e.line_no) FROM {EDGES} e
                 WHERE e.run_id = p.run_id AND e.bucket = p.first_clean_line // {B} AND e.line_no < p.first_clean_line)
            ) AS line_no
            FROM refresh_positions p WHERE p.first_clean_line IS NOT NULL
        )
        SELECT p.run_id, p.logged, p.first_clean_line, greatest(k.line_no, u.line_no) AS warmup_end,
               p.first_line, p.last_line
        FROM refresh_positions p LEFT JOIN kth k USING (run_id) LEFT JOIN unclean u USING (run_id)
        """
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP VIEW {MARKS} AS
        SELECT i.*, c.logged, c.first_clean_line, coalesce(i.line_no <= c.warmup_end, false) AS warmup
        FROM iterations i JOIN {CUTS} c USING (run_id)
        """
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {RANGES} AS
        SELECT run_id, 'all' AS part, NULL::BIGINT AS lo, NULL::BIGINT AS hi FROM {CUTS}
        UNION ALL SELECT run_id, 'warmup', NULL, warmup_end FROM {CUTS}
        UNION ALL SELECT run_id, 'steady', warmup_end, NULL FROM {CUTS}
        """
    )
    edges.load_ranges()
    _parts(store)
    _fifths(store, edges)
    # the steady lines' figures, the whole run's global batch, the fifths' sec/it; where the steady lines
    # have none of a figure, the medians fall back to the run's other lines: all of them, or those after
    # the first (a range of its own, read only then)
    fallback = [
        f"SELECT run_id, '{part}' AS part, '{series}' AS series FROM {PARTS} "
        f"WHERE part = 'all' AND run_id NOT IN (SELECT run_id FROM {PARTS} WHERE part = 'steady' AND {series}_lines > 0)"
        for series, parts in FALLBACK_SERIES.items()
        for part in parts
    ]
    con.execute(
        "CREATE OR REPLACE TEMP TABLE refresh_wanted AS "
        + " UNION ALL ".join(
            [f"SELECT run_id, 'steady' AS part, '{s}' AS series FROM {CUTS}" for s in STEADY_SERIES]
            + [f"SELECT run_id, 'all', 'gbs' FROM {CUTS}"]
            + [f"SELECT run_id, part, 'drift' FROM {RANGES} WHERE part LIKE '%_fifth'"]
            + fallback
        )
    )
    con.execute(
        f"INSERT INTO {RANGES} SELECT run_id, 'later', first_line, NULL FROM {CUTS} "
        "WHERE run_id IN (SELECT run_id FROM refresh_wanted WHERE part = 'later')"
    )
    edges.load_ranges()
    wanted_ranges = (
        f"(SELECT * FROM {RANGES} r WHERE EXISTS "
        "(SELECT 1 FROM refresh_wanted w WHERE w.run_id = r.run_id AND w.part = r.part))"
    )
    run_values.count_ranges(store, wanted_ranges, _edge_lines(ranges=wanted_ranges), scope.new)
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {VALUES} AS {run_values.values_sql('SELECT * FROM refresh_wanted')}"
    )
    con.execute(f"CREATE OR REPLACE TEMP TABLE {MEDIANS} AS {medians_sql(f'SELECT * FROM {VALUES}')}")
    return replace(scope, marks=MARKS, prepared=True)


def first_steady_line(store: Store, run_id: int, column: str, value: float) -> tuple[int, int]:
    """(line, iteration) of a run's first steady line whose `column` is `value` (NaN is NaN): a literal
    range and value, so that DuckDB reads only the row groups that can hold it (a rule's worst line)."""
    found = store.con.execute(
        f"SELECT min(i.line_no), arg_min(i.iteration, i.line_no) FROM iterations i JOIN {CUTS} c USING (run_id) "
        f"WHERE i.run_id = {int(run_id)} AND i.line_no > c.warmup_end AND i.{column} = CAST('{float(value)!r}' AS DOUBLE)"
    ).fetchone()
    assert found is not None and found[0] is not None, (run_id, column, value)
    return int(found[0]), int(found[1])


def median(part: str, series: str) -> str:
    """An aggregate over `MEDIANS` grouped by run: the median of a series over a range (NULL: no line)."""
    return f"any_value(median) FILTER (part = '{part}' AND series = '{series}')"


def counted(part: str, series: str) -> str:
    """... and its count of lines (NULL where none)."""
    return f"any_value(lines) FILTER (part = '{part}' AND series = '{series}')"


STEADY_SQL = f"""
WITH m AS (
    SELECT run_id,
           {median("steady", "elapsed")} AS elapsed, {counted("steady", "elapsed")} AS elapsed_n,
           {median("later", "elapsed")} AS elapsed_later, {median("all", "elapsed")} AS elapsed_all,
           coalesce({counted("all", "elapsed")}, 0) AS elapsed_all_n,
           {median("steady", "samples")} AS samples, {counted("steady", "samples")} AS samples_n,
           {median("steady", "rate")} AS rate, {counted("steady", "rate")} AS rate_n,
           {median("later", "rate")} AS rate_later, {median("all", "rate")} AS rate_all,
           coalesce({counted("all", "rate")}, 0) AS rate_all_n,
           {median("steady", "tflops")} AS tflops, {counted("steady", "tflops")} AS tflops_n,
           {median("all", "tflops")} AS tflops_all
    FROM {MEDIANS} GROUP BY run_id
)
SELECT
    a.run_id,
    a.lines AS iterations_logged,
    a.last_iteration,
    coalesce(s.lines, 0) AS steady_lines,
    -- as schema 013's run_steady: the steady lines' median, else over the lines after the first, else all
    coalesce(
        m.elapsed,
        CASE WHEN m.elapsed_n IS NULL THEN m.elapsed_later END,
        CASE WHEN m.elapsed_n IS NULL AND NOT m.elapsed_all_n > a.first_elapsed THEN m.elapsed_all END
    ) AS sec_per_it,
    coalesce(
        m.samples,
        CASE WHEN m.samples_n IS NULL THEN m.rate END,
        CASE WHEN m.samples_n IS NULL AND m.rate_n IS NULL THEN m.rate_later END,
        CASE WHEN m.samples_n IS NULL AND m.rate_n IS NULL AND NOT m.rate_all_n > a.first_rate THEN m.rate_all END
    ) AS samples_per_s,
    coalesce(m.tflops, CASE WHEN m.tflops_n IS NULL THEN m.tflops_all END) AS tflops_reported,
    a.final_loss,
    a.skipped AS skipped_iterations,
    a.nan AS nan_iterations,
    a.last_line
FROM {PARTS} a
LEFT JOIN {PARTS} s ON s.run_id = a.run_id AND s.part = 'steady'
LEFT JOIN m ON m.run_id = a.run_id
WHERE a.part = 'all'
"""
"""Each run's steady-state figures as schema 013's `run_steady` computes them, from the ranges' figures,
with the last line they describe (`tests/test_views.py` holds them against the view's)."""

FIGURES_SQL = f"""
SELECT run_id,
       coalesce({median("steady", "tflop")},
                CASE WHEN {counted("steady", "tflop")} IS NULL THEN {median("all", "tflop")} END) AS implied_tflop,
       coalesce({median("steady", "tflops")},
                CASE WHEN {counted("steady", "tflops")} IS NULL THEN {median("all", "tflops")} END) AS reported_tflops,
       {median("all", "gbs")} AS gbs_logged
FROM {MEDIANS} GROUP BY run_id
"""
"""The model's measured figures of each run (`analysis.inputs.FIGURES_SQL`: the same, over the lines) where
no `effective tera flops per gpu` line stands beside its iterations (a run that prints one is read from its
lines: `refresh._figures`)."""


def drop(store: Store) -> None:
    store.con.execute(f"DROP VIEW IF EXISTS {MARKS}")
    for table in TEMPORARY[1:]:
        store.con.execute(f"DROP TABLE IF EXISTS {table}")


def _fifths(store: Store, edges: _Edges) -> None:
    """The drift rule's ranges: the first and last fifths of the steady lines it reads (`DRIFT_LINE`), as
    ntile(5) over them by line number makes them: the first ceil(n/5) lines, the last floor(n/5), for runs
    with 10 such lines or more."""
    B = run_buckets.BUCKET_LINES
    located = store.con.execute(
        f"""
        WITH counts AS (
            SELECT b.run_id, b.bucket, b.drift_lines AS lines
            FROM iteration_buckets b JOIN {CUTS} c USING (run_id) WHERE b.bucket > c.warmup_end // {B}
            UNION ALL
            SELECT e.run_id, e.bucket, count(*) FILTER ({DRIFT_LINE})
            FROM {EDGES} e JOIN {CUTS} c USING (run_id)
            WHERE e.bucket = c.warmup_end // {B} AND e.line_no > c.warmup_end GROUP BY ALL
        ),
        sizes AS (SELECT run_id, sum(lines) AS n FROM counts GROUP BY run_id HAVING sum(lines) >= 10),
        wanted AS (
            SELECT run_id, 1 AS fifth, (n + 4) // 5 AS k FROM sizes
            UNION ALL
            SELECT run_id, 5, n - n // 5 + 1 FROM sizes
        ),
        running AS (
            SELECT run_id, bucket, lines, sum(lines) OVER (PARTITION BY run_id ORDER BY bucket) AS upto
            FROM counts
        )
        SELECT w.run_id, w.fifth, r.bucket, CAST(w.k - (r.upto - r.lines) AS BIGINT) AS k_in
        FROM wanted w JOIN running r ON r.run_id = w.run_id AND r.upto >= w.k AND r.upto - r.lines < w.k
        """
    ).fetchall()
    if not located:
        return
    edges.load((run, bucket) for run, _, bucket, _ in located)
    wanted = ", ".join(f"({run}, {fifth}, {bucket}, {k_in})" for run, fifth, bucket, k_in in located)
    store.con.execute(
        f"""
        INSERT INTO {RANGES}
        WITH wanted AS (SELECT * FROM (VALUES {wanted}) w(run_id, fifth, bucket, k_in)),
        picked AS (
            SELECT run_id, fifth, line_no FROM (
                SELECT e.run_id, w.fifth, e.line_no, w.k_in,
                       row_number() OVER (PARTITION BY e.run_id, w.fifth ORDER BY e.line_no) AS n
                FROM wanted w JOIN {EDGES} e ON e.run_id = w.run_id AND e.bucket = w.bucket
                JOIN {CUTS} c ON c.run_id = w.run_id
                WHERE e.line_no > c.warmup_end AND {DRIFT_LINE}
            ) WHERE n = k_in
        )
        SELECT p.run_id, 'first_fifth', c.warmup_end, p.line_no FROM picked p JOIN {CUTS} c USING (run_id)
        WHERE p.fifth = 1
        UNION ALL
        SELECT run_id, 'last_fifth', line_no - 1, NULL FROM picked WHERE fifth = 5
        """
    )
    edges.load_ranges()


def _in_buckets(t: str) -> str:
    """A bucket of table `t` inside range `r`, that it does not cut."""
    return f"(r.lo IS NULL OR {t}.bucket > r.lo // {run_buckets.BUCKET_LINES}) AND (r.hi IS NULL OR {t}.bucket < r.hi // {run_buckets.BUCKET_LINES})"


def _edge_lines(columns: str = "e.*", ranges: str = RANGES) -> str:
    """The lines of each range in the buckets it cuts."""
    return (
        f"SELECT r.part, {columns} FROM {ranges} r JOIN {EDGES} e ON e.run_id = r.run_id "
        f"WHERE (r.lo IS NULL OR e.line_no > r.lo) AND (r.hi IS NULL OR e.line_no <= r.hi) "
        f"AND (e.bucket = r.lo // {run_buckets.BUCKET_LINES} OR e.bucket = r.hi // {run_buckets.BUCKET_LINES})"
    )


PART_RANGES = ("all", "warmup", "steady")
"""The ranges whose aggregates are read (the others' lines per value only)."""


def _parts(store: Store) -> None:
    """`PARTS`: the aggregates of each run's `PART_RANGES`."""
    combined = ", ".join(f"{combine} AS {name}" for name, _, combine in PARTIALS)
    store.con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {PARTS} AS
        SELECT run_id, part, {combined} FROM (
            SELECT r.run_id, r.part, {", ".join(f"b.{n}" for n, _, _ in PARTIALS)}
            FROM {RANGES} r JOIN iteration_buckets b ON b.run_id = r.run_id WHERE {_in_buckets("b")}
            UNION ALL
            {run_buckets.partial_columns(_edge_lines(), keys="run_id, part")}
        ) WHERE part IN {PART_RANGES} GROUP BY run_id, part
        """
    )


def medians_sql(values: str) -> str:
    """(run_id, part, series, lines, median) of each group of `values` (rows of `VALUES`' columns, at most
    one per value): the value at position (n - 1) // 2 + 1 in order, and for an even n the one after it,
    their median taken by DuckDB's `median` as it takes it over the lines (NaN sorts last in both)."""
    return f"""
    WITH counted AS (
        SELECT run_id, part, series, value, lines,
               sum(lines) OVER (PARTITION BY run_id, part, series ORDER BY value ROWS UNBOUNDED PRECEDING) AS upto,
               sum(lines) OVER (PARTITION BY run_id, part, series) AS n
        FROM ({values})
    ),
    middle AS (
        SELECT run_id, part, series, n, value FROM counted
        WHERE upto >= (n - 1) // 2 + 1 AND upto - lines < (n - 1) // 2 + 1
        UNION ALL
        SELECT run_id, part, series, n, value FROM counted
        WHERE n % 2 = 0 AND upto >= n // 2 + 1 AND upto - lines < n // 2 + 1
    )
    SELECT run_id, part, series, any_value(n) AS lines, median(value) AS median FROM middle GROUP BY ALL
    """


EDGE_COLUMNS = (
    "run_id, iteration, line_no, elapsed_s, learning_rate, global_batch_size, lm_loss, loss_scale, grad_norm, "
    "skipped, nan, samples_per_s, tflops_reported"
)
"""The columns of a line that the ranges' aggregates and counts read."""


class _Edges:
    """`EDGES`: the lines of the buckets a refresh reads, loaded once each; a run whose every bucket is
    wanted is read whole (a short run: one branch of the query for all of them)."""

    def __init__(self, store: Store, spans: dict[int, tuple[int, int]]) -> None:
        self.store = store
        self.spans = {
            run: (first // run_buckets.BUCKET_LINES, last // run_buckets.BUCKET_LINES)
            for run, (first, last) in spans.items()
        }
        self.loaded: set[tuple[int, int]] = set()
        store.con.execute(
            f"CREATE OR REPLACE TEMP TABLE {EDGES} AS {lines_sql(f'SELECT {EDGE_COLUMNS} FROM iterations WHERE FALSE')}"
        )

    def load_ranges(self) -> None:
        """The buckets the ranges of `RANGES` cut."""
        rows = self.store.con.execute(f"SELECT run_id, lo, hi FROM {RANGES}").fetchall()
        self.load(
            (run, end // run_buckets.BUCKET_LINES)
            for run, lo, hi in rows
            for end in (lo, hi)
            if end is not None
        )

    def load(self, pairs: Iterable[tuple[int, int]]) -> None:
        B = run_buckets.BUCKET_LINES
        wanted: dict[int, set[int]] = {}
        for run, bucket in pairs:
            if run in self.spans and (run, bucket) not in self.loaded:
                wanted.setdefault(int(run), set()).add(int(bucket))
        whole, branches = [], []
        for run, buckets in sorted(wanted.items()):
            first, last = self.spans[run]
            if len(buckets) == last - first + 1:  # nothing of it loaded yet, and all of it wanted
                whole.append(run)
                self.loaded.update((run, b) for b in buckets)
                continue
            for bucket in sorted(buckets):
                branches.append(
                    f"SELECT {EDGE_COLUMNS} FROM iterations WHERE run_id = {run} "
                    f"AND line_no >= {bucket * B} AND line_no < {(bucket + 1) * B}"
                )
                self.loaded.add((run, bucket))
        if whole:
            branches.append(
                f"SELECT {EDGE_COLUMNS} FROM iterations WHERE run_id IN ({', '.join(map(str, whole))})"
            )
        if branches:
            self.store.con.execute(f"INSERT INTO {EDGES} {lines_sql(' UNION ALL '.join(branches))}")
