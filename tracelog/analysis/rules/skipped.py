"""Training health: NaN and skipped iterations. A run's NaN iterations (the framework's count, a loss or
grad norm printed as NaN, a Megatron line without its loss), its skipped steps after warm-up or in it, and
a run whose optimizer skipped most of its steps. Pure SQL over the store; `health` runs it with the rest."""

from __future__ import annotations

from tracelog.analysis import run_ranges
from tracelog.analysis.rules import Flag
from tracelog.analysis.rules import run_flag as _flag
from tracelog.analysis.scope import Scope
from tracelog.parsers.deepspeed_config import SKIPPED_RUNNING
from tracelog.store import Store
from tracelog.thresholds import Thresholds


def _with_losses_left_out(rows: list[tuple], megatron: set[int]) -> tuple[list[tuple], dict[int, int]]:
    """The rule's rows with the lines whose loss Megatron left out counted as NaN iterations (`LOSS_LEFT_OUT`,
    in Megatron runs that print a loss elsewhere), in the shape the rest of the rule reads; and how many
    such lines each run has."""
    out, left_out = [], {}
    for row in rows:
        run_id, nan_total, first_nan, nan_line, *middle, unscaled, left, first_left, left_line, has_loss = row
        if left and has_loss and run_id in megatron:
            left_out[run_id] = int(left)
            nan_total = (nan_total or 0) + left
            if first_nan is None or left_line < nan_line:
                first_nan, nan_line = first_left, left_line
        out.append((run_id, nan_total, first_nan, nan_line, *middle, unscaled))
    return out, left_out


NOT_SCALER = (
    "with a loss scale of 1.0 there is no fp16 scaler to overflow: steps the run was told to skip "
    "(Megatron's `--iterations-to-skip`, argonne-lcf's `--train-range-to-skip`) or whose grad norm a check rejected."
)
NOT_SCALER_HINT = (
    "Look for the log's own word before the first of them (`Caught N in 'ranges_to_skip'`, `Bad grad_norm "
    "detected`): a bad batch or a spike the run stepped over; the optimizer did not update on those steps."
)


def lines_rows(store: Store, scope: Scope) -> list[tuple]:
    """Per run: its NaN lines (`run_buckets.NAN_LINES`, the first and its line), its skipped steps after
    warm-up and in it (the first after), the iterations its lines stand for, the first skipped line, whether
    it ran without an fp16 scaler, its lines without their loss (`LOSS_LEFT_OUT`, the first and its line),
    and whether it printed a loss at all."""
    scope = run_ranges.prepare(store, scope)
    parts = run_ranges.PARTS
    return store.con.execute(
        f"""
        SELECT a.run_id, a.nan_lines AS nan_total, a.first_nan, a.first_nan_line,
               s.skipped AS skipped_steady, w.skipped AS skipped_warmup, s.first_skip,
               -- the iterations the logged lines stand for: first to last, plus one interval for the first
               -- line's own (the mean interval between lines)
               CASE WHEN a.lines > 1 THEN (a.last_iteration - a.first_iteration) * CAST(a.lines AS BIGINT)
                    / (CAST(a.lines AS BIGINT) - 1) END AS covered,
               a.first_skip_line,
               -- no fp16 loss scaler: the run printed a scale of 1.0 at most (bf16, fp32)
               coalesce(a.top_scale <= 1, false) AS unscaled,
               a.left_out, a.first_left, a.first_left_line, a.losses > 0 AS has_loss
        FROM {parts} a
        LEFT JOIN {parts} s ON s.run_id = a.run_id AND s.part = 'steady'
        LEFT JOIN {parts} w ON w.run_id = a.run_id AND w.part = 'warmup'
        WHERE a.part = 'all' AND {scope.runs.replace("run_id", "a.run_id")}
        """
    ).fetchall()


