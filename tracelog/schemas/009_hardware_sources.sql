-- tracelog schema, version 9: where each hardware fact of a run or bench came from. Ingest resolves the
-- GPU, GPUs per node, fabric and NICs per node of every run and bench in a fixed order and keeps, per
-- fact, the source that decided: `command line` (--gpu and friends, or `tracelog set`), `log` (a line of
-- the file itself names it), `bench` (a bench ingested from the same hosts), `cluster` (a [cluster.NAME]
-- section of tracelog.toml whose host pattern or path glob matches). `detail` says which line, bench or
-- cluster. The decided value is also in the run's or bench's own column, where the model reads it.
-- IF NOT EXISTS: applying it twice (a version row lost) changes nothing.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS nics_per_node INTEGER;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS hosts VARCHAR[];      -- as the log's NCCL lines name them
ALTER TABLE benches ADD COLUMN IF NOT EXISTS nics_per_node INTEGER;

CREATE TABLE IF NOT EXISTS run_hardware (
    run_id  INTEGER NOT NULL,
    fact    VARCHAR NOT NULL,    -- gpu_model, gpus_per_node, fabric, nics_per_node
    value   VARCHAR,
    source  VARCHAR NOT NULL,    -- command line, log, bench, cluster
    detail  VARCHAR
);

CREATE TABLE IF NOT EXISTS bench_hardware (
    bench_id INTEGER NOT NULL,
    fact     VARCHAR NOT NULL,
    value    VARCHAR,
    source   VARCHAR NOT NULL,
    detail   VARCHAR
);

CREATE OR REPLACE VIEW hardware_sources AS
SELECT 'run' AS subject_kind, run_id AS subject_id, fact, value, source, detail FROM run_hardware
UNION ALL
SELECT 'bench', bench_id, fact, value, source, detail FROM bench_hardware;
