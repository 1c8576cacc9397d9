"""The rare lines of a Megatron log that the Python state machine reads one at a time: configuration
echoes (arguments, world size, parameter counts, theoretical memory, an MPI launch), timer blocks in every
`--timing-log-option` layout, evaluations, and DeepSpeed's lines kept as run parameters. The hot lines are
read a block at a time in `megatron`; the few lines `STATEFUL_RX` picks come here, in order."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Protocol

import polars as pl

from tracelog.parsers.base import Batch, as_int, batches_of, numbers_guarded
from tracelog.parsers.deepspeed_config import SEE_MEMORY_RX, see_memory_mib
from tracelog.parsers.megatron_config import RunInfo
from tracelog.parsers.megatron_lines import (
    ARG_LINE_RX,
    ARGS_END,
    ARGS_START,
    DS_MEMORY_RX,
    EFFECTIVE_RX,
    ESTIMATED_RX,
    LINE_PARAMS,
    PADDED_RX,
    PARAMS_BILLIONS_RX,
    PARAMS_RX,
    RANK_PREFIX_RX,
    STRAGGLER_RX,
    THEORY_RX,
    TIMER_ALL_HEAD,
    TIMER_BLOCK_LINE_RX,
    TIMER_NAME_RX,
    TIMER_RANK_RX,
    WORLD_PART_RX,
    WORLD_RX,
    attach_iteration,
    params_billions_name,
    validation_metrics,
)


class TimerBlock(Protocol):
    """What one block hands the next about a timer block being read (the parse's carry)."""

    timer_block: bool
    timer_all: bool
    timer_name: str | None
    timer_line: int


def ensure_run(runs: dict[int, RunInfo], key: int, line_no: int) -> RunInfo:
    if key not in runs:
        runs[key] = RunInfo(key, line_start=line_no)
    return runs[key]


# An MPI launch as a shell echoes it (`$ mpirun --np 8 singularity exec ... train_gpt3_7b_mpi.sh`): a rank
# per process, so `-np` is the world where each process is a trainer's rank (Megatron's MPI scripts read
# OMPI_COMM_WORLD_RANK); where a per-node launcher runs under it (torchrun, DeepSpeed's), `-np` counts
# those, and the line stays for the hardware scan (`--nproc_per_node`); a distribution's name for one MPI's
# launcher included (`mpirun.mpich`, `mpirun.openmpi`, Intel MPI's `mpiexec.hydra`)
MPI_LAUNCH_RX = re.compile(r"(?:^|[\s$>+;&/])(?:mpirun|mpiexec|orterun)(?:\.\w+)?\s")
MPI_RANKS_RX = re.compile(r"\s(?:--?np|-n)(?:\s+|=)(\d+)(?![\w.])")
MPI_PER_NODE_RX = re.compile(r"\s(?:--?npernode|-ppn|-perhost)(?:\s+|=)(\d+)(?![\w.])|\bppr:(\d+):node\b")
PER_NODE_LAUNCHER_RX = re.compile(
    r"\btorchrun\b|torch\.distributed\.(?:launch|run)\b|\bdeepspeed\s|accelerate launch"
)


def mpi_launch(run: RunInfo, line: str, line_no: int) -> bool:
    """An MPI launch of the trainer's ranks: the command as `launch_command`, its rank count as `mpi_ranks`
    and its ranks per node as `mpi_ranks_per_node` (`RunInfo.record` takes them as the GPUs where nothing
    else says how many)."""
    if not MPI_LAUNCH_RX.search(line) or PER_NODE_LAUNCHER_RX.search(line):
        return False
    ranks = MPI_RANKS_RX.search(line)
    if ranks is None:
        return False
    command = re.sub(r"^\s*(?:[$>+]\s+)+", "", line).strip()
    run.params.append({"name": "launch_command", "value": command, "line_no": line_no})
    run.params.append({"name": "mpi_ranks", "value": ranks.group(1), "line_no": line_no})
    if per_node := MPI_PER_NODE_RX.search(line):
        value = per_node.group(1) or per_node.group(2)
        run.params.append({"name": "mpi_ranks_per_node", "value": value, "line_no": line_no})
    return True


def line_param(run: RunInfo, line: str, line_no: int) -> bool:
    """A DeepSpeed line kept as a run parameter (`LINE_PARAMS`); the partition's stages as one, the last."""
    for rx, name in LINE_PARAMS:
        if match := rx.search(line):
            stage = name == "deepspeed_pipe_stage"
            kept = next((p for p in run.params if p["name"] == name), None) if stage else None
            if kept is not None:
                kept["value"] = str(max(int(kept["value"]), int(match.group(1))))
            else:
                run.params.append({"name": name, "value": match.group(1), "line_no": line_no})
            return True
    return False


def stateful_batches(
    stateful: pl.DataFrame, carry: TimerBlock, runs: dict[int, RunInfo], anchors: pl.DataFrame
) -> Iterator[Batch]:
    timers: list[dict[str, Any]] = []
    metrics: list[dict[str, Any]] = []
    scored: list[dict[str, Any]] = []  # validation and test losses, at the iteration they name
    ds_memory: list[dict[str, Any]] = []  # DeepSpeed's memory figures, at the global step they name
    unparsed: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []

    def add(table: str, row: dict[str, Any]) -> None:
        (unparsed if table == "unparsed" else events).append(row)

    for line_no, raw_line, run_key in stateful.select("line_no", "line", "run_key").iter_rows():
        with numbers_guarded(line_no, raw_line, add):
            run = ensure_run(runs, run_key, line_no)
            line = RANK_PREFIX_RX.sub("", raw_line, count=1)
            if ARGS_START.search(line) or ARGS_END in line:
                continue
            if "time across ranks" in line or TIMER_ALL_HEAD in line:
                carry.timer_block, carry.timer_all, carry.timer_name = True, TIMER_ALL_HEAD in line, None
                continue
            if match := TIMER_BLOCK_LINE_RX.match(line):
                low, high = match.group(2), match.group(3)
                timers.append(
                    {
                        "run_key": run_key,
                        "line_no": line_no,
                        "rank": None,
                        "name": match.group(1),
                        "time_min_ms": float(low) if high is not None else None,
                        "time_ms": float(high if high is not None else low),
                    }
                )
                continue
            follows = carry.timer_line == line_no - 1  # the rank lines of one timer are consecutive
            carry.timer_line = line_no
            if carry.timer_all and (match := TIMER_RANK_RX.match(line)) and carry.timer_name and follows:
                timers.append(
                    {
                        "run_key": run_key,
                        "line_no": line_no,
                        "rank": int(match.group(1)),
                        "name": carry.timer_name,
                        "time_min_ms": None,
                        "time_ms": float(match.group(2)),
                    }
                )
                continue
            if carry.timer_all and (match := TIMER_NAME_RX.match(line)):
                carry.timer_name = match.group(1)
                continue
            if match := ARG_LINE_RX.match(line):
                run.set_arg(match.group(1) or match.group(3), match.group(2) or match.group(4) or "", line_no)
                continue
            if match := WORLD_RX.search(line):
                run.set_world(int(match.group(1)), dict(WORLD_PART_RX.findall(match.group(2))), line_no)
                continue
            if match := PARAMS_RX.search(line):
                run.add_rank_params(int(match.group(1)), int(match.group(2)), int(match.group(3)))
                continue
            if match := EFFECTIVE_RX.search(line):
                metrics.append(
                    {
                        "run_key": run_key,
                        "key": "effective tera flops per gpu",
                        "value": float(match.group(1)),
                        "text": line.strip(),
                        "line_no": line_no,
                    }
                )
                if match.group(2):
                    run.params_printed = as_int(float(match.group(2)) * 1e9)  # type: ignore[assignment]
                run.effective_tflops = True
                continue
            if match := THEORY_RX.search(line):
                run.theoretical_memory(match, line_no)
                continue
            if match := PADDED_RX.search(line):
                run.columns["vocab"] = int(match.group(3))
                continue
            if match := PARAMS_BILLIONS_RX.search(line):
                name = params_billions_name(match)
                run.params.append({"name": name, "value": match.group(5), "line_no": line_no})
                if name == "theoretical_params_billions_total" and not run.params_printed:
                    run.params_printed = as_int(float(match.group(5)) * 1e9)  # type: ignore[assignment]
                continue
            if match := ESTIMATED_RX.search(line):
                run.params_printed = as_int(float(match.group(1)) * 1e9)  # type: ignore[assignment]
                continue
            if line_param(run, line, line_no) or mpi_launch(run, line, line_no):
                continue
            if "MnRtt/Rnk:" in line and (figures := STRAGGLER_RX.findall(line)):
                metrics.extend(
                    {
                        "run_key": run_key,
                        "key": f"straggler {name}/Rnk",
                        "value": float(value),
                        "text": f"{value}{unit}/{rank}",
                        "line_no": line_no,
                    }
                    for name, value, unit, rank in figures
                )
                continue
            if "Max_MA " in line and (match := SEE_MEMORY_RX.search(line)):
                # DeepSpeed's `see_memory_usage` (`Before Building Model`, ...): at the iteration before it
                allocated, peak, reserved, peak_reserved = see_memory_mib(match.groups())
                ds_memory.append(
                    {"run_key": run_key, "line_no": line_no, "rank": None, "global_step": None}
                    | {"allocated_mib": allocated, "max_allocated_mib": peak, "reserved_mib": reserved}
                    | {"max_reserved_mib": peak_reserved}
                )
                continue
            if match := DS_MEMORY_RX.search(line):
                gib = 1024.0  # DeepSpeed prints GB of 2^30 bytes (`/ (1024**3)`)
                ds_memory.append(
                    {
                        "run_key": run_key,
                        "line_no": line_no,
                        "rank": None,
                        "global_step": int(match.group(1)),
                        "allocated_mib": float(match.group(2)) * gib,
                        "max_allocated_mib": float(match.group(3)) * gib,
                        "reserved_mib": None,
                        "max_reserved_mib": None,
                    }
                )
                continue
            if (validation := validation_metrics(line)) is not None and validation[1]:
                iteration, figures = validation
                # the end of training's names none: it takes the last iteration line's, as other metrics do
                (metrics if iteration is None else scored).extend(
                    {"run_key": run_key, "key": key, "value": value, "text": text, "line_no": line_no}
                    | ({} if iteration is None else {"iteration": iteration})
                    for key, value, text in figures
                )
                continue
            if line.strip():
                unparsed.append({"line_no": line_no, "text": raw_line})
    # `batches_of`: a rank or value past what polars holds is an event, not a failed frame.
    for table, rows in (("timers", timers), ("iteration_metrics", metrics)):
        for batch in batches_of(table, rows) if rows else ():
            if isinstance(batch.rows, pl.DataFrame) and batch.table == table:
                yield Batch(table, attach_iteration(batch.rows, anchors))
            else:
                yield batch
    if scored:
        yield from batches_of("iteration_metrics", scored)
    if ds_memory:
        yield from batches_of("memory", ds_memory_steps(ds_memory, anchors))
    if unparsed:
        yield Batch("unparsed", unparsed)
    if events:
        yield Batch("events", events)


def ds_memory_steps(rows: list[dict[str, Any]], anchors: pl.DataFrame) -> list[dict[str, Any]]:
    """The iteration of each ThroughputTimer memory line. Its `global_step` counts the steps since the
    process started (runtime/utils.py `ThroughputTimer.global_step_count`), which is the iteration only
    in a run that did not resume: in a resumed one (`global_step=5` between iterations 136004 and 136005)
    it is the step after the iteration line before it."""
    # only the keys go through polars: a printed step past its integers stays a Python int (`batches_of`
    # turns it into an event)
    keys = pl.DataFrame(
        {"run_key": [r["run_key"] for r in rows], "line_no": [r["line_no"] for r in rows]},
        schema={"run_key": pl.Int32, "line_no": pl.Int64},
    ).with_row_index("_at")
    before_of = dict(attach_iteration(keys, anchors).select("_at", "iteration").iter_rows())
    out = []
    for at, row in enumerate(rows):
        row = dict(row)
        step, before = row.pop("global_step"), before_of.get(at)
        if step is None:  # a line without a step of its own (`see_memory_usage`)
            row["iteration"] = before
        else:
            row["iteration"] = before + 1 if before is not None and step <= before else step
        out.append(row)
    return out
