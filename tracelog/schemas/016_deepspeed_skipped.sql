-- tracelog schema, version 16: a run's skipped iterations are DeepSpeed's own count where it is larger.
--
-- DeepSpeed's step line (`[Rank 0] step=200, skipped=4, lr=[...]`) carries the running count of the steps
-- its optimizer skipped since training began, kept as the metric `skipped steps before this line (running
-- count)` (tracelog/parsers/base.py `SKIPPED_RUNNING`). Megatron-DeepSpeed's own `number of skipped
-- iterations` can say 0 on every line where DeepSpeed skipped (argonne-lcf's Megatron-DeepSpeed: 4 by step
-- 200), and a log that starts late holds none of the skips before it: `skipped_iterations` is the larger
-- of the lines' sum and the highest running count. Otherwise `run_summary` is as schema 002 made it.
CREATE OR REPLACE VIEW run_summary AS
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
    CAST(greatest(s.skipped_iterations, ds.skipped_running) AS BIGINT) AS skipped_iterations,
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
) mem USING (run_id)
LEFT JOIN (
    SELECT run_id, CAST(max(value) AS BIGINT) AS skipped_running
    FROM iteration_metrics WHERE key = 'skipped steps before this line (running count)' GROUP BY run_id
) ds USING (run_id);
