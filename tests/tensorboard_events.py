"""Writes TensorBoard event files as Megatron-LM's `training_log` does, for tests and the sample.

`python -m tests.tensorboard_events` regenerates `sample_logs/tb_llama3_8b_h100/`: the events of the
first run of `sample_logs/megatron_lm_llama3_8b_h100.log` (its arguments as text summaries, each
iteration's scalars in the order `training_log` writes them, the `X vs samples` copies, timers in seconds
as `timers.write` does, memory in bytes), so the text log and the events describe one run. Records are
written with tensorboard's own `RecordWriter` and protobuf definitions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.summary.writer.record_writer import RecordWriter

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "sample_logs" / "megatron_lm_llama3_8b_h100.log"
SAMPLE = ROOT / "sample_logs" / "tb_llama3_8b_h100" / "events.out.tfevents.1715682049.node001.4242.0"
START_S = 1715682049.0  # 2024-05-14 10:20:49 UTC, the log's start of training
ARG_RX = re.compile(r"^  (\w+) \.+ (.*)$")
ITER_RX = re.compile(r"iteration +(\d+)/ *\d+ \|(.*)$")
TIMER_RX = re.compile(r"^    ([\w-]+) \.+: \(([\d.]+), ([\d.]+)\)")


def scalar(tag: str, value: float, step: int, wall_time: float) -> Event:
    return Event(
        wall_time=wall_time, step=step, summary=Summary(value=[Summary.Value(tag=tag, simple_value=value)])
    )


def text(tag: str, value: str, step: int = 0) -> Event:
    """As torch.utils.tensorboard's `add_text` writes it: a string tensor under the text plugin."""
    metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="text"))
    tensor = TensorProto(dtype=7, string_val=[value.encode()])  # DT_STRING
    tensor.tensor_shape.dim.add(size=1)
    return Event(
        wall_time=START_S,
        step=step,
        summary=Summary(value=[Summary.Value(tag=f"{tag}/text_summary", metadata=metadata, tensor=tensor)]),
    )


def first_run() -> tuple[dict[str, str], list[dict[str, float]], dict[str, float]]:
    """The first run of the sample log: its arguments, iterations, and the timers printed (max, ms)."""
    args: dict[str, str] = {}
    iterations: list[dict[str, float]] = []
    timers: dict[str, float] = {}
    for line in LOG.read_text().splitlines():
        if "exiting program" in line:
            break
        if match := ARG_RX.match(line):
            args[match[1]] = match[2]
        elif match := ITER_RX.search(line):
            pairs = (part.split(":", 1) for part in match[2].split("|") if ":" in part)
            iterations.append({"iteration": float(match[1]), **{k.strip(): float(v) for k, v in pairs}})
        elif match := TIMER_RX.match(line):
            timers[match[1]] = float(match[3])
    return args, iterations, timers


def megatron_events(
    args: dict[str, str], iterations: list[dict[str, float]], timers: dict[str, float]
) -> Iterable[Event]:
    yield Event(wall_time=START_S, file_version="brain.Event:2")
    for arg, arg_value in args.items():
        yield text(arg, arg_value)
    for it in iterations:
        step, samples = int(it["iteration"]), int(it["consumed samples"])
        seconds = it["elapsed time per iteration (ms)"] / 1000.0
        wall = START_S + step * seconds
        losses = [(key, value) for key, value in it.items() if key.endswith(" loss") and key != "loss scale"]
        for tag, value in (
            ("learning-rate", it["learning rate"]),
            ("batch-size", it["global batch size"]),
            *losses,
            ("loss-scale", it["loss scale"]),
            ("grad-norm", it["grad norm"]),
        ):
            yield scalar(tag, value, step, wall)
            yield scalar(f"{tag} vs samples", value, samples, wall)
        yield scalar("params-norm", 250.0 + step / 100.0, step, wall)
        yield scalar("mem-reserved-bytes", 60864.0 * 2**20, step, wall)
        yield scalar("mem-allocated-bytes", 14021.5 * 2**20, step, wall)
        yield scalar("mem-max-allocated-bytes", 58120.7 * 2**20, step, wall)
        yield scalar("iteration-time", seconds, step, wall)
        yield scalar("throughput", it["throughput per GPU (TFLOP/s/GPU)"], step, wall)
        for name, max_ms in timers.items():
            yield scalar(f"{name}-time", max_ms / 1000.0, step, wall)


def write(path: Path, events: Iterable[Event]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        writer = RecordWriter(f)
        for event in events:
            writer.write(event.SerializeToString())
        writer.flush()
    return path


def write_sample(path: Path = SAMPLE) -> Path:
    return write(path, megatron_events(*first_run()))


if __name__ == "__main__":
    print(write_sample())
