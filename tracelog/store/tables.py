"""Table names the rest of the package shares, and the one query that lists flags.

Rows hang off a run or a bench by id, and the model's outputs hang off a subject (`subject_kind`,
`subject_id`); removing a run, a bench or a whole source walks these lists, so a new child table is
added here once.
"""

from __future__ import annotations

RUN_CHILD_TABLES = ("iterations", "iteration_metrics", "memory", "timers", "run_params", "run_tags")
BENCH_CHILD_TABLES = (
    "collectives",
    "collective_iterations",
    "p2p",
    "links",
    "bench_params",
    "bench_devices",
)
MODEL_OUTPUT_TABLES = ("predictions", "comparisons", "flags")
SOURCE_CHILD_TABLES = ("runs", "benches", "unparsed", "events", "sources")
SEVERITIES = ("critical", "warning", "info")
BENCH_SUBJECT_KINDS = ("bench", "collective", "p2p", "links")
