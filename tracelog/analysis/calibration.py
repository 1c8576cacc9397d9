"""Calibration: the model's free constants fitted to the runs and benches already in the store.

The textbook model has three constants no formula fixes: the share of the dense peak the GEMMs sustain
(`DEFAULT_COMPUTE_EFFICIENCY`), and per link the latency α of a ring step and the share of the
unidirectional bandwidth NCCL reaches (`DEFAULT_ALPHA_US`, `DEFAULT_LINK_EFFICIENCY`). A team's own
measurements say what they are on its hardware. Fitted constants are data, not code: each is kept in
the `calibrations` table with the subjects it came from and three errors, each the median over those
subjects of |ln(predicted / measured)|:

- `fit_error`: at the fitted value;
- `heldout_error`: each subject predicted from a fit that did not see it (leave-one-out over runs or
  benches; with a single bench, 5-fold over its message sizes);
- `uncalibrated_error`: at the textbook value.

Constants:

- `compute_scale`, per GPU model and precision: a multiplier on the model's compute efficiency
  (`predict_iteration(compute_scale=...)`). For each run with a measured steady sec/it and the inputs a
  time prediction needs, the scale s_i at which the model's sec/it equals the measured one is found by
  bisection on ln s (the predicted time falls monotonically as s grows; bounds 0.01 and 10: a run
  outside them has inputs that are off); the fitted scale is the median of the s_i. Whatever the scale
  multiplies in the model (every sustained GEMM efficiency; memory-bound operations and communication
  stay as they are), s_i is the one that reproduces the run.
  The median makes half the runs slower and half faster than predicted, so it is robust to the few
  runs whose inputs are off; it is the scale that minimises the median log error when the runs' other
  terms are small beside compute.
- `alpha_us` and `link_efficiency`, per link (the catalog link a bench ran over, `hardware.bench_link`):
  nccl-tests out-of-place rows (median time per size) fitted by least squares to the model of
  `predict_collective`, t = steps·α + S·f/(e·B) (Thakur, Rabenseifner, Gropp 2005; f the busbw factor of
  nccl-tests doc/PERFORMANCE.md, B the link's unidirectional bandwidth). The model is linear in α and
  1/e; each row's residual is divided by its measured time, so the µs rows of small messages weigh as
  much as the ms rows of large ones. α is kept ≥ 0 and e ≤ 1 (refitting the other term at the bound).
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from tracelog.analysis.inputs import RunInputs
from tracelog.errors import TracelogError
from tracelog.hardware import Link, bench_link, normalize_precision
from tracelog.model.collectives import (
    BUSBW_FACTOR,
    DEFAULT_ALPHA_US,
    DEFAULT_LINK_EFFICIENCY,
    RING_STEPS,
    normalize_op,
    predict_collective,
)
from tracelog.model.timing import predict_iteration
from tracelog.store import Store, lake

if TYPE_CHECKING:
    import pandas as pd

COMPUTE_SCALE = "compute_scale"
ALPHA_US = "alpha_us"
LINK_EFFICIENCY = "link_efficiency"
TABLE = "calibrations"
COLUMNS = (
    "constant", "scope", "value", "default_value", "unit", "n", "subject_kind", "subject_ids",
    "fit_error", "heldout_error", "uncalibrated_error", "heldout", "estimator",
)  # fmt: skip

SCALE_BOUNDS = (0.01, 10.0)
"""The compute scales a run may imply: beyond these its inputs are wrong (the model caps each GEMM's
efficiency at the dense peak, so a scale far above 1 changes nothing)."""
ROW_FOLDS = 5
"""Folds over message sizes when a link has a single bench to leave out."""

COMPUTE_ESTIMATOR = "median over runs of the scale at which predicted sec/it = measured (bisection on ln s)"
COLLECTIVE_ESTIMATOR = "least squares of t = steps*alpha + S*f/(e*B), residuals relative to measured t"


@dataclass(frozen=True)
class Fit:
    """One fitted constant with what it came from and how well it predicts."""

    constant: str
    scope: str
    value: float
    default_value: float
    unit: str
    subject_kind: str
    subject_ids: tuple[int, ...]
    fit_error: float
    heldout_error: float | None
    uncalibrated_error: float
    heldout: str
    estimator: str

    @property
    def n(self) -> int:
        return len(self.subject_ids)

    def row(self) -> dict[str, object]:
        return {c: (list(self.subject_ids) if c == "subject_ids" else getattr(self, c)) for c in COLUMNS}


@dataclass(frozen=True)
class Constants:
    """The constants the model runs with: fitted ones by scope, the textbook value elsewhere.
    `Constants()` is the textbook model (`--uncalibrated`)."""

    compute_scales: dict[str, float] = field(default_factory=dict)
    collectives: dict[str, tuple[float, float]] = field(default_factory=dict)  # link id: (α µs, e)

    def compute_scale(self, gpu_id: str | None, precision: str) -> float:
        if gpu_id is None:
            return 1.0
        return self.compute_scales.get(compute_scope(gpu_id, precision), 1.0)

    def collective(self, link_id: str | None) -> tuple[float, float]:
        """(α µs per step, efficiency) of a link: fitted, else the textbook defaults."""
        return self.collectives.get(link_id or "", (DEFAULT_ALPHA_US, DEFAULT_LINK_EFFICIENCY))

    def is_calibrated_link(self, link_id: str | None) -> bool:
        return (link_id or "") in self.collectives


TEXTBOOK = Constants()


def compute_scope(gpu_id: str, precision: str) -> str:
    """`a100-sxm4-80gb/bf16`: the scope of a compute scale (fp16 and bf16 are kept apart)."""
    with contextlib.suppress(TracelogError):
        precision = normalize_precision(precision)
    return f"{gpu_id}/{precision}"


def log_error(predicted: float, measured: float) -> float:
    """|ln(predicted / measured)|: symmetric, so 2× too slow and 2× too fast weigh the same."""
    return abs(math.log(predicted / measured))


# --- compute --------------------------------------------------------------------------------------


def predicted_sec_per_it(
    inputs: RunInputs,
    scale: float = 1.0,
    constants: Constants = TEXTBOOK,
    efficiency: float | None = None,
) -> float:
    """The model's sec/it of a run at a compute scale (collectives at `constants`' values for the GPU's
    intra-node link when the run fits in one node); `efficiency` a flat share of the peak instead of the
    per-operation model, as `predict_iteration` takes it."""
    cfg, train, gpu = inputs.cfg, inputs.train, inputs.gpu
    if cfg is None or train is None or gpu is None:
        raise TracelogError(f"run {inputs.run_id}: no time prediction ({'; '.join(inputs.missing)})")
    alpha_us, link_efficiency = run_collective_constants(inputs, constants)
    time = predict_iteration(
        cfg,
        train,
        gpu,
        inputs.fabric,
        efficiency,
        gpus_per_node=inputs.gpus_per_node,
        alpha_us=alpha_us,
        link_efficiency=link_efficiency,
        compute_scale=scale,
    )
    return time.total_s


def run_collective_constants(inputs: RunInputs, constants: Constants) -> tuple[float, float]:
    """α and link efficiency for a run's collectives. `predict_iteration` takes one pair for the TP and
    DP groups alike, so a fitted pair is used only where both run over the one link it was fitted on:
    the GPU's intra-node link, for a run within one node."""
    gpu = inputs.gpu
    if gpu is None or not gpu.intra_node_link or (inputs.gpus or 1) > inputs.gpus_per_node:
        return DEFAULT_ALPHA_US, DEFAULT_LINK_EFFICIENCY
    return constants.collective(gpu.intra_node_link)


