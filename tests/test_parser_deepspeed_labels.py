"""DeepSpeed's lines behind srun's `--label` (`0: `), its blank lines included."""

from __future__ import annotations

from tests.conftest import rows_by_table
from tracelog.parsers import deepspeed

# Verbatim, deepspeedai/Megatron-DeepSpeed#98 (November 2022, an 18.4B GPT on 128 GPUs): the flops profiler's
# summary from rank 0 under srun's label; its empty line is `0:` with the label's blank lost in the paste, and
# the last line is cut where the excerpt ends.
PROFILER = """\
0: -------------------------- DeepSpeed Flops Profiler --------------------------
0: Profile Summary at step 2:
0: Notations:
0: data parallel size (dp_size), model parallel size(mp_size),
0: number of parameters (params), number of multiply-accumulate operations(MACs),
0: number of floating-point operations (flops), floating-point operations per second (FLOPS),
0: fwd latency (forward propagation latency), bwd latency (backward propagation latency),
0: step (weights update latency), iter latency (sum of fwd, bwd and step latency)
0:
0: world size:                                                   128
0: data parallel size:                                           16
0: model parallel size:                                          8
0: batch size per GPU:                                           8
0: params per gpu:                                               2318.53 M
0: params of model = params per GPU * mp_size
"""


def test_a_labelled_empty_line_is_an_empty_line() -> None:
    """`0:` alone is rank 0's empty line, not a line nobody read; the summary's figures give the layout and
    only the line cut before its figure stays unparsed."""
    out = rows_by_table(deepspeed.parse, PROFILER)
    assert [u["text"] for u in out["unparsed"]] == ["0: params of model = params per GPU * mp_size"]
    (run,) = out["runs"]
    assert (run["gpus"], run["dp"], run["tp"], run["mbs"]) == (128, 16, 8, 8)
