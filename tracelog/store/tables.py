"""Table names the rest of the package shares, and the one query that lists flags.

Rows hang off a run or a bench by id, and the model's outputs hang off a subject (`subject_kind`,
`subject_id`); removing a run, a bench or a whole source walks these lists, so a new child table is
added here once.
"""

from __future__ import annotations

DERIVED_RUN_TABLES = (
    "loss_spikes",
    "run_progress",
    "run_steady_cache",
    "iteration_buckets",
    "iteration_values",
    "iteration_value_sums",
    "flat_loss_stretches",
)
"""What a refresh keeps about a run between refreshes (see `analysis.loss_spikes`, the steady-state
medians of schema 013, `analysis.run_buckets` and `analysis.flat_stretches`): dropped with the run, and
when a merge changes its rows."""
RUN_CHILD_TABLES = (
    "iterations",
    "iteration_metrics",
    "memory",
    "timers",
    "run_params",
    "run_tags",
    "run_hardware",
    *DERIVED_RUN_TABLES,
)
BENCH_CHILD_TABLES = (
    "collectives",
    "collective_iterations",
    "perftest",
    "p2p",
    "links",
    "bench_params",
    "bench_devices",
    "bench_hardware",
)
MODEL_OUTPUT_TABLES = ("predictions", "comparisons", "flags")
SOURCE_CHILD_TABLES = ("runs", "benches", "unparsed", "events", "sources")
SEVERITIES = ("critical", "warning", "info")
BENCH_SUBJECT_KINDS = ("bench", "collective", "p2p", "links")

HARDWARE_SQL = """
SELECT fact, value, source, detail FROM {table} WHERE {id_col} = {id}
ORDER BY list_position(['gpu_model', 'gpus_per_node', 'fabric', 'nics_per_node'], fact)
"""
"""Where each hardware fact of a run or bench came from (see `tracelog.resolve`)."""