class TimingConstants(TypedDict):
    """The constants `predict_iteration` takes as keyword arguments."""

    compute_scale: float
    alpha_us: float
    link_efficiency: float


@dataclass(frozen=True)
class RunConstants:
    """The constants one run's prediction uses, and how a prediction records them."""

    compute_scale: float
    alpha_us: float
    link_efficiency: float
    scope: str

    @property
    def timing(self) -> TimingConstants:
        """Keyword arguments of `predict_iteration`."""
        return TimingConstants(
            compute_scale=self.compute_scale, alpha_us=self.alpha_us, link_efficiency=self.link_efficiency
        )

    @property
    def calibrated(self) -> bool:
        return self.compute_scale != 1.0 or (self.alpha_us, self.link_efficiency) != TEXTBOOK.collective(None)

    @property
    def source(self) -> str:
        """`calibrated a100-sxm4-80gb/bf16` or `textbook`: the formula of the `compute_scale` row."""
        return f"calibrated {self.scope}" if self.compute_scale != 1.0 else "textbook"

    @property
    def detail(self) -> dict[str, object]:
        return {**self.timing, "calibrated": self.calibrated}


def for_run(inputs: RunInputs, constants: Constants) -> RunConstants:
    """The compute scale of the run's GPU and precision and its collectives' α and efficiency."""
    gpu_id = inputs.gpu.id if inputs.gpu is not None else None
    alpha_us, link_efficiency = run_collective_constants(inputs, constants)
    scope = compute_scope(gpu_id, inputs.precision) if gpu_id else ""
    return RunConstants(constants.compute_scale(gpu_id, inputs.precision), alpha_us, link_efficiency, scope)


