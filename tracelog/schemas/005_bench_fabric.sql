-- The network between the nodes of a benchmark, a catalog link id (`--fabric` at ingest or `tracelog set
-- bench:ID --fabric`). NULL: one node, or not named (the model then assumes the GPU's reference fabric and
-- says so).
ALTER TABLE benches ADD COLUMN IF NOT EXISTS fabric VARCHAR;
