"""The fast path of the Megatron parser reads exactly what the regex path reads.

Iteration and `time (ms) |` lines are read by position once a layout is learned from one line of the log;
every line that does not fit (a key more or less, another order, a value that is not a plain number) goes
to the per-key regexes. These tests hold the two paths against each other on the sample logs, the public
corpus and lines built to break the layout, in one block and across blocks.
"""

from __future__ import annotations

import math
import threading

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SAMPLES, corpus_files, source_of
from tracelog.parsers import megatron, megatron_layout
from tracelog.parsers.base import Block, prefetched

ITERATION = (
    " [2024-11-04 10:00:{s:02d}] iteration {i:8d}/ 9000000 | consumed samples: {samples:12d} | elapsed time per "
    "iteration (ms): {ms} | throughput per GPU (TFLOP/s/GPU): 362.1 | learning rate: {lr} | global batch "
    "size:  1024 | lm loss: {loss} | loss scale: 1.0 | grad norm: 0.705 | number of skipped iterations:   0 "
    "| number of nan iterations:   0 |"
)
TIMER = (
    "time (ms) | forward-compute: {f} | backward-compute: 3176.24 | optimizer: 104.16 | batch-generator: 1.21"
)


def iteration(i: int, ms: str = "5246.7", lr: str = "1.499999E-04", loss: str = "2.908113E+00") -> str:
    return ITERATION.format(s=i % 60, i=i, samples=i * 1024, ms=ms, lr=lr, loss=loss)


def canonical(text: str | bytes, block_bytes: int, fast: bool) -> dict[str, list]:
    """Every table's rows, sorted, with NaN made comparable (NaN != NaN would hide equal rows)."""
    out: dict[str, list] = {}
    for batch in megatron.parse(source_of(text, block_bytes), fast=fast):
        rows = batch.rows.to_dicts() if isinstance(batch.rows, pl.DataFrame) else list(batch.rows)
        out.setdefault(batch.table, []).extend(rows)

    def plain(value):
        if isinstance(value, float) and math.isnan(value):
            return "NaN"
        if isinstance(value, list):
            return repr(value)
        return value

    return {
        table: sorted((tuple(sorted((k, plain(v)) for k, v in row.items())) for row in rows), key=repr)
        for table, rows in out.items()
    }


def assert_same(text: str | bytes, block_bytes: int = 1 << 20) -> None:
    assert canonical(text, block_bytes, fast=True) == canonical(text, block_bytes, fast=False)


LOGS = [*sorted(SAMPLES.glob("megatron_*.log")), *corpus_files("megatron")]
# Tiny blocks cut through every multi-line structure; they are slow, so only on the bundled samples.
CASES = [
    (path, block_bytes)
    for path in LOGS
    for block_bytes in (300, 64 << 10, 16 << 20)
    if block_bytes > 300 or path.parent == SAMPLES
]


@pytest.mark.parametrize(("path", "block_bytes"), CASES, ids=[f"{p.name}-{b}" for p, b in CASES])
def test_fast_and_regex_paths_agree_on_real_logs(path, block_bytes: int) -> None:
    assert_same(path.read_bytes(), block_bytes)


VARIANTS = {
    "extra key": iteration(5) + " mtp_1 loss: 2.5 |",
    "missing key": iteration(5).replace(" loss scale: 1.0 |", ""),
    "keys swapped": iteration(5).replace(
        "lm loss: 2.908113E+00 | loss scale: 1.0", "loss scale: 1.0 | lm loss: 2.908113E+00"
    ),
    "nan loss": iteration(5, loss="nan"),
    "inf and infinity": iteration(5, loss="inf", ms="infinity"),
    "value with unit": iteration(5, lr="1.5e-4GB"),
    "value not a number": iteration(5, loss="n/a"),
    "empty value": iteration(5, loss=""),
    "signed integer": iteration(5).replace("global batch size:  1024", "global batch size: +1024"),
    "negative integer": iteration(5).replace("global batch size:  1024", "global batch size: -1024"),
    "float where an integer goes": iteration(5).replace(
        "global batch size:  1024", "global batch size: 1024.0"
    ),
    "huge integer": iteration(5).replace(
        "global batch size:  1024", "global batch size: 99999999999999999999"
    ),
    "tab before value": iteration(5).replace("lm loss: ", "lm loss:\t"),
    "no space after colon": iteration(5).replace("lm loss: ", "lm loss:"),
    "unicode space": iteration(5).replace("lm loss: ", "lm loss:\u00a0"),
    "arabic digits": iteration(5).replace("consumed samples:         5120", "consumed samples: ٥١٢٠"),
    "timestamp with T": iteration(5).replace("2024-11-04 10", "2024-11-04T10"),
    "timestamp with millis": iteration(5).replace(":05]", ":05,123]"),
    "timestamp malformed": iteration(5).replace("[2024-11-04 10:00:05]", "[2024-11-4  10:00:05]"),
    "timestamp five-digit year": iteration(5).replace("[2024-11-04 10:00:05]", "[02024-11-04 10:00:0]"),
    "no timestamp": iteration(5).replace(" [2024-11-04 10:00:05]", ""),
    "second timestamp in a value": iteration(5) + " note: [2024-01-01 00:00:00] |",
    "rank prefix": "[rank7]: " + iteration(5),
    "srun prefix": "12: " + iteration(5),
    "wider iteration number": iteration(123456789),
    "no space before number": iteration(5).replace("iteration        5/", "iteration5/"),
    "pipe inside a value": iteration(5).replace("grad norm: 0.705", "grad norm: 0.7|05"),
    "colon inside an extra value": iteration(5) + " eta: 01:02:03 |",
    "iteration word in an extra value": iteration(5) + " note: iteration 3/ 4 |",
    "elapsed in seconds": iteration(5).replace("iteration (ms): 5246.7", "iteration (s): 5.2467"),
    "known key duplicated": iteration(5) + " lm loss: 9.0 |",
    "key inside another key": iteration(5).replace("grad norm: 0.705", "pre-clip grad norm: 0.705"),
    "trailing text": iteration(5) + " done",
    "no trailing pipe": iteration(5).rstrip("|").rstrip(),
    "padding changed": iteration(5).replace("consumed samples:         5120", "consumed samples: 5120"),
}


