"""What the lines of a Megatron log hold, and how the regex path reads them.

Patterns for every era's iteration, timer and memory lines (aliases across eras share a column), the
regex readers that are the reference for every faster path, and how timer and memory lines find the
iteration they belong to.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import polars as pl
import regex

from tracelog.parsers.event_words import QUOTED
from tracelog.parsers.prefixes import RAY_PREFIX

NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?i:nan|inf))"
ITER_MARK = "elapsed time per iteration"
TIMER_MARK = "time (ms) |"
ARGS_START = regex.compile(r"-{3,}\s*arguments\s*-{3,}")
ARGS_END = "end of arguments"

# Iteration line fields: column -> (pattern with one group, dtype). Aliases across eras share a column.
ITER_FIELDS: dict[str, tuple[str, Any]] = {
    "iteration": (r"iteration\s+(\d+)\s*/", pl.Int64),
    "train_iters": (r"iteration\s+\d+\s*/\s*(\d+)", pl.Int64),
    "consumed_samples": (r"consumed samples:\s*(\d+)", pl.Int64),
    "consumed_tokens": (r"consumed tokens:\s*(\d+)", pl.Int64),
    "elapsed_raw": (r"elapsed time per iteration \(m?s\):\s*" + NUM, pl.Float64),
    "learning_rate": (r"learning rate:\s*" + NUM, pl.Float64),
    # `gloabl` as ModelLink / MindSpeed (Ascend) print it in their READMEs' sample output
    "global_batch_size": (r"gl(?:oba|oab)l batch size:\s*(\d+)", pl.Int64),
    "lm_loss": (r"lm[ _-]loss:\s*" + NUM, pl.Float64),
    "loss_scale": (r"loss scale:\s*" + NUM, pl.Float64),
    "grad_norm": (r"grad[ _-]norm:\s*" + NUM, pl.Float64),
    "num_zeros": (r"num zeros:\s*" + NUM, pl.Float64),
    "skipped": (r"number of skipped iterations:\s*(\d+)", pl.Int64),
    "nan": (r"number of nan iterations:\s*(\d+)", pl.Int64),
    "samples_per_s": (r"samples(?: per second|/sec):\s*" + NUM, pl.Float64),  # GPT-NeoX: `samples/sec:`
    "tflops_reported": (r"(?:TFLOPs|TFLOP/s/GPU\)|tflops):\s*" + NUM, pl.Float64),
}
# Keys (as printed, normalised) that the columns above already hold; every other key is kept as a metric.
KNOWN_KEYS = {
    "consumed samples",
    "consumed tokens",
    "elapsed time per iteration (ms)",
    "elapsed time per iteration (s)",
    "learning rate",
    "global batch size",
    "gloabl batch size",
    "lm loss",
    "lm-loss",
    "lm_loss",
    "loss scale",
    "grad norm",
    "grad-norm",
    "grad_norm",
    "num zeros",
    "number of skipped iterations",
    "number of nan iterations",
    "samples per second",
    "samples/sec",
    "tflops",
    "throughput per gpu (tflop/s/gpu)",
}
TIMESTAMP = r"\[(\d{4}-?\d\d-?\d\d[ T]\d\d:\d\d:\d\d)(?:[.,]\d+)?\]"
"""A line's time: `[2024-05-01 10:00:00]`, or AMD Primus's logger's `[20251202 09:12:08]`."""
RANK_PREFIX = r"^\s*(?:\[(?:rank|Rank|RANK|default)\s*(\d+)\]:?|(\d+):\s)"
"""torchrun's `[rank3]:` (`--local-ranks-filter`, PyTorch's default since 2.2) and `[default3]:` (`--tee`),
and the `3: ` of srun's `--label`."""
PRIMUS_RANK = r"^\s*\[\d{8} \d\d:\d\d:\d\d\]\[rank-(\d+)/\d+\]"
"""AMD Primus's logger (primus/core/utils/logger.py): `[20251202 09:12:08][rank-7/8][INFO ] [---trainer.py:2560] :`."""
# DeepSpeed's lines in a Megatron log that are kept as run parameters (`LINE_PARAMS`), as the two line
# filters below see them; each pattern leads with a literal, and none has a counted repetition (polars'
# regex slows to seconds on a long line with one).
DEEPSPEED_LINES = (
    r"|Creating [A-Za-z0-9_. ]*optimizer|stage=\d+ layers=\d|Reduce bucket size \d|\] +train_batch_size \.\."
    r"|MaxMemAllocated=|MnRtt/Rnk:|Max_MA "
)
# Megatron-core's StragglerDetector report (megatron/core/utils.py, README_STRAGGLER.md): the least and
# most of each rank's step time, power, temperature, utilisation, clock, data-loader time and throughput,
# each with the rank it came from (`MnRtt/Rnk: 3453.08ms/8 | MxRtt/Rnk: 3468.20ms/0 | ...`); kept as
# metrics `straggler MnRtt/Rnk`, the value in its printed unit and the text with the rank.
STRAGGLER_RX = regex.compile(r"\b(M[nx][A-Za-z]{2,6})/Rnk:\s*" + NUM + r"\s*([A-Za-z%]*)/(\d+)")
# DeepSpeed's throughput timer inside a Megatron-DeepSpeed log (runtime/utils.py ThroughputTimer): its
# memory figures at every print are the run's allocated and peak allocated memory at that global step.
DS_MEMORY_RX = regex.compile(
    r"global_step=(\d+),.*?\bMemAllocated=" + NUM + r"\s*GB,\s*MaxMemAllocated=" + NUM + r"\s*GB"
)
# Lines the Python state machine must see (rare: configuration echoes and multi-line timer blocks).
STATEFUL_RX = (
    r"using world size|number of parameters|Theoretical memory footprints|Effective Tera Flops"
    r"|times? across ranks|\.\.\.: [(\d]|     rank |padded vocab|-{3,}\s*arguments|end of arguments"
    r"|estimated model parameters:|loss at iteration \d|loss at the end of training|in billions:|mpirun|mpiexec"
    + DEEPSPEED_LINES
)

