"""Which lines of a training log are events, and of which kind: the words a dying job, a warning, an
error or a checkpoint prints, a logger's level, PyTorch's glog prefix. Shared by every training-log parser
(the Megatron parser matches whole columns with `event_kind`, the others a line at a time with `kind_of`)."""

from __future__ import annotations

import re
from typing import Any

import polars as pl
import regex

# What a dying job prints beside errors: PyTorch's NCCL watchdog (`Watchdog caught collective operation
# timeout: WorkNCCL(...) ran for 600030 milliseconds before timing out`, `Some NCCL operations have failed or
# timed out`), torchrun's elastic agent in glog form (`E1019 ... api.py:874] failed (exitcode: -6)`), the C++
# runtime (`pure virtual method called`, `(core dumped)`), Slurm (`CANCELLED AT ... DUE TO TIME LIMIT`); the
# Megatron, DeepSpeed and NeMo parsers' warning patterns all take them from here.
CRASH_WORDS = (
    r"timed out|timing out|operation timeout|failed \(exitcode|pure virtual method called|core dumped"
    r"|cancelled at|terminate called after throwing|uncorrectable ecc|eccuncorrectable"
)
# Megatron's word that a checkpoint is on disk (megatron/training/checkpointing.py: `successfully saved
# checkpoint from iteration N to PATH`, before 2023 and in Megatron-DeepSpeed `... at iteration N to PATH`)
# and that a restart resumed from one (`successfully loaded checkpoint from PATH [ t 1/4, p 1/1 ] at
# iteration N`): where a run that died can go on from.
CHECKPOINT_WORDS = (
    r"successfully saved checkpoint|successfully loaded checkpoint|saving checkpoint at iteration"
)
# Megatron's marks around its training loop (megatron/training/training.py `print_datetime`): `[before the
# start of training step] datetime: ...` and `[after training is done] datetime: ...`. With no iteration
# between them the loop ran no step (a run resumed at its last iteration).
TRAINING_WORDS = r"\[before the start of training step\]|\[after training is done\]"
WARNING_RX = (
    r"(?i)(traceback \(most recent call last\)|\w*error\b|exception|nccl warn|\w*warn(?:ing)?\b|out of memory"
    r"|killed|segmentation fault|"
    + CRASH_WORDS
    + "|"
    + CHECKPOINT_WORDS
    + "|"
    + TRAINING_WORDS
    + r"|\[[WEF]\d{3,4} \d\d:\d\d:\d\d)"
)
# PyTorch's C++ (glog) prefix: `[W522 18:16:36.4 CUDACachingAllocator.cpp:495] ...` is a warning whatever it
# says, `[E328 00:21:12.9 ProcessGroupNCCL.cpp:683] ...` an error (month and day unpadded in PyTorch's own
# format; lower-cased, as the lines are matched)
GLOG_ERROR_RX = r"\[[ef]\d{3,4} \d\d:\d\d:\d\d"
# The same words without the leading `\w*` the Megatron parser's (linear, Rust) regex carries, for parsers
# reading a line at a time: Python's backtracking `search` retries that prefix at every position, quadratic
# in a long word (seconds for 20 KiB of letters, minutes for 64 KiB); for "does the line name one" the
# prefix changes nothing.
# Nor is Python's echo of the source line that raised a warning (`  warnings.warn(  # warn only once`,
# printed under the warning itself) a second warning.
# A log pasted as a block quote (`> ` before every line, markdown notes) says the same.
QUOTED = r"(?:>[ \t]?)*"
WARN_ECHO_RX = r"^" + QUOTED + r"\s+warnings\.warn\("
EVENT_WORDS_RX = regex.compile(
    r"^(?!" + QUOTED + r"\s+warnings\.warn\()(?:.*?)" + WARNING_RX.replace(r"\w*", "")
)
# event kind -> words that mark it, most specific first
EVENT_KINDS = (
    ("checkpoint_saved", "successfully saved checkpoint"),
    ("checkpoint_loaded", "successfully loaded checkpoint"),
    ("checkpoint_saving", "saving checkpoint at iteration"),  # a save begun; `successfully saved` ends it
    # Slurm: `*** STEP 255941.18 ON node CANCELLED AT ... DUE TO TIME LIMIT ***`, also where it is glued
    # behind Megatron's mark as a paste can show it (NVIDIA-NeMo/Megatron-Bridge#1500:
    # `[after training is done] datetime: ... [2025-11-24T22:14:50.004] error: *** STEP ... CANCELLED AT`)
    ("crash", "cancelled at"),
    ("training_started", "[before the start of training step]"),
    ("training_done", "[after training is done]"),
    ("traceback", "traceback (most recent call last)"),
    ("nan", "unexpected result nan"),  # Megatron-Core's rerun state machine found a NaN
    ("oom", "out of memory"),
    ("timeout", "operation timeout"),
    ("timeout", "timed out"),
    ("timeout", "timing out"),
    ("nccl_warn", "nccl warn"),
    ("crash", "segmentation fault"),
    ("crash", "killed"),
    ("crash", "failed (exitcode"),
    ("crash", "pure virtual method called"),
    ("crash", "core dumped"),
    ("crash", "terminate called after throwing"),  # a C++ exception nobody caught: the process aborts
    ("crash", "uncorrectable ecc"),  # the GPU's memory failed (`uncorrectable ECC error encountered`)
    ("crash", "eccuncorrectable"),  # CUDA's name for it (`cudaErrorECCUncorrectable`)
    ("error", "error"),
    ("error", "exception"),
    ("warning", "warn"),
)


