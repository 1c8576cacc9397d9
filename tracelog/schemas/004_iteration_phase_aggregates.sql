-- iteration_phase and run_steady without window functions over a run's iterations: per-run aggregates
-- joined back. A window over `SELECT i.*` materialises every column of a whole run at once (one run of
-- 3.5 M logged lines is one partition); these read a few columns and keep a few numbers per run.
--
-- Same marks as 002_views.sql. Line numbers are unique within a run, so `n <= ceil(logged * 0.05)` is
-- `line_no <= the line of the ceil(5%)-th logged line`, which `min(line_no, k)` finds from the k smallest
-- line numbers (a heap of k, which DuckDB allows up to 999,999: runs over 19,999,980 logged lines take
-- the window instead); `n = 1` is within it, as ceil(logged * 0.05) >= 1. `n` itself stays a column for
-- the queries that use it (the report's sampling); DuckDB leaves the window out of queries that do not.

CREATE OR REPLACE VIEW iteration_phase AS
WITH per_run AS (
    SELECT
        run_id,
        count(*) AS logged,
        CAST(ceil(count(*) * 0.05) AS BIGINT) AS warmup_lines,
        min(CASE WHEN coalesce(skipped, 0) = 0 AND coalesce(nan, 0) = 0 THEN line_no END) AS first_clean_line
    FROM iterations
    GROUP BY run_id
),
cutoff AS (
    SELECT i.run_id, list_max(min(i.line_no, least(p.warmup_lines, 999999))) AS last_warmup_line
    FROM iterations i JOIN per_run p USING (run_id)
    WHERE p.warmup_lines < 1000000
    GROUP BY i.run_id
    UNION ALL
    SELECT run_id, line_no
    FROM (
        SELECT i.run_id, i.line_no, p.warmup_lines,
               row_number() OVER (PARTITION BY i.run_id ORDER BY i.line_no) AS k
        FROM iterations i JOIN per_run p USING (run_id)
        WHERE p.warmup_lines >= 1000000
    )
    WHERE k = warmup_lines
)
SELECT
    i.*,
    row_number() OVER (PARTITION BY i.run_id ORDER BY i.line_no) AS n,
    p.logged,
    p.first_clean_line,
    (i.line_no <= c.last_warmup_line OR coalesce(i.line_no < p.first_clean_line, false)) AS warmup
FROM iterations i
JOIN per_run p ON p.run_id = i.run_id
JOIN cutoff c ON c.run_id = i.run_id;

-- run_steady: the same medians. `n > 1` is `line_no > the run's first line`; and a fallback median (the
-- second and later arguments of a coalesce) is taken only over the lines of runs where every median before
-- it has no value, so a run with steady lines keeps one median's values per figure in memory, not three.
CREATE OR REPLACE VIEW run_steady AS
WITH present AS (
    SELECT
        run_id,
        min(line_no) AS first_line,
        count(elapsed_s) FILTER (NOT warmup) > 0 AS elapsed_steady,
        count(elapsed_s) > arg_min(CASE WHEN elapsed_s IS NULL THEN 0 ELSE 1 END, line_no) AS elapsed_later,
        count(samples_per_s) FILTER (NOT warmup) > 0 AS samples_steady,
        count(global_batch_size / elapsed_s) FILTER (NOT warmup) > 0 AS rate_steady,
        count(global_batch_size / elapsed_s)
            > arg_min(CASE WHEN global_batch_size / elapsed_s IS NULL THEN 0 ELSE 1 END, line_no) AS rate_later,
        count(tflops_reported) FILTER (NOT warmup) > 0 AS tflops_steady
    FROM iteration_phase
    GROUP BY run_id
)
SELECT
    i.run_id,
    count(*) AS iterations_logged,
    max(i.iteration) AS last_iteration,
    count(*) FILTER (NOT i.warmup) AS steady_lines,
    coalesce(
        median(i.elapsed_s) FILTER (NOT i.warmup),
        median(i.elapsed_s) FILTER (i.line_no > p.first_line AND NOT p.elapsed_steady),
        median(i.elapsed_s) FILTER (NOT p.elapsed_steady AND NOT p.elapsed_later)
    ) AS sec_per_it,
    coalesce(
        median(i.samples_per_s) FILTER (NOT i.warmup),
        median(i.global_batch_size / i.elapsed_s) FILTER (NOT i.warmup AND NOT p.samples_steady),
        median(i.global_batch_size / i.elapsed_s)
            FILTER (i.line_no > p.first_line AND NOT p.samples_steady AND NOT p.rate_steady),
        median(i.global_batch_size / i.elapsed_s)
            FILTER (NOT p.samples_steady AND NOT p.rate_steady AND NOT p.rate_later)
    ) AS samples_per_s,
    coalesce(
        median(i.tflops_reported) FILTER (NOT i.warmup),
        median(i.tflops_reported) FILTER (NOT p.tflops_steady)
    ) AS tflops_reported,
    arg_max(i.lm_loss, i.line_no) FILTER (i.lm_loss IS NOT NULL) AS final_loss,
    sum(coalesce(i.skipped, 0)) AS skipped_iterations,
    sum(coalesce(i.nan, 0)) AS nan_iterations
FROM iteration_phase i
JOIN present p ON p.run_id = i.run_id
GROUP BY i.run_id;
