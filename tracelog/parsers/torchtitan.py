"""torchtitan's training log (pytorch/torchtitan): PyTorch-native pretraining with FSDP2, TP, PP and CP.

Its metrics line (torchtitan/components/metrics.py, `MetricsProcessor.log`), every `log_freq` steps, on
every rank (torchrun's `[rankN]:` prefix where it tags them), in colours on a terminal:

    [rank0]:[titan] 2026-05-18 16:04:46,338 - root - INFO - step: 14  loss:  3.24405  grad_norm:  0.8319
    memory:  9.46GiB(64.99%)  tps: 7,282  tflops: 0.52  mfu: 0.17%

(one line) gives an `iterations` row per step: the loss, the grad norm and the TFLOP/s per GPU as
printed (`num_flops_per_token * tps`). Seconds per step are not printed: they are the time between this
step's line and the last step's over the steps between, as the metrics processor itself times them
(`time_end_to_end = time_delta / log_freq`); the first step logged has none. `memory` is the peak
reserved memory of the printing rank since the last line (`max_reserved_gib`): a `memory` row per rank.
`tps` (tokens per second per device, `wps` before 2024) and `mfu` (%, `N/A` with FP8) are metrics. The
same step printed by several ranks is one row, the first printed; a step not above the last one starts a
new run (a restart from a checkpoint), as does `Training starts at step N` after steps were read.

The run's configuration, as the trainer prints it at start: `Building device mesh with parallelism:
pp=1, dp_replicate=1, dp_shard=8, cp=1, tp=1, ep=1` (or, before 2025, `Building 2-D device mesh with
['dp_shard', 'tp'], [4, 2]`), `Model llama3 8B size: 8,030,261,248 total parameters`, `Trainer is
initialized with ... tokens per train step, ..., maximum context length 8192, total steps 1000` (before
2025: `Training starts at step 1, with local batch size 1, global batch size 8, sequence length 8192,
total steps 1000 (warmup 200)`) and `Peak FLOPS used for computing MFU: 9.890e+14`. The `CUDA capacity:
NVIDIA H100 80GB HBM3 with 79.11GiB memory` line names the GPU for the hardware scan, as unparsed lines
do. Warnings and tracebacks are events; anything else is `unparsed`.

What the model needs and the log says only by name (`model_inputs`): the shape of a flavour it built
without printing its arguments (`Building llama3 8B`, `Model llama3 8B size: ...`; `torchtitan_flavors`),
FSDP as ZeRO-3 (`Applied FSDP to the model`, or a mesh with dp_shard > 1), and activation checkpointing
(`Applied selective activation checkpointing to the model`, `Applied FullAC ...`: recompute `op` or
`full`); `Compiling each TransformerBlock with torch.compile` and `Compiling the loss function with
torch.compile` are kept as parameters (`torch_compile`, `compiled_loss`). The checkpointer's
saves are events (`Finished saving the checkpoint ...`: `checkpoint_saved`).

A launch starts the next run once steps were read, whatever its step numbers: its command
(`./run_train.sh ...`, `./run_llama_train.sh` before 2025, the `+ torchrun --nproc_per_node=8 ...` their
`set -x` echoes, `python -m torchtitan.train`), torchrun's banner (`Setting OMP_NUM_THREADS environment
variable for each process ...`), or the trainer's first lines (`torchtitan version: ...`, `Starting job:`,
`Building llama3 8B ...`, `Building device mesh ...`, the model's size, `Float8 training active ...`, the
batch and step totals). A command is kept as the run's `launch_command`; its `--nproc_per_node` (or the
script's `NGPU=`) gives the GPUs per node, and float8 linears (`--model.converters float8`,
`quantize.linear.float8`, 2024's `--float8.enable_float8_linear`, or the trainer's `Float8 training active`
/ `Swapped to Float8Linear layers`) give precision fp8.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from tracelog.parsers.base import PARTLY_READ_EVENT, Batch, Emitter, LineSource, drive, guarded
from tracelog.parsers.event_words import EVENT_WORDS_RX, kind_of
from tracelog.parsers.prefixes import TORCHRUN_BANNER
from tracelog.parsers.run_rows import RunRows, printed_number
from tracelog.parsers.torchtitan_flavors import flavor_shape

FORMAT = "torchtitan"
VERSION = "7"  # "2": a launch (its command, torchrun's banner, the trainer's first lines) starts a run; "3": a fork's
# `step: 640/644 = 99.3789%`, and `Training completed` as the `training_done` event; "4": a step line cut inside its
# last figure keeps its other figures; "5": a loss of -1.0 (a rank without the last pipeline stage) is no loss, and
# the trainer-initialized line of spring 2025 (no accumulation) is read; "6": `Compiling the loss function with
# torch.compile` as `compiled_loss`; "7": `tflops: 0.00` with `mfu: 0.00%` (a model whose FLOPs torchtitan does not
# count) is no rate, and `memory: 0.00GiB(0.00%)` (an allocator without statistics) no memory row

NUM = r"([-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)"
RANK_RX = re.compile(r"^\s*\[rank(\d+)\]:")
STAMP_RX = re.compile(r"(?:\[titan\] |^\s*\[)(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:,(\d{3,6}))?")
"""torchtitan's logger (`[titan] 2026-05-18 16:04:46,338 - root - INFO - ...`), or the `ezpz` logger some
forks run it under (`[2025-09-11 14:09:46,954794][I][components/metrics:437:log] step: 1 ...`)."""
# A fork prints how far the steps went: `step: 640/644 = 99.3789%  loss: ...` (AICrossSim/NewComputeBench).
STEP_RX = re.compile(r"(?<![\w])(?<!validate )step:\s*(\d+)(?:\s*/\s*\d+\s*=\s*[\d.]+%)?\s+loss:\s*" + NUM)
VALIDATE_RX = re.compile(r"validate step:\s*(\d+)\s+loss:\s*" + NUM)
# torchtitan's `memory: 171.75GiB(96.29%)` is the peak over the device's capacity (`device_capacity_gib`):
# the capacity, where nothing names the GPU, for the memory rules; read where the share is large enough for
# its two decimals to give it to 0.1 %
MEMORY_SHARE_RX = re.compile(r"\bmemory:\s*([\d.]+)GiB\((\d+\.\d+)%\)")
FIELD_RX = re.compile(r"\b(grad_norm|memory|tps|wps|tflops|mfu):\s*" + NUM[:-1] + r"|N/A)(GiB)?")
CUT_FIGURE_RX = re.compile(r"\b([A-Za-z_]+):\s*" + NUM + r"\s*$")
"""A step line that ends in a bare figure: torchtitan ends every step line with `mfu: 34.29%` (its metrics
processor, every version and the forks it was copied into), so the line was cut inside that figure, which
may have lost digits (`loss:  3` of `loss:  3.00867`); it is not kept."""
MESH_RX = re.compile(r"Building device mesh with parallelism: (.*)")
OLD_MESH_RX = re.compile(r"Building \d+-D device mesh with \[([^\]]*)\], \[([^\]]*)\]")
SIZE_RX = re.compile(r"\bsize: ([\d,]+) total parameters")
PER_RANK_RX = re.compile(r"(?<![\d,])([\d,]+) tokens per DP rank, .*gradient accumulation steps (\d+)")
"""2025's `Trainer is initialized with 8192 tokens per DP rank, 65536 tokens per train step, gradient
accumulation steps 1, maximum context length 8192, ...`: a micro-batch is tokens per rank / (context x
accumulation)."""
INITIALIZED_RX = re.compile(
    # the count only from a run's first digit: a line of digits would otherwise backtrack quadratically
    r"(?<![\d,])([\d,]+) tokens per train step, .*maximum context length (\d+), total steps (\d+)"
)
# since late 2025: `Trainer is initialized with local batch size 8, global batch size 64, gradient accumulation
# steps 1, sequence length 2048, total steps 10 (warmup 2)`; from March to June 2025 (torchtitan@12983cc to the
# gradient accumulation of #1238) without the accumulation: `... local batch size 2, global batch size 2, sequence
# length 4096, total steps 10 (warmup 2).`, the global batch then local batch x data-parallel degree
INITIALIZED_2025_RX = re.compile(
    r"Trainer is initialized with local batch size (\d+), global batch size (\d+), (?:gradient accumulation "
    r"steps (\d+), )?sequence length (\d+), total steps (\d+)"
)
STARTS_RX = re.compile(
    r"Training starts at step (\d+)(?:, with local batch size (\d+), global batch size (\d+), "
    r"sequence length (\d+), total steps (\d+))?"
)
PEAK_RX = re.compile(r"Peak FLOPS used for computing MFU: " + NUM)
JOB_RX = re.compile(r"\bStarting job: (.*)")
# `Building llama3 8B with TransformerModelArgs(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, vocab_size=...,
# multiple_of=1024, ffn_dim_multiplier=1.3, ...)`: the Llama shape (torchtitan/models/llama3/model/args.py)
MODEL_ARGS_RX = re.compile(r"\bTransformerModelArgs\((.*)\)")
MODEL_ARG_RX = re.compile(
    r"\b(dim|n_layers|n_heads|n_kv_heads|vocab_size|multiple_of|ffn_dim_multiplier)=([\w.]+)"
)
# a launch command as a shell, a paste (`$ `, `> `) or `set -x` (`+ `) shows it
LAUNCH_RX = re.compile(
    r"(?:^|[\s/])(?:run_train\.sh|run_llama_train\.sh)(?:\s|$)|(?:^|[\s;&+])torchrun\s+(?:--|-m\s|\S+\.py\b)"
    r"|-m\s+torchtitan\.train\b"
)
OWN_LAUNCH_RX = re.compile(
    r"(?:^|[\s/])(?:run_train\.sh|run_llama_train\.sh)(?:\s|$)|-m\s+torchtitan\.train\b"
)
"""torchtitan's launch scripts, not any torchrun: what detection may take as torchtitan's."""
NPROC_RX = re.compile(r"--nproc[_-]per[_-]node[= ]+(\d+)(?![\w.])|(?<![\w$])NGPU=(\d+)(?![\w.])")
FLOAT8_COMMAND_RX = re.compile(
    r"--model\.converters[= ]+[\"']?[\w.,\[\] \"']*?\bfloat8\b|--quantize\.linear\.float8\b"
    r"|--float8\.enable_float8_linear\b"
)
FLOAT8_RX = re.compile(r"\bFloat8 training active\b|\bSwapped to Float8Linear layers\b")
VERSION_RX = re.compile(r"\btorchtitan version: (\S+)")
BUILDING_RX = re.compile(r"(?:^|INFO - |\]:)\s*Building [\w.-]+ ")  # the model, its tokenizer, its logger
MODEL_BUILT_RX = re.compile(r"\bBuilding ([\w.-]+ [\w.-]+)(?: with | on meta device|\s*$)")
START_LINES = (
    JOB_RX, MESH_RX, OLD_MESH_RX, SIZE_RX, INITIALIZED_RX, INITIALIZED_2025_RX, STARTS_RX, VERSION_RX,
    BUILDING_RX, FLOAT8_RX,
)  # fmt: skip
# The trainer's last word once its loop returned (torchtitan/trainer.py `logger.info("Training completed")`):
# what fails after it (process-group teardown aborting, SIGABRT) lost no step.
MODEL_SIZE_RX = re.compile(r"\bModel ([\w.-]+ [\w.-]+) size: ")
AC_RX = re.compile(r"\bApplied (\w+) activation checkpointing to the model")
"""`selective` or `full` until 2025 (parallelize_llama.py `apply_ac`), the class's name since
(`SelectiveAC`, `FullAC`, `MemoryBudgetAC`: distributed/activation_checkpoint.py)."""
SHARDING_RX = re.compile(r"\bApplied (FSDP|HSDP|DDP) to the model")
COMPILE_RX = re.compile(r"\bCompiling each TransformerBlock with torch\.compile")
COMPILE_LOSS_RX = re.compile(r"\bCompiling the loss function with torch\.compile")
"""components/loss.py since bbb1b616e (2025-04-02): the loss compiled with the run (`--training.compile`; since
2025-08 `--compile.components`, which may compile it alone); before, torchtitan never compiled it."""
LAYER_SAC_RX = re.compile(r"selective[_-]ac[_-]option[= ]+['\"]?\d")
CHECKPOINT_RX = re.compile(
    r"\b(?:Finished (saving|staging|loading) the checkpoint|(Saving) the checkpoint)\b"
)
"""The checkpointer's words (components/checkpoint.py, checkpointer/dcp.py): `Finished saving the checkpoint
(or staging if async is enabled)in 21.38 seconds.` (2024-25; `Finished {phase} the checkpoint in ...` since),
`Saving the checkpoint (or staging if async is enabled).` and `Finished loading the checkpoint in ...` (the
`Loading the checkpoint ...` before it stays unparsed, as does `Saving a full checkpoint at last step, step
N.`, a save that finishes before the next line and prints no end of its own).
Staged only (an async save still writing) is a save begun, not one on disk."""
CHECKPOINT_KINDS = {
    "saving": "checkpoint_saved",
    "staging": "checkpoint_saving",
    "loading": "checkpoint_loaded",
    "Saving": "checkpoint_saving",
}
DONE_RX = re.compile(r"(?:^|INFO - |\]:)\s*Training completed\s*$")
NO_LOSS_HERE = -1.0
"""The loss a rank without the last pipeline stage prints: it computes none (train.py since pipeline parallelism
came in May 2024, pytorch/torchtitan@aafe0e8, and trainer.py since: `torch.tensor([-1.0])` on a rank that is
not the last stage), so a
pipeline-parallel run logged from rank 0 (`LOG_RANK=0`, the default) prints `loss: -1.0000` at every step
(pytorch/torchtitan#1232). No cross-entropy is negative: the figure is no loss."""
METRIC_KEYS = {"tps": "tokens per second per device", "wps": "tokens per second per device", "mfu": "mfu (%)"}


