-- tracelog schema, version 1: sources, training runs and their rows, benchmarks and their rows,
-- unparsed lines and events, and the model's outputs. Units are in the column names.

CREATE SEQUENCE IF NOT EXISTS source_ids START 1;
CREATE SEQUENCE IF NOT EXISTS run_ids START 1;
CREATE SEQUENCE IF NOT EXISTS bench_ids START 1;
CREATE SEQUENCE IF NOT EXISTS flag_ids START 1;

CREATE TABLE sources (
    source_id      INTEGER PRIMARY KEY DEFAULT nextval('source_ids'),
    path           VARCHAR NOT NULL,      -- as given on the command line ('-' for stdin)
    sha256         VARCHAR NOT NULL,      -- of the bytes ingested so far
    bytes          BIGINT NOT NULL,
    format         VARCHAR NOT NULL,
    parser_version VARCHAR NOT NULL,
    ingested_at    TIMESTAMP NOT NULL DEFAULT current_timestamp,
    lines_total    BIGINT NOT NULL,
    lines_parsed   BIGINT NOT NULL,
    lines_unparsed BIGINT NOT NULL
);

CREATE TABLE runs (
    run_id          INTEGER PRIMARY KEY DEFAULT nextval('run_ids'),
    source_id       INTEGER NOT NULL,
    run_key         INTEGER NOT NULL,     -- position of the run within its source (0, 1, ... on restarts)
    name            VARCHAR,
    framework       VARCHAR,              -- megatron, megatron-deepspeed, deepspeed, table
    status          VARCHAR,              -- e.g. OOM for a lab-note row that did not fit
    notes           VARCHAR,
    nodes           INTEGER,
    gpus            INTEGER,
    gpus_per_node   INTEGER,
    tp              INTEGER,
    pp              INTEGER,
    dp              INTEGER,
    cp              INTEGER,
    vp              INTEGER,              -- virtual pipeline chunks (interleaved schedule)
    sequence_parallel BOOLEAN,
    mbs             INTEGER,
    gbs             INTEGER,
    seq_len         INTEGER,
    layers          INTEGER,
    hidden          INTEGER,
    heads           INTEGER,
    query_groups    INTEGER,
    ffn_hidden      INTEGER,
    vocab           INTEGER,
    params          BIGINT,               -- total parameters, as printed or summed over model-parallel ranks
    precision       VARCHAR,              -- fp32, fp16, bf16, fp8
    zero_stage      INTEGER,
    recompute       VARCHAR,              -- none, selective, full
    swiglu          BOOLEAN,
    train_iters     BIGINT,
    gpu_model       VARCHAR,              -- hardware catalog id, e.g. a100-sxm4-80gb
    fabric          VARCHAR,              -- catalog link id of the inter-node fabric
    tflops_formula  VARCHAR,              -- which formula produced the log's own TFLOPs figure
    line_start      BIGINT,
    line_end        BIGINT
);

CREATE TABLE run_tags (
    run_id INTEGER NOT NULL,
    key    VARCHAR NOT NULL,
    value  VARCHAR,
    PRIMARY KEY (run_id, key)
);

-- Every `name ..... value` line of an arguments block, and other configuration echoes, verbatim.
CREATE TABLE run_params (
    run_id  INTEGER NOT NULL,
    name    VARCHAR NOT NULL,
    value   VARCHAR,
    line_no BIGINT
);

CREATE TABLE iterations (
    run_id            INTEGER NOT NULL,
    iteration         BIGINT NOT NULL,
    train_iters       BIGINT,
    rank              INTEGER,
    consumed_samples  BIGINT,
    consumed_tokens   BIGINT,
    elapsed_s         DOUBLE,             -- seconds per iteration, averaged over the log interval
    learning_rate     DOUBLE,
    global_batch_size BIGINT,
    lm_loss           DOUBLE,
    loss_scale        DOUBLE,
    grad_norm         DOUBLE,
    num_zeros         DOUBLE,
    skipped           BIGINT,             -- skipped iterations in the log interval
    nan               BIGINT,             -- NaN iterations in the log interval
    samples_per_s     DOUBLE,
    tflops_reported   DOUBLE,             -- the log's own TFLOP/s per GPU
    ts                TIMESTAMP,
    line_no           BIGINT NOT NULL
);

-- Any other `key: value` pair of an iteration line (other losses, fork-specific fields).
CREATE TABLE iteration_metrics (
    run_id    INTEGER NOT NULL,
    iteration BIGINT,
    key       VARCHAR NOT NULL,
    value     DOUBLE,
    text      VARCHAR,
    line_no   BIGINT NOT NULL
);

CREATE TABLE memory (
    run_id            INTEGER NOT NULL,
    rank              INTEGER,
    iteration         BIGINT,
    allocated_mib     DOUBLE,
    max_allocated_mib DOUBLE,
    reserved_mib      DOUBLE,
    max_reserved_mib  DOUBLE,
    line_no           BIGINT NOT NULL
);

