-- tracelog schema, version 10: what current nccl-tests prints beyond the classic table (src/util.cu).
-- `collectives` gains the -I 1 summary columns (i_min i_max i_p99 i_cv%, and from -J JSON also p50, p95,
-- mean and standard deviation), the -S 1 timestamp, and `cpu_time_us` for -C 1, where the time column is
-- host wall time per iteration and `time_us` (CUDA time) stays NULL. `bench_devices.comm_group` is the
-- `Group` of a rank: NCCL_TESTS_SPLIT runs one communicator per group in one output.
-- `collective_iterations` holds the -J JSON per-iteration times: `process` NULL is the max over every
-- process (`times_us`), otherwise the row of `per_process_max_times_us` (max over that process's GPUs).
-- IF NOT EXISTS: applying it twice (a version row lost) changes nothing.
ALTER TABLE collectives ADD COLUMN IF NOT EXISTS cpu_time_us DOUBLE;
ALTER TABLE collectives ADD COLUMN IF NOT EXISTS i_min_us DOUBLE;
ALTER TABLE collectives ADD COLUMN IF NOT EXISTS i_max_us DOUBLE;
ALTER TABLE collectives ADD COLUMN IF NOT EXISTS i_p50_us DOUBLE;
ALTER TABLE collectives ADD COLUMN IF NOT EXISTS i_p95_us DOUBLE;
ALTER TABLE collectives ADD COLUMN IF NOT EXISTS i_p99_us DOUBLE;
ALTER TABLE collectives ADD COLUMN IF NOT EXISTS i_avg_us DOUBLE;
ALTER TABLE collectives ADD COLUMN IF NOT EXISTS i_stdev_us DOUBLE;
ALTER TABLE collectives ADD COLUMN IF NOT EXISTS i_cv_pct DOUBLE;
ALTER TABLE collectives ADD COLUMN IF NOT EXISTS i_skipped BIGINT;
ALTER TABLE collectives ADD COLUMN IF NOT EXISTS printed_at TIMESTAMP;
ALTER TABLE bench_devices ADD COLUMN IF NOT EXISTS comm_group INTEGER;

CREATE TABLE IF NOT EXISTS collective_iterations (
    bench_id   INTEGER NOT NULL,
    size_bytes BIGINT NOT NULL,
    type       VARCHAR,
    redop      VARCHAR,
    root       INTEGER,
    placement  VARCHAR NOT NULL,          -- out-of-place, in-place
    process    BIGINT,                    -- NULL: the max over every process
    host       VARCHAR,                   -- the host of the process's first rank, from config.devices
    iteration  BIGINT NOT NULL,           -- 0-based, as the tool's arrays
    time_us    DOUBLE
);