LOGGER_RX = re.compile(r"\[titan\] \d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} - [\w.]+ - [A-Z]+ - ")
"""torchtitan's logger (torchtitan/tools/logging.py: `[titan] %(asctime)s - %(name)s - %(levelname)s - `), the
logger's name `root` until late 2025 and the module's since (`torchtitan.trainer`, pytorch/torchtitan#4628)."""


def detect(head: str) -> int:
    """Two metrics lines of torchtitan's shape (a step, a loss and its throughput), or one with its `[titan]`
    logger or its memory as torchtitan prints it (`memory: 87.04GiB(93.48%)`); else, a log cut before its
    first step (a crash at start, a paste of the setup), two of the trainer's own lines: its logger's, or its
    start lines that name it (the device mesh, the batch and step totals, its version), or one with its launch
    script (`./run_train.sh`) on another line."""
    lines = head.split("\n")
    steps = [line for line in lines if STEP_RX.search(line) and ("tps:" in line or "wps:" in line)]
    if len(steps) >= 2 or (steps and ("[titan]" in head or MEMORY_SHARE_RX.search(steps[0]))):
        return 40
    own = sum(1 for line in lines if LOGGER_RX.search(line) or _names_torchtitan(line))
    if own >= 2 or (own and any(OWN_LAUNCH_RX.search(line) for line in lines)):
        return 30  # as nanotron's logger before any step; below any parser's own lines
    return 0


