"""The collectives' constants fitted to the nccl-tests benches in the store (`tracelog calibrate`): per
intra-node link from the benches on one node, per fabric from those across nodes. Kept and used as
`analysis.calibration` keeps and uses every fitted constant (its module doc says how they are judged).

- `alpha_us` and `link_efficiency`, per link (the catalog link a bench ran over, `hardware.bench_link`):
  nccl-tests out-of-place rows (median time per size) fitted by least squares to the model of
  `predict_collective`, t = steps·α + S·f/(e·B) (Thakur, Rabenseifner, Gropp 2005; f the busbw factor of
  nccl-tests doc/PERFORMANCE.md, B the link's unidirectional bandwidth). The model is linear in α and
  1/e; each row's residual is divided by its measured time, so the µs rows of small messages weigh as
  much as the ms rows of large ones. α is kept ≥ 0 and e ≤ 1 (refitting the other term at the bound).
- `alpha_us` and `link_efficiency`, per fabric (the network between nodes a multi-node bench ran over:
  its `fabric`, else the GPU's reference fabric, as its prediction takes it): the network step's α of
  NCCL's Simple protocol and the share of the node's NIC bandwidth NCCL reaches, in the very model
  that predicts multi-node benches (`model.collectives.predict_nccl`: ring or tree, LL, LL128 or
  Simple, the intra-node link at its own constants). That model is a minimum over algorithms, not
  linear, so the pair is found by a grid search on ln α and ln e, refined around the best point, of
  the mean squared ln(predicted / measured) time over the benches' rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np

from tracelog import hardware
from tracelog.analysis.calibration import (
    ALPHA_US,
    LINK_EFFICIENCY,
    TEXTBOOK,
    Constants,
    Fit,
    log_error,
    median,
)
from tracelog.errors import TracelogError
from tracelog.hardware import Link, bench_link
from tracelog.model.collectives import (
    BUSBW_FACTOR,
    DEFAULT_ALPHA_US,
    DEFAULT_ALPHA_US_BY_CLASS,
    DEFAULT_LINK_EFFICIENCY,
    DEFAULT_NET_EFFICIENCY,
    RING_STEPS,
    Placement,
    algorithms,
    bench_placement,
    link_class,
    normalize_op,
    predict_collective,
)
from tracelog.model.nvls import NcclOffer, offer_from
from tracelog.store import Store

ROW_FOLDS = 5
"""Folds over message sizes when a link has a single bench to leave out; a link's benches (inside a node
or across nodes) are left out one by one up to this many, in this many folds beyond."""
COLLECTIVE_ESTIMATOR = "least squares of t = steps*alpha + S*f/(e*B), residuals relative to measured t"
FABRIC_ESTIMATOR = (
    "grid search of the mean squared ln(predicted/measured) time under NCCL's cost model (predict_nccl), "
    "alpha per network step (Simple protocol) and e of the node's NIC bandwidth"
)
ALPHA_RANGE_US = (0.05, 1000.0)
EFFICIENCY_RANGE = (0.01, 1.0)
"""Where the fabric fit searches: a network step from tens of ns to a ms, and from 1% of the NICs'
bandwidth to all of it. A fit that lands on a bound says the bench is outside what the model explains."""
GRID_POINTS = 13
GRID_ROUNDS = 5
"""The fabric fit's grid: GRID_POINTS per axis on a log scale, then GRID_ROUNDS refinements, each a
grid of the same size over ±2 steps of the previous one around its best point: each round narrows the
range threefold, so the last step is about 0.3% of α and 0.2% of e."""


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


USABLE_SQL = "coalesce(status, 'complete') NOT IN ('failed', 'data_error')"
"""A bench the fit may learn from: not one that failed or returned wrong data (a broken GPU, link or
driver is no figure of the fabric); a partial sweep's rows are measurements like any other."""


