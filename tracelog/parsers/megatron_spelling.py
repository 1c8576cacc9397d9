"""Iteration lines of Megatron's forks and early releases read as the classic line they stand for.

Megatron's iteration line is `| key: value |` pairs; some writers spell the same figures otherwise, and
their lines are rewritten into the classic spelling before any path reads them (`as_classic`), so one set
of patterns (`megatron_lines.ITER_FIELDS`) and the fast path's layouts serve them all.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import polars as pl

from tracelog.parsers.base import PARTLY_READ_EVENT, Batch
from tracelog.parsers.megatron_lines import NUM

# argonne-lcf/Megatron-DeepSpeed (megatron/training_log.py, 2024 on) prints its iteration line as
# `key=value` pairs with Python names (`iteration=  136004/  136100 | ... | elapsed_time_per_iteration_ms=3415.3
# | ... | lm loss=12.316531 | ... | TFLOPs=53.66 |`); those lines are read as the classic line they stand
# for. Its `[LM]TFLOPs` is Megatron's own count (the classic line's TFLOPs); `[DS]TFLOPs`, the flops
# profiler's count of the same step, is not kept (as no other TFLOP figure of a line beside the first).
KEY_VALUE_MARK = "elapsed_time_per_iteration_ms="
KEY_VALUE_NAMES = {
    "iteration=": "iteration ",
    "consumed_samples=": "consumed samples: ",
    "consumed_tokens=": "consumed tokens: ",
    KEY_VALUE_MARK: "elapsed time per iteration (ms):",
    "learning_rate=": "learning rate: ",
    "global_batch_size=": "global batch size: ",
    "loss_scale=": "loss scale: ",
    "grad_norm=": "grad norm: ",
    "num_zeros=": "num zeros: ",
    "params_norm=": "params norm: ",
    "number_of_skipped_iterations=": "number of skipped iterations: ",
    "number_of_nan_iterations=": "number of nan iterations: ",
    "samples_per_second=": "samples per second: ",
    "[LM]TFLOPs=": "TFLOPs: ",
    "[DS]TFLOPs=": "DeepSpeed TFLOP/s: ",
    "TFLOPs=": "TFLOPs: ",
}


def key_value_as_classic(line: pl.Expr) -> pl.Expr:
    """A `key=value` iteration line in the classic `key: value` spelling; every other key (the losses,
    `actual_seqlen`) keeps its name with `=` made `:`."""
    named = line.str.replace_many(list(KEY_VALUE_NAMES), list(KEY_VALUE_NAMES.values()))
    return named.str.replace_all(r"(\|\s*)([A-Za-z][^|=:]{0,80}?)=", "${1}${2}: ")


# GPT-NeoX (megatron/training.py, `training_log`) prints its FLOP rate with the unit glued on by
# `human_readable_flops`: `approx flops per GPU: 112.9TFLOPS` (deepspeedai/DeepSpeed#3742 quotes one). A
# rate in TFLOPS is read as the classic line's `TFLOPs: 112.9`; one in another unit (GFLOPS, PFLOPS) stays
# a metric with its text.
NEOX_FLOPS_MARK = "approx flops per GPU:"


def neox_flops_as_classic(line: pl.Expr) -> pl.Expr:
    return line.str.replace(r"approx flops per GPU:\s*([0-9]+(?:\.[0-9]+)?)TFLOPS", "TFLOPs: ${1}")


# The first public Megatron-LM (2019: pretrain_bert.py and pretrain_gpt2.py, until training_log moved into
# megatron/training.py in December 2019) printed its keys without a colon: ` iteration      200/   20000 |
# elapsed time per iteration (ms): 313.1 | learning rate 2.020E-06 | lm loss 9.444483E+00 | nsp loss
# 2.486780E-01 | loss scale 1.0 |`, the first release (March 2019) with ` epoch  0 |` in front. Every
# iteration line of theirs says `learning rate` so, and each such part is read as `key: value`.
COLONLESS_MARK = "| learning rate "
COLONLESS_PART = r"\|(\s*[A-Za-z][A-Za-z _-]{0,80}?)\s+(" + NUM + r"\s*\|)"
"""A `| lm loss 9.444483E+00 |` part, on a line whose every `|` is doubled: matches do not overlap, so each
part must have a `|` of its own on either side."""


def colonless_as_classic(line: pl.Expr) -> pl.Expr:
    doubled = pl.concat_str([line.str.replace_all("|", "||", literal=True), pl.lit("|")])
    named = doubled.str.replace_all(COLONLESS_PART, "|${1}: ${2}")
    return (
        named.str.replace(r"\|$", "")
        .str.replace_all("||", "|", literal=True)
        .str.replace(r"^(\s*epoch)\s+(\d+)(\s*\|\s*iteration\s)", "${1}: ${2}${3}")
    )


REWRITES = (
    (KEY_VALUE_MARK, key_value_as_classic),
    (NEOX_FLOPS_MARK, neox_flops_as_classic),
    (COLONLESS_MARK, colonless_as_classic),
)


ANY_MARK_RX = "|".join(re.escape(mark) for mark, _ in REWRITES)


def as_classic(frame: pl.DataFrame) -> pl.DataFrame:
    """The block with each line of another spelling rewritten in the classic one (a literal mark picks
    them, so a block without one costs one scan for all the marks)."""
    line = pl.col("line")
    if not frame.select(line.str.contains(ANY_MARK_RX).any()).item():
        return frame
    for mark, rewrite in REWRITES:
        marked = line.str.contains(mark, literal=True)
        if frame.select(marked.any()).item():
            frame = frame.with_columns(pl.when(marked).then(rewrite(line)).otherwise(line))
    return frame


def partly_read_batches(texts: pl.DataFrame, message: pl.Expr) -> list[Batch]:
    """Lines read only in part (`line_no`, `run_key`, `line`): each stays `unparsed` as well as read, and an
    event of the kind PARTLY_READ_EVENT says what was not kept (`message`, cut to 400 characters), so that
    no figure is lost in silence."""
    return [
        Batch("unparsed", texts.select("line_no", pl.col("line").alias("text"))),
        Batch(
            "events",
            texts.select(
                "line_no",
                "run_key",
                pl.lit(PARTLY_READ_EVENT).alias("kind"),
                message.str.slice(0, 400).alias("text"),
            ),
        ),
    ]


def partly_read(lines: pl.DataFrame, unread: pl.DataFrame) -> Iterator[Batch]:
    """Iteration lines with a figure nothing read (`megatron_lines.unread_parts`): the line stays
    `unparsed` as well as read, and an event says so, so that a spelling no pattern knows loses no loss
    in silence."""
    if unread.is_empty():
        return
    texts = lines.join(unread.select("line_no", "run_key"), on="line_no").sort("line_no")
    yield from partly_read_batches(
        texts,
        pl.concat_str([pl.lit("iteration line read in part: a figure without a key is not kept: "), "line"]),
    )
