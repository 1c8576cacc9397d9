"""TensorBoard event files (`events.out.tfevents.*`): the scalars and text summaries a training job wrote.

On many clusters stdout is rotated away and the event files are all that is left of a run. The file is a
TFRecord stream: per record an 8-byte little-endian length, its masked CRC-32C, the serialized `Event`
protobuf and that payload's masked CRC-32C (tensorflow/core/lib/io/record_writer.cc). Events are decoded
with tensorboard's own protobuf definitions (`tensorboard.compat.proto.event_pb2`). The records are framed
here rather than by tensorboard's `EventFileLoader` because, without TensorFlow installed, that loader
checks each CRC in pure Python: 1.4 MB/s (16 s for a 23 MB file of 420,000 Megatron scalars) against
14 MB/s framed and decoded here with a C CRC-32C (`google-crc32c`), 4 MB/s with the rows built (README,
TensorBoard event files); the loader also ends silently at a bad or truncated record, where tracelog must
say so. Reading from the ingest's stream also keeps memory flat and lets the
store hash the file in the same pass.

Tags are mapped as the writers name them: Megatron-LM `training_log` (`lm loss`, `learning-rate`,
`loss-scale`, `grad-norm`, `num-zeros`, `batch-size`, `iteration-time` in s, `throughput` in
TFLOP/s/GPU, `mem-*-bytes`, timers as `NAME-time` in seconds, the `X vs samples` copies whose step is
the consumed samples, arguments as one text summary per argument), NeMo's Lightning logger
(`reduced_train_loss`, `lr`, `train_step_timing in s`, ...), DeepSpeed's monitor (`Train/Samples/...`,
stepped by samples). Every other scalar is a metric. Record numbers (1-based) stand in for line numbers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tracelog.errors import TracelogError
from tracelog.parsers.base import Batch, Emitter, LineSource, guarded
from tracelog.parsers.megatron_config import RunInfo
from tracelog.parsers.tfrecord import Records, header_ok

if TYPE_CHECKING:
    from tensorboard.compat.proto.event_pb2 import Event

FORMAT = "tensorboard"
VERSION = "1"
READS_LINES = False  # binary records: growth is whole records, never "a line still being written"
DESCRIBES_RUNS_OF_OTHER_FILES = True  # a job's events and its text log are one run (see store.merge)
NAME_MARK = "tfevents"  # every TensorBoard writer names its files events.out.tfevents.<time>.<host>...
OPEN_STEPS = 256  # steps whose rows are held while their events may still come (Megatron writes in order)

ITERATION_TAGS = {
    "lm loss": "lm_loss",
    "reduced_train_loss": "lm_loss",  # NeMo
    "learning-rate": "learning_rate",
    "lr": "learning_rate",  # NeMo
    "loss-scale": "loss_scale",
    "grad-norm": "grad_norm",
    "grad_norm": "grad_norm",  # NeMo
    "num-zeros": "num_zeros",
    "batch-size": "global_batch_size",
    "global_batch_size": "global_batch_size",  # NeMo
    "iteration-time": "elapsed_s",  # Megatron: seconds per iteration
    "train_step_timing in s": "elapsed_s",  # NeMo
    "throughput": "tflops_reported",  # Megatron: TFLOP/s per GPU
    "consumed_samples": "consumed_samples",  # NeMo
}
INTEGER_COLUMNS = {"global_batch_size", "consumed_samples"}
MEMORY_TAGS = {  # Megatron --log-memory-to-tensorboard, bytes (torch.cuda.memory_stats)
    "mem-reserved-bytes": "reserved_mib",
    "mem-allocated-bytes": "allocated_mib",
    "mem-max-allocated-bytes": "max_allocated_mib",
}
MIB = 1 << 20
TIMER_SUFFIX = "-time"  # megatron/core/timers.py write(): name + '-time', the max across ranks, seconds
SAMPLES_SUFFIX = " vs samples"
# DeepSpeed's monitor writes `Train/Samples/train_loss`, `.../lr`, `.../loss_scale` and timers with the
# consumed samples as the step (deepspeed/runtime/engine.py): no iteration number, so these are metrics
# without one, their sample count kept in `text`.
DEEPSPEED_SAMPLES = "Train/Samples/"
TEXT_SUFFIX = "/text_summary"  # torch.utils.tensorboard and tensorboardX append it to add_text tags


def detect(head: str) -> int:
    """Event files are binary: `detect_binary` claims them, never the text detection."""
    return 0


def detect_binary(head: bytes, path: str) -> int:
    """Sure on a TFRecord header; the file's name alone still claims a damaged events file, so the user
    hears what is wrong with it rather than 'binary file'."""
    if header_ok(head):
        return 100
    return 50 if NAME_MARK in os.path.basename(path) else 0


def _tensor_util() -> ModuleType:
    """TensorBoard's protobuf and tensor modules, loaded by the first events file: 0.12 s that every
    ingest of a text log would pay at start-up if the parser loaded them with itself."""
    from tensorboard.util import tensor_util

    return tensor_util


@guarded
def parse(source: LineSource) -> Iterator[Batch]:
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto.event_pb2 import Event

    reader = Records(source)
    state = _State()
    for record_no, payload in reader.records():
        try:
            event = Event.FromString(payload)
        except DecodeError as exc:
            state.out.add(
                "events", _event(record_no, "bad_record", f"record does not decode as an Event: {exc}")
            )
            continue
        state.event(record_no, event)
        if state.out.due():
            yield from state.out.flush()
    for record_no, kind, text in reader.problems:
        state.out.add("events", _event(record_no, kind, text))
    if reader.records_read == 0:
        why = reader.problems[0][2] if reader.problems else "the file holds no records"
        raise TracelogError(f"no readable TensorBoard record: {why}", source.name)
    runs = state.finish(_folder_name(source.name))
    yield from state.out.flush()
    yield runs


def _folder_name(path: str) -> str | None:
    """TensorBoard names a run after the folder of its event files; a bare file name says nothing."""
    folder = os.path.dirname(path)
    if path == "-" or not folder:
        return None
    return os.path.basename(os.path.abspath(folder)) or None


def _event(record_no: int, kind: str, text: str) -> dict[str, Any]:
    return {"line_no": record_no, "kind": kind, "text": text, "run_key": 0}


class _State:
    """Rows per step, held while more of the step's events may come, and the run's arguments."""

    def __init__(self) -> None:
        self.out = Emitter()
        self.run = RunInfo(0, line_start=1)
        self.steps: dict[int, dict[str, Any]] = {}
        self.memory: dict[int, dict[str, Any]] = {}
        self.last_step: int | None = None
        self.roles: dict[str, tuple[str, str]] = {}

    def event(self, record_no: int, event: Event) -> None:
        kind = event.WhichOneof("what")
        if kind == "summary":
            step, wall_time = event.step, event.wall_time
            for value in event.summary.value:
                if value.WhichOneof("value") == "simple_value":
                    self._number(record_no, step, wall_time, value.tag, value.simple_value)
                else:
                    self._other(record_no, step, wall_time, value)
        elif kind != "file_version":
            self.out.add("unparsed", {"line_no": record_no, "text": f"step {event.step}: {kind} event"})

    def _other(self, record_no: int, step: int, wall_time: float, value: Any) -> None:
        """A summary value that is no `simple_value`: a text, a TF 2 scalar tensor, or what tracelog
        does not read (histograms, images), kept as unparsed."""
        tag = value.tag
        plugin = value.metadata.plugin_data.plugin_name
        if plugin == "text" or tag.endswith(TEXT_SUFFIX):
            self._text(record_no, tag.removesuffix(TEXT_SUFFIX), value)
            return
        number = _scalar(value)
        if number is None:
            what = value.WhichOneof("value") or "empty"
            self.out.add(
                "unparsed", {"line_no": record_no, "text": f"step {step}: {plugin or what} summary {tag!r}"}
            )
            return
        self._number(record_no, step, wall_time, tag, number)

    def _role(self, tag: str) -> tuple[str, str]:
        """What a tag is (decided once per tag): a copy against samples, memory, an iteration column,
        a timer or a metric, and the column or name it goes to."""
        base = tag.removesuffix(SAMPLES_SUFFIX)
        if base != tag and base in self.roles:
            role = ("copy", "")
        elif tag.startswith(DEEPSPEED_SAMPLES):
            role = ("per_sample", tag)
        elif tag in MEMORY_TAGS:
            role = ("memory", MEMORY_TAGS[tag])
        elif tag in ITERATION_TAGS:
            role = ("iteration", ITERATION_TAGS[tag])
        elif tag.endswith(TIMER_SUFFIX):
            role = ("timer", tag.removesuffix(TIMER_SUFFIX))
        else:
            role = ("metric", tag)
        self.roles[tag] = role
        return role

    def _number(self, record_no: int, step: int, wall_time: float, tag: str, number: float) -> None:
        kind, column = self.roles.get(tag) or self._role(tag)
        if kind == "copy":
            # The same value against consumed samples: Megatron writes it right after the iteration's own.
            row = self.steps.get(self.last_step) if self.last_step is not None else None
            if row is not None:
                row["consumed_samples"] = step
            return
        if kind == "per_sample":
            self.out.add(
                "iteration_metrics",
                {
                    "run_key": 0,
                    "key": column,
                    "value": number,
                    "text": f"at {step} samples",
                    "line_no": record_no,
                },
            )
            return
        self.last_step = step
        if kind == "memory":
            mem = self.memory.setdefault(step, {"run_key": 0, "iteration": step, "line_no": record_no})
            mem[column] = number / MIB
            return
        if kind == "iteration":
            row = self.steps.get(step) or self._step(step, record_no, wall_time)
            row[column] = round(number) if column in INTEGER_COLUMNS else number
        elif kind == "timer":
            self._step(step, record_no, wall_time)
            self.out.add(
                "timers",
                {
                    "run_key": 0,
                    "iteration": step,
                    "name": column,
                    "time_ms": number * 1000.0,
                    "line_no": record_no,
                },
            )
        else:
            self._step(step, record_no, wall_time)
            self.out.add(
                "iteration_metrics",
                {"run_key": 0, "iteration": step, "key": column, "value": number, "line_no": record_no},
            )

    def _step(self, step: int, record_no: int, wall_time: float) -> dict[str, Any]:
        """The held row of `step`, opened at its first event (its time is the event's wall time)."""
        row = self.steps.get(step)
        if row is None:
            ts = datetime.fromtimestamp(wall_time, UTC).replace(tzinfo=None)
            row = {"run_key": 0, "iteration": step, "line_no": record_no, "ts": ts}
            self.steps[step] = row
            if len(self.steps) > OPEN_STEPS:
                self._flush(1)
        return row

    def _flush(self, count: int) -> None:
        for step in list(self.steps)[:count]:
            row = self.steps.pop(step)
            if len(row) > 4:  # more than the keys, the record number and the time
                self.out.add("iterations", row)
        while len(self.memory) > OPEN_STEPS:
            self.out.add("memory", self.memory.pop(next(iter(self.memory))))

    def _text(self, record_no: int, tag: str, value: Any) -> None:
        try:
            text = _tensor_util().make_ndarray(value.tensor)
            flat = [
                t.decode("utf-8", errors="replace") if isinstance(t, bytes) else str(t) for t in text.flat
            ]
        except (ValueError, TypeError) as exc:
            self.out.add("events", _event(record_no, "bad_value", f"text summary {tag!r} unreadable: {exc}"))
            return
        self.run.set_arg(tag, "\n".join(flat), record_no)

    def finish(self, name: str | None) -> Batch:
        """Flush every held row; the run's row, handed out last, once every argument was read."""
        self._flush(len(self.steps))
        for step in list(self.memory):
            self.out.add("memory", self.memory.pop(step))
        record = self.run.record()
        if not self.run.args:
            record.pop("framework")
        if name:
            record["name"] = name
        return Batch("runs", [record])


def _scalar(value: Any) -> float | None:
    """The number of a scalar summary: `simple_value` (torch, tensorboardX) or a rank-0 tensor (TF 2)."""
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind == "tensor" and not value.tensor.tensor_shape.dim and value.tensor.dtype not in (0, 7):
        try:
            return float(_tensor_util().make_ndarray(value.tensor).item())
        except (ValueError, TypeError):
            return None
    return None
