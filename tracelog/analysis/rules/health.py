"""Training health: NaN and skipped iterations (`skipped.py`), loss-scale collapse, loss spikes, sec/it drift,
straggler steps, and runs that ended in an error. Pure SQL over the store; no model needed."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime

from tracelog.analysis import run_ranges
from tracelog.analysis.rules import Flag
from tracelog.analysis.rules import run_flag as _flag
from tracelog.analysis.rules.skipped import nan_and_skipped
from tracelog.analysis.scope import Scope
from tracelog.store import Store
from tracelog.store.runs import CHECKPOINT_ITERATION_SQL
from tracelog.thresholds import Thresholds

COLLAPSED_SCALE = 2.0
"""A loss scale this low has collapsed: DeepSpeed's and Megatron's default minimum scale is 1, where DeepSpeed
exits (`Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.`,
runtime/fp16/loss_scaler.py `DynamicLossScaler.update_scale`), and a working fp16 scale is in the thousands."""

# The scale an fp16 loss scaler's overflow line reduced to, and the one it attempted: DeepSpeed's
# `[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 64, reducing to 32` (loss_scaler.py;
# `[deepscale]` in 2020-21), its fused and unfused optimizers' `Attempted loss scale: 65536.0, reducing to
# 32768.0` and `Reducing dynamic loss scale from 4294967296.0 to 2147483648.0`. A hysteresis line
# (`..., but hysteresis is 2. Reducing hysteresis to 1`) attempted a scale and reduced none.
SCALE_NUMBER = "\\s*([0-9][0-9.eE+]*)"
REDUCED_TO_SQL = (
    f"try_cast(regexp_extract(text, '(?:reducing to|loss scale from \\S+ to){SCALE_NUMBER}', 1) AS DOUBLE)"
)
ATTEMPTED_SQL = f"try_cast(regexp_extract(text, '(?:[Aa]ttempted loss scale:|loss scale from){SCALE_NUMBER}', 1) AS DOUBLE)"


def loss_scale_collapse(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    """An fp16 loss scale that fell to `COLLAPSED_SCALE` or below from a higher one: over the steady lines'
    printed scale, and the scaler's overflow lines (`REDUCED_TO_SQL`), which tell the fall where no step line
    follows it (a run that died of it: the Trainer's dicts print no scale). The line of the first fall to
    the lowest scale is named (looked up only for a run flagged: it reads the run's lines)."""
    scope = run_ranges.prepare(store, scope)
    lines = {
        run_id: (top, lowest)
        for run_id, top, lowest in store.con.execute(
            f"""
            SELECT run_id, scale_top, scale_low FROM {run_ranges.PARTS}
            WHERE {scope.runs} AND part = 'steady' AND scale_low > 0
            """
        ).fetchall()
    }
    overflows = {
        run_id: (top, lowest, at_line)
        for run_id, top, lowest, at_line in store.con.execute(
            f"""
            WITH o AS (
                SELECT run_id, line_no, {REDUCED_TO_SQL} AS reduced, {ATTEMPTED_SQL} AS attempted FROM events
                WHERE {scope.runs} AND run_id IS NOT NULL AND kind = 'overflow'
            )
            SELECT run_id, max(attempted), min(reduced) FILTER (reduced > 0),
                   arg_min(line_no, (reduced, line_no)) FILTER (reduced > 0)
            FROM o GROUP BY run_id HAVING min(reduced) FILTER (reduced > 0) IS NOT NULL
            """
        ).fetchall()
    }
    flags = []
    for run_id in sorted(lines.keys() | overflows.keys()):
        top_line, low_line = lines.get(run_id, (None, None))
        top_said, low_said, said_line = overflows.get(run_id, (None, None, None))
        top = max(v for v in (top_line, top_said, low_line, low_said) if v is not None)
        lowest = min(v for v in (low_line, low_said) if v is not None)
        if lowest > COLLAPSED_SCALE or top <= lowest:
            continue
        at_line = (
            run_ranges.first_steady_line(store, run_id, "loss_scale", low_line)[0]
            if low_line is not None
            else None
        )
        said = low_said is not None and (low_line is None or low_said < low_line)
        if low_said == low_line and said_line is not None and at_line is not None:
            said = said_line < at_line
        flags.append(
            _flag(
                "training_health",
                "critical",
                run_id,
                f"fp16 loss scale collapsed to {lowest:g} (it reached {top:g})"
                + (" by the loss scaler's overflow lines." if said else "."),
                "A loss scale at 1 or 2 means nearly every step overflows: the run is diverging (DeepSpeed exits "
                "at its minimum scale, 1 by default). Restart from an earlier checkpoint with a lower learning "
                "rate, or train in bf16.",
                row_ref=f"line {said_line if said else at_line}",
                measured=float(lowest),
                expected=float(top),
            )
        )
    return flags


def loss_spikes(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    # the spikes themselves are kept in `loss_spikes`, brought up to date by the refresh before the rules
    rows = store.con.execute(
        f"""
        SELECT run_id, count(*) AS spikes, arg_max(iteration, ratio) AS worst_it, max(ratio) AS worst_ratio,
               arg_max(line_no, ratio) AS worst_line, arg_max(lm_loss, ratio) AS worst_loss,
               arg_max(running_median, ratio) AS base
        FROM loss_spikes WHERE {scope.runs} GROUP BY run_id
        """
    ).fetchall()
    return [
        _flag(
            "training_health",
            "warning",
            run_id,
            f"{spikes} loss spike(s); the worst at iteration {worst_it}: {loss:.4g} against a running "
            f"median of {base:.4g} ({ratio:.2f}x).",
            "Check the data at those steps and the grad norm; frequent spikes suggest a lower learning rate "
            "or gradient clipping.",
            row_ref=f"line {line}",
            measured=float(loss),
            expected=float(base),
            ratio=float(ratio),
        )
        for run_id, spikes, worst_it, ratio, line, loss, base in rows
    ]


def sec_per_it_drift(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    # The medians of the first and last of ntile(5) over the steady lines the rule reads, by line number:
    # the ranges `run_ranges` finds for runs with 10 such lines or more.
    scope = run_ranges.prepare(store, scope)
    rows = store.con.execute(
        f"""
        SELECT run_id, {run_ranges.median("first_fifth", "drift")}, {run_ranges.median("last_fifth", "drift")}
        FROM {run_ranges.MEDIANS} WHERE {scope.runs} AND series = 'drift' GROUP BY run_id
        """
    ).fetchall()
    return [
        _flag(
            "training_health",
            "warning",
            run_id,
            f"sec/it drifted up over the run: {last:.4g} s in the last fifth against {first:.4g} s in the "
            f"first ({last / first:.2f}x).",
            "A slow rise points at thermal throttling, a straggler node or a leak (memory fragmentation, "
            "growing dataloader queues); compare per-rank timers and nvidia-smi clocks.",
            measured=float(last),
            expected=float(first),
            ratio=float(last / first),
        )
        for run_id, first, last in rows
        if first and last and last / first > t.sec_it_drift
    ]


def straggler_steps(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    # the steady lines with a sec/it above 0 counted per value: their median, the lines above the threshold,
    # and the first of the slowest
    scope = run_ranges.prepare(store, scope)
    values = (
        f"SELECT * FROM {run_ranges.VALUES} "
        f"WHERE {scope.runs} AND part = 'steady' AND series = 'elapsed' AND value > 0"
    )
    rows = [
        (
            run_id,
            count,
            *run_ranges.first_steady_line(store, run_id, "elapsed_s", worst)[::-1],
            worst,
            typical,
        )
        for run_id, count, worst, typical in store.con.execute(
            f"""
            WITH typical AS (SELECT run_id, median AS typical FROM ({run_ranges.medians_sql(values)}))
            SELECT run_id, sum(v.lines), max(v.value), any_value(t.typical)
            FROM ({values}) v JOIN typical t USING (run_id) WHERE v.value > ? * t.typical GROUP BY run_id
            """,
            [t.straggler],
        ).fetchall()
    ]
    return [
        _flag(
            "training_health",
            "info",
            run_id,
            f"{count} logged interval(s) at least {t.straggler:g}x the steady median; the slowest at "
            f"iteration {it}: {worst:.4g} s against {typical:.4g} s.",
            "Isolated slow steps are usually checkpoints, evaluation or a straggler rank; if they recur, "
            "line them up with the timers and the events around them.",
            row_ref=f"line {line}",
            measured=float(worst),
            expected=float(typical),
            ratio=float(worst / typical),
        )
        for run_id, count, it, line, worst, typical in rows
    ]


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
    is the ranges' (`run_ranges.PARTS`), not a scan of every line of the run."""
    scope = run_ranges.prepare(store, scope)
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
              AND e.line_no > coalesce(s.stepped, 0)
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
            f" It died at line {fatal_line}: {_sentence(fatal_text)}"
            if fatal_line is not None and fatal_line != line
            else ""
        )
        if fatal_line is None and uncaught_line is not None:
            died = " The log ends in that exception, after its traceback: the process died of it."
        if fatal_line is not None and first_line is not None and first_line < fatal_line:
            # what it died of is often a symptom (other ranks time out waiting for one that failed)
            died += f" An error came before it, at line {first_line}: {_sentence(first_text)}"
        if ended is not None:
            died += _last_checkpoint(store, run_id, ended)
        flags.append(
            _flag(
                "training_health",
                "critical" if ended is not None else "warning",
                run_id,
                f"{count} error line(s) in the log; the last: {_sentence(text)}{died}",
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
            f" after them; the first: {_sentence(text)}",
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
        f"; the job ended at line {ended}: {_sentence(ended_text)}"
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
        f"{count} error line(s) in the log; the last: {_sentence(text)} Training had finished before it: "
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
        else f"A process failed at line {line}: {_sentence(text or '')}"
    )
    return f" {what.rstrip('.')}; training went on after it (an iteration at line {stepped})."


def _sentence(text: str, most: int = 200) -> str:
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


def nan_found_by_a_check(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    """NaNs a run's own check found and said so in a line rather than in its counts: Megatron-Core's rerun
    state machine (`ERROR:megatron.core.rerun_state_machine:Unexpected result nan on rank 3 at iteration #3
    ... (message='found NaN in local grad norm ...')`, `--rerun-mode validate_results`), which stops the
    job before any iteration line says it."""
    rows = store.con.execute(
        f"""
        SELECT run_id, count(*), min(line_no), arg_min(text, line_no),
               min(try_cast(regexp_extract(text, 'at iteration #(\\d+)', 1) AS BIGINT))
        FROM events WHERE {scope.runs} AND run_id IS NOT NULL AND kind = 'nan' GROUP BY run_id
        """
    ).fetchall()
    return [
        _flag(
            "training_health",
            "critical",
            run_id,
            f"The run's NaN check fired {count} time(s)"
            + (f", first at iteration {iteration}" if iteration is not None else "")
            + f": {_sentence(text)}",
            "A NaN in the loss or the gradients: look at the batch of that iteration and the steps before it; "
            "Megatron's rerun state machine says whether it reproduces on another GPU (a faulty GPU if not).",
            row_ref=f"line {line}",
            measured=float(count),
            expected=0.0,
        )
        for run_id, count, line, text, iteration in rows
    ]


def save_unfinished(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    """A log that ends inside a checkpoint save: Megatron's `saving checkpoint at iteration N` with no
    `successfully saved` and no iteration after it (a save that hung, as an asynchronous one on slow
    storage can, or a job killed in it). An info: a live log may simply be mid-save."""
    scope = run_ranges.prepare(store, scope)
    rows = store.con.execute(
        f"""
        SELECT e.run_id, max(e.line_no) FILTER (e.kind = 'checkpoint_saving') AS started,
               arg_max(e.text, e.line_no) FILTER (e.kind = 'checkpoint_saving'),
               max(e.line_no) FILTER (e.kind = 'checkpoint_saved') AS saved,
               any_value(p.last_line) AS stepped
        FROM events e LEFT JOIN {run_ranges.PARTS} p ON p.run_id = e.run_id AND p.part = 'all'
        WHERE {scope.runs.replace("run_id", "e.run_id")} AND e.run_id IS NOT NULL
          AND e.kind IN ('checkpoint_saving', 'checkpoint_saved')
        GROUP BY e.run_id
        """
    ).fetchall()
    return [
        _flag(
            "training_health",
            "info",
            run_id,
            f"The log ends inside a checkpoint save begun at line {started}, and no line says it was saved: "
            f"{_sentence(text)}",
            "If the job stopped there, the save hung or was killed (storage, an asynchronous save): the "
            "checkpoint before it is the last complete one.",
            row_ref=f"line {started}",
        )
        for run_id, started, text, saved, stepped in rows
        if started is not None and started > (saved or 0) and started > (stepped or 0)
    ]


def trained_no_steps(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    """A run that loaded a checkpoint and whose training loop ran no step: Megatron's `[after training is
    done]` after the load with no iteration line between, where the log confirms nothing was trained in
    between (the checkpoint saved after it is of the loaded iteration, or `--train-iters` is not past it).
    A run resumed at its last iteration, which only evaluates and saves again. An info: it may be meant."""
    rows = store.con.execute(
        f"""
        WITH ev AS (
            SELECT run_id, kind, line_no, {CHECKPOINT_ITERATION_SQL} AS it FROM events
            WHERE {scope.runs} AND run_id IS NOT NULL
              AND kind IN ('checkpoint_loaded', 'training_started', 'training_done', 'checkpoint_saved')
        ), loaded AS (
            SELECT run_id, arg_max(it, line_no) AS it, max(line_no) AS line_no FROM ev
            WHERE kind = 'checkpoint_loaded' AND it IS NOT NULL GROUP BY run_id
        ), done AS (
            SELECT l.run_id, l.it, l.line_no AS loaded_line, min(e.line_no) AS done_line FROM loaded l
            JOIN ev e ON e.run_id = l.run_id AND e.kind = 'training_done' AND e.line_no > l.line_no GROUP BY ALL
        )
        SELECT d.run_id, d.it, d.loaded_line, d.done_line,
               (SELECT max(e.line_no) FROM ev e WHERE e.run_id = d.run_id AND e.kind = 'training_started'
                  AND e.line_no BETWEEN d.loaded_line AND d.done_line) AS started_line,
               (SELECT arg_min(e.it, e.line_no) FROM ev e WHERE e.run_id = d.run_id
                  AND e.kind = 'checkpoint_saved' AND e.line_no > d.done_line) AS saved_it,
               (SELECT min(e.line_no) FROM ev e WHERE e.run_id = d.run_id
                  AND e.kind = 'checkpoint_saved' AND e.line_no > d.done_line) AS saved_line,
               (SELECT r.train_iters FROM runs r WHERE r.run_id = d.run_id) AS train_iters
        FROM done d
        WHERE NOT EXISTS (SELECT 1 FROM iterations i WHERE i.run_id = d.run_id
                            AND i.line_no BETWEEN d.loaded_line AND d.done_line)
        """
    ).fetchall()
    flags = []
    for run_id, it, loaded_line, done_line, started_line, saved_it, saved_line, train_iters in rows:
        if saved_it != it and not (train_iters is not None and train_iters <= it):
            continue  # a few steps fewer than the log interval print no line either
        since = (
            f"`[before the start of training step]` at line {started_line}" if started_line else "the load"
        )
        why = (
            f"it saved iteration {it} again at line {saved_line}"
            if saved_it == it
            else f"its --train-iters is {train_iters}"
        )
        flags.append(
            _flag(
                "training_health",
                "info",
                run_id,
                f"Resumed at its last iteration: trained no steps. It loaded the checkpoint of iteration {it} "
                f"(line {loaded_line}), and `[after training is done]` at line {done_line} follows {since} with "
                f"no iteration line between; {why}.",
                "To train on, raise --train-iters (or --train-samples) past the checkpoint's iteration; a run "
                "meant only to evaluate a checkpoint can say so with --skip-train.",
                row_ref=f"line {done_line}",
                measured=0.0,
            )
        )
    return flags


# Error kinds that already say why a run has no step (`ended_in_error` flags them), and Megatron's mark that
# its training loop ran (`trained_no_steps` tells a run resumed at its last iteration).
EXPLAINED_KINDS = "('error', 'oom', 'crash', 'nccl_warn', 'timeout', 'traceback', 'training_done')"


def no_step_logged(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    """A training log whose run has no step, no figure measured in one (a timer, the flops profiler's step,
    a memory report after an iteration, an overflow the loss scaler skipped) and no error: it ends in the
    run's setup. A job stuck before its
    first step (a collective or the data loader hanging, as GPT-NeoX 20B in EleutherAI/gpt-neox#988), a log
    cut short, or one still being written; its ingest read the setup and would otherwise say nothing."""
    scope = run_ranges.prepare(store, scope)
    # a run with logged lines is not one: the others alone are looked for in the tables of a step's figures
    without = store.con.execute(
        f"SELECT run_id FROM runs WHERE {scope.runs} AND run_id NOT IN (SELECT run_id FROM {run_ranges.PARTS})"
    ).fetchall()
    if not without:
        return []
    scope = replace(scope, runs=f"run_id IN ({', '.join(str(int(r)) for (r,) in without)})")
    rows = store.con.execute(
        f"""
        SELECT r.run_id, r.line_start, r.line_end FROM runs r
        WHERE {scope.runs.replace("run_id", "r.run_id")} AND r.line_end IS NOT NULL
          AND coalesce(r.framework, '') <> 'table'
          AND NOT EXISTS (SELECT 1 FROM iterations i WHERE i.run_id = r.run_id)
          AND NOT EXISTS (SELECT 1 FROM iteration_metrics m WHERE m.run_id = r.run_id)
          AND NOT EXISTS (SELECT 1 FROM timers m WHERE m.run_id = r.run_id)
          AND NOT EXISTS (SELECT 1 FROM events e WHERE e.run_id = r.run_id AND e.kind IN {EXPLAINED_KINDS})
          -- steps that ran without a line of their own: a memory report after them, the fp16 scaler skipping
          AND NOT EXISTS (SELECT 1 FROM memory m WHERE m.run_id = r.run_id AND m.iteration >= 1)
          AND NOT EXISTS (SELECT 1 FROM events e WHERE e.run_id = r.run_id AND e.kind = 'overflow')
        ORDER BY r.run_id
        """
    ).fetchall()
    return [
        _flag(
            "no_step_logged",
            "warning",
            run_id,
            f"No training step in the log: the run's lines {start} to {end} are its setup, and no step, error or "
            "traceback follows them.",
            "A job stuck before its first step (a hung collective or data loader: look at the last lines of "
            "every rank), a log cut short, or one still starting; ingest it again when it has grown.",
            row_ref=f"line {end}",
            measured=0.0,
        )
        for run_id, start, end in rows
    ]


RULES = (
    nan_and_skipped,
    trained_no_steps,
    no_step_logged,
    save_unfinished,
    nan_found_by_a_check,
    loss_scale_collapse,
    loss_spikes,
    sec_per_it_drift,
    straggler_steps,
    ended_in_error,
    nccl_warnings,
)


def evaluate(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    return [flag for rule in RULES for flag in rule(store, t, scope)]
