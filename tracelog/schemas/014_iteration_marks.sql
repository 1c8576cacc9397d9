-- tracelog schema, version 14: `iteration_marks`, every logged line with its warm-up mark, and no line count.
--
-- `iteration_phase` numbers each line of its run (`n`, a row_number window over the run), and DuckDB
-- computes that window even for a query that never reads `n`: three to four times the cost of the marks
-- alone (0.18-0.26 s against 0.06 s for a median over a run of 439,000 lines). The flag rules and the
-- model's inputs read these marks at every refresh, several times over; they read `iteration_marks`.
-- `iteration_phase` keeps its columns, in their order, for users' queries and the report's sampling.
CREATE OR REPLACE VIEW iteration_marks AS
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
    p.logged,
    p.first_clean_line,
    (i.line_no <= c.last_warmup_line OR coalesce(i.line_no < p.first_clean_line, false)) AS warmup
FROM iterations i
JOIN per_run p ON p.run_id = i.run_id
JOIN cutoff c ON c.run_id = i.run_id;

CREATE OR REPLACE VIEW iteration_phase AS
SELECT * EXCLUDE (logged, first_clean_line, warmup),
       row_number() OVER (PARTITION BY run_id ORDER BY line_no) AS n,
       logged, first_clean_line, warmup
FROM iteration_marks;