@pytest.mark.parametrize("variant", list(VARIANTS), ids=list(VARIANTS))
@pytest.mark.parametrize("position", ["first", "middle"])
def test_a_line_off_the_layout_reads_as_the_regex_path_reads_it(variant: str, position: str) -> None:
    """Mixed layouts in one block: the odd line first (it becomes the example) or among regular lines."""
    odd = VARIANTS[variant]
    regular = [iteration(i, ms=f"{5200 + i}.5", loss=f"{3 - i / 100:.6E}") for i in range(1, 40)]
    lines = [odd, *regular] if position == "first" else [*regular[:20], odd, *regular[20:]]
    timers = [TIMER.format(f=f"{1600 + i}.25") for i in range(len(lines))]
    text = "".join(f"{line}\n{timer}\n" for line, timer in zip(lines, timers, strict=True))
    assert_same(text)
    assert_same(text, block_bytes=2000)


TIMER_VARIANTS = {
    "extra timer": TIMER.format(f="1.0") + " | grads-reduce: 3.5",
    "missing timer": TIMER.format(f="1.0").replace(" | optimizer: 104.16", ""),
    "min and max": "time (ms) | forward-compute: (1.0, 2.0) | backward-compute: 3176.24 | optimizer: 104.16 | "
    "batch-generator: 1.21",
    "not a number": TIMER.format(f="fast"),
    "colon in name": TIMER.format(f="1.0").replace("optimizer:", "optimizer:inner:"),
    "other head": "[2024-11-04 10:00:05] " + TIMER.format(f="1.0"),
    "empty part": TIMER.format(f="1.0") + " |",
}


@pytest.mark.parametrize("variant", list(TIMER_VARIANTS), ids=list(TIMER_VARIANTS))
def test_timer_lines_off_the_layout_read_as_the_regex_path_reads_them(variant: str) -> None:
    lines = [iteration(1), TIMER_VARIANTS[variant]]
    for i in range(2, 30):
        lines += [iteration(i), TIMER.format(f=f"{1600 + i}.25")]
    lines += [iteration(30), TIMER_VARIANTS[variant]]
    assert_same("\n".join(lines) + "\n")


def test_more_layouts_than_are_kept() -> None:
    """Each block may bring layouts of its own; past LAYOUTS_KEPT the oldest are forgotten, not the results."""
    lines = []
    for n in range(megatron_layout.LAYOUTS_KEPT + 3):
        extra = "".join(f" k{n}_{j}: {j}.5 |" for j in range(n))
        lines += [iteration(i) + extra for i in range(n * 10 + 1, n * 10 + 6)]
    assert_same("\n".join(lines) + "\n", block_bytes=1500)


def test_regular_lines_do_take_the_fast_path() -> None:
    """A guard on speed, not results: a log's regular lines must fit the learned layout, not fall back."""
    lines = pl.DataFrame({"line_no": range(1, 201), "line": [iteration(i) for i in range(1, 201)]})
    fitted, left = megatron_layout.iterations_by_layout(lines, [])
    assert fitted.height == 200 and left.is_empty()
    timers = lines.with_columns(
        pl.lit(TIMER.format(f="1.5")).alias("line"), pl.lit(0, pl.Int32).alias("run_key")
    )
    ((_, fitted_timers),) = megatron_layout.timers_by_layout(timers, [])
    assert fitted_timers.height == 200


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=320), st.sampled_from([" ", "|", ":", "x", "1", "-", ""])
        ),
        min_size=1,
        max_size=3,
    )
)
def test_mutated_lines_read_as_the_regex_path_reads_them(edits: list[tuple[int, str]]) -> None:
    """Characters put into or taken out of regular lines at random places, between regular lines."""
    odd = iteration(7)
    for at, char in edits:
        at = min(at, len(odd))
        odd = odd[:at] + char + odd[at + (0 if char else 1) :]
    text = "\n".join([iteration(1), iteration(2), odd, iteration(3), TIMER.format(f="2.5")]) + "\n"
    assert_same(text)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300))