CREATE TABLE timers (
    run_id      INTEGER NOT NULL,
    rank        INTEGER,
    iteration   BIGINT,
    name        VARCHAR NOT NULL,
    time_ms     DOUBLE,                   -- the value, or the max across ranks where min/max is printed
    time_min_ms DOUBLE,
    line_no     BIGINT NOT NULL
);

CREATE TABLE benches (
    bench_id       INTEGER PRIMARY KEY DEFAULT nextval('bench_ids'),
    source_id      INTEGER NOT NULL,
    bench_key      INTEGER NOT NULL,
    tool           VARCHAR NOT NULL,      -- nccl-tests, p2pBandwidthLatencyTest, nvidia-smi-topo, all_reduce_bench
    collective     VARCHAR,
    ranks          INTEGER,
    nodes          INTEGER,
    gpus_per_node  INTEGER,
    gpu_name       VARCHAR,               -- as printed
    gpu_model      VARCHAR,               -- catalog id
    dtype          VARCHAR,
    redop          VARCHAR,
    hosts          VARCHAR[],
    status         VARCHAR,               -- complete, partial, failed, data_error
    avg_busbw_gbps DOUBLE,                -- as printed by the tool
    wrong_total    BIGINT,
    out_of_bounds  BIGINT,
    line_start     BIGINT,
    line_end       BIGINT
);

CREATE TABLE bench_params (
    bench_id INTEGER NOT NULL,
    name     VARCHAR NOT NULL,
    value    VARCHAR,
    line_no  BIGINT
);

CREATE TABLE bench_devices (
    bench_id INTEGER NOT NULL,
    rank     INTEGER,
    device   INTEGER,
    host     VARCHAR,
    pid      INTEGER,
    bus_id   VARCHAR,
    gpu_name VARCHAR,
    line_no  BIGINT
);

CREATE TABLE collectives (
    bench_id    INTEGER NOT NULL,
    size_bytes  BIGINT NOT NULL,
    count       BIGINT,
    type        VARCHAR,
    redop       VARCHAR,
    root        INTEGER,
    placement   VARCHAR NOT NULL,         -- out-of-place, in-place
    time_us     DOUBLE,
    algbw_gbps  DOUBLE,
    busbw_gbps  DOUBLE,
    wrong       BIGINT,                   -- NULL where the tool printed N/A
    line_no     BIGINT NOT NULL
);

CREATE TABLE p2p (
    bench_id INTEGER NOT NULL,
    matrix   VARCHAR NOT NULL,            -- e.g. bandwidth_uni_p2p_on, latency_gpu_p2p_off
    src      INTEGER NOT NULL,
    dst      INTEGER NOT NULL,
    value    DOUBLE,
    unit     VARCHAR NOT NULL,            -- GB/s or us
    line_no  BIGINT NOT NULL
);

CREATE TABLE links (
    bench_id   INTEGER NOT NULL,
    host       VARCHAR,
    a          VARCHAR NOT NULL,          -- GPU0, NIC1, ...
    b          VARCHAR NOT NULL,
    link_kind  VARCHAR NOT NULL,          -- X, NV12, PIX, PXB, PHB, NODE, SYS
    link_count INTEGER,                   -- NVLink count for NV#
    line_no    BIGINT NOT NULL
);

CREATE TABLE unparsed (
    source_id INTEGER NOT NULL,
    line_no   BIGINT NOT NULL,
    text      VARCHAR
);

-- Lines worth surfacing that are not rows: warnings, errors, tracebacks, tool verdicts.
CREATE TABLE events (
    source_id INTEGER NOT NULL,
    run_id    INTEGER,
    bench_id  INTEGER,
    line_no   BIGINT NOT NULL,
    kind      VARCHAR NOT NULL,           -- warning, error, traceback, nccl_warn, ...
    text      VARCHAR
);

CREATE TABLE predictions (
    subject_kind VARCHAR NOT NULL,        -- run, bench, collective, p2p
    subject_id   INTEGER NOT NULL,
    metric       VARCHAR NOT NULL,
    value        DOUBLE,
    unit         VARCHAR,
    formula      VARCHAR,
    detail       VARCHAR,
    computed_at  TIMESTAMP DEFAULT current_timestamp
);

CREATE TABLE comparisons (
    subject_kind VARCHAR NOT NULL,
    subject_id   INTEGER NOT NULL,
    metric       VARCHAR NOT NULL,
    measured     DOUBLE,
    predicted    DOUBLE,
    ratio        DOUBLE,
    unit         VARCHAR
);

CREATE TABLE flags (
    flag_id      INTEGER PRIMARY KEY DEFAULT nextval('flag_ids'),
    rule         VARCHAR NOT NULL,
    severity     VARCHAR NOT NULL,        -- critical, warning, info
    subject_kind VARCHAR NOT NULL,
    subject_id   INTEGER NOT NULL,
    row_ref      VARCHAR,
    measured     DOUBLE,
    expected     DOUBLE,
    ratio        DOUBLE,
    message      VARCHAR NOT NULL,
    hint         VARCHAR
);