def bench_curves(store: Store, where: str = "TRUE") -> list[BenchCurve]:
    """The nccl-tests benches (a SQL predicate over `bench_id`) with a known link and two or more ranks."""
    benches = store.con.execute(
        f"""
        SELECT bench_id, collective, gpu_model, gpu_name, nodes, ranks, gpus_per_node FROM benches
        WHERE ({where}) AND bench_id IN (SELECT bench_id FROM collectives) AND {USABLE_SQL} ORDER BY bench_id
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


Curve = TypeVar("Curve", "BenchCurve", "FabricCurve")


def _row_folds(curve: Curve, folds: int) -> list[tuple[Curve, Curve]]:
    """(fit part, held-out part) of one bench: every `folds`-th size held out in turn."""
    out = []
    n = len(curve.sizes_bytes)
    for k in range(folds):
        keep = [i for i in range(n) if i % folds != k]
        held = [i for i in range(n) if i % folds == k]
        if len(keep) < 2 or not held:
            continue

        def part(idx: list[int]) -> Curve:
            return replace(
                curve,
                sizes_bytes=tuple(curve.sizes_bytes[i] for i in idx),
                times_us=tuple(curve.times_us[i] for i in idx),
            )

        out.append((part(keep), part(held)))
    return out


def held_out_splits(members: list[Curve]) -> tuple[str, list[tuple[list[Curve], list[Curve]]]]:
    """How a link's benches are held out, and the (fit, held-out) splits: one by one up to ROW_FOLDS
    benches, in ROW_FOLDS folds beyond, and a single bench over its message sizes."""
    if len(members) > ROW_FOLDS:
        folds = [(
            [m for i, m in enumerate(members) if i % ROW_FOLDS != k], members[k::ROW_FOLDS]
        ) for k in range(ROW_FOLDS)]  # fmt: skip
        return f"{ROW_FOLDS}-fold over benches", folds
    if len(members) > 1:
        return "leave-one-bench-out", [(members[:i] + members[i + 1 :], [m]) for i, m in enumerate(members)]
    return f"{ROW_FOLDS}-fold over message sizes", [([f], [h]) for f, h in _row_folds(members[0], ROW_FOLDS)]


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
        heldout_kind, splits = held_out_splits(members)
        held_errors: list[float] = []
        for fit_part, held_part in splits:
            try:
                a, e = fit_alpha_efficiency(fit_part)
            except TracelogError:
                continue
            held_errors += curve_error(held_part, a, e)
        fits += _fit_pair(
            link_id,
            members,
            (alpha, efficiency),
            (DEFAULT_ALPHA_US, DEFAULT_LINK_EFFICIENCY),
            (
                median(curve_error(members, alpha, efficiency)),
                median(held_errors) if held_errors else None,
                median(curve_error(members, DEFAULT_ALPHA_US, DEFAULT_LINK_EFFICIENCY)),
            ),
            heldout_kind,
            COLLECTIVE_ESTIMATOR,
        )
    return fits


def bound_notes(fits: Iterable[Fit]) -> list[str]:
    """A sentence for each fabric constant the grid search left on a bound of its range
    (`ALPHA_RANGE_US`, `EFFICIENCY_RANGE`): the benches' curve is outside what the model explains."""
    ranges = {ALPHA_US: ALPHA_RANGE_US, LINK_EFFICIENCY: EFFICIENCY_RANGE}
    notes = []
    for fit in fits:
        low, high = ranges.get(fit.constant, (None, None))
        if fit.estimator != FABRIC_ESTIMATOR or low is None or high is None:
            continue
        if math.isclose(fit.value, low, rel_tol=1e-6) or math.isclose(fit.value, high, rel_tol=1e-6):
            what = (
                "a fixed cost per call that no per-step latency explains"
                if fit.constant == ALPHA_US
                else "a bandwidth the fabric's NICs do not bound"
            )
            notes.append(
                f"{fit.constant} of {fit.scope} stops at the bound of its search ({fit.value:g}): its benches "
                f"{', '.join(str(b) for b in fit.subject_ids)} show {what}; read that constant as a bound"
            )
    return notes


def _fit_pair(
    scope: str,
    members: Sequence[BenchCurve] | Sequence[FabricCurve],
    values: tuple[float, float],
    defaults: tuple[float, float],
    errors: tuple[float, float | None, float],
    heldout: str,
    estimator: str,
) -> list[Fit]:
    """`alpha_us` and `link_efficiency` of one link as two rows sharing their subjects and their errors
    (at the fit, held out, uncalibrated)."""
    alpha = Fit(
        constant=ALPHA_US,
        scope=scope,
        value=values[0],
        default_value=defaults[0],
        unit="us",
        subject_kind="bench",
        subject_ids=tuple(c.bench_id for c in members),
        fit_error=errors[0],
        heldout_error=errors[1],
        uncalibrated_error=errors[2],
        heldout=heldout,
        estimator=estimator,
    )
    efficiency = replace(
        alpha, constant=LINK_EFFICIENCY, value=values[1], default_value=defaults[1], unit="ratio"
    )
    return [alpha, efficiency]


# --- fabrics: the network between nodes -----------------------------------------------------------


@dataclass(frozen=True)
class FabricCurve:
    """One multi-node bench as the fabric fit sees it: where its ranks sat (the fabric included) and its
    median time per message size."""

    bench_id: int
    op: str
    place: Placement
    sizes_bytes: tuple[float, ...]
    times_us: tuple[float, ...]

    @property
    def fabric_id(self) -> str:
        assert self.place.fabric is not None
        return self.place.fabric.id


def measured_times(store: Store, bench_id: int) -> list[tuple[float, float, float | None]]:
    """(size, median time, peak busbw) per message size of one bench: its out-of-place rows, or its
    in-place ones when it has no others (torch.distributed's all_reduce, as all_reduce_bench times it). A
    row that prints no time (all_reduce_bench's summary: `The average bandwidth of all_reduce with a 4.0GB
    payload ...: algbw: 2.019 GBps`) takes the time its algbw means: size / algbw."""
    for placement in ("out-of-place", "in-place"):
        rows = store.con.execute(
            "SELECT size_bytes, median(coalesce(time_us, size_bytes / nullif(algbw_gbps, 0) / 1e3)) AS t, "
            "max(busbw_gbps) FROM collectives WHERE bench_id = ? AND placement = ? "
            "AND coalesce(time_us, size_bytes / nullif(algbw_gbps, 0) / 1e3) > 0 "
            "GROUP BY size_bytes ORDER BY size_bytes",
            [bench_id, placement],
        ).fetchall()
        if rows:
            return rows
    return []


OFFER_PARAMS = (
    "NCCL version",
    "nccl-library",
    "nccl_version",
    "command",
    "env NCCL_ALGO",
    "env NCCL_NVLS_ENABLE",
    "NCCL_ALGO",
    "NCCL_NVLS_ENABLE",
)


def nccl_offers(store: Store, where: str = "TRUE") -> dict[int, NcclOffer]:
    """What each bench's NCCL could choose from (a SQL predicate over `bench_id`), read from its
    parameters (`nvls.offer_from`) in one query, not one per bench: a DuckLake statement costs tens of ms."""
    found: dict[int, dict[str, str]] = {}
    for bench_id, name, value in store.con.execute(
        f"SELECT bench_id, name, any_value(value) FROM bench_params WHERE ({where}) AND list_contains(?, name) "
        "GROUP BY bench_id, name",
        [list(OFFER_PARAMS)],
    ).fetchall():
        if value is not None:
            found.setdefault(int(bench_id), {})[name] = value
    return {bench_id: offer_from(params) for bench_id, params in found.items()}


def link_classes(
    place: Placement, constants: Constants, *, fabric: bool = True
) -> tuple[dict[str, float], dict[str, float]]:
    """α and efficiency per link class (`nvlink`, `pcie`, `net`) from the constants fitted to the links
    of a placement, as `predict_nccl` takes them; without `fabric`, those of the intra-node link alone."""
    alpha: dict[str, float] = {}
    efficiency: dict[str, float] = {}
    for lk in (place.intra, place.fabric if fabric else None):
        if lk is not None and constants.is_calibrated_link(lk.id):
            alpha[link_class(lk)], efficiency[link_class(lk)] = constants.collective(lk.id)
    return alpha, efficiency


def fabric_curves(store: Store, where: str = "TRUE") -> list[FabricCurve]:
    """The nccl-tests benches (a SQL predicate over `bench_id`) whose ranks span nodes, with a GPU and a
    fabric known (given, or the GPU's reference fabric, as their predictions assume)."""
    benches = store.con.execute(
        f"""
        SELECT bench_id, collective, gpu_model, gpu_name, nodes, ranks, gpus_per_node, fabric, nics_per_node
        FROM benches WHERE ({where}) AND bench_id IN (SELECT bench_id FROM collectives) AND {USABLE_SQL}
        ORDER BY bench_id
        """
    ).fetchall()
    curves = []
    offers = nccl_offers(store, where)
    for bench_id, collective, gpu_model, gpu_name, nodes, ranks, gpn, fabric_id, nics in benches:
        if not ranks or ranks < 2:
            continue
        try:
            op = normalize_op(collective or "")
            fabric = hardware.fabric_of(fabric_id, nics)
            gpu = hardware.gpu_for(gpu_model, gpu_name)
            allowed = offers.get(int(bench_id), NcclOffer()).allowed(op)
            place, _assumed = bench_placement(gpu, ranks, nodes, gpn, fabric, allowed)
            if place.nodes < 2:
                continue
            algorithms(op, place)  # refuses a fabric that cannot join nodes (an intra-node link)
        except TracelogError:
            continue
        rows = [r for r in measured_times(store, int(bench_id)) if r[0] > 0]
        if len(rows) >= 2:
            sizes = tuple(float(r[0]) for r in rows)
            times = tuple(float(r[1]) for r in rows)
            curves.append(FabricCurve(int(bench_id), op, place, sizes, times))
    return curves


def fabric_errors(
    curves: Sequence[FabricCurve], constants: Constants, alpha_us: float | None, efficiency: float | None
) -> list[float]:
    """ln(predicted / measured) of every row under NCCL's cost model, the intra-node link at its fitted
    constants and the network at α and e (None: the textbook value of the network class)."""
    return [float(x) for x in _log_errors(_rows_by_placement(curves), constants, alpha_us, efficiency)]


_Rows = list[tuple[str, Placement, np.ndarray, np.ndarray]]


def _rows_by_placement(curves: Sequence[FabricCurve]) -> _Rows:
    """The curves' rows pooled by (operation, placement): NCCL's algorithms and their costs depend on
    those alone, so a fit over a thousand benches of one acceptance run costs what one bench costs."""
    pooled: dict[tuple[str, Placement], tuple[list[float], list[float]]] = {}
    for c in curves:
        sizes, times = pooled.setdefault((c.op, c.place), ([], []))
        sizes += c.sizes_bytes
        times += c.times_us
    return [(op, place, np.array(s, float), np.array(t, float)) for (op, place), (s, t) in pooled.items()]


def _log_errors(
    rows: _Rows, constants: Constants, alpha_us: float | None, efficiency: float | None
) -> np.ndarray:
    out = []
    for op, place, sizes, times in rows:
        alpha, eff = link_classes(place, constants, fabric=False)
        if alpha_us is not None:
            alpha["net"] = alpha_us
        if efficiency is not None:
            eff["net"] = efficiency
        options = algorithms(op, place, alpha, eff)
        predicted = np.min([a.latency_us + sizes / (a.algbw_gbps * 1e3) for a in options], axis=0)
        out.append(np.log(predicted / times))
    return np.concatenate(out) if out else np.array([])


def fit_fabric(curves: Sequence[FabricCurve], constants: Constants = TEXTBOOK) -> tuple[float, float]:
    """α (µs per network step) and efficiency e of one fabric from its benches' rows (module doc)."""
    rows = _rows_by_placement(curves)
    if sum(len(r[2]) for r in rows) < 2:
        raise TracelogError("need at least two (size, time) rows to fit α and the efficiency")

    def loss(log_alpha: float, log_eff: float) -> float:
        errors = _log_errors(rows, constants, math.exp(log_alpha), math.exp(log_eff))
        return float(np.mean(errors * errors))

    bounds_a = tuple(math.log(v) for v in ALPHA_RANGE_US)
    bounds_e = tuple(math.log(v) for v in EFFICIENCY_RANGE)
    (a_lo, a_hi), (e_lo, e_hi) = bounds_a, bounds_e
    best = (math.inf, a_lo, e_lo)
    for _ in range(GRID_ROUNDS + 1):
        a_step = (a_hi - a_lo) / (GRID_POINTS - 1)
        e_step = (e_hi - e_lo) / (GRID_POINTS - 1)
        for i in range(GRID_POINTS):
            for j in range(GRID_POINTS):
                la, le = a_lo + i * a_step, e_lo + j * e_step
                best = min(best, (loss(la, le), la, le))
        _, la, le = best
        a_lo, a_hi = max(bounds_a[0], la - 2 * a_step), min(bounds_a[1], la + 2 * a_step)
        e_lo, e_hi = max(bounds_e[0], le - 2 * e_step), min(bounds_e[1], le + 2 * e_step)
    return math.exp(best[1]), math.exp(best[2])


def fit_fabrics(curves: Iterable[FabricCurve], constants: Constants = TEXTBOOK) -> list[Fit]:
    """`alpha_us` and `link_efficiency` per fabric (two rows sharing subjects and errors); `constants`
    hold the intra-node links' fits, made first."""
    by_fabric: dict[str, list[FabricCurve]] = {}
    for c in curves:
        by_fabric.setdefault(c.fabric_id, []).append(c)
    fits = []
    for fabric_id, members in sorted(by_fabric.items()):
        alpha, efficiency = fit_fabric(members, constants)
        heldout_kind, splits = held_out_splits(members)
        held_errors: list[float] = []
        for fit_part, held_part in splits:
            a, e = fit_fabric(fit_part, constants)
            held_errors += [abs(x) for x in fabric_errors(held_part, constants, a, e)]

        def median_abs(
            alpha_us: float | None, eff: float | None, members: list[FabricCurve] = members
        ) -> float:
            return median([abs(x) for x in fabric_errors(members, constants, alpha_us, eff)])

        fits += _fit_pair(
            fabric_id,
            members,
            (alpha, efficiency),
            (DEFAULT_ALPHA_US_BY_CLASS["net"], DEFAULT_NET_EFFICIENCY),
            (
                median_abs(alpha, efficiency),
                median(held_errors) if held_errors else None,
                median_abs(None, None),
            ),
            heldout_kind,
            FABRIC_ESTIMATOR,
        )
    return fits