def timed_runs(runs: Iterable[RunInputs], efficiency: float | None = None) -> list[RunInputs]:
    """The runs a compute scale can be fitted on: a measured steady sec/it and every input a time
    prediction needs (shapes, layout, GPU, and a fabric across nodes)."""
    out = []
    for run in runs:
        if not run.sec_per_it or run.sec_per_it <= 0 or run.gpu is None:
            continue
        try:
            predicted_sec_per_it(run, efficiency=efficiency)
        except TracelogError:
            continue
        out.append(run)
    return out


def run_scale(inputs: RunInputs, constants: Constants = TEXTBOOK, efficiency: float | None = None) -> float:
    """The compute scale at which the model's sec/it equals the run's measured one, by bisection on ln s
    within `SCALE_BOUNDS` (a run outside them gets the bound)."""
    measured = inputs.sec_per_it
    assert measured
    lo, hi = (math.log(b) for b in SCALE_BOUNDS)

    def gap(log_s: float) -> float:
        return predicted_sec_per_it(inputs, math.exp(log_s), constants, efficiency) - measured

    if gap(lo) <= 0:
        return SCALE_BOUNDS[0]
    if gap(hi) >= 0:
        return SCALE_BOUNDS[1]
    for _ in range(60):  # 60 halvings of ln(10 / 0.01) ≈ 6.9: far below float precision
        mid = (lo + hi) / 2
        if gap(mid) > 0:
            lo = mid
        else:
            hi = mid
    return math.exp((lo + hi) / 2)


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def fit_compute(
    runs: Iterable[RunInputs], constants: Constants = TEXTBOOK, efficiency: float | None = None
) -> list[Fit]:
    """One `compute_scale` per GPU model and precision over the runs that allow it (see module doc);
    leave-one-out held-out error with two runs or more. `efficiency`: a flat share of the peak instead
    of the per-operation model (what `tracelog predict --efficiency` uses)."""
    groups: dict[str, list[RunInputs]] = {}
    for run in timed_runs(runs, efficiency):
        assert run.gpu is not None
        groups.setdefault(compute_scope(run.gpu.id, run.precision), []).append(run)
    fits = []
    for scope, members in sorted(groups.items()):
        scales = [run_scale(run, constants, efficiency) for run in members]
        value = _median(scales)

        def error(scale: float, run: RunInputs, at: Constants = constants) -> float:
            return log_error(predicted_sec_per_it(run, scale, at, efficiency), run.sec_per_it or 0.0)

        heldout = None
        if len(members) > 1:
            left_out = [error(_median(scales[:i] + scales[i + 1 :]), run) for i, run in enumerate(members)]
            heldout = _median(left_out)
        fits.append(
            Fit(
                constant=COMPUTE_SCALE,
                scope=scope,
                value=value,
                default_value=1.0,
                unit="x efficiency",
                subject_kind="run",
                subject_ids=tuple(run.run_id for run in members),
                fit_error=_median([error(value, run) for run in members]),
                heldout_error=heldout,
                uncalibrated_error=_median([error(1.0, run, TEXTBOOK) for run in members]),
                heldout="leave-one-run-out",
                estimator=COMPUTE_ESTIMATOR
                + (f"; flat efficiency {efficiency}" if efficiency is not None else "; per-operation model"),
            )
        )
    return fits