# Literals every line some classification regex matches contains: one substring scan finds the few lines
# the regexes need to see (argument blocks, configuration echoes, memory reports). A wider net costs nothing
# but a few more lines for them, so each alternative leads with a literal of a few letters: DeepSpeed's `]`
# before `train_batch_size` and the five spaces before `rank ` made the scan's literal prefilter give up
# (198 -> 108 ns a line).
SPECIAL_RX = (
    r"arguments|using world size|number of parameters|Theoretical memory footprints|Effective Tera Flops"
    r"|times? across ranks|\.\.\.: [(\d]| rank |padded vocab|estimated model parameters:|memory \([MG]B\) \|"
    r"|loss at iteration \d|loss at the end of training|in billions:|mpirun|mpiexec"
    + DEEPSPEED_LINES.replace(r"\] +train_batch_size", "train_batch_size")
)
# megatron/training/training.py `evaluate_and_print_results`: ` validation loss at iteration 100 | lm loss
# value: 8.095942E+00 | lm loss PPL: 3.281128E+03 |` (since 2024 `... on validation set |`, `... on test
# set |`); BigScience's Megatron-DeepSpeed printed `valid loss at iteration`, argonne-lcf's prints
# `lm loss value=2.697780lm loss PPL=14.846734` (no separator between the two).
VALIDATION_RX = regex.compile(r"\b(validation|valid|test) loss at iteration (\d+)([^|]{0,200})\|(.*)$")
# ... and after the training loop (`evaluate_and_print_results` with the prefix `the end of training for val
# data` / `for test data`): ` validation loss at the end of training for val data | lm loss value: 5.741563E+00
# | lm loss PPL: 3.115511E+02 |`. It names no iteration: it scores the weights the run ended with.
END_OF_TRAINING_RX = regex.compile(r"\bloss at the end of training for (\w+) data\s*\|(.*)$")
END_OF_TRAINING = "(end of training)"
VALIDATION_FIELD_RX = regex.compile(r"([A-Za-z][\w -]{0,80}?)\s+(value|PPL)\s*[:=]\s*" + NUM)


