"""Training health: NaN and skipped iterations (`skipped.py`), loss-scale collapse, loss spikes, sec/it drift,
straggler steps, and runs that ended in an error. Pure SQL over the store; no model needed."""

from __future__ import annotations

from dataclasses import replace

from tracelog.analysis import run_ranges
from tracelog.analysis.rules import Flag
from tracelog.analysis.rules import run_flag as _flag
from tracelog.analysis.rules.error_lines import ended_in_error, nccl_warnings, sentence
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
            + f": {sentence(text)}",
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
            f"{sentence(text)}",
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
