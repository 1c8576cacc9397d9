"""MosaicML Composer's console output, as llm-foundry's `scripts/train/train.py` prints it (MPT and Llama
training with FSDP).

The metrics come in blocks (`composer_block`): a progress header per `console_log_interval`, then one
`\\t Train key: value` line per metric; an evaluation's under `[Eval batch=N/N] Eval on eval data:`. Each
block gives an `iterations` row at its batch (the header's, or `time/batch` plus one where the header counts
epochs or tokens): the loss, the learning rate, the grad norm, the samples per second, the reported TFLOP/s
per GPU, a `memory` row where MemoryMonitor printed, and every other figure as a metric under its key.
Seconds per batch are SpeedMonitor's `throughput/batches_per_sec` inverted (its samples per second over the
global batch where they agree and carry more digits), else, until its window has filled, the difference of
`time/train` since the last block over the batches between; the run parameter `step_time_source` says which
rows took which. Evaluation losses are `validation loss` at the batch the evaluation followed: the last
batch printed, or the first multiple of `eval_interval` at or after it where the configuration gives one
in batches.

The run's configuration is the YAML echo of llm-foundry and the `Config:` block of Composer
(`composer_config`), and llm-foundry's start lines, printed bare until late 2023 (`Building trainer...`,
`cfg.n_params=1.25e+08`) and since behind its logger's prefix (`2024-09-30 02:05:36,662:
rank0[73][MainThread]: INFO: llmfoundry.command_utils.train: Building trainer...`; a warning or an error
behind it is an event), and the command that launched it (`composer -n 8 train.py yamls/...`, `torchrun
... train.py ...`: `launch_command`, its processes per node and nodes). Composer's `Using precision Precision.AMP_BF16` gives the precision; the checkpoint loads and saves
it logs are events, as are warnings, tracebacks and the launcher's `Global rank N (PID p) exited with code
c`. llm-foundry's `Done.` after `trainer.fit()` is `training_done`.

Ranks: torchrun's `[rankN]:` / `[defaultN]:` prefix names the rank of a line; Composer's launcher, when a
rank fails, prints that rank's captured output between `----------Begin global rank N STDOUT----------`
and its `End` line, all of it that rank's (its blocks, from batch 1, are rank N's memory, not new batches;
its start lines start no run). A block is read until its rank prints its next header, so ranks interleaved
line by line are read apart where they are prefixed; one batch printed by several ranks is one `iterations`
row (the first closed), each prefixed rank's memory a row of its own. A line of another stream inside a
block (a warning) leaves the block open.

One run per launch: once a run has printed a batch, the lines a launch prints first (llm-foundry's
`Building tokenizer...`, `Initializing model...`, `Building trainer...`, the config echo, Composer's
`Config:` block, a launch command, torchrun's `Setting OMP_NUM_THREADS` banner, Composer's launcher's
`Starting distributed environment`), a batch more than one below the last
its rank printed, or another total start the next run (a relaunch, a resume from a checkpoint). A figure cut
short (a float with fewer than Composer's four decimals: a log that stops mid-line) is not kept; its line is
unparsed with an `unread_figures` event. Lines of no meaning here are `unparsed`. Memory stays at one block
per rank and the run rows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from tracelog.parsers.base import PARTLY_READ_EVENT, Batch, Emitter, LineSource, drive, guarded
from tracelog.parsers.checkpoints import fill_run
from tracelog.parsers.composer_block import (
    COLUMN_KEYS,
    EVAL_HEADER_RX,
    FLOPS_KEY,
    HEADER_RX,
    LINE_RX,
    LR_RX,
    METRIC_NAMES,
    MFU_KEY,
    Block,
    Figure,
    eval_key,
    memory_row,
    pairs_of,
    rate_seconds,
    read_value,
)
from tracelog.parsers.composer_config import KEY_RX as CONFIG_KEY_RX
from tracelog.parsers.composer_config import RULE, TOP_KEYS, ConfigEcho, attention_backend, run_columns
from tracelog.parsers.composer_lines import (
    CHECKPOINT_RX,
    COMMAND_RX,
    DUMP_RX,
    EVAL_INTERVAL_RX,
    EXITED_RX,
    LAUNCH_RX,
    LOGGER_RX,
    NNODES_RX,
    NPROC_RX,
    PARAMS_RX,
    PRECISION_RX,
    PRECISIONS,
    START_RX,
    TIME_UNITS,
    TORCHRUN_RX,
)
from tracelog.parsers.composer_lines import detect as detect
from tracelog.parsers.event_words import EVENT_WORDS_RX, kind_of
from tracelog.parsers.nanotron import world_size
from tracelog.parsers.prefixes import TORCHRUN_BANNER
from tracelog.parsers.run_rows import RunRows

FORMAT = "composer"
VERSION = "3"  # "2": a head with two lines of Composer's or llm-foundry's loggers in llm-foundry's format is Composer's; "3": a Hugging Face model named by its checkpoint gets its shape (parsers.checkpoints)


class _Parser(RunRows):
    framework = FORMAT

    def __init__(self) -> None:
        super().__init__()
        self.out = Emitter()
        self.echo = ConfigEcho()
        self.expect_echo = False  # after `Logging config`: the next YAML key starts the echo
        self.last_line_rule = False  # the last line was Composer's rule of asterisks
        self.dump_rank: int | None = None
        self.open: dict[int | None, Block] = {}
        self.configs: dict[int, dict[str, str]] = {}
        self.notes: dict[int, dict[str, Any]] = {}  # per run: what the figures told (mbs, GPUs, sources)
        self._reset_run_state()

    def _reset_run_state(self) -> None:
        self.trained = False  # the run printed a batch
        # per rank: (epoch, batch) of its last header
        self.last_header: dict[int | None, tuple[int, int]] = {}
        self.total: int | None = None
        self.last_iteration: int | None = None
        self.last_train_time: tuple[int, float] | None = None  # (batch, time/train) of the last block
        self.eval_seen: tuple[int | None, set[str]] = (None, set())

    def new_run(self) -> None:
        if not self.trained or self.dump_rank is not None:
            return  # nothing trained yet: the launch's lines belong to the run they open
        for rank in list(self.open):
            self.close(rank)
        self.run_key += 1
        self._reset_run_state()

    def config(self) -> dict[str, str]:
        return self.configs.setdefault(self.run_key, {})

    def note(self) -> dict[str, Any]:
        return self.notes.setdefault(self.run_key, {"sources": {}})

    # -- lines ------------------------------------------------------------------------------------------

    def line(self, n: int, text: str) -> None:
        dump = DUMP_RX.match(text)
        if dump:
            self.dump_rank = int(dump.group(2)) if dump.group(1) == "Begin" else None
            self.run(n)
            return
        body, rank = text, self.dump_rank
        if prefix := TORCHRUN_RX.match(body):
            rank, body = int(prefix.group(1)), body[prefix.end() :]
        if (self.echo.active or self.expect_echo) and self.yaml(n, body):
            return
        rule = body.strip() == RULE
        was_rule, self.last_line_rule = self.last_line_rule, rule
        if rule:
            self.run(n)
            return
        if was_rule and body.strip() == "Config:":
            self.new_run()
            self.run(n)
            self.echo.start()
            return
        if body.startswith("["):
            if self.header(n, body, rank):
                return
        elif (match := LINE_RX.match(body)) and body[:1] in "\t ":
            self.metric(n, text, match, rank)
            return
        if logged := LOGGER_RX.match(body):
            self.logged(n, text, logged)
        elif not self.message(n, text, body.strip()):
            self.other(n, text, body)

    def yaml(self, n: int, body: str) -> bool:
        """A line of a config echo (True), or the first line after one (False: read as any other)."""
        if not self.echo.active:
            key = CONFIG_KEY_RX.match(body)
            if key is None or key.group("indent") or key.group("dash"):
                return False
            self.new_run()
            self.echo.start()
            self.expect_echo = False
        leaf = self.echo.feed(body)
        if leaf is False:
            return False
        self.run(n)
        if isinstance(leaf, tuple):
            path, value = leaf
            config = self.config()
            if path not in config:
                config[path] = value
                self.param(n, path, value)
        return True

    def message(self, n: int, text: str, message: str) -> bool:
        """llm-foundry's and Composer's own words, bare or behind llm-foundry's logger; False for others."""
        if COMMAND_RX.search(message):
            self.launch(n, message)
        elif LAUNCH_RX.match(message):
            self.new_run()
            self.run(n)
            if message.startswith("Logging config"):
                self.expect_echo = True
        elif START_RX.match(message):
            self.run(n)
            if message.rstrip(".") == "Done":
                self.event(n, "training_done", text)
        elif match := PARAMS_RX.match(message):
            self.run(n)
            self.note()["params"] = round(float(match.group(1)))
        elif match := PRECISION_RX.match(message):
            self.run(n)
            if match.group(1) in PRECISIONS:
                self.note()["precision"] = PRECISIONS[match.group(1)]
        elif match := CHECKPOINT_RX.match(message):
            word = next(g for g in match.groups() if g)
            kind = {"done saving": "checkpoint_saved", "Saving": "checkpoint_saving"}.get(
                word, "checkpoint_loaded"
            )
            self.event(n, kind, text)
        elif EXITED_RX.match(message):
            self.event(n, "crash", text)
        else:
            return False
        return True

    def launch(self, n: int, command: str) -> None:
        """The command that started the trainer: kept verbatim (past a prompt or `set -x`'s `+ `), with the
        processes per node and the nodes it asks for."""
        self.new_run()
        self.run(n)
        self.param(n, "launch_command", re.sub(r"^\s*(?:[$>+]\s+)+", "", command).strip())
        if match := NPROC_RX.search(command):
            self.note()["gpus_per_node"] = int(match.group(1) or match.group(2))
        if match := NNODES_RX.search(command):
            self.note()["nodes"] = int(match.group(1))

    def logged(self, n: int, text: str, match: re.Match[str]) -> None:
        level, message = match.group(3), match.group(5).strip()
        if level in ("WARNING", "ERROR", "CRITICAL"):
            fallback = "warning" if level == "WARNING" else "error"
            self.event(n, kind_of(message, fallback=fallback, leveled=True), text)
        elif not self.message(n, text, message):
            self.out.add("unparsed", {"line_no": n, "text": text})

    def other(self, n: int, text: str, body: str) -> None:
        if TORCHRUN_BANNER in body:  # torchrun starting a launch: its warning stays unparsed, as before
            self.new_run()
            self.run(n)
        key = CONFIG_KEY_RX.match(body) if body.startswith(tuple(TOP_KEYS)) else None
        if key and not key.group("indent") and key.group("key") in TOP_KEYS and self.yaml(n, body):
            return
        if EVENT_WORDS_RX.search(body):
            self.event(n, kind_of(body), text)
        elif body.strip():
            self.out.add("unparsed", {"line_no": n, "text": text})

    def event(self, n: int, kind: str, text: str) -> None:
        self.out.add("events", {"run_key": self.run_key, "line_no": n, "kind": kind, "text": text})

    # -- blocks -----------------------------------------------------------------------------------------

    def header(self, n: int, body: str, rank: int | None) -> bool:
        if match := HEADER_RX.match(body):
            self.train_header(n, body, rank, match)
            return True
        if match := EVAL_HEADER_RX.match(body):
            self.close(rank)
            self.run(n)
            if match.group(4):  # the closing line of an evaluation, its metrics under it
                self.open[rank] = Block(
                    self.run_key, n, rank, "eval", iteration=self.eval_iteration(), label=match.group(3)
                )
            return True
        return False

    def train_header(self, n: int, body: str, rank: int | None, match: re.Match[str]) -> None:
        rest = match.group("rest")
        header = body[: len(body) - len(rest)]
        open_block = self.open.get(rank)
        if open_block is not None and open_block.header == header and rest.strip():
            self.pairs(n, body, rest, open_block)  # 2022: a metric per line, each behind the header
            return
        self.close(rank)
        self.expect_echo = False
        value, epoch = int(match.group("value")), int(match.group("epoch") or 0)
        total = int(match.group("total")) if match.group("total") else None
        counts_batches = match.group("unit") == "batch" and not epoch
        before = self.last_header.get(rank)
        if self.dump_rank is None and (
            (before is not None and (epoch, value) < (before[0], before[1] - 1))
            or (counts_batches and total is not None and self.total not in (None, total))
        ):
            self.new_run()  # a resume from a checkpoint, or another max_duration
        self.last_header[rank] = (epoch, value)
        if counts_batches and total is not None:
            self.total = total
        self.trained = True
        self.run(n)
        block = Block(
            self.run_key, n, rank, "train", match.group("unit"), value, total, epoch or None, header
        )
        self.open[rank] = block
        if rest.strip():
            self.pairs(n, body, rest, block)

    def pairs(self, n: int, text: str, rest: str, block: Block) -> None:
        """The figures behind a header on its own line; one cut short, or words that give none, leave the line
        read in part."""
        pairs, unread = pairs_of(rest)
        for phase, key, printed in pairs:
            value, _ = read_value(printed)
            if value is None:
                unread += 1
            else:
                block.add(phase, Figure(key, printed, value, n, text))
        if unread or not pairs:
            self.partly_read(n, text)

    def metric(self, n: int, text: str, match: re.Match[str], rank: int | None) -> None:
        block = self.open.get(rank)
        if block is None and rank is not None and self.dump_rank is None:
            block = self.open.get(None)
        if block is None:
            self.out.add("unparsed", {"line_no": n, "text": text})
            return
        value, cut = read_value(match.group("value").strip())
        if value is None:
            if cut:
                self.partly_read(n, text)
            else:
                self.out.add("unparsed", {"line_no": n, "text": text})
            return
        self.run(n)
        block.add(
            match.group("phase"), Figure(match.group("key"), match.group("value").strip(), value, n, text)
        )

    def partly_read(self, n: int, text: str) -> None:
        what = "a figure cut short (Composer prints four decimals), not kept"
        self.out.add("unparsed", {"line_no": n, "text": text})
        self.event(n, PARTLY_READ_EVENT, what)

    def eval_iteration(self) -> int:
        """The batch an evaluation followed: the last printed, or the first multiple of `eval_interval` (in
        batches) at or after it, not past the run's total."""
        last = self.last_iteration or 0
        interval = EVAL_INTERVAL_RX.match(self.config().get("eval_interval", ""))
        if interval and int(interval.group(1)) > 0 and last:
            step = int(interval.group(1))
            rounded = -(-last // step) * step
            last = min(rounded, self.total) if self.total else rounded
        return last

    def close(self, rank: int | None) -> None:
        block = self.open.pop(rank, None)
        if block is None:
            return
        if block.phase == "eval":
            self.emit_evals(block, block.iteration)
            return
        iteration = block.batch()
        if iteration is None:  # a header counting tokens or samples, and no `time/batch` under it
            figures = [*block.figures.values(), *block.evals]
            lines = {block.line_no: block.header, **{f.line_no: f.line for f in figures}}
            for line_no, text in lines.items():
                self.out.add("unparsed", {"line_no": line_no, "text": text})
            return
        repeated = self.last_iteration is not None and iteration <= self.last_iteration
        if not repeated:
            self.emit_train(block, iteration)
            self.last_iteration = iteration
        if not repeated or block.rank is not None:
            self.emit_memory(block, iteration)
        self.emit_evals(block, iteration)

    def emit_train(self, block: Block, iteration: int) -> None:
        figures, note, get = block.figures, self.note(), block.figures.get
        loss = get("loss/train/total") or get("loss/train")
        norm, samples, flops = get("l2_norm/grad/global"), get("throughput/samples_per_sec"), get(FLOPS_KEY)
        elapsed, source = self.seconds(block, iteration)
        if source:
            note["sources"][source] = note["sources"].get(source, 0) + 1
        rate = self.rate_figure(block)
        row = {
            "run_key": block.run_key,
            "iteration": iteration,
            "train_iters": self.total,
            "rank": block.rank,
            "lm_loss": loss.value if loss else None,
            "learning_rate": rate.value if rate and rate.value > 0 else None,
            "grad_norm": norm.value if norm else None,
            "samples_per_s": samples.value if samples else None,
            "tflops_reported": flops.value / 1e12 if flops else None,
            "elapsed_s": round(elapsed, 6) if elapsed is not None else None,
            "line_no": block.line_no,
        }
        self.out.add("iterations", row)
        for key, figure in figures.items():
            if key in METRIC_NAMES:
                name, value = METRIC_NAMES[key], figure.value
            elif key == MFU_KEY:
                name, value = "mfu (%)", figure.value * 100
            elif key in COLUMN_KEYS or (figure is rate and figure.value > 0):
                continue
            else:
                name, value = key, figure.value
            self.metric_row(block.run_key, iteration, name, value, figure)
        if "trainer/device_train_microbatch_size" in figures:
            note["mbs"] = figures["trainer/device_train_microbatch_size"].value
        per_device = get("throughput/device/samples_per_sec")
        if samples and per_device and "world" not in note:
            note["world"] = world_size((samples.text, ""), (per_device.text, ""))

    def seconds(self, block: Block, iteration: int) -> tuple[float | None, str | None]:
        """Seconds per batch from SpeedMonitor's rates, else from `time/train` since the last block."""
        config = self.config()
        gbs = config.get("global_train_batch_size", "")
        elapsed, source = rate_seconds(block.figures, int(gbs) if gbs.isdigit() else None)
        trained = block.figures.get("time/train")
        if elapsed is None and trained is not None and self.last_train_time is not None:
            batch, before = self.last_train_time
            unit = config.get("callbacks.speed_monitor.time_unit", "hours")
            scale = TIME_UNITS.get(unit)
            if scale and iteration > batch and trained.value > before:
                elapsed = (trained.value - before) * scale / (iteration - batch)
                source = f"time/train differences ({unit}, four decimals)"
        if trained is not None and math.isfinite(trained.value):
            self.last_train_time = (iteration, trained.value)
        return elapsed, source

    @staticmethod
    def rate_figure(block: Block) -> Figure | None:
        """The first optimizer's learning rate, group 0 (LRMonitor logs the optimizers in order)."""
        return next(
            (f for key, f in block.figures.items() if (m := LR_RX.match(key)) and m.group(1) == "0"), None
        )

    def emit_memory(self, block: Block, iteration: int) -> None:
        if row := memory_row(block, iteration):
            self.out.add("memory", row)

    def emit_evals(self, block: Block, iteration: int | None) -> None:
        at, seen = self.eval_seen
        if at != iteration:
            at, seen = iteration, set()
            self.eval_seen = (at, seen)
        for figure in block.evals:
            name = eval_key(figure.key)
            if name in seen:
                continue  # the same evaluation from another rank
            seen.add(name)
            self.metric_row(block.run_key, iteration, name, figure.value, figure)

    def metric_row(
        self, run_key: int, iteration: int | None, name: str, value: float, figure: Figure
    ) -> None:
        row = {"run_key": run_key, "iteration": iteration, "key": name, "value": value, "text": figure.text}
        self.out.add("iteration_metrics", {**row, "line_no": figure.line_no})

    # -- end --------------------------------------------------------------------------------------------

    def finish(self) -> None:
        for rank in list(self.open):
            self.close(rank)
        for key, run in self.runs.items():
            config, note = self.configs.get(key, {}), self.notes.get(key, {"sources": {}})
            columns = run_columns(config)
            for column in ("params", "precision", "gpus_per_node", "nodes"):  # what other lines said
                if column not in columns and note.get(column):
                    columns[column] = note[column]
            if "mbs" not in columns and note.get("mbs"):
                columns["mbs"] = int(note["mbs"])  # `auto` microbatching: the size it settled on
            if "gpus" not in columns and note.get("world"):
                columns["gpus"] = note["world"]  # the samples per second over those per device
            run.update(columns)
            fill_run(run, ("model.pretrained_model_name_or_path",))  # a Hugging Face model (`hf_causal_lm`)
            if (backend := attention_backend(config)) is not None:  # the name the model reads
                said = next(
                    p["line_no"] for p in run["run_params"] if p["name"] == "model.attn_config.attn_impl"
                )
                run["run_params"].append({"name": "attention_backend", "value": backend, "line_no": said})
            if note["sources"]:
                sources = "; ".join(
                    f"{source}: {count} row{'s' if count > 1 else ''}"
                    for source, count in note["sources"].items()
                )
                run["run_params"].append(
                    {"name": "step_time_source", "value": sources, "line_no": run["line_start"]}
                )
            self.out.add("runs", run)


@guarded
def parse(source: LineSource) -> Iterator[Batch]:
    return drive(_Parser(), source)
