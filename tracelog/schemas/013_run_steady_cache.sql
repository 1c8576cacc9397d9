-- tracelog schema, version 13: each run's steady-state medians kept as the refresh computed them, so that
-- reading them (`tracelog runs`, `show`, the report, `run_summary`) does not sort every logged line of a
-- run again: at 1.76 M iterations the medians take 2.6 s, the check below 13 ms.
--
-- A kept row stands only while it still describes the run's rows: the same count of logged lines and the
-- same last line (a grown, merged, retracted or edited run fails the check). Every other run is computed
-- from its rows alone, as 004 computes it (its `iteration_phase` marks and `run_steady` medians, here over
-- the iterations of those runs only: a filter above the medians would not keep DuckDB from computing
-- them for every run).
-- IF NOT EXISTS: applying it twice (a version row lost) changes nothing.
CREATE TABLE IF NOT EXISTS run_steady_cache (
    run_id             INTEGER NOT NULL,
    iterations_logged  BIGINT,
    last_iteration     BIGINT,
    steady_lines       BIGINT,
    sec_per_it         DOUBLE,
    samples_per_s      DOUBLE,
    tflops_reported    DOUBLE,
    final_loss         DOUBLE,
    skipped_iterations BIGINT,
    nan_iterations     BIGINT,
    last_line          BIGINT        -- the run's last logged line when it was kept
);

CREATE OR REPLACE VIEW run_steady AS
WITH live AS (
    SELECT run_id, count(*) AS logged, max(line_no) AS last_line FROM iterations GROUP BY run_id
),
kept AS (
    SELECT c.run_id, c.iterations_logged, c.last_iteration, c.steady_lines, c.sec_per_it, c.samples_per_s,
           c.tflops_reported, c.final_loss, c.skipped_iterations, c.nan_iterations
    FROM run_steady_cache c
    JOIN live l ON l.run_id = c.run_id AND l.logged = c.iterations_logged AND l.last_line = c.last_line
    QUALIFY row_number() OVER (PARTITION BY c.run_id ORDER BY c.last_line) = 1
),
base AS (
    SELECT run_id, line_no, iteration, elapsed_s, samples_per_s, global_batch_size, tflops_reported,
           lm_loss, skipped, nan
    FROM iterations
    WHERE run_id NOT IN (SELECT run_id FROM kept)
),
per_run AS (
    SELECT
        run_id,
        CAST(ceil(count(*) * 0.05) AS BIGINT) AS warmup_lines,
        min(CASE WHEN coalesce(skipped, 0) = 0 AND coalesce(nan, 0) = 0 THEN line_no END) AS first_clean_line
    FROM base
    GROUP BY run_id
),
cutoff AS (
    SELECT i.run_id, list_max(min(i.line_no, least(p.warmup_lines, 999999))) AS last_warmup_line
    FROM base i JOIN per_run p USING (run_id)
    WHERE p.warmup_lines < 1000000
    GROUP BY i.run_id
    UNION ALL
    SELECT run_id, line_no
    FROM (
        SELECT i.run_id, i.line_no, p.warmup_lines,
               row_number() OVER (PARTITION BY i.run_id ORDER BY i.line_no) AS k
        FROM base i JOIN per_run p USING (run_id)
        WHERE p.warmup_lines >= 1000000
    )
    WHERE k = warmup_lines
),
phase AS (
    SELECT i.*,
           (i.line_no <= c.last_warmup_line OR coalesce(i.line_no < p.first_clean_line, false)) AS warmup
    FROM base i
    JOIN per_run p ON p.run_id = i.run_id
    JOIN cutoff c ON c.run_id = i.run_id
),
present AS (
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
    FROM phase
    GROUP BY run_id
),
computed AS (
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
    FROM phase i
    JOIN present p ON p.run_id = i.run_id
    GROUP BY i.run_id
)
SELECT * FROM kept
UNION ALL
SELECT * FROM computed;

-- the runs already stored, kept once now (the next refresh of each keeps it again)
INSERT INTO run_steady_cache
SELECT s.*, l.last_line
FROM run_steady s
JOIN (SELECT run_id, max(line_no) AS last_line FROM iterations GROUP BY run_id) l USING (run_id)
WHERE s.run_id NOT IN (SELECT run_id FROM run_steady_cache);
