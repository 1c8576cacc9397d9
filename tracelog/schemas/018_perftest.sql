-- tracelog schema, version 18: perftest's result rows (ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw
-- and their _lat variants; tracelog/parsers/perftest.py), one per printed size.
--
-- Bandwidths in GB/s (10^9 bytes/s) whatever the tool printed: its "MB/sec" and "MiB/sec" are 2^20 bytes
-- per second (format_factor 0x100000, perftest src/perftest_parameters.c), "Gb/sec" 10^9 bits. A row is
-- one direction, except in a bidirectional run (-b; the bench param `bidirectional` = yes), where perftest
-- prints both directions summed. `report`: NULL for a run's result table, 'local' / 'remote' for the
-- per-side tables of --report-both. Latencies in microseconds as printed: half the round trip for write
-- and send, the whole round trip for read and atomic.
-- IF NOT EXISTS: applying it twice (a version row lost) changes nothing.
CREATE TABLE IF NOT EXISTS perftest (
    bench_id      INTEGER NOT NULL,
    size_bytes    BIGINT NOT NULL,        -- #bytes
    iters         BIGINT,                 -- #iterations
    report        VARCHAR,                -- NULL, local, remote
    bw_peak_gbps  DOUBLE,                 -- BW peak (0 where perftest measured none: -D, --run_infinitely)
    bw_avg_gbps   DOUBLE,                 -- BW average
    msg_rate_mpps DOUBLE,                 -- MsgRate[Mpps]
    t_min_us      DOUBLE,
    t_max_us      DOUBLE,
    t_typical_us  DOUBLE,                 -- the median
    t_avg_us      DOUBLE,
    t_stdev_us    DOUBLE,
    t_p99_us      DOUBLE,
    t_p999_us     DOUBLE,
    tps           DOUBLE,                 -- `tps average` of a latency run with -D
    line_no       BIGINT NOT NULL
);