def nan_and_skipped(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    scope = run_ranges.prepare(store, scope)
    rows = lines_rows(store, scope)
    megatron = {
        run_id
        for (run_id,) in store.con.execute(
            f"SELECT run_id FROM runs WHERE {scope.runs} AND framework IN ('megatron', 'megatron-deepspeed')"
        ).fetchall()
    }
    rows, left_out = _with_losses_left_out(rows, megatron)
    flags: list[Flag] = []
    # a run without a skipped line has no calibration to find (the ranges' first skipped line is its
    # whole run's), and is not read line by line for one
    calibrating = _calibrating(store, scope, [row[0] for row in rows if row[8] is not None])
    barely = _barely_trained(store, t, scope, [row for row in rows if row[0] not in calibrating])
    flags.extend(barely.values())
    counted = _deepspeed_counts(store, scope)
    mid_run = _started_mid_run(store, scope)
    early = _early_overflows(store, scope)
    for (
        run_id,
        nan_total,
        first_nan,
        nan_line,
        skipped_steady,
        skipped_warmup,
        first_skip,
        *_,
        unscaled,
    ) in rows:
        deepspeed, said, settled = "", {}, ""
        if (scales := calibrating.get(run_id)) is not None and not counted.get(run_id):
            # every skip so far the scaler halving its way down from its first scale, whichever lines the
            # warm-up cut (5 % of them, or up to the first clean one: here none) called warm-up
            skipped_warmup, skipped_steady = (skipped_warmup or 0) + (skipped_steady or 0), 0
            settled = ", every logged step so far " + (
                f"(the loss scale falling from {scales[0]:.0f} to {scales[1]:.0f})"
                if scales[1] < scales[0]
                else f"(the loss scale at {scales[0]:.0f})"
            )
        elif (
            (settling := early.get(run_id))
            and skipped_warmup
            and not counted.get(run_id)
            and run_id not in mid_run
        ):
            # a scaler seen calibrating in the warm-up lines that overflows again in the run's first
            # MID_RUN_STEPS steps past the cut: the scale settling, not an overflow of a settled one
            moved, first_skip = settling
            skipped_steady, skipped_warmup = (skipped_steady or 0) - moved, (skipped_warmup or 0) + moved
            settled = f" and the first {MID_RUN_STEPS} steps"
        if (ds := counted.get(run_id)) is not None:
            before, last, step, line, first_ds_skip = ds
            lines = int((skipped_steady or 0) + (skipped_warmup or 0))
            where = f" by DeepSpeed's count (`step={step}, skipped={last}` at line {line}; the iteration lines count {lines})"
            if last - before > (skipped_steady or 0):
                skipped_steady, first_skip, deepspeed = last - before, first_ds_skip, where
            elif not skipped_steady and before > (skipped_warmup or 0):
                skipped_warmup, deepspeed = before, where
            said = {"row_ref": f"line {line}"} if deepspeed else {}
        if skipped_warmup and not deepspeed and (start := mid_run.get(run_id)) is not None:
            # the log's first lines are not the run's first steps: what they skipped is no calibration (a
            # running count of DeepSpeed's, above, covers the steps before the log too)
            first, first_skip = start
            skipped_steady, skipped_warmup = (skipped_steady or 0) + skipped_warmup, 0
            deepspeed += f", in a log that starts mid-run (its first step line at iteration {first})"
        if nan_total:
            flags.append(
                _flag(
                    "training_health",
                    "critical",
                    run_id,
                    f"{int(nan_total)} NaN iteration(s), the first in the interval ending at iteration {first_nan}"
                    + (
                        f"; {left_out[run_id]} of them a line without its loss, which Megatron leaves out when it "
                        "is NaN."
                        if left_out.get(run_id)
                        else "."
                    ),
                    "Look at the loss and grad norm before it; lower the learning rate or restart from the last "
                    "good checkpoint, and check the data shard of that step.",
                    row_ref=f"line {nan_line}",
                    measured=float(nan_total),
                    expected=0.0,
                )
            )
        if run_id in barely:
            continue  # the critical flag above says it; "calibrating" would be wrong
        if skipped_steady:
            flags.append(
                _flag(
                    "training_health",
                    "warning",
                    run_id,
                    f"{int(skipped_steady)} skipped iteration(s) after warm-up (first near iteration {first_skip})"
                    + f"{deepspeed}: "
                    + (NOT_SCALER if unscaled else "the fp16 loss scaler hit overflows."),
                    NOT_SCALER_HINT
                    if unscaled
                    else "Repeated overflows after warm-up point at instability: consider bf16, a lower learning "
                    "rate or a larger initial loss scale window.",
                    measured=float(skipped_steady),
                    expected=0.0,
                    **said,
                )
            )
        elif skipped_warmup:
            flags.append(
                _flag(
                    "training_health",
                    "info",
                    run_id,
                    f"{int(skipped_warmup)} skipped iteration(s) "
                    + (f"before the steady part{deepspeed}: " if deepspeed else f"during warm-up{settled}: ")
                    + (NOT_SCALER if unscaled else "the fp16 loss scale calibrating."),
                    (NOT_SCALER_HINT + " " if unscaled else "Normal at the start of fp16 training; ")
                    + "these lines are left out of the steady-state medians.",
                    measured=float(skipped_warmup),
                    expected=0.0,
                    **said,
                )
            )
    return flags


CALIBRATION_OVERFLOWS = 32
"""Overflows the fp16 loss scaler's calibration alone can skip: halving from 2**32, Megatron's default
`--initial-loss-scale`, reaches 1 after 32 of them."""


def _calibrating(store: Store, scope: Scope, skipping: list[int]) -> dict[int, tuple[float, float]]:
    """Runs whose every skipped step is the fp16 loss scale calibrating: from the run's first step, each
    line's interval skipped whole, its loss scale (above 1) lower than the line's before, and no skip after
    those lines, `CALIBRATION_OVERFLOWS` at most. A log of a run's first ten steps, all of them overflows
    from 2**28 down to 2**23, is the scaler at work, not a run that skipped most of its steps; a log whose
    skips stop and start again, or whose scale stays put, is not. Per run: its first and last scale so far.
    Only the runs in `skipping` (those with a skipped line) are read, and of them only the lines before a
    run's first clean one line by line (32 at most carry the skips)."""
    if not skipping:
        return {}
    runs = f"{scope.runs} AND run_id IN ({', '.join(str(int(r)) for r in skipping)})"
    rows = store.con.execute(
        f"""
        WITH candidates AS (
            SELECT run_id, sum(skipped) AS total,
                   min(line_no) FILTER (coalesce(skipped, 0) = 0 AND coalesce(nan, 0) = 0) AS clean
            FROM iterations WHERE {runs} AND iteration > 0 GROUP BY run_id
            HAVING sum(skipped) BETWEEN 1 AND {CALIBRATION_OVERFLOWS}
        ), lines AS (
            SELECT i.run_id, i.line_no, coalesce(i.skipped, 0) AS skipped, i.loss_scale,
                   NOT (coalesce(i.skipped, 0) > 0
                        AND i.skipped = i.iteration - coalesce(lag(i.iteration) OVER w, 0)
                        AND i.loss_scale > 1
                        AND coalesce(i.loss_scale < lag(i.loss_scale) OVER w, true)) AS other
            FROM iterations i JOIN candidates c USING (run_id)
            WHERE i.iteration > 0 AND (c.clean IS NULL OR i.line_no < c.clean)
            WINDOW w AS (PARTITION BY i.run_id, i.rank ORDER BY i.line_no)
        ), ends AS (
            SELECT run_id, min(line_no) FILTER (other) AS first_other FROM lines GROUP BY run_id
        )
        SELECT l.run_id, arg_min(l.loss_scale, l.line_no),
               arg_max(l.loss_scale, l.line_no) FILTER (e.first_other IS NULL OR l.line_no < e.first_other)
        FROM lines l JOIN ends e USING (run_id) JOIN candidates c USING (run_id) GROUP BY l.run_id
        HAVING sum(l.skipped) FILTER (e.first_other IS NULL OR l.line_no < e.first_other) = any_value(c.total)
        """
    ).fetchall()
    return {run_id: (float(first), float(last)) for run_id, first, last in rows}


MID_RUN_STEPS = 100
"""Steps past which a log's first line no longer stands for the run's warm-up: the fp16 loss scale calibrates
in its first few dozen steps (from 2**32, Megatron's default `--initial-loss-scale`, to a working scale of
2**16 or so is 16 overflows; DeepSpeed's default `initial_scale_power` is 16), and Megatron's default
`--log-interval` is 100, whose first line counts them all."""


def _early_overflows(store: Store, scope: Scope) -> dict[int, tuple[int, int | None]]:
    """Overflows an fp16 run's steady lines count in its first `MID_RUN_STEPS` steps: where its warm-up
    lines (5 % of them, or up to the first clean one) skipped too, the loss scale still settling after the
    cut, which halves it once or twice more in the first few dozen steps (2**18 to 2**17 at step 50 of a
    run from scratch), the scaler's calibration too. Per run: how many, and the first skip after them
    (None for none)."""
    early = f"iteration <= {MID_RUN_STEPS} AND loss_scale > 1"
    rows = store.con.execute(
        f"""
        SELECT run_id, sum(skipped) FILTER (NOT warmup AND {early}),
               min(iteration) FILTER (NOT warmup AND skipped > 0 AND NOT coalesce({early}, false))
        FROM {scope.marks} WHERE {scope.runs} AND skipped > 0 GROUP BY run_id
        HAVING sum(skipped) FILTER (NOT warmup AND {early}) > 0
        """
    ).fetchall()
    return {run_id: (int(moved), later) for run_id, moved, later in rows}


def _started_mid_run(store: Store, scope: Scope) -> dict[int, tuple[int, int]]:
    """Runs whose log starts mid-run (an excerpt, or a log begun late): the interval the first step line
    stands for (the mean interval between lines; none with one line) starts past `MID_RUN_STEPS`, and no
    checkpoint was loaded before it (a resumed launch may calibrate its loss scale again). Per run: its first
    logged iteration and the first iteration with a skipped step."""
    rows = store.con.execute(
        f"""
        SELECT a.run_id, a.first_iteration, a.first_skip FROM {run_ranges.PARTS} a
        WHERE a.part = 'all' AND {scope.runs.replace("run_id", "a.run_id")}
          AND a.first_iteration - CASE WHEN a.lines > 1
                THEN (a.last_iteration - a.first_iteration) / (a.lines - 1) ELSE 0 END > {MID_RUN_STEPS}
          AND NOT EXISTS (SELECT 1 FROM events e WHERE e.run_id = a.run_id AND e.kind = 'checkpoint_loaded'
                            AND e.line_no < a.first_line)
        """
    ).fetchall()
    return {
        run_id: (int(first), int(skip) if skip is not None else int(first)) for run_id, first, skip in rows
    }


def _deepspeed_counts(store: Store, scope: Scope) -> dict[int, tuple[int, int, int, int, int | None]]:
    """DeepSpeed's running counts of skipped steps (`step=200, skipped=4`, `SKIPPED_RUNNING`) per run: the
    count before the run's steady lines begin (the last step line before them: warm-up, and the steps
    before a log that starts late), the last count, its step and line, and the first step whose count
    rose past the first. Megatron-DeepSpeed's iteration lines can count 0 where DeepSpeed skipped; the
    rule takes DeepSpeed's figure where it is larger."""
    rows = store.con.execute(
        f"""
        WITH ds AS (
            SELECT run_id, iteration, line_no, value FROM iteration_metrics
            WHERE {scope.runs} AND key = ? AND iteration > 0
        ), steady AS (
            SELECT run_id, first_line AS first_steady FROM {run_ranges.PARTS} WHERE part = 'steady'
        ), counts AS (
            SELECT ds.run_id,
                   coalesce(arg_max(value, line_no) FILTER (first_steady IS NULL OR line_no < first_steady), 0)
                       AS before,
                   arg_max(value, line_no) AS last, arg_max(iteration, line_no) AS step, max(line_no) AS line
            FROM ds LEFT JOIN steady USING (run_id) GROUP BY ds.run_id
        )
        SELECT c.run_id, c.before, c.last, c.step, c.line, min(ds.iteration) FILTER (ds.value > c.before)
        FROM counts c JOIN ds USING (run_id) GROUP BY ALL
        """,
        [SKIPPED_RUNNING],
    ).fetchall()
    return {
        run_id: (int(before), int(last), step, line, first)
        for run_id, before, last, step, line, first in rows
    }


def _barely_trained(store: Store, t: Thresholds, scope: Scope, rows: list[tuple]) -> dict[int, Flag]:
    """Runs whose optimizer skipped more than `skipped_share` of the steps the log covers: the fp16 loss
    scaler overflowing on most steps, so the weights barely moved (a loss printed as 0.0, or not falling,
    is the other sign). Counted from the lines' skipped counts over the iterations they stand for, or,
    for a log that starts late, from DeepSpeed's running count on its first step line (1995 skipped by
    step 2000 tells it alone). A loss scale that merely calibrates skips a few dozen steps at the start,
    well below any share worth the name."""
    share: dict[int, tuple[float, float, str]] = {}
    # A tail's running count first: it covers the steps before the log too. The lines after it add theirs.
    running = store.con.execute(
        f"""
        WITH counts AS (
            SELECT run_id, arg_min(value, line_no) AS value, min(line_no) AS line_no, max(value) AS top
            FROM iteration_metrics WHERE {scope.runs} AND key = ? AND iteration > 0 GROUP BY run_id
        )
        -- no step line after the first: nothing to add (a sum over no rows is NULL, not 0); a later running
        -- count (Megatron-DeepSpeed keeps every step line's) counts where the iteration lines' say less
        SELECT c.run_id,
               greatest(any_value(c.value) + coalesce(sum(coalesce(m.skipped, 0)) FILTER (m.line_no > c.line_no), 0),
                        any_value(c.top)),
               max(m.iteration), any_value(c.line_no)
        FROM counts c JOIN {scope.marks} m USING (run_id) GROUP BY c.run_id
        """,
        [SKIPPED_RUNNING],
    ).fetchall()
    for run_id, count, last, line_no in running:
        if count is not None and last and count > t.skipped_share * last:
            share[run_id] = (float(count), float(last), f"line {line_no}")
    unscaled = {row[0]: row[-1] for row in rows}
    for run_id, _, _, _, steady, warmup, _, covered, first_line, _ in rows:
        skipped = (steady or 0) + (warmup or 0)
        if run_id not in share and covered and skipped and skipped > t.skipped_share * covered:
            share[run_id] = (skipped, covered, f"line {first_line}")
    return {
        run_id: _flag(
            "training_health",
            "critical",
            run_id,
            f"{int(count)} of about {int(round(covered))} iterations were skipped ({min(count / covered, 1):.1%}): "
            + (
                NOT_SCALER[:-1] + ", so the weights were rarely updated."
                if unscaled.get(run_id)
                else "the fp16 loss scaler overflowed on most steps, so the weights were rarely updated."
            ),
            NOT_SCALER_HINT
            if unscaled.get(run_id)
            else "Check the loss scale settings (DeepSpeed's `fp16.initial_scale_power`, `loss_scale_window`, "
            "`min_loss_scale`; Megatron's `--initial-loss-scale`) and the weights' range: a model trained in "
            "bf16 often overflows fp16; train it in bf16 or fp32.",
            row_ref=ref,
            measured=min(count / covered, 1.0),
            expected=0.0,
        )
        for run_id, (count, covered, ref) in share.items()
    }