def validation_metrics(line: str) -> tuple[int | None, list[tuple[str, float, str]]] | None:
    """The iteration of a validation line and its figures as (metric key, value, text printed): `validation
    lm loss`, `validation lm loss PPL`, `test lm loss`, ...; the evaluation at the end of training has no
    iteration of its own (None) and its keys say it: `validation (end of training) lm loss`."""
    match = VALIDATION_RX.search(line)
    if match is None:
        return _end_of_training(line)
    kind = "test" if match.group(1) == "test" or "test set" in match.group(3) else "validation"
    return int(match.group(2)), _figures(kind, match.group(4))


def _end_of_training(line: str) -> tuple[None, list[tuple[str, float, str]]] | None:
    match = END_OF_TRAINING_RX.search(line)
    if match is None:
        return None
    kind = "test" if match.group(1) == "test" else "validation"
    return None, _figures(f"{kind} {END_OF_TRAINING}", match.group(2))


def _figures(kind: str, fields: str) -> list[tuple[str, float, str]]:
    figures = []
    for field in VALIDATION_FIELD_RX.finditer(fields):
        name, what, raw = field.group(1).strip(), field.group(2), field.group(3)
        key = f"{kind} {name}" + (" PPL" if what == "PPL" else "")
        figures.append((key, float(raw), raw))
    return figures


TIMESTAMP_RX = regex.compile(TIMESTAMP)
RANK_PREFIX_RX = regex.compile(RANK_PREFIX)
# The part naming the iteration, behind whatever prefix a logger put before it
# (`[2025-11-10 09:43:36,161992][I][megatron/training_log:402:training_log]  iteration  136004/ 136100`).
ITERATION_PART_RX = regex.compile(r"(?:^|[\s\]:])iteration\s+\d+\s*/")
ARG_LINE_RX = regex.compile(
    # megatron/training/arguments.py `_print_args`: `'.' * (48 - len(name))` between a name and its value,
    # so a name of 47 characters or more gets one dot or none
    # (behind Ray's worker prefix too, as SkyPilot runs a job: every line of it starts `(task, pid=N) `)
    r"^\s*(?:"
    + RAY_PREFIX
    + r")?(?:([A-Za-z_][\w.-]*)\s+\.{2,}\s?(.*?)|([a-z_][a-z0-9_]{46,}) \.? ?(\S.*?))\s*$"
)
# megatron/core/timers.py, `--timing-log-option`: minmax prints `name ....: (min, max)`, max prints
# `name ....: max` (group 2 the max, group 3 empty), all prints `times across ranks (ms):`, then per timer
# `  name:` and `     rank  N: value`.
TIMER_BLOCK_LINE_RX = regex.compile(
    r"^" + QUOTED + r"\s*(.+?)\s*\.{2,}:\s*\(?\s*" + NUM + r"(?:\s*,\s*" + NUM + r"\s*\))?\s*$"
)
TIMER_ALL_HEAD = "times across ranks (ms):"
TIMER_RANK_LITERAL = "     rank "
TIMER_NAME_RX = regex.compile(r"^" + QUOTED + r"\s{1,4}(\S[^:|]*?):\s*$")
TIMER_RANK_RX = regex.compile(r"^" + QUOTED + r"\s*rank\s+(\d+):\s*" + NUM + r"\s*$")
WORLD_RX = regex.compile(r"using world size:\s*(\d+)(.*)")
# Megatron-LM 2024-2025 printed `hierarchical context-parallel sizes: {}` with no separator after it:
# `... sizes: Nonetensor-model-parallel size: 1` (megatron/training/arguments.py); a list value ends in `]`.
WORLD_PART_RX = regex.compile(r"(?:None)?([a-z-]+?)[- ]size:\s*(\d+)")
PARAMS_RX = regex.compile(
    r"number of parameters on \(tensor, pipeline\) model parallel rank \((\d+), (\d+)\):\s*(\d+)"
)
EFFECTIVE_RX = regex.compile(
    r"Effective Tera Flops per GPU:\s*" + NUM + r"(?: and total parameters\s*" + NUM + r"\s*B)?"
)
THEORY_RX = regex.compile(
    r"Theoretical memory footprints: weight and optimizer=\s*"
    + NUM
    + r"\s*MB(?:, activation=\s*"
    + NUM
    + r"\s*MB, total=\s*"
    + NUM
    + r"\s*MB)?"
)
ESTIMATED_RX = regex.compile(r"estimated model parameters:\s*" + NUM)
# megatron/training/theoretical_memory_usage.py beside its memory footprints: its parameter counts, in
# billions to two decimals (`Total number of parameters in billions: 64.69`, `Number of parameters in most
# loaded shard in billions: 2.0794`), kept as run parameters `theoretical_params_billions_<what>`; behind a
# logger's prefix too (AMD Primus: `[...][DEBUG] [theoretical_memory_usage.py:149] : Total number ...`).
PARAMS_BILLIONS_RX = regex.compile(
    r"(?:^|[|:\]])\s*(Total number of (active )?parameters|Number of (active )?parameters in ([a-z ]{1,40}?)) "
    r"in billions:\s*" + NUM
)


