-- tracelog schema, version 17: each run's logged lines summed up per bucket of line numbers, kept between
-- refreshes, so that the refresh after a log grew reads its new lines and the state, not the whole run.
--
-- A bucket is the lines of a run whose line_no // 65536 is the same (16384 since schema 019;
-- tracelog/analysis/run_buckets.py, `BUCKET_LINES`). `iteration_buckets` holds one row per bucket with the aggregates the steady-state
-- medians, the model's inputs and the health rules add up (counts, sums, first and last lines, ...);
-- `iteration_values` the bucket's lines counted per combination of the figures whose medians are taken
-- (sec/it, samples/s, global batch, TFLOP/s: printed figures take few distinct values), which gives an
-- exact median over any range of lines. A range that cuts a bucket (the warm-up cut, the drift rule's
-- fifths) reads that bucket's own lines. `iteration_value_sums` holds those counts over all the buckets
-- before a few of them (where the last refresh's ranges began and ended), so that a range's counts are
-- those of the nearest such sum and of the buckets between, not of every bucket it spans
-- (tracelog/analysis/run_values.py).
--
-- `run_progress` (rule 'buckets') says up to which line a run's buckets are summed: a refresh sums again
-- the bucket of its last line and those after it; a row rewritten below it moves it back
-- (`store.progress.rewind`), a merge or a parse from the first byte drops a run's buckets with the rest of
-- what a refresh keeps.
--
-- `flat_loss_stretches`: the not_learning rule's stretches of one loss printed on consecutive lines, long
-- enough for its threshold, kept as `loss_spikes` keeps spikes (rule 'flat_loss' in `run_progress`).
-- IF NOT EXISTS: applying it twice (a version row lost) changes nothing.
CREATE TABLE IF NOT EXISTS iteration_buckets (
    run_id           INTEGER NOT NULL,
    bucket           BIGINT NOT NULL,    -- line_no // BUCKET_LINES
    no_scaler        BOOLEAN,            -- the run's precision said bf16 or fp32 when summed (NaN lines read by it)
    lines            BIGINT NOT NULL,
    first_line       BIGINT,
    last_line        BIGINT,
    clean_line       BIGINT,             -- the first line neither skipped nor NaN
    first_iteration  BIGINT,
    last_iteration   BIGINT,
    loss_line        BIGINT,             -- the last line with a loss, and that loss
    final_loss       DOUBLE,
    losses           BIGINT,
    skipped          BIGINT,
    nan              BIGINT,
    first_elapsed    INTEGER,            -- 1 where the bucket's first line has sec/it, else 0
    first_rate       INTEGER,            -- the same for global batch / sec/it
    first_skip       BIGINT,             -- the first iteration and line with a skipped step
    first_skip_line  BIGINT,
    top_scale        DOUBLE,             -- the highest loss scale
    scale_top        DOUBLE,             -- over the lines with a loss scale above 0: the highest
    scale_low        DOUBLE,             -- and the lowest
    nan_lines        BIGINT,             -- NaN iterations the lines stand for (run_buckets.NAN_LINES)
    first_nan        BIGINT,
    first_nan_line   BIGINT,
    left_out         BIGINT,             -- lines without their loss (run_buckets.LOSS_LEFT_OUT)
    first_left       BIGINT,
    first_left_line  BIGINT,
    zl_lines         BIGINT,             -- lines that print a learning rate, not skipped (rules/learning.py)
    zl_first_line    BIGINT,
    zl_last_line     BIGINT,
    zl_first_it      BIGINT,
    zl_last_it       BIGINT,
    zl_zero_norms    BIGINT,
    zl_norms         BIGINT,
    zl_low           DOUBLE,
    zl_high          DOUBLE,
    zl_all_zero      BOOLEAN,
    zero_norms       BIGINT,             -- lines that updated the weights with a grad norm of 0
    drift_lines      BIGINT,             -- lines the drift rule reads (sec/it above 0, not skipped)
    elapsed_lines    BIGINT,             -- lines with sec/it, samples/s, global batch / sec/it, TFLOP/s,
    samples_lines    BIGINT,             -- and TFLOP/s x sec/it
    rate_lines       BIGINT,
    tflops_lines     BIGINT,
    tflop_lines      BIGINT
);

CREATE TABLE IF NOT EXISTS iteration_values (
    run_id            INTEGER NOT NULL,
    bucket            BIGINT NOT NULL,
    elapsed_s         DOUBLE,            -- the figures whose medians are taken, as a line prints them
    unskipped         BOOLEAN,           -- coalesce(skipped, 0) = 0
    samples_per_s     DOUBLE,
    global_batch_size BIGINT,
    tflops_reported   DOUBLE,
    lines             BIGINT NOT NULL    -- the bucket's lines that print these
);

CREATE TABLE IF NOT EXISTS iteration_value_sums (
    run_id            INTEGER NOT NULL,
    bucket            BIGINT NOT NULL,   -- the lines of the buckets before this one, counted as above
    elapsed_s         DOUBLE,
    unskipped         BOOLEAN,
    samples_per_s     DOUBLE,
    global_batch_size BIGINT,
    tflops_reported   DOUBLE,
    lines             BIGINT NOT NULL
);

CREATE TABLE IF NOT EXISTS flat_loss_stretches (
    run_id           INTEGER NOT NULL,
    lm_loss          DOUBLE NOT NULL,
    steps            BIGINT NOT NULL,    -- distinct iterations on the stretch's lines
    first_line       BIGINT NOT NULL,
    last_line        BIGINT NOT NULL,
    first_iteration  BIGINT,
    last_iteration   BIGINT
);
