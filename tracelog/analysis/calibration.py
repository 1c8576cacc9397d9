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
- `alpha_us` and `link_efficiency`, per intra-node link and per fabric: fitted on the nccl-tests
  benches (`analysis.link_fit`).

A run's collectives take the pair of its GPU's intra-node link inside a node and the pair of its fabric
across nodes (`run_collective_constants`); a link without a fit keeps the textbook pair.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from tracelog.analysis.inputs import RunInputs
from tracelog.errors import TracelogError
from tracelog.hardware import normalize_precision
from tracelog.model.collectives import (
    DEFAULT_ALPHA_US,
    DEFAULT_LINK_EFFICIENCY,
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

COMPUTE_ESTIMATOR = "median over runs of the scale at which predicted sec/it = measured (bisection on ln s)"


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
    intra-node link and the run's fabric, `run_collective_constants`); `efficiency` a flat share of the
    peak instead of the per-operation model, as `predict_iteration` takes it."""
    cfg, train, gpu = inputs.cfg, inputs.train, inputs.gpu
    if cfg is None or train is None or gpu is None:
        raise TracelogError(f"run {inputs.run_id}: no time prediction ({'; '.join(inputs.missing)})")
    alpha_us, link_efficiency, net_alpha_us, net_link_efficiency = run_collective_constants(inputs, constants)
    time = predict_iteration(
        cfg,
        train,
        gpu,
        inputs.fabric,
        efficiency,
        gpus_per_node=inputs.gpus_per_node,
        alpha_us=alpha_us,
        link_efficiency=link_efficiency,
        net_alpha_us=net_alpha_us,
        net_link_efficiency=net_link_efficiency,
        compute_scale=scale,
    )
    return time.total_s


def run_collective_constants(inputs: RunInputs, constants: Constants) -> tuple[float, float, float, float]:
    """α and link efficiency of a run's collectives inside a node (those fitted to the GPU's intra-node
    link) and across nodes (those fitted to the run's fabric). Where a link has no fit its pair is the
    textbook one: a fitted NVLink says nothing about the network, nor a fitted network about NVLink."""
    intra = constants.collective(inputs.gpu.intra_node_link if inputs.gpu is not None else None)
    net = constants.collective(inputs.fabric.id if inputs.fabric is not None else None)
    return (*intra, *net)


class TimingConstants(TypedDict):
    """The constants `predict_iteration` takes as keyword arguments."""

    compute_scale: float
    alpha_us: float
    link_efficiency: float
    net_alpha_us: float
    net_link_efficiency: float


@dataclass(frozen=True)
class RunConstants:
    """The constants one run's prediction uses, and how a prediction records them: `alpha_us` and
    `link_efficiency` for collectives inside a node, `net_alpha_us` and `net_link_efficiency` for those
    across nodes."""

    compute_scale: float
    alpha_us: float
    link_efficiency: float
    scope: str
    net_alpha_us: float = DEFAULT_ALPHA_US
    net_link_efficiency: float = DEFAULT_LINK_EFFICIENCY

    @property
    def timing(self) -> TimingConstants:
        """Keyword arguments of `predict_iteration`."""
        return TimingConstants(
            compute_scale=self.compute_scale,
            alpha_us=self.alpha_us,
            link_efficiency=self.link_efficiency,
            net_alpha_us=self.net_alpha_us,
            net_link_efficiency=self.net_link_efficiency,
        )

    @property
    def calibrated(self) -> bool:
        textbook = TEXTBOOK.collective(None)
        return (
            self.compute_scale != 1.0
            or (self.alpha_us, self.link_efficiency) != textbook
            or (self.net_alpha_us, self.net_link_efficiency) != textbook
        )

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
    alpha_us, link_efficiency, net_alpha_us, net_link_efficiency = run_collective_constants(inputs, constants)
    scope = compute_scope(gpu_id, inputs.precision) if gpu_id else ""
    scale = constants.compute_scale(gpu_id, inputs.precision)
    return RunConstants(scale, alpha_us, link_efficiency, scope, net_alpha_us, net_link_efficiency)


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


def median(values: Sequence[float]) -> float:
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
        value = median(scales)

        def error(scale: float, run: RunInputs, at: Constants = constants) -> float:
            return log_error(predicted_sec_per_it(run, scale, at, efficiency), run.sec_per_it or 0.0)

        heldout = None
        if len(members) > 1:
            left_out = [error(median(scales[:i] + scales[i + 1 :]), run) for i, run in enumerate(members)]
            heldout = median(left_out)
        fits.append(
            Fit(
                constant=COMPUTE_SCALE,
                scope=scope,
                value=value,
                default_value=1.0,
                unit="x efficiency",
                subject_kind="run",
                subject_ids=tuple(run.run_id for run in members),
                fit_error=median([error(value, run) for run in members]),
                heldout_error=heldout,
                uncalibrated_error=median([error(1.0, run, TEXTBOOK) for run in members]),
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
    return median(errors), len(errors)


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