def params_billions_name(match: Any) -> str:
    """`theoretical_params_billions_total`, `..._total_active`, `..._most_loaded_shard`, `..._active_transformer_block`."""
    if match.group(4):
        what = ("active_" if match.group(3) else "") + match.group(4).strip().replace(" ", "_")
    else:
        what = "total" + ("_active" if match.group(2) else "")
    return f"theoretical_params_billions_{what}"


# DeepSpeed's engine names the optimizer it wrapped the model's in (runtime/engine.py, `log_dist`):
# "Creating fp16 optimizer with dynamic loss scale", "Creating fp16 unfused optimizer ...", "Creating
# BF16 optimizer", "Creating fp16 ZeRO stage 1 optimizer"; the DeepSpeed parser keeps the same name.
OPTIMIZER_WRAPPER_RX = regex.compile(r"Creating ([A-Za-z0-9_. ]{0,80}?optimizer)")
# DeepSpeed's PipelineModule prints its partition, one `stage=N layers=M` line per stage (runtime/pipe/
# module.py `_partition_layers`): the pipeline depth of a log whose arguments block does not give it.
PIPE_STAGE_RX = regex.compile(r"^\s*stage=(\d+) layers=\d+\s*$")
# ZeRO's optimizers print their gradient bucket in elements (runtime/zero/stage_1_and_2.py, stage3.py),
# grouped by commas since DeepSpeed's config types format their integers so (`500,000,000`); the value is
# kept as printed and read by `analysis.predictions`.
REDUCE_BUCKET_RX = regex.compile(r"\bReduce bucket size (\d{1,3}(?:,\d{3})+|\d+)")
# DeepSpeed's configuration echo (runtime/config.py `print`): the global batch, for a log whose own
# arguments give only the micro-batch (Megatron v1.1.5 of DeepSpeedExamples: `batch_size`, `gas`).
DS_TRAIN_BATCH_RX = regex.compile(r"\] +train_batch_size \.{2,} *(\d+)\s*$")
LINE_PARAMS = (
    (PIPE_STAGE_RX, "deepspeed_pipe_stage"),
    (DS_TRAIN_BATCH_RX, "deepspeed_train_batch_size"),
    (REDUCE_BUCKET_RX, "reduce_bucket_size"),
    (OPTIMIZER_WRAPPER_RX, "optimizer_wrapper"),
)
"""DeepSpeed's lines inside a Megatron log that are kept as run parameters, by the name each takes."""
PADDED_RX = regex.compile(r"padded vocab \(size: (\d+)\) with (\d+) dummy tokens \(new size: (\d+)\)")
VALUE_RX = regex.compile(r"^\s*" + NUM + r"\s*(?:([A-Za-z%/]+))?\s*(?:/\s*" + NUM + r")?\s*$")
LEAD_VALUE_RX = regex.compile(r"^\s*" + NUM + r"\s*([A-Za-z%]+)?/(?:[-+.\w]+%?/)+[-+.\w]+%?\s*$")