# A traceback's own lines are part of the traceback, not error lines of their own: a C++ stack frame
# (`frame #0: c10::Error::Error(c10::SourceLocation, ...)`), the source lines Python quotes under each frame
# (`    raise Exception(`, `    except TypeError:`), rich's box-drawn traceback (`│   2034 │ ... except
# TypeError:`, every line inside its box), and Python's words between chained exceptions (`During handling of
# the above exception, another exception occurred:`). The exception's own line is the error. `error` inside an
# identifier (`TORCH_NCCL_ASYNC_ERROR_HANDLING`, torchtitan's warning at every start) is no error either: the
# word, or the end of an exception's name. Lower-cased, as the lines are matched.
FRAME_RX = (
    r"^" + QUOTED + r"\s*(?:frame #\d+:|[│╭╰]|during handling of the above exception"
    r"|the above exception was the direct cause)|^" + QUOTED + r"\s+(?:raise|except)\b"
)
# Nor is a file or folder of that name (torchelastic's `error_file: .../attempt_0/6/error.json`).
ERROR_WORD_RX = r"(?:^|[^_/])error(?:$|[^_.]|\.(?:$|[^a-z]))"
# A line its logger printed at warning level (NeMo's `[NeMo W ...]`, PyTorch's `[W522 18:16:36.1 ...]`,
# Python's `WARNING:` / ` - WARNING - ` / `[WARNING]`, a `...Warning:` category) is a warning whatever
# words it uses ("to ensure that checkpointing will not error out"); lower-cased, as the lines are matched.
WARNING_LEVEL_RX = (
    r"\[nemo w |\[w\d{3,4} \d|(?:^|[\]:]\s?)warning:|\[warning\]|\s-\s+warning\s+-\s|\|\s*warning\s*\|"
    r"|\w+warning:"
)


OTHER_KIND_RX = "|".join(
    [
        f"(?:{FRAME_RX})",
        ERROR_WORD_RX,
        GLOG_ERROR_RX,
        *(re.escape(word) for kind, word in EVENT_KINDS if kind != "warning" and word != "error"),
    ]
)
"""Any word that can make a line's kind other than `warning` (lower-cased, as the lines are matched)."""


def event_kinds(lowered: pl.Series) -> pl.Series:
    """`event_kind` of each lower-cased line. Most of a log's events are a framework's warnings, which no
    word of another kind is in: one scan for those words picks the lines the kinds are worked out for (the
    25 tests of `event_kind` cost 0.9 us a line), the others are warnings."""
    kinds = pl.repeat("warning", lowered.len(), dtype=pl.String, eager=True).alias("kind")
    other = lowered.str.contains(OTHER_KIND_RX)
    if other.any():
        found = lowered.filter(other).to_frame("_lowered").select(event_kind(pl.col("_lowered")))
        kinds = kinds.scatter(other.arg_true(), found.to_series())
    return kinds


def event_kind(lowered: pl.Expr | None = None) -> pl.Expr:
    """The event kind of each line. `lowered`: the lines lower-cased, a column the frame holds already;
    polars' eager `select` computes a shared sub-expression again at every use, and the 25 uses of the
    lowered text cost nine times the rest of the kinds (the Megatron parser's largest kernel once)."""
    if lowered is None:
        lowered = pl.col("line").str.to_lowercase()
    expr: Any = pl.when(lowered.str.contains(FRAME_RX)).then(pl.lit("traceback"))
    warned = lowered.str.contains(WARNING_LEVEL_RX)
    for kind, word in EVENT_KINDS:
        found = (
            lowered.str.contains(ERROR_WORD_RX)
            if word == "error"
            else lowered.str.contains(word, literal=True)
        )
        if word == "error":
            found = found | lowered.str.contains(GLOG_ERROR_RX)
        expr = expr.when(found & ~warned if kind == "error" else found).then(pl.lit(kind))
    return expr.otherwise(pl.lit("warning"))


def kind_of(text: str, fallback: str = "warning", leveled: bool = False) -> str:
    """The event kind of one line's text (`event_kind` for a whole column); `fallback` where no word says
    one (a logger's level, for a parser that reads it: `leveled`, and a warning's level is not overruled
    by the word "error")."""
    lowered = text.lower()
    if regex.match(FRAME_RX, lowered):
        return "traceback"
    warned = (leveled and fallback == "warning") or regex.search(WARNING_LEVEL_RX, lowered) is not None
    return next(
        (
            kind
            for kind, word in EVENT_KINDS
            if kind != "warning"
            and not (warned and kind == "error")
            and (
                bool(regex.search(ERROR_WORD_RX, lowered) or regex.search(GLOG_ERROR_RX, lowered))
                if word == "error"
                else word in lowered
            )
        ),
        fallback,
    )
