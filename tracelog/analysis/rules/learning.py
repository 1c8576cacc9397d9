"""Runs that are not learning: a grad norm of exactly 0 on every steady step, or a loss that does not
move at all, to the precision it is printed with, over many steps. Pure SQL over the store.

Both read the lines of steps that updated the weights: not skipped (an fp16 overflow's step prints what
it prints, and the skipped-steps rules tell of it), not at a learning rate of 0 (a frozen model, or an
evaluation driven through the training loop, does not learn by design), and for the grad norm only the
steady lines (the first of a run may print 0 before any gradient was reduced)."""

from __future__ import annotations

from tracelog.analysis import flat_stretches, run_ranges
from tracelog.analysis.rules import Flag
from tracelog.analysis.rules import run_flag as _flag
from tracelog.analysis.run_buckets import UPDATING
from tracelog.analysis.scope import Scope
from tracelog.store import Store
from tracelog.thresholds import Thresholds

RULE = "not_learning"


LOSS_FELL = 0.01
"""A steady loss whose second half's median is this share below its first half's fell: a real gradient
moved it, so a grad norm printed as 0 beside it is a placeholder, not a gradient. Megatron-DeepSpeed with
DeepSpeed's pipeline engine prints `grad norm: 0.000` and `loss scale: -1.0` on every line of a run whose
loss falls from 43 to 7.7 (bigscience's `meg_ds_3d_gpt2_perf_n16-ds-on.out` in the corpus)."""

DECIMALS = "coalesce(list_min(list_filter(range(0, 9), lambda k: abs(v - round(v, k::INTEGER)) <= 1e-9 * greatest(1, abs(v)))), 9)"
"""The decimals a loss `v` shows: the fewest that write it back (11.00078 shows 5, 3.0 shows none). A run's
printed precision is the most any of its losses shows."""

FINE_PRECISION = 1e-3
"""The flat-loss rule judges a run only where one unit of its printed precision is at most this share of
the loss (Megatron's `1.100078E+01`: 1e-6; the Trainer's 4 decimals on a loss of 1: 1e-4). A loss printed
with 2 decimals (`loss=2.35`, nanotron's `lm_loss: 6.89`) stays the same over several lines of a healthy
run (nanotron's sample repeats 6.89 on three), the more so near its plateau and where each line averages
a log interval."""


def zero_grad_norm(store: Store, t: Thresholds, scope: Scope) -> dict[int, Flag]:
    """Runs whose grad norm is exactly 0 on every steady line that updated the weights, over at least
    `not_learning_lines` of them, while the loss beside it did not fall (`LOSS_FELL`) and the loss scale
    is not Megatron-DeepSpeed's -1 placeholder: a zero gradient updates nothing (a detached loss, frozen
    parameters, labels all masked)."""
    # The run's count first (`run_buckets`): a run with fewer lines of a zero grad norm than the rule
    # needs (every healthy run: none) is left before its warm-up marks and halves are paid for.
    scope = run_ranges.prepare(store, scope)
    candidates = [
        int(run_id)
        for (run_id,) in store.con.execute(
            f"SELECT run_id FROM {run_ranges.PARTS} WHERE {scope.runs} AND part = 'all' AND zero_norms >= ?",
            [t.not_learning_lines],
        ).fetchall()
    ]
    if not candidates:
        return {}
    rows = store.con.execute(
        f"""
        WITH lines AS MATERIALIZED (
            SELECT run_id, line_no, iteration, grad_norm, lm_loss, loss_scale FROM {scope.marks}
            WHERE run_id IN ({", ".join(map(str, candidates))}) AND NOT warmup AND grad_norm IS NOT NULL
                  AND {UPDATING}
        ),
        zero AS (
            SELECT run_id FROM lines GROUP BY run_id
            HAVING count(*) >= ? AND bool_and(grad_norm = 0) AND coalesce(min(loss_scale), 0) >= 0
        ),
        steady AS (
            SELECT *, row_number() OVER (PARTITION BY run_id ORDER BY line_no) AS k,
                   count(*) OVER (PARTITION BY run_id) AS n
            FROM lines WHERE run_id IN (SELECT run_id FROM zero)
        )
        SELECT run_id, any_value(n), min(line_no), max(line_no), min(iteration), max(iteration),
               min(lm_loss) FILTER (isfinite(lm_loss)), max(lm_loss) FILTER (isfinite(lm_loss)),
               median(lm_loss) FILTER (isfinite(lm_loss) AND 2 * k <= n),
               median(lm_loss) FILTER (isfinite(lm_loss) AND 2 * k > n),
               (SELECT count(*) FROM iterations a WHERE a.run_id = steady.run_id AND a.grad_norm = 0),
               (SELECT count(*) FROM iterations a WHERE a.run_id = steady.run_id)
        FROM steady GROUP BY run_id
        """,
        [t.not_learning_lines],
    ).fetchall()
    flags = {}
    for run_id, n, first_line, last_line, first_it, last_it, low, high, early, late, zeros, lines in rows:
        if early is not None and late is not None and late < early * (1 - LOSS_FELL):
            continue
        loss = f"; the loss stayed between {low:.7g} and {high:.7g}" if low is not None else ""
        flags[run_id] = _flag(
            RULE,
            "warning",
            run_id,
            f"The grad norm is 0 on all {n} steady lines (lines {first_line}-{last_line}, iterations "
            f"{first_it}-{last_it}; on {zeros} of the run's {lines} lines){loss}: no gradient reaches the "
            "weights, so the run is not learning.",
            "Look for what cuts the gradient: a loss computed without grad (detached, under no_grad), "
            "frozen parameters (requires_grad False, an optimizer given no parameters), or labels all "
            "masked; a grad norm the framework prints as a placeholder reads 0 as well (the loss then falls).",
            row_ref=f"line {first_line}",
            measured=0.0,
        )
    return flags