ITER_LINE_RX = regex.compile(r"iteration(?:\s+|=\s*)\d+\s*/\s*\d+\s*\|.*elapsed[ _]time[ _]per[ _]iteration")
"""An iteration line of any era, argonne-lcf's `iteration=  1/ 635782 | ... elapsed_time_per_iteration_ms=`
spelling included: detection's mark of a Megatron log."""


ITERATION_COLUMNS = (
    "line_no",
    "iteration",
    "train_iters",
    "consumed_samples",
    "consumed_tokens",
    "learning_rate",
    "global_batch_size",
    "lm_loss",
    "loss_scale",
    "grad_norm",
    "num_zeros",
    "skipped",
    "nan",
    "samples_per_s",
    "tflops_reported",
    "ts",
    "rank",
    "elapsed_raw",
    "_ms",
    "_extra",
    "_unread",
)


ITERATION_DTYPES: dict[str, Any] = {
    **{name: dtype for name, (_, dtype) in ITER_FIELDS.items()},
    "line_no": pl.Int64,
    "ts": pl.Datetime("us"),
    "rank": pl.Int32,
    "_ms": pl.Boolean,
    "_extra": pl.Boolean,
    "_unread": pl.Boolean,
}
UNREAD_PART = r"\|[^|:]*[0-9][^|:]*\|"
"""A part with a figure and no `key:` (on a line whose every `|` is doubled): nothing reads it."""
UNREAD_ITERATION_PART = r"\|[^|:]*iteration\s+[0-9]+\s*/[^|:]*\|"
"""GPT-NeoX's `| iteration 10/ 320000 |` after its `samples/sec:` part: the iteration, read."""


def unread_parts(line: pl.Expr) -> pl.Expr:
    """Whether a line has a part holding a figure that no key names (`| 9.44 |`, `| lm loss 9.44 |` in a
    spelling no rewrite knows): the line is read only in part, and is said to be."""
    doubled = pl.concat_str([line.str.replace_all("|", "||", literal=True), pl.lit("|")])
    return doubled.str.count_matches(UNREAD_PART) > doubled.str.count_matches(UNREAD_ITERATION_PART)


def iterations_by_regex(iters: pl.DataFrame) -> pl.DataFrame:
    """Iteration lines read with one regex per key: every era and fork, whatever order the keys come in."""
    line = pl.col("line")
    cols = [
        line.str.extract(pattern, 1).cast(dtype, strict=False).alias(name)
        for name, (pattern, dtype) in ITER_FIELDS.items()
    ]
    known_fields = [
        pl.col(name).is_not_null().cast(pl.Int32)
        for name in ITER_FIELDS
        if name not in ("iteration", "train_iters")
    ]
    rows = iters.select(
        "line_no",
        *cols,
        line.str.contains(r"elapsed time per iteration \(ms\)").alias("_ms"),
        unread_parts(line).alias("_unread"),
        line.str.extract(TIMESTAMP, 1)
        .str.replace("T", " ")
        .str.replace(r"^(\d{4})(\d\d)(\d\d) ", "${1}-${2}-${3} ")
        .str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False)
        .alias("ts"),
        pl.coalesce(
            line.str.extract(RANK_PREFIX, 1),
            line.str.extract(RANK_PREFIX, 2),
            line.str.extract(PRIMUS_RANK, 1),
        )
        .cast(pl.Int32, strict=False)
        .alias("rank"),
        (line.str.count_matches(r"[^\s|]:\s") - line.str.contains(RANK_PREFIX).cast(pl.UInt32)).alias(
            "_fields"
        ),
    )
    rows = rows.with_columns(
        (pl.col("_fields").cast(pl.Int32) > pl.sum_horizontal(known_fields)).alias("_extra"),
    )
    return rows.filter(pl.col("iteration").is_not_null()).select(ITERATION_COLUMNS)


