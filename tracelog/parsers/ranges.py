"""What a number may be in each column the parsers fill: the ranges `base.checked` holds every value to.

Kept apart from the checks so that the lists read as a table, and so that tests can hold them against
the schema.
"""

from __future__ import annotations

# Range checks of every numeric value a parser hands out (`checked`). Column types follow
# schemas/001_init.sql: these columns are INTEGER (32-bit), every other integer column BIGINT; a test holds
# the list against the schema.
INT32_COLUMNS = frozenset(
    [
        "rank",
        "device",
        "comm_group",
        "pid",
        "src",
        "dst",
        "root",
        "nodes",
        "gpus",
        "gpus_per_node",
        "nics_per_node",  # set by hardware resolution, bounded here should a parser ever read it
        "tp",
        "pp",
        "dp",
        "cp",
        "vp",
        "mbs",
        "gbs",
        "seq_len",
        "layers",
        "hidden",
        "heads",
        "query_groups",
        "ffn_hidden",
        "vocab",
        "zero_stage",
        "ranks",
        "link_count",
        "run_key",
        "bench_key",
    ]
)
INT_LIMITS = {True: (1 << 31) - 1, False: (1 << 63) - 1}
# BIGINT columns a parser may hand out as floats (a number read from text as a float): past 2^63 their
# insert fails, so they are range-checked as integers too. The test of INT32_COLUMNS holds this against
# the schema as well.
INT64_COLUMNS = frozenset(
    [
        "iteration",
        "train_iters",
        "consumed_samples",
        "consumed_tokens",
        "global_batch_size",
        "skipped",
        "nan",
        "params",
        "size_bytes",
        "count",
        "process",
        "wrong",
        "wrong_total",
        "out_of_bounds",
        "i_skipped",
        "line_no",
        "line_start",
        "line_end",
        "iters",
    ]
)
# Floats whose NaN or inf is what the log said (a diverged loss, an overflowed gradient norm): kept.
NAN_MEANINGFUL = frozenset({"lm_loss", "grad_norm", "num_zeros", "value@iteration_metrics", "loss_scale"})
# Floats that may be negative (a metric of the user's own); every other number a parser reads is a size,
# count, duration, rate or index, where a negative value is a misprint.
SIGNED = frozenset({"value@iteration_metrics", "lm_loss", "loss_scale"})  # -1: Megatron-DeepSpeed under bf16
# Columns without which a row is no row: a bad value there drops the row (the event keeps its text).
KEYS = frozenset({"iteration", "size_bytes", "src", "dst", "line_no", "run_key", "bench_key"})
# No link moves a petabyte per second: 1e6 GB/s is over 500x NVLink 5's 1.8 TB/s per GPU (NVIDIA
# Blackwell datasheet), the fastest link in hardware.toml. Bandwidths above it are misprints.
MAX_BANDWIDTH_GBPS = 1e6
BANDWIDTH = frozenset(
    {"algbw_gbps", "busbw_gbps", "avg_busbw_gbps", "value@p2p", "bw_peak_gbps", "bw_avg_gbps"}
)