def flat_loss(store: Store, t: Thresholds, scope: Scope) -> dict[int, Flag]:
    """Runs whose loss prints the same value on at least `flat_loss_lines` consecutive lines of
    different iterations that updated the weights, where the printed precision resolves the loss finely
    (`FINE_PRECISION`): a model whose weights do not move, or a loss that is not the model's. The stretches
    are kept between refreshes (`analysis.flat_stretches`, brought up to date by the refresh); the longest
    of a run is named, the first of equals."""
    rows = store.con.execute(
        f"""
        WITH long AS (
            SELECT run_id, lm_loss AS v, steps, first_line, last_line, first_iteration AS first_it,
                   last_iteration AS last_it
            FROM flat_loss_stretches WHERE {scope.runs}
        ),
        -- the printed precision, paid only in the runs that have a stretch long enough (none, in most)
        precision AS (
            SELECT run_id, max({DECIMALS}) AS decimals
            FROM (
                SELECT DISTINCT run_id, lm_loss AS v FROM iterations
                WHERE run_id IN (SELECT run_id FROM long) AND {flat_stretches.LINES}
            )
            GROUP BY run_id
        )
        SELECT s.run_id, arg_max(s.v, [s.steps, -s.first_line]), max(s.steps),
               arg_max(s.first_line, [s.steps, -s.first_line]), arg_max(s.last_line, [s.steps, -s.first_line]),
               arg_max(s.first_it, [s.steps, -s.first_line]), arg_max(s.last_it, [s.steps, -s.first_line]),
               any_value(p.decimals)
        FROM long s JOIN precision p USING (run_id)
        WHERE pow(10, -p.decimals) <= ? * abs(s.v)
        GROUP BY s.run_id
        """,
        [FINE_PRECISION],
    ).fetchall()
    return {
        run_id: _flag(
            RULE,
            "warning",
            run_id,
            f"The loss is {value:.{decimals}f} on {steps} consecutive lines (lines {first_line}-{last_line}, "
            f"iterations {first_it}-{last_it}), identical to the {decimals} decimals it is printed with: "
            "the weights are not moving, so the run is not learning.",
            "A loss that does not change at all is not noise: look for frozen parameters or an optimizer "
            "given none, a learning rate the scheduler holds at (nearly) zero, or a loss that does not "
            "depend on the model (a constant, a cached value, labels all masked).",
            row_ref=f"line {first_line}",
            measured=float(steps),
        )
        for run_id, value, steps, first_line, last_line, first_it, last_it, decimals in rows
    }


def zero_learning_rate(store: Store, t: Thresholds, scope: Scope) -> dict[int, Flag]:
    """Runs whose learning rate is exactly 0 on every line that prints one, over at least
    `not_learning_lines` of them: the optimizer moves no weight. The two rules above leave lines at a
    learning rate of 0 out (a warm-up's first step prints 0, and a frozen model or an evaluation driven
    through the training loop does not learn by design); a whole run at 0 is what a user must hear of
    all the same, since it is as often a scheduler that never leaves 0 or a warm-up longer than the run
    (a published LLaMA-Factory SFT log prints `'grad_norm': 0.0, 'learning_rate': 0.0` on every step
    while its loss sits at 12.0-12.1)."""
    scope = run_ranges.prepare(store, scope)
    rows = store.con.execute(
        f"""
        SELECT run_id, zl_lines, zl_first_line, zl_last_line, zl_first_it, zl_last_it, zl_zero_norms, zl_norms,
               zl_low, zl_high
        FROM {run_ranges.PARTS} WHERE {scope.runs} AND part = 'all' AND zl_lines >= ? AND zl_all_zero
        """,
        [t.not_learning_lines],
    ).fetchall()
    flags = {}
    for run_id, n, first_line, last_line, first_it, last_it, zero_norms, norms, low, high in rows:
        norm = f"; the grad norm is 0 on {zero_norms} of them" if zero_norms and zero_norms == norms else ""
        loss = f"; the loss stayed between {low:.7g} and {high:.7g}" if low is not None else ""
        # a frozen model driven through the loop on purpose still has gradients: a grad norm of 0 beside
        # the rate of 0 is a run broken twice over (the published log above), a warning; alone, information
        flags[run_id] = _flag(
            RULE,
            "warning" if norm else "info",
            run_id,
            f"The learning rate is 0 on all {n} lines that print one (lines {first_line}-{last_line}, "
            f"iterations {first_it}-{last_it}){norm}{loss}: the optimizer moves no weight, so the run is "
            "not learning.",
            "Check the scheduler (a warm-up longer than the run, a decay already at its end, a resumed "
            "scheduler state), the learning rate given (0, or a typo such as 1e-50) and, with DeepSpeed, "
            "which of its config and the framework's arguments sets it; an evaluation-only pass through "
            "the training loop prints 0 by design.",
            row_ref=f"line {first_line}",
            measured=0.0,
        )
    return flags


def not_learning(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    """One flag per run: the zero grad norm where it is seen (it says why), else the flat loss, else a
    learning rate of 0 throughout (the two others leave its lines out)."""
    flags = zero_learning_rate(store, t, scope)
    flags.update(flat_loss(store, t, scope))
    flags.update(zero_grad_norm(store, t, scope))
    return list(flags.values())


RULES = (not_learning,)


def evaluate(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    return [flag for rule in RULES for flag in rule(store, t, scope)]
