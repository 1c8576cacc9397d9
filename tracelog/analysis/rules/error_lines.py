"""Error lines in a training log: the line that says a run died (out of memory, a timeout, a failed
process), an exception nobody caught at the log's end, a job killed after its training loop returned,
and NCCL's warnings in a run that went on training."""

from __future__ import annotations

import re
from datetime import datetime

from tracelog.analysis import run_ranges
from tracelog.analysis.rules import Flag
from tracelog.analysis.rules import run_flag as _flag
from tracelog.analysis.scope import Scope
from tracelog.store import Store
from tracelog.store.runs import CHECKPOINT_ITERATION_SQL
from tracelog.thresholds import Thresholds

# Error lines that say the run died (out of memory, a collective that timed out, a process the launcher
# saw fail, a core dump, Slurm cancelling the step at its time limit): the flag is critical and names the
# first of them; other error lines a warning.
FATAL_SQL = (
    "kind IN ('oom', 'timeout', 'crash') OR regexp_matches(lower(text), "
    "'out of memory|timeout|timed out|timing out|failed \\(exitcode|core dumped|cancelled at')"
)


def ended_in_error(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    """Error lines, critical where one says the run died (`FATAL_SQL`) or the log ends in an exception
    nobody caught: a traceback after the last iteration line, and an error line after it (Python prints
    the exception last: `AttributeError: 'GPTModel' object has no attribute ...`). The last iteration line
    is the ranges' (`run_ranges.PARTS`), not a scan of every line of the run; and the done mark is looked
    for after the earliest of the runs' last iteration lines, a literal range whose row groups alone DuckDB
    reads (the text of every event of the run was read for it: the 702,000 warnings of the 1 GB benchmark
    log, 10-21 ms of the refresh after its growth, where the rule takes 4 ms now)."""
    scope = run_ranges.prepare(store, scope)
    after = store.scalar(
        f"SELECT min(coalesce(p.last_line, 0)) FROM runs r LEFT JOIN {run_ranges.PARTS} p "
        f"ON p.run_id = r.run_id AND p.part = 'all' WHERE {scope.runs.replace('run_id', 'r.run_id')}"
    )
    rows = store.con.execute(
        f"""
        WITH last_step AS (
            SELECT run_id, last_line AS stepped FROM {run_ranges.PARTS} WHERE {scope.runs} AND part = 'all'
        ), last_traceback AS (
            SELECT run_id, max(line_no) AS traced FROM events
            WHERE {scope.runs} AND kind = 'traceback' GROUP BY run_id
        ), done AS (
            SELECT e.run_id, min(e.line_no) AS done_line, arg_min(e.text, e.line_no) AS done_text
            FROM events e LEFT JOIN last_step s USING (run_id)
            WHERE {scope.runs.replace("run_id", "e.run_id")} AND e.run_id IS NOT NULL
              AND (e.kind = 'training_done' OR contains(e.text, '{DONE_MARK}'))
              AND e.line_no > coalesce(s.stepped, 0) AND e.line_no > {int(after or 0)}
            GROUP BY e.run_id
        ), errors AS (
            SELECT e.run_id, e.text, e.line_no, e.kind, ({FATAL_SQL}) AS fatal, s.stepped,
                   e.kind = 'error' AND b.traced >= coalesce(s.stepped, 0) AND e.line_no > b.traced AS uncaught
            FROM events e LEFT JOIN last_step s USING (run_id) LEFT JOIN last_traceback b USING (run_id)
            WHERE {scope.runs.replace("run_id", "e.run_id")} AND e.run_id IS NOT NULL
              AND e.kind IN ('error', 'oom', 'crash', 'nccl_warn', 'timeout')
              -- NCCL's warnings in a run that trained on after them are diagnostics (`nccl_warnings`)
              AND NOT (e.kind = 'nccl_warn' AND e.line_no < coalesce(s.stepped, 0) AND NOT ({FATAL_SQL}))
        )
        SELECT run_id, arg_max(text, line_no), max(line_no), count(*),
               -- an error line glued to the end of the last step's line (a progress bar that did not end
               -- its line) came after that step
               arg_min(text, line_no) FILTER (fatal AND line_no >= coalesce(stepped, 0)),
               min(line_no) FILTER (fatal AND line_no >= coalesce(stepped, 0)),
               max(line_no) FILTER (uncaught),
               arg_min(text, line_no) FILTER (fatal AND line_no < stepped),
               min(line_no) FILTER (fatal AND line_no < stepped), any_value(stepped),
               arg_min(text, line_no) FILTER (kind = 'error' AND line_no >= coalesce(stepped, 0)),
               min(line_no) FILTER (kind = 'error' AND line_no >= coalesce(stepped, 0)),
               any_value(d.done_line), any_value(d.done_text)
        FROM errors LEFT JOIN done d USING (run_id) GROUP BY run_id
        """
    ).fetchall()
    flags = []
    for (
        run_id, text, line, count, fatal_text, fatal_line, uncaught_line,
        went_text, went_line, stepped, first_text, first_line, done_line, done_text,
    ) in rows:  # fmt: skip
        ended = fatal_line if fatal_line is not None else uncaught_line
        if ended is not None and done_line is not None and ended >= done_line:
            flags.append(
                _finished_then_ended(run_id, text, count, stepped, done_line, done_text, ended, fatal_text)
            )
            continue
        # a fatal line with iterations after it: a restart within the job (NeMo's in-job restart,
        # torchrun's --max-restarts) went on training, so the run did not end there
        died = _went_on(went_text, went_line, stepped, last=line)
        died += (
            f" It died at line {fatal_line}: {sentence(fatal_text)}"
            if fatal_line is not None and fatal_line != line
            else ""
        )
        if fatal_line is None and uncaught_line is not None:
            died = " The log ends in that exception, after its traceback: the process died of it."
        if fatal_line is not None and first_line is not None and first_line < fatal_line:
            # what it died of is often a symptom (other ranks time out waiting for one that failed)
            died += f" An error came before it, at line {first_line}: {sentence(first_text)}"
        if ended is not None:
            died += _last_checkpoint(store, run_id, ended)
        flags.append(
            _flag(
                "training_health",
                "critical" if ended is not None else "warning",
                run_id,
                f"{count} error line(s) in the log; the last: {sentence(text)}{died}",
                'Read the events table for this run (tracelog sql "SELECT * FROM events WHERE run_id = '
                f'{run_id}"): a crash ends the run early and its last iterations are not steady state.',
                row_ref=f"line {ended if ended is not None else line}",
                measured=float(count),
                expected=0.0,
            )
        )
    return flags


def nccl_warnings(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    """NCCL's `WARN` lines in a run that went on training after them, none saying it died (`FATAL_SQL`):
    information, not error lines. NCCL warns of what it falls back from and goes on (`lib wrapper not
    initialized` where no verbs library loads, a path it cannot resolve in sysfs), so a healthy run can
    print one on every rank; counted as errors they raised a warning on runs that were fine. One after
    the last step, or in a run with no step, is still an error line (`ended_in_error`): it is what a
    dying communicator prints."""
    scope = run_ranges.prepare(store, scope)
    rows = store.con.execute(
        f"""
        WITH last_step AS (
            SELECT run_id, last_line AS stepped FROM {run_ranges.PARTS} WHERE {scope.runs} AND part = 'all'
        )
        SELECT e.run_id, count(*), arg_min(e.text, e.line_no), min(e.line_no), count(DISTINCT e.text)
        FROM events e JOIN last_step s USING (run_id)
        WHERE {scope.runs.replace("run_id", "e.run_id")} AND e.kind = 'nccl_warn'
          AND e.line_no < s.stepped AND NOT ({FATAL_SQL})
        GROUP BY e.run_id
        """
    ).fetchall()
    return [
        _flag(
            "training_health",
            "info",
            run_id,
            f"{count} NCCL warning line(s) ({distinct} distinct) before the last step, and the run trained on"
            f" after them; the first: {sentence(text)}",
            "NCCL warns of what it falls back from (a verbs library it could not load, a network it skipped):"
            " check that the transport and bandwidth it settled on are the ones the job expects "
            "(NCCL_DEBUG=INFO prints its choice, and the job's bandwidth flags compare them).",
            row_ref=f"line {line}",
            measured=float(count),
            expected=0.0,
        )
        for run_id, count, text, line, distinct in rows
    ]


# Megatron's mark that its training loop returned (`print_datetime('after training is done')`): a job that
# dies after it lost no step. Any parser's `training_done` event is such a mark (torchtitan's `Training
# completed`); Megatron's is also found where a glued Slurm line made its event a crash.
DONE_MARK = "[after training is done]"
DONE_MARKS = (DONE_MARK, "Training completed")
DONE_AT_RX = re.compile(r"\[after training is done\] datetime: (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
CANCELLED_AT_RX = re.compile(r"CANCELLED AT (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")


def _finished_then_ended(
    run_id: int,
    text: str,
    count: int,
    stepped: int | None,
    done_line: int,
    done_text: str,
    ended: int,
    ended_text: str | None,
) -> Flag:
    """The flag of a job that died after its training loop had returned: the run's steps are all in the
    log, and what ended the job (Slurm's time limit on a process hung in its teardown, an exception in its
    cleanup) cost the allocation's idle time, not training. A warning, with that idle time where Slurm's
    `CANCELLED AT` and Megatron's mark both give their clock."""
    after = f", after its last iteration (line {stepped})" if stepped is not None else ""
    what = (
        f"; the job ended at line {ended}: {sentence(ended_text)}"
        if ended_text and ended != done_line
        else ""
    )
    mark = next((m for m in DONE_MARKS if m in done_text), done_text.strip()[:80])
    held = ""
    start, stop = DONE_AT_RX.search(done_text), CANCELLED_AT_RX.search(ended_text or "")
    if start and stop:
        seconds = int(
            (datetime.fromisoformat(stop.group(1)) - datetime.fromisoformat(start.group(1))).total_seconds()
        )
        if seconds >= 0:
            held = (
                f" Slurm cancelled it {seconds // 60} min {seconds % 60} s after training was done: the allocation "
                "sat idle that long."
            )
    return _flag(
        "training_health",
        "warning",
        run_id,
        f"{count} error line(s) in the log; the last: {sentence(text)} Training had finished before it: "
        f"`{mark}` at line {done_line}{after}{what}.{held}",
        "The run's steps are complete: the job hung or failed on its way out (process-group teardown, CUDA "
        "graphs, a profiler's shutdown) and was killed there. Megatron-Bridge jobs with CUDA graphs hang so "
        "(NVIDIA-NeMo/Megatron-Bridge#1500, #3595), and torchtitan runs can abort (SIGABRT) destroying their "
        "process group; a shorter time limit bounds the idle time. Check that the last checkpoint was saved.",
        row_ref=f"line {ended}",
        measured=float(count),
        expected=0.0,
    )


def _went_on(text: str | None, line: int | None, stepped: int | None, last: int) -> str:
    if line is None:
        return ""
    what = (
        "That line is a process failing"
        if line == last
        else f"A process failed at line {line}: {sentence(text or '')}"
    )
    return f" {what.rstrip('.')}; training went on after it (an iteration at line {stepped})."


def sentence(text: str, most: int = 200) -> str:
    """A log line quoted in a message: whole up to `most` characters and a full stop, else cut at a space
    with `…`."""
    text = text.strip()
    if len(text) <= most:
        return text if text.endswith((".", "!", "?")) else text + "."
    cut = text[:most]
    return (cut[: cut.rfind(" ")] if " " in cut[most // 2 :] else cut) + "…"


def _last_checkpoint(store: Store, run_id: int, before_line: int) -> str:
    """Where a run that died can go on from: the last checkpoint its log says was saved before it died
    (Megatron's `successfully saved checkpoint ... iteration N`, kept as `checkpoint_saved` events)."""
    saved = store.con.execute(
        f"SELECT arg_max({CHECKPOINT_ITERATION_SQL}, line_no), max(line_no) FROM events "
        f"WHERE run_id = {int(run_id)} AND kind = 'checkpoint_saved' AND line_no < {int(before_line)}"
    ).fetchone()
    if saved is None or saved[1] is None:
        return " No checkpoint saved before it in this log."
    iteration, line = saved
    if iteration is None:  # a line that does not name its step (torchtitan's): the last step logged before it
        last = store.con.execute(
            f"SELECT max(iteration) FROM iterations WHERE run_id = {int(run_id)} AND line_no < {int(line)}"
        ).fetchone()
        iteration = last[0] if last else None
    if iteration is None:
        return f" A checkpoint was saved before it (line {line})."
    return f" The last checkpoint saved before it: iteration {iteration} (line {line})."