def _names_torchtitan(line: str) -> bool:
    """A start line only torchtitan's trainer prints (`Training starts at step N` alone is anyone's)."""
    if any(rx.search(line) for rx in (MESH_RX, OLD_MESH_RX, INITIALIZED_RX, INITIALIZED_2025_RX, VERSION_RX)):
        return True
    starts = STARTS_RX.search(line)
    return starts is not None and starts.group(2) is not None


class _Parser(RunRows):
    framework = FORMAT

    def __init__(self) -> None:
        super().__init__()
        self.out = Emitter()
        self.validated: set[tuple[int, str]] = set()  # (run, step) of the validation lines read
        self.last_step: int | None = None
        self.last_stamp: datetime | None = None
        self.memory_step: int | None = None
        self.memory_seen: set[int | None] = set()  # the ranks whose memory of `memory_step` was read
        self.last_row: dict[str, Any] | None = None  # the last step's row, while the emitter holds it

    def new_run(self) -> None:
        if self.last_step is not None:
            self.run_key += 1
            self.last_step, self.last_stamp, self.last_row = None, None, None
            self.memory_step, self.memory_seen = None, set()

    def line(self, n: int, text: str) -> None:
        body = text  # colour codes are gone already (`LineSource` removes them)
        rank_match = RANK_RX.match(body)
        rank = int(rank_match.group(1)) if rank_match else None
        if match := STEP_RX.search(body):
            self.step(n, body, match, rank)
        elif match := VALIDATE_RX.search(body):
            if (self.run_key, match.group(1)) in self.validated:
                return  # the same validation from another rank
            self.validated.add((self.run_key, match.group(1)))
            metric = {"run_key": self.run_key, "iteration": int(match.group(1)), "key": "validation loss"}
            self.out.add(
                "iteration_metrics",
                {**metric, "value": printed_number(match.group(2)), "text": match.group(2), "line_no": n},
            )
        elif match := CHECKPOINT_RX.search(body):
            word = next(g for g in match.groups() if g)
            self.out.add(
                "events",
                {"run_key": self.run_key, "line_no": n, "kind": CHECKPOINT_KINDS[word], "text": text},
            )
        elif DONE_RX.search(body):
            self.out.add(
                "events", {"run_key": self.run_key, "line_no": n, "kind": "training_done", "text": text}
            )
        elif not self.config(n, body) and body.strip():
            if EVENT_WORDS_RX.search(body):
                self.out.add(
                    "events", {"run_key": self.run_key, "line_no": n, "kind": kind_of(body), "text": text}
                )
            else:
                self.out.add("unparsed", {"line_no": n, "text": text})

    def step(self, n: int, body: str, match: re.Match[str], rank: int | None) -> None:
        step = int(match.group(1))
        fields = {key: (value, unit) for key, value, unit in FIELD_RX.findall(body)}
        cut = CUT_FIGURE_RX.search(body)
        if cut:
            fields.pop(cut.group(1), None)
            self.out.add("unparsed", {"line_no": n, "text": body})
            text = f"step line cut inside its last figure, `{cut.group(0).strip()}` not kept"
            self.out.add(
                "events", {"run_key": self.run_key, "line_no": n, "kind": PARTLY_READ_EVENT, "text": text}
            )
        if self.last_step is not None and step < self.last_step:
            self.new_run()  # a restart from a checkpoint logs steps again
        if step != self.memory_step:  # ranks print a step's lines together: only its own are held
            self.memory_step, self.memory_seen = step, set()
        share = MEMORY_SHARE_RX.search(body)
        if share and float(share.group(1)) == 0 and float(share.group(2)) == 0:
            # the allocator kept no statistics (PYTORCH_NO_CUDA_MEMORY_CACHING=1, a device without them): no
            # peak was measured, and 0 MiB would read as a run that used no memory
            fields.pop("memory", None)
            self.param(
                n, "memory_not_measured", "memory: 0.00GiB(0.00%): the device reported no reserved memory"
            )
        if "memory" in fields and rank not in self.memory_seen:
            self.memory_seen.add(rank)
            gib = printed_number(fields["memory"][0])
            at = {"run_key": self.run_key, "iteration": step, "rank": rank, "line_no": n}
            self.out.add("memory", {**at, "max_reserved_mib": gib * 1024 if gib is not None else None})
            said = self.run(n)["run_params"]
            if (
                share
                and float(share.group(2)) >= 10
                and not any(p["name"] == "device_memory_mib" for p in said)
            ):
                self.param(
                    n, "device_memory_mib", round(float(share.group(1)) / float(share.group(2)) * 102400)
                )
        loss = None if cut and cut.group(1) == "loss" else printed_number(match.group(2))
        if loss == NO_LOSS_HERE:
            loss = None
            who = f"rank {rank}" if rank is not None else "the printing rank"
            self.param(n, "loss_not_logged", f"{who} prints -1.0: it holds no last pipeline stage")
        if step == self.last_step:
            pending = self.out.tables.get("iterations") or []
            row = self.last_row
            if (
                loss is not None
                and row is not None
                and row["lm_loss"] is None
                and pending
                and pending[-1] is row
            ):
                row["lm_loss"] = loss  # the last stage's rank, after one that holds no loss (LOG_RANK=0,15)
            return  # the same step from another rank
        self.run(n)
        stamp = STAMP_RX.search(body)
        ts = None
        if stamp:
            ts = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S")
            fraction = stamp.group(2) or "0"
            ts = ts.replace(microsecond=int(fraction.ljust(6, "0")[:6]))
        elapsed = None
        if (
            ts is not None
            and self.last_stamp is not None
            and self.last_step is not None
            and step > self.last_step
        ):
            elapsed = round((ts - self.last_stamp).total_seconds() / (step - self.last_step), 6)
        row = {
            "run_key": self.run_key,
            "iteration": step,
            "rank": rank,
            "lm_loss": loss,
            "grad_norm": printed_number(fields["grad_norm"][0]) if "grad_norm" in fields else None,
            "tflops_reported": self.tflops(n, fields),
            "elapsed_s": elapsed,
            "ts": ts,
            "line_no": n,
        }
        self.out.add("iterations", row)
        self.last_row = row
        for key, name in METRIC_KEYS.items():
            if key in fields:
                value = fields[key][0]
                metric = {"run_key": self.run_key, "iteration": step, "key": name, "text": value}
                self.out.add("iteration_metrics", {**metric, "value": printed_number(value), "line_no": n})
        self.last_step, self.last_stamp = step, ts

    def tflops(self, n: int, fields: dict[str, tuple[str, str]]) -> float | None:
        """The step's TFLOP/s per GPU as printed (`num_flops_per_token * tps`), none where it prints 0.00 with
        an MFU of 0.00%: a model whose FLOPs torchtitan does not count (`get_nparams_and_flops` returns 0, as
        for FLUX: torchtitan/models/flux/README.md, TODO), not a measured rate."""
        if "tflops" not in fields:
            return None
        tflops = printed_number(fields["tflops"][0])
        mfu = printed_number(fields["mfu"][0]) if "mfu" in fields else None
        if tflops == 0 and mfu in (0, None):
            self.param(
                n, "tflops_not_counted", "tflops: 0.00, mfu: 0.00%: torchtitan counts no FLOPs for this model"
            )
            return None
        return tflops

    def config(self, n: int, body: str) -> bool:
        """A line of the launch or of the trainer's start that says the run's layout, size or length; after
        steps were read, such a line is the start of the next run (a relaunch logging to the same file)."""
        if LAUNCH_RX.search(body):
            self.new_run()
            self.launch(n, body)
            return True
        if TORCHRUN_BANNER in body:
            self.new_run()
            self.run(n)
            return False  # torchrun's warning: an event or unparsed, as before
        if any(rx.search(body) for rx in START_LINES):
            self.new_run()
        if match := MESH_RX.search(body):
            degrees = {
                k.strip(): int(v)
                for k, _, v in (p.partition("=") for p in match.group(1).split(","))
                if v.strip().isdigit()
            }
            self.layout(n, degrees)
            self.param(n, "device_mesh", match.group(1).strip())
        elif match := OLD_MESH_RX.search(body):
            names = [name.strip(" '\"") for name in match.group(1).split(",")]
            sizes = [int(size) for size in match.group(2).split(",") if size.strip().isdigit()]
            self.layout(n, dict(zip(names, sizes, strict=False)))
            self.param(n, "device_mesh", f"{match.group(1)} {match.group(2)}")
        elif match := SIZE_RX.search(body):
            self.run(n)["params"] = int(match.group(1).replace(",", ""))
            if named := MODEL_SIZE_RX.search(body):
                self.param(n, "model", named.group(1))
        elif match := AC_RX.search(body):
            self.param(n, "activation_checkpointing", match.group(1))
        elif match := SHARDING_RX.search(body):
            self.param(n, "data_parallel", match.group(1))
        elif COMPILE_RX.search(body):
            self.param(n, "torch_compile", True)
        elif COMPILE_LOSS_RX.search(body):
            self.param(n, "compiled_loss", True)
        elif match := INITIALIZED_2025_RX.search(body):
            local, global_, seq, steps = (int(match.group(i)) for i in (1, 2, 4, 5))
            self.run(n).update(mbs=local, gbs=global_, seq_len=seq, train_iters=steps)
            if match.group(3) is not None:
                self.param(n, "gradient_accumulation_steps", match.group(3))
            accumulation = int(match.group(3) or 1)  # none printed before torchtitan had any
            if (
                local and accumulation and global_ % (local * accumulation) == 0
            ):  # global = local x dp x accum.
                self.run(n).setdefault("dp", global_ // (local * accumulation))
        elif match := INITIALIZED_RX.search(body):
            tokens, context, steps = (int(g.replace(",", "")) for g in match.groups())
            run = self.run(n)
            run["train_iters"] = steps
            if context:  # a context length of 0 says nothing of the sequence (and would divide by it)
                run["seq_len"] = context
                if tokens % context == 0:
                    run["gbs"] = tokens // context
            if (per_rank := PER_RANK_RX.search(body)) and context:
                rank_tokens, accumulation = int(per_rank.group(1).replace(",", "")), int(per_rank.group(2))
                if accumulation and rank_tokens % (context * accumulation) == 0:
                    run["mbs"] = rank_tokens // (context * accumulation)
        elif match := STARTS_RX.search(body):
            if match.group(2) is not None:
                local, global_, seq, steps = (int(g) for g in match.groups()[1:])
                self.run(n).update(mbs=local, gbs=global_, seq_len=seq, train_iters=steps)
            self.param(n, "start_step", match.group(1))
        elif match := MODEL_ARGS_RX.search(body):
            self.model_shape(n, dict(MODEL_ARG_RX.findall(match.group(1))))
        elif match := PEAK_RX.search(body):
            self.param(n, "peak_flops_for_mfu", match.group(1))
        elif match := JOB_RX.search(body):
            self.param(n, "job_description", match.group(1).strip())
        elif match := VERSION_RX.search(body):
            self.param(n, "torchtitan_version", match.group(1))
        elif FLOAT8_RX.search(body):
            self.run(n)["precision"] = "fp8"
        elif match := MODEL_BUILT_RX.search(body):
            self.param(n, "model", match.group(1))
        else:
            return False
        return True

    def launch(self, n: int, body: str) -> None:
        """The launch command: kept verbatim (past a prompt or `set -x`'s `+ `), with the processes per
        node torchrun starts (`NGPU` is run_train.sh's `--nproc_per_node`) and float8 linears."""
        run = self.run(n)
        self.param(n, "launch_command", re.sub(r"^\s*(?:[$>+]\s+)+", "", body).strip())
        if match := NPROC_RX.search(body):
            per_node = int(match.group(1) or match.group(2))
            if 0 < per_node <= 64:
                run["gpus_per_node"] = per_node
        if FLOAT8_COMMAND_RX.search(body):
            run["precision"] = "fp8"

    def model_shape(self, n: int, args: dict[str, str]) -> None:
        """Run columns from a Llama `TransformerModelArgs`; the FFN width as its FeedForward computes it
        (torchtitan/models/llama3/model/model.py: 2/3 of 4·dim, times ffn_dim_multiplier, rounded up to a
        multiple of multiple_of) and a gated (SwiGLU) MLP."""
        if not (args.get("dim", "").isdigit() and args.get("n_layers", "").isdigit()):
            return
        dim, run = int(args["dim"]), self.run(n)
        run.update(hidden=dim, layers=int(args["n_layers"]), swiglu=True)
        for key, column in (("n_heads", "heads"), ("n_kv_heads", "query_groups"), ("vocab_size", "vocab")):
            if args.get(key, "").isdigit():
                run[column] = int(args[key])
        ffn = int(2 * 4 * dim / 3)
        multiplier, multiple = printed_number(args.get("ffn_dim_multiplier", "")), args.get("multiple_of", "")
        if multiplier is not None:
            ffn = int(multiplier * ffn)
        if multiple.isdigit():
            ffn = int(multiple) * ((ffn + int(multiple) - 1) // int(multiple))
        run["ffn_hidden"] = ffn

    def layout(self, n: int, degrees: dict[str, int]) -> None:
        run = self.run(n)
        for name, column in (("tp", "tp"), ("pp", "pp"), ("cp", "cp")):
            if name in degrees:
                run[column] = degrees[name]
        if degrees.get("dp_shard", 1) > 1:  # torchtitan shards with FSDP2 whenever it is (`apply_fsdp`)
            run["zero_stage"] = 3
        dp = degrees.get("dp_replicate", 1) * degrees.get("dp_shard", 1) * degrees.get("dp", 1)
        run["dp"] = dp
        run["gpus"] = dp * degrees.get("tp", 1) * degrees.get("pp", 1) * degrees.get("cp", 1)

    def finish(self) -> None:
        for run in self.runs.values():
            self.model_inputs(run)
            self.out.add("runs", run)

    def model_inputs(self, run: dict[str, Any]) -> None:
        """What the model needs that the log says only by name: the shape of a flavour the trainer did not
        print the arguments of (`torchtitan_flavors`), FSDP as ZeRO-3 (`Applied FSDP`; a mesh with
        `dp_shard` > 1 says it in `layout`; `Applied DDP` replicates), and
        activation checkpointing: `full`, or torchtitan's per-operation selective policy (`op`, the
        option of its shipped Llama configurations) unless the command asked for every N-th layer."""
        params = {p["name"]: p["value"] for p in run["run_params"]}
        if "layers" not in run and (shape := flavor_shape(params.get("model", ""))):
            for key, value in shape.items():
                run.setdefault(key, value)
        sharding = params.get("data_parallel")
        if sharding in ("FSDP", "HSDP"):
            run.setdefault("zero_stage", 3)
        elif sharding == "DDP":  # replicas only: torchtitan applies DDP where dp_shard is 1
            run.setdefault("zero_stage", 0)
        mode = (params.get("activation_checkpointing") or "").lower()
        if mode in ("full", "fullac"):
            run.setdefault("recompute", "full")
        elif mode == "selectiveac" or (
            mode == "selective" and not LAYER_SAC_RX.search(params.get("launch_command", ""))
        ):
            run.setdefault("recompute", "op")


@guarded
def parse(source: LineSource) -> Iterator[Batch]:
    parser = _Parser()
    return drive(parser, source)
