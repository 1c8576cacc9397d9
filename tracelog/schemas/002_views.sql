-- Views people query: iterations with their warm-up marked, and one summary row per run.
--
-- Warm-up: the first logged line of a run, every line in the first 5% of its logged lines, and the
-- leading lines whose interval had skipped or NaN iterations (fp16 loss-scale calibration). Steady-state
-- medians use the other lines; a run too short to have any falls back to all lines but its first, then all.

CREATE VIEW iteration_phase AS
WITH numbered AS (
    SELECT
        i.*,
        row_number() OVER (PARTITION BY run_id ORDER BY line_no) AS n,
        count(*) OVER (PARTITION BY run_id) AS logged,
        min(CASE WHEN coalesce(skipped, 0) = 0 AND coalesce(nan, 0) = 0 THEN line_no END)
            OVER (PARTITION BY run_id) AS first_clean_line
    FROM iterations i
)
SELECT
    *,
    (n = 1 OR n <= ceil(logged * 0.05) OR coalesce(line_no < first_clean_line, false)) AS warmup
FROM numbered;

CREATE VIEW run_steady AS
SELECT
    run_id,
    count(*) AS iterations_logged,
    max(iteration) AS last_iteration,
    count(*) FILTER (NOT warmup) AS steady_lines,
    coalesce(
        median(elapsed_s) FILTER (NOT warmup),
        median(elapsed_s) FILTER (n > 1),
        median(elapsed_s)
    ) AS sec_per_it,
    coalesce(
        median(samples_per_s) FILTER (NOT warmup),
        median(global_batch_size / elapsed_s) FILTER (NOT warmup),
        median(global_batch_size / elapsed_s) FILTER (n > 1),
        median(global_batch_size / elapsed_s)
    ) AS samples_per_s,
    coalesce(
        median(tflops_reported) FILTER (NOT warmup),
        median(tflops_reported)
    ) AS tflops_reported,
    arg_max(lm_loss, line_no) FILTER (lm_loss IS NOT NULL) AS final_loss,
    sum(coalesce(skipped, 0)) AS skipped_iterations,
    sum(coalesce(nan, 0)) AS nan_iterations
FROM iteration_phase
GROUP BY run_id;

CREATE VIEW run_summary AS
SELECT
    r.run_id,
    r.name,
    r.framework,
    r.gpu_model,
    r.nodes,
    r.gpus,
    r.dp,
    r.tp,
    r.pp,
    r.mbs,
    r.gbs,
    r.layers,
    r.hidden,
    r.heads,
    r.seq_len,
    r.vocab,
    r.params,
    s.iterations_logged,
    s.last_iteration,
    s.sec_per_it,
    s.samples_per_s,
    coalesce(s.tflops_reported, m.effective_tflops) AS tflops_reported,
    s.final_loss,
    s.skipped_iterations,
    s.nan_iterations,
    mem.peak_reserved_mib
FROM runs r
LEFT JOIN run_steady s USING (run_id)
LEFT JOIN (
    SELECT run_id, median(value) AS effective_tflops
    FROM iteration_metrics WHERE key = 'effective tera flops per gpu' GROUP BY run_id
) m USING (run_id)
LEFT JOIN (
    SELECT run_id, max(coalesce(max_reserved_mib, reserved_mib)) AS peak_reserved_mib FROM memory GROUP BY run_id
) mem USING (run_id);