def test_a_block_frame_has_one_row_per_line(data: bytes) -> None:
    """The line count of the next block comes from the frame's height, so the two must agree."""
    data = data.replace(b"\x00", b"")
    if not data:
        return
    block = Block(1, data)
    counted = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    assert block.frame().height == counted == block.line_count


@pytest.mark.parametrize("data", [b"\x1b@", b"a\n\x1b@", b"a\n\x1b[0m", b"\x1b[0m\nb\n"])
def test_a_line_of_colour_codes_alone_is_still_a_line(data: bytes) -> None:
    """A last line that held only an escape sequence (`ESC @`, a colour reset) is an empty line once the codes
    are removed, not no line: the block's lines, its frame and its count agree (found by hypothesis)."""
    block = Block(1, data)
    counted = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    assert len(block.lines()) == block.frame().height == counted == block.line_count


def test_prefetched_hands_on_items_and_errors_in_order() -> None:
    def items():
        yield 1
        yield 2
        raise KeyboardInterrupt

    got = []
    with pytest.raises(KeyboardInterrupt):
        for item in prefetched(items(), depth=1):
            got.append(item)
    assert got == [1, 2]


def test_prefetched_stops_its_worker_when_the_caller_stops() -> None:
    produced = []

    def items():
        for i in range(1000):
            produced.append(i)
            yield i

    before = set(threading.enumerate())
    stream = prefetched(items(), depth=2)
    assert next(stream) == 0
    stream.close()
    assert len(produced) < 10
    assert not [t for t in threading.enumerate() if t not in before and t.is_alive()]


@pytest.mark.parametrize(
    "line",
    [
        "------------------------ arguments ------------------------",
        "-------------------- end of arguments ---------------------",
        "using world size: 256, data-parallel size: 8, context-parallel size: 1, tensor-model-parallel size: 8",
        " > number of parameters on (tensor, pipeline) model parallel rank (0, 0): 1750000000",
        "times across ranks (ms):",
        "     rank  0: 3176.24",
        "[Rank 0] (after 10 iterations) memory (MB) | allocated: 21845.5 | max allocated: 44262.1",
        " validation loss at iteration 100 | lm loss value: 8.095942E+00 | lm loss PPL: 3.281128E+03 |",
        "[2024-03-02 10:00:00,123] [INFO] [config.py:1000:print]   train_batch_size ............. 1024",
        "[2024-03-02 10:00:00,123] [INFO] [logging.py:96:log_dist] [Rank 0] Creating BF16 optimizer",
        "stage=0 layers=13",
        "Reduce bucket size 500,000,000",
        "$ mpirun --np 8 singularity exec pytorch.sif train_gpt3_7b_mpi.sh",
    ],
)
def test_every_line_a_classifying_pattern_reads_passes_the_literal_scan(line: str) -> None:
    """`SPECIAL_RX` picks the lines the configuration, memory and timer-block patterns then look at: a line
    it missed would lose its figures, so it must take every line they take, whatever its prefix."""
    from tracelog.parsers.megatron_lines import (
        ARGS_END,
        ARGS_START,
        SPECIAL_RX,
        STATEFUL_RX,
        TIMER_RANK_LITERAL,
    )
    from tracelog.parsers.megatron_memory import MEMORY_MARK

    frame = pl.DataFrame({"line": [line]})
    taken = frame.select(
        pl.col("line").str.contains(ARGS_START.pattern)
        | pl.col("line").str.contains(ARGS_END, literal=True)
        | pl.col("line").str.contains(STATEFUL_RX)
        | pl.col("line").str.contains(MEMORY_MARK, literal=True)
        | pl.col("line").str.contains(TIMER_RANK_LITERAL, literal=True)
    ).item()
    assert taken
    assert frame.select(pl.col("line").str.contains(SPECIAL_RX)).item()


def test_timer_and_plain_lines_are_copied_out_of_the_blocks_buffers() -> None:
    """The lines a block's timer and plain passes read are copied into buffers of their own (their string
    kernels ran several times slower over views into the whole block): the same rows, only their bytes."""
    lines = [TIMER.format(f="1683.23") if i % 3 == 0 else iteration(i) for i in range(3000)]
    lines[5] = "UserWarning: ünïcode, and an empty line next"
    lines[8] = ""
    block = pl.DataFrame({"line_no": range(1, 3001), "line": lines})
    timers = block.filter(pl.col("line").str.starts_with("time (ms)") | pl.col("line").str.contains("ü"))
    compact = megatron._compacted(timers)

    def text_bytes(frame: pl.DataFrame) -> int:
        views = frame["line"].to_arrow(compat_level=pl.CompatLevel.newest())
        return sum(buffer.size for buffer in views.buffers()[2:] if buffer is not None)

    assert compact.equals(timers)
    assert text_bytes(compact) <= timers["line"].str.len_bytes().sum() < text_bytes(timers) / 3
