"""DeepSpeed's flops profiler summary (profiling/flops_profiler/profiler.py `print_model_profile`), in a
training log or saved on its own: its latencies as timers, its figures as metrics, its FLOPS per GPU as
the step's TFLOP/s, its sizes as the run's columns. Its per-module breakdown is left unparsed."""

from __future__ import annotations

import re
from typing import Any, Protocol

from tracelog.parsers.deepspeed_config import NUM, RunState, number


class ProfiledParser(Protocol):
    """What of the DeepSpeed parser the profiler's block reads and writes."""

    in_profiler: bool
    profiler_step: int | None

    def run(self, line_no: int) -> RunState: ...
    def emit(self, table: str, row: dict[str, Any]) -> None: ...
    def metric(
        self, run: RunState, step: int | None, key: str, value: float | None, text: str, line_no: int
    ) -> None: ...
    def step_row(
        self, run: RunState, step: int, line_no: int, rank: int | None, ts: str | None
    ) -> dict[str, Any] | None: ...


PROFILER_STEP_RX = re.compile(r"Profile Summary at step (\d+)")
PROFILER_LINE_RX = re.compile(r"^(.+?):\s{2,}" + NUM + r"\s*([A-Za-z/]*)\s*$")
SI = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15}  # B: params, billions
TIME_MS = {"s": 1000.0, "ms": 1.0, "us": 1e-3}


# DeepSpeed-Chat's `print_throughput` (applications/DeepSpeed-Chat/dschat/utils/perf.py), once per
# micro-batch: `Model Parameters: 0.331 B, Latency: 0.27s, TFLOPs: 1.02, Samples/sec: 7.28, Time/seq 0.14s,
# Batch Size: 2, Sequence Length: 512`
CHAT_THROUGHPUT_RX = re.compile(  # NUM is a group of its own
    r"^Model Parameters: "
    + NUM
    + r" B, Latency: "
    + NUM
    + r"s, TFLOPs: "
    + NUM
    + r", Samples/sec: "
    + NUM
    + r", Time/seq \S+s, Batch Size: (\d+), Sequence Length: (\d+)"
)
CHAT_METRICS = (
    (2, "latency per micro-batch (DeepSpeed-Chat, s)"),
    (3, "TFLOPs (DeepSpeed-Chat)"),
    (4, "samples per second (DeepSpeed-Chat)"),
)


def chat_throughput(parser: ProfiledParser, line_no: int, msg: str) -> bool:
    """DeepSpeed-Chat's throughput line: the model's size, micro-batch and sequence length as the run's,
    its latency, TFLOPs and samples/s as metrics of the last step (it prints per micro-batch, between the
    engine's step lines)."""
    match = CHAT_THROUGHPUT_RX.match(msg.strip())
    if match is None:
        return False
    run = parser.run(line_no)
    run.columns.setdefault("params", round(float(match.group(1)) * 1e9))
    run.columns.setdefault("mbs", int(match.group(5)))
    run.columns.setdefault("seq_len", int(match.group(6)))
    for group, key in CHAT_METRICS:
        parser.metric(run, run.last_step, key, number(match.group(group)), match.group(group), line_no)
    return True


def profiler_line(parser: ProfiledParser, line_no: int, msg: str) -> bool:
    """The flops profiler's summary block (and DeepSpeed-Chat's throughput line); its per-module breakdown
    is left unparsed."""
    if msg.startswith("Model Parameters: "):
        return chat_throughput(parser, line_no, msg)
    if "DeepSpeed Flops Profiler" in msg:
        parser.in_profiler = True
        parser.profiler_step = None
        return True
    if not parser.in_profiler:
        return False
    if match := PROFILER_STEP_RX.search(msg):
        parser.profiler_step = int(match.group(1))
        return True
    if "Aggregated Profile per GPU" in msg or "Detailed Profile" in msg:
        parser.in_profiler = False
        return False
    if msg.startswith(("Notations:", "data parallel size (dp_size)", "number of parameters (params)")):
        return True
    if msg.startswith(("number of floating-point", "fwd latency (forward", "step (weights update")):
        return True
    match = PROFILER_LINE_RX.match(msg.strip())
    if not match:
        return False
    run = parser.run(line_no)
    label, value, unit = match.group(1).strip(), number(match.group(2)), match.group(3)
    name = label.split(" = ")[0].strip()
    step = parser.profiler_step
    if unit in TIME_MS:
        parser.emit(
            "timers",
            {
                "run_key": run.key,
                "rank": None,
                "iteration": step,
                "name": f"flops_profiler: {name}",
                "time_ms": value * TIME_MS[unit],
                "line_no": line_no,
            },
        )
        return True
    scaled = value * SI.get(unit[:1], 1.0) if unit else value
    if unit.endswith("FLOPS"):
        scaled /= 1e12
        if name == "FLOPS per GPU" and step is not None:
            row = parser.step_row(run, step, line_no, None, None)
            if row is not None:
                row["tflops_reported"] = scaled
    parser.metric(run, step, f"flops_profiler: {name}", scaled, f"{match.group(2)} {unit}".strip(), line_no)
    # mp_size is the engine's model-parallel group (`mpu.get_model_parallel_world_size()`: Megatron's
    # tensor-parallel size, the `model` axis of DeepSpeed's pipeline topology)
    columns = {
        "world size": "gpus",
        "data parallel size": "dp",
        "model parallel size": "tp",
        "batch size per GPU": "mbs",
    }
    if name in columns:
        run.columns.setdefault(columns[name], int(value))
    elif name.startswith("params of model"):
        run.columns.setdefault("params", int(scaled))
    return True