def split_fields(line: str) -> list[tuple[str, str]]:
    """`key: value` pairs of a `|`-separated log line, in order, keys stripped of prefixes."""
    pairs = []
    for raw_part in line.split("|"):
        part = RANK_PREFIX_RX.sub("", TIMESTAMP_RX.sub("", raw_part))
        if ":" not in part or ITERATION_PART_RX.search(part):
            continue
        key, _, raw = part.partition(": ") if ": " in part else part.partition(":")
        key = key.strip()
        if key:
            pairs.append((key, raw.strip()))
    return pairs


def parse_value(raw: str) -> tuple[float | None, str | None, float | None]:
    """A number, its unit (`153.81GB`) and the average of a `current/average` pair, where printed."""
    match = VALUE_RX.match(raw)
    if not match:
        # a run of slash-separated figures (Primus's `153.81GB/102.17GB/255.98GB/60.09%`): the first
        lead = LEAD_VALUE_RX.match(raw)
        return (float(lead.group(1)), lead.group(2), None) if lead else (None, None, None)
    value = float(match.group(1))
    average = float(match.group(3)) if match.group(3) else None
    return value, match.group(2), average


def iteration_anchors(iteration_rows: pl.DataFrame | None, last_iteration: dict[int, int]) -> pl.DataFrame:
    """(run_key, line_no, iteration) to attach timers and memory lines to the iteration before them."""
    seed = pl.DataFrame(
        {
            "run_key": list(last_iteration),
            "line_no": [0] * len(last_iteration),
            "iteration": list(last_iteration.values()),
        },
        schema={"run_key": pl.Int32, "line_no": pl.Int64, "iteration": pl.Int64},
    )
    if iteration_rows is None:
        return seed
    now = iteration_rows.select(pl.col("run_key").cast(pl.Int32), "line_no", "iteration")
    return pl.concat([seed, now]).sort("line_no")


def attach_iteration(rows: pl.DataFrame, anchors: pl.DataFrame) -> pl.DataFrame:
    rows = rows.with_columns(pl.col("run_key").cast(pl.Int32)).sort("line_no")
    return rows.join_asof(anchors, on="line_no", by="run_key", strategy="backward", check_sortedness=False)


# DeepSpeed's logger (`[logging.py:96:log_dist] [Rank 0] ...`) and its step line, in Megatron-DeepSpeed logs.
DS_LOGGER = "log_dist]"
DS_STEP_RX = r"\bstep=(\d+), skipped=\d+"


def deepspeed_timer_steps(rows: pl.DataFrame, timers: pl.DataFrame, plain: pl.DataFrame) -> pl.DataFrame:
    """Megatron-DeepSpeed: the DeepSpeed engine prints its timers (`wall_clock_breakdown`) inside the
    step, before Megatron's iteration line of that step, so the iteration line before them is the
    previous step's. Their step is counted from DeepSpeed's `step=N` lines: the ZeRO optimizer's timers
    (`optimizer_allgather`, ...) are printed by its step() at every step, the last of them just before
    `step=N`; the engine's own (`fwd_microstep`, `fwd`, ...) just after it (DeepSpeed's
    runtime/zero/stage_1_and_2.py and runtime/engine.py). So a line of the optimizer's is step N less the
    lines of its kind between it and `step=N`, one of the engine's step N plus those between `step=N` and
    it; with `steps_per_print` 1 both are N. The engine's `_microstep` timers print at every micro-step,
    so with more than two gradient-accumulation steps their count runs ahead of the steps (left as
    counted: the log does not say which micro-step a line is). Where this block holds no such line (the
    line in the next block), they keep the iteration before them."""
    line = pl.col("line")
    ds = timers.filter(line.str.contains(DS_LOGGER, literal=True))
    if ds.is_empty():
        return rows
    steps = plain.filter(line.str.contains(DS_LOGGER, literal=True) & line.str.contains(DS_STEP_RX)).select(
        pl.col("run_key").cast(pl.Int32),
        "line_no",
        pl.col("line_no").alias("_step_line"),
        line.str.extract(DS_STEP_RX, 1).cast(pl.Int64, strict=False).alias("_step"),
    )
    if steps.is_empty():
        return rows
    ds = ds.select(
        pl.col("run_key").cast(pl.Int32),
        "line_no",
        line.str.extract(r"time \(ms\) \|\s*([^:|]+?)\s*:", 1).alias("_lead"),
    ).sort("line_no")
    before_step = pl.col("_lead").str.starts_with("optimizer_")
    found = []
    directions: tuple[tuple[bool, Literal["forward", "backward"]], ...] = (
        (True, "forward"),
        (False, "backward"),
    )
    for before, strategy in directions:
        part = ds.filter(before_step == before)
        if part.is_empty():
            continue
        joined = part.join_asof(steps, on="line_no", by="run_key", strategy=strategy, check_sortedness=False)
        between = (
            pl.col("line_no")
            .rank("ordinal", descending=before)
            .over("run_key", "_step_line", "_lead")
            .cast(pl.Int64)
            - 1
        )
        found.append(
            joined.select("line_no", (pl.col("_step") + (-between if before else between)).alias("_it"))
        )
    fixed = pl.concat(found)
    return (
        rows.join(fixed, on="line_no", how="left")
        .with_columns(pl.coalesce("_it", "iteration").alias("iteration"))
        .drop("_it")
    )