def sec_per_it_error(runs: Iterable[RunInputs], constants: Constants) -> tuple[float, int]:
    """Median |ln(predicted / measured)| of sec/it over the runs that have both, with their count: how
    well a set of constants predicts runs (e.g. ones the fit never saw)."""
    errors = []
    for run in timed_runs(runs):
        assert run.gpu is not None and run.sec_per_it
        scale = constants.compute_scale(run.gpu.id, run.precision)
        errors.append(log_error(predicted_sec_per_it(run, scale, constants), run.sec_per_it))
    if not errors:
        raise TracelogError("no run has a measured sec/it and the inputs to predict one")
    return _median(errors), len(errors)


# --- collectives ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchCurve:
    """One nccl-tests bench as the fit sees it: out-of-place median time per message size."""

    bench_id: int
    op: str
    ranks: int
    link: Link
    sizes_bytes: tuple[float, ...]
    times_us: tuple[float, ...]


def bench_curves(store: Store, where: str = "TRUE") -> list[BenchCurve]:
    """The nccl-tests benches (a SQL predicate over `bench_id`) with a known link and two or more ranks."""
    benches = store.con.execute(
        f"""
        SELECT bench_id, collective, gpu_model, gpu_name, nodes, ranks, gpus_per_node FROM benches
        WHERE ({where}) AND bench_id IN (SELECT bench_id FROM collectives) ORDER BY bench_id
        """
    ).fetchall()
    curves = []
    for bench_id, collective, gpu_model, gpu_name, nodes, ranks, gpn in benches:
        try:
            op = normalize_op(collective or "")
        except TracelogError:
            continue
        if not ranks or ranks < 2:
            continue
        link = bench_link(gpu_model, gpu_name, nodes, ranks, gpn)
        if link is None:
            continue
        rows = store.con.execute(
            "SELECT size_bytes, median(time_us) FROM collectives WHERE bench_id = ? "
            "AND placement = 'out-of-place' AND time_us > 0 AND size_bytes > 0 "
            "GROUP BY size_bytes ORDER BY size_bytes",
            [bench_id],
        ).fetchall()
        if len(rows) >= 2:
            sizes, times = zip(*rows, strict=True)
            curves.append(BenchCurve(int(bench_id), op, int(ranks), link, tuple(sizes), tuple(times)))
    return curves