def timers_by_regex(timers: pl.DataFrame, anchors: pl.DataFrame) -> pl.DataFrame:
    parts = (
        timers.select("line_no", "run_key", pl.col("line").str.split("|").list.slice(1).alias("part"))
        .explode("part")
        .with_columns(
            pl.col("part").str.extract(r"^\s*(.+?)\s*:\s*\S", 1).alias("name"),
            pl.col("part").str.extract(r":\s*" + NUM, 1).cast(pl.Float64, strict=False).alias("time_ms"),
            pl.col("part")
            .str.extract(r":\s*\(?\s*" + NUM + r"\s*,\s*" + NUM, 1)
            .cast(pl.Float64, strict=False)
            .alias("_min"),
            pl.col("part")
            .str.extract(r":\s*\(?\s*" + NUM + r"\s*,\s*" + NUM, 2)
            .cast(pl.Float64, strict=False)
            .alias("_max"),
        )
        .filter(pl.col("name").is_not_null())
        .with_columns(
            pl.coalesce("_max", "time_ms").alias("time_ms"),
            pl.col("_min").alias("time_min_ms"),
        )
        .drop("part", "_min", "_max")
    )
    return attach_iteration(parts, anchors)


def per_thousand(values: pl.Series) -> pl.Series:
    """Milliseconds as seconds, rounded to the nanosecond: 3415.3 ms is 3.4153 s, not the
    3.4153000000000002 a plain division leaves."""
    return pl.Series(np.round(values.to_numpy() / 1000.0, 9)).zip_with(values.is_not_null(), values)


def generic_metrics(iters: pl.DataFrame, extra: pl.DataFrame) -> list[dict[str, Any]]:
    """Every key of an iteration line that has no column of its own, kept as a metric."""
    lines = dict(
        iters.filter(pl.col("line_no").is_in(extra["line_no"].implode()))
        .select("line_no", "line")
        .iter_rows()
    )
    out = []
    for line_no, run_key, iteration in extra.select("line_no", "run_key", "iteration").iter_rows():
        for key, raw in split_fields(lines[line_no]):
            norm = key.lower()
            if norm in KNOWN_KEYS or norm.startswith("iteration") or "tflop" in norm:
                continue
            value, _unit, average = parse_value(raw)
            out.append(
                {
                    "run_key": run_key,
                    "iteration": iteration,
                    "key": key,
                    "value": value,
                    "text": raw,
                    "line_no": line_no,
                }
            )
            if average is not None:
                out.append(
                    {
                        "run_key": run_key,
                        "iteration": iteration,
                        "key": f"{key} (average)",
                        "value": average,
                        "text": raw,
                        "line_no": line_no,
                    }
                )
    return out