def _design(curves: Sequence[BenchCurve]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: ring steps, the bandwidth term at e = 1 (µs), and the measured time (µs)."""
    steps, wire, times = [], [], []
    for c in curves:
        n_steps, factor = RING_STEPS[c.op](c.ranks), BUSBW_FACTOR[c.op](c.ranks)
        for size, time in zip(c.sizes_bytes, c.times_us, strict=True):
            steps.append(n_steps)
            wire.append(size * factor / (c.link.unidirectional_gbps * 1e9) * 1e6)
            times.append(time)
    return np.array(steps, float), np.array(wire, float), np.array(times, float)


def fit_alpha_efficiency(curves: Sequence[BenchCurve]) -> tuple[float, float]:
    """α (µs per ring step) and efficiency e of one link from its benches' rows (module doc)."""
    steps, wire, times = _design(curves)
    if times.size < 2:
        raise TracelogError("need at least two (size, time) rows to fit α and the efficiency")
    a, w = steps / times, wire / times
    ones = np.ones_like(times)
    (alpha, inverse), *_ = np.linalg.lstsq(np.column_stack([a, w]), ones, rcond=None)
    if alpha < 0:  # latency cannot be negative: the bandwidth term alone
        alpha = 0.0
        inverse = float(w @ ones / (w @ w))
    if inverse < 1:  # faster than the link: e at its bound 1, α refitted
        inverse = 1.0
        alpha = max(0.0, float(a @ (ones - w) / (a @ a)))
    if inverse <= 0 or not math.isfinite(inverse):
        raise TracelogError("the rows do not reach the bandwidth-bound range; cannot fit an efficiency")
    return float(alpha), float(1 / inverse)


def curve_error(curves: Sequence[BenchCurve], alpha_us: float, efficiency: float) -> list[float]:
    """|ln(predicted / measured)| of every row, at α and e."""
    out = []
    for c in curves:
        for size, time in zip(c.sizes_bytes, c.times_us, strict=True):
            p = predict_collective(c.op, size, c.ranks, c.link.unidirectional_gbps, alpha_us, efficiency)
            out.append(log_error(p.time_us, time))
    return out


def _row_folds(curve: BenchCurve, folds: int) -> list[tuple[BenchCurve, BenchCurve]]:
    """(fit part, held-out part) of one bench: every `folds`-th size held out in turn."""
    out = []
    for k in range(folds):
        keep = [i for i in range(len(curve.sizes_bytes)) if i % folds != k]
        held = [i for i in range(len(curve.sizes_bytes)) if i % folds == k]
        if len(keep) < 2 or not held:
            continue

        def part(idx: list[int]) -> BenchCurve:
            return BenchCurve(
                curve.bench_id,
                curve.op,
                curve.ranks,
                curve.link,
                tuple(curve.sizes_bytes[i] for i in idx),
                tuple(curve.times_us[i] for i in idx),
            )

        out.append((part(keep), part(held)))
    return out


def fit_collectives(curves: Iterable[BenchCurve]) -> list[Fit]:
    """`alpha_us` and `link_efficiency` per link (two rows sharing subjects and errors)."""
    by_link: dict[str, list[BenchCurve]] = {}
    for c in curves:
        by_link.setdefault(c.link.id, []).append(c)
    fits = []
    for link_id, members in sorted(by_link.items()):
        try:
            alpha, efficiency = fit_alpha_efficiency(members)
        except TracelogError:
            continue
        splits: list[tuple[list[BenchCurve], list[BenchCurve]]]
        if len(members) > 1:
            heldout_kind = "leave-one-bench-out"
            splits = [(members[:i] + members[i + 1 :], [m]) for i, m in enumerate(members)]
        else:
            heldout_kind = f"{ROW_FOLDS}-fold over message sizes"
            splits = [([fit], [held]) for fit, held in _row_folds(members[0], ROW_FOLDS)]
        held_errors: list[float] = []
        for fit_part, held_part in splits:
            try:
                a, e = fit_alpha_efficiency(fit_part)
            except TracelogError:
                continue
            held_errors += curve_error(held_part, a, e)
        alpha_fit = Fit(
            constant=ALPHA_US,
            scope=link_id,
            value=alpha,
            default_value=DEFAULT_ALPHA_US,
            unit="us",
            subject_kind="bench",
            subject_ids=tuple(c.bench_id for c in members),
            fit_error=_median(curve_error(members, alpha, efficiency)),
            heldout_error=_median(held_errors) if held_errors else None,
            uncalibrated_error=_median(curve_error(members, DEFAULT_ALPHA_US, DEFAULT_LINK_EFFICIENCY)),
            heldout=heldout_kind,
            estimator=COLLECTIVE_ESTIMATOR,
        )
        efficiency_fit = replace(
            alpha_fit,
            constant=LINK_EFFICIENCY,
            value=efficiency,
            default_value=DEFAULT_LINK_EFFICIENCY,
            unit="ratio",
        )
        fits += [alpha_fit, efficiency_fit]
    return fits


# --- the store ------------------------------------------------------------------------------------


def has_table(store: Store) -> bool:
    """Whether the store has the calibrations table (a read-only store of an older schema has not). A
    writable store was brought to the newest schema when it opened; the store keeps a table's columns
    once looked up, so a refresh per file does not ask the catalog again."""
    return not store.read_only or bool(store.columns(TABLE))


@lake.retried
def save(store: Store, fits: Sequence[Fit]) -> None:
    """Replace the rows of the fitted (constant, scope) pairs; other constants stay as they were."""
    import pandas as pd  # loaded by what returns a frame, not at start-up

    if not fits:
        return
    with store.transaction():
        for fit in fits:
            store.con.execute(
                f"DELETE FROM {TABLE} WHERE constant = ? AND scope = ?", [fit.constant, fit.scope]
            )
        store.insert(TABLE, pd.DataFrame([fit.row() for fit in fits]))


def load(store: Store | None) -> Constants:
    """The constants stored by `tracelog calibrate`; the textbook model when there are none."""
    if store is None or not has_table(store):
        return TEXTBOOK
    rows = store.con.execute(f"SELECT constant, scope, value FROM {TABLE}").fetchall()
    scales = {scope: value for constant, scope, value in rows if constant == COMPUTE_SCALE}
    alphas = {scope: value for constant, scope, value in rows if constant == ALPHA_US}
    efficiencies = {scope: value for constant, scope, value in rows if constant == LINK_EFFICIENCY}
    collectives = {
        link: (alphas.get(link, DEFAULT_ALPHA_US), efficiencies.get(link, DEFAULT_LINK_EFFICIENCY))
        for link in alphas.keys() | efficiencies.keys()
    }
    return Constants(scales, collectives)


def table(store: Store) -> pd.DataFrame:
    """The stored constants, one row each, as `tracelog calibrate` prints them."""
    import pandas as pd  # loaded by what returns a frame, not at start-up

    if not has_table(store):
        return pd.DataFrame(columns=list(COLUMNS))
    return store.query(f"SELECT * FROM {TABLE} ORDER BY constant, scope")


def fits_frame(fits: Sequence[Fit]) -> pd.DataFrame:
    """Fits as a table: constant, scope, value, textbook value, n, and the three errors."""
    import pandas as pd  # loaded by what returns a frame, not at start-up

    return pd.DataFrame(
        [
            {
                "constant": f.constant,
                "scope": f.scope,
                "value": f.value,
                "textbook": f.default_value,
                "n": f.n,
                "subject_kind": f.subject_kind,
                "fit_error": f.fit_error,
                "heldout_error": f.heldout_error,
                "uncalibrated_error": f.uncalibrated_error,
                "heldout": f.heldout,
            }
            for f in fits
        ],
        columns=[
            "constant", "scope", "value", "textbook", "n", "subject_kind", "fit_error", "heldout_error",
            "uncalibrated_error", "heldout",
        ],
    )  # fmt: skip


def calibrate(
    store: Store,
    runs: Iterable[RunInputs],
    bench_where: str = "TRUE",
) -> list[Fit]:
    """Fit the collectives on the benches, then the compute scales on the runs with the fitted
    collectives in place, and store both. `runs` are the model inputs of the runs to fit on."""
    collective_fits = fit_collectives(bench_curves(store, bench_where))
    save(store, collective_fits)
    compute_fits = fit_compute(runs, load(store))
    save(store, compute_fits)
    return collective_fits + compute_fits
