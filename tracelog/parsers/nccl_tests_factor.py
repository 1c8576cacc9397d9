"""The rank count a nccl-tests table's own figures prove: busbw = algbw x a factor that depends only on the
collective and the rank count n (nccl-tests doc/PERFORMANCE.md, src/*.cu `*GetBw`): 2(n-1)/n for all_reduce,
(n-1)/n for all_gather, reduce_scatter, alltoall, gather and scatter, 1 for broadcast, reduce and sendrecv.

Both figures are printed rounded (`%7.2f`): each row only says the factor lies between
(busbw - h) / (algbw + h) and (busbw + h) / (algbw - h), h half a unit of the last printed digit. Every row
of one bench has the same factor, so the ranges of its best-conditioned rows (the half with the largest
algbw, whose figures carry the most digits) are intersected, and n is every count whose factor falls in
what is left. Near the factor's limit (1.998 for an all_reduce) that is a range of counts, not one: the
bench then holds the lowest, and says so.

Two more figures say the rank count where the factor cannot:

- The count column. nccl-tests prints as `size` the larger of the send and receive buffers and as `count`
  the count passed to NCCL (src/common.cu `writeBenchmarkLinePreamble(max(sendBytes, expectedBytes),
  nbytes / wordSize(type), ...)`); all_gather, reduce_scatter, alltoall, gather and scatter pass one rank's
  share (src/*.cu `GetCollByteCount`: `base = count/nranks`, `recvcount = base*nranks`), so their size is
  count x element bytes x ranks exactly, where all_reduce, broadcast, reduce and sendrecv print size =
  count x element bytes. A ratio above 1 is the rank count, at any size, rounding or not (a table of small
  messages whose busbw prints 0.00, or one from before mid-2020 whose busbw equals algbw).
- A busbw of 0.00 at every size while algbw is well above it: 2(n-1)/n and (n-1)/n are 0 only for n = 1,
  so each process ran alone (nccl-tests built without MPI=1 under mpirun prints such rows, its in-place
  time a launch: NVIDIA/nccl-tests#294)."""

from __future__ import annotations

import math
from dataclasses import dataclass

RING_FAMILY = ("all_gather", "reduce_scatter", "alltoall", "gather", "scatter")
"""The collectives whose factor is (n-1)/n: n follows from the factor whichever of them a bench ran."""
SCALE = {"all_reduce": 2, **dict.fromkeys(RING_FAMILY, 1)}
ELEMENT_BYTES = {
    **dict.fromkeys(("int8", "uint8", "char", "f8e4m3", "f8e5m2", "fp8_e4m3", "fp8_e5m2"), 1),
    **dict.fromkeys(("half", "bfloat16"), 2),
    **dict.fromkeys(("int32", "uint32", "int", "float"), 4),
    **dict.fromkeys(("int64", "uint64", "double"), 8),
}
"""The bytes of each type name nccl-tests and rccl-tests print (src/common.cu `test_typenames`; `char` and
`int` before NCCL 2.x's sized names)."""
ZERO_BUSBW_MIN_ALGBW = 1.0
"""The algbw (GB/s) above which a printed busbw of 0.00 is no rounding: the factor is below 0.005."""


def count_ratio(size: int, count: int, type_name: str | None) -> int | None:
    """size / (count x element bytes) of one row: the rank count for the (n-1)/n family, 1 for the others
    (see the module's docstring); 0 where it is not a whole number; None where it says nothing (an unknown
    type, a count of 0)."""
    element = ELEMENT_BYTES.get(type_name or "")
    if element is None or count <= 0 or size <= 0:
        return None
    ranks, rest = divmod(size, count * element)
    return ranks if rest == 0 else 0


def row_range(
    algbw_text: str, busbw_text: str, size: int | None = None, time_text: str | None = None
) -> tuple[float, float, float, float] | None:
    """The busbw/algbw factors one printed row allows, twice: from the printed algbw, and narrowed by the
    row's size and time; None where a figure is not a plain positive decimal. nccl-tests computes algbw as
    size / time (bytes over microseconds x 1e3, in GB/s), which the time's digits often pin down far closer
    than algbw's two decimals (131072 B in 406.8 us: 0.3222 GB/s, printed 0.32). The time narrows the range
    only where the two agree (not for a collective whose printed size is not algbw's numerator); the plain
    range is kept for a table whose narrowed ranges disagree (figures edited or made up by hand)."""
    try:
        algbw, busbw = float(algbw_text), float(busbw_text)
    except ValueError:
        return None
    if "e" in (algbw_text + busbw_text).lower() or not (math.isfinite(algbw) and math.isfinite(busbw)):
        return None
    half_a, half_b = _half_unit(algbw_text), _half_unit(busbw_text)
    low, high = algbw - half_a, algbw + half_a
    if low <= 0 or busbw <= 0:
        return None
    plain = ((busbw - half_b) / high, (busbw + half_b) / low)
    timed = _timed_algbw(size, time_text)
    if timed is not None and timed[0] <= high and timed[1] >= low:
        low, high = max(low, timed[0]), min(high, timed[1])
    return (*plain, (busbw - half_b) / high, (busbw + half_b) / low)


def _timed_algbw(size: int | None, time_text: str | None) -> tuple[float, float] | None:
    """The algbw range size / time allows, in GB/s, from the time's printed digits (microseconds)."""
    if not size or not time_text or "e" in time_text.lower():
        return None
    try:
        time_us = float(time_text)
    except ValueError:
        return None
    half = _half_unit(time_text)
    if not math.isfinite(time_us) or time_us - half <= 0:
        return None
    return size / ((time_us + half) * 1e3), size / ((time_us - half) * 1e3)


def _half_unit(text: str) -> float:
    decimals = len(text.split(".", 1)[1]) if "." in text else 0
    return 0.5 * 10.0**-decimals


@dataclass(frozen=True)
class FactorRanks:
    """What the factor says: whether it is an all_reduce's (else the (n-1)/n family's), the lowest and highest
    rank count it allows (None: no upper bound), the factor's range, and how many of the printed (algbw, busbw)
    pairs gave it, of how many."""

    all_reduce: bool
    low: int
    high: int | None
    factor_low: float
    factor_high: float
    used: int
    pairs: int
    said: str | None = None  # the `ranks_source` where the count column or a busbw of 0 said the ranks

    def source(self) -> str:
        """The `ranks_source` of a bench whose ranks come from its factor."""
        if self.said:
            return self.said
        formula = "2(n-1)/n" if self.all_reduce else "(n-1)/n"
        span = (
            f"busbw/algbw {self.factor_low:.5f} to {self.factor_high:.5f} by the {self.used} of its {self.pairs} "
            f"printed pairs with the largest algbw, {formula}"
        )
        if self.high == self.low:
            return f"the busbw factor ({span}: {self.low} ranks)"
        upper = f"to {self.high}" if self.high is not None else "or more"
        return f"at least {self.low} from the busbw factor ({span}: {self.low} {upper} ranks)"


def factor_ranks(collective: str | None, ranges: list[tuple[float, ...]]) -> FactorRanks | None:
    """The ranks the rows' factor allows. `ranges`: (algbw, lowest, highest factor[, the same narrowed by the
    time]) per row (`row_range`): the narrowed ranges where they give an answer, else the plain ones. A named
    collective without a rank-dependent factor (broadcast, reduce, sendrecv) says nothing; an unnamed one is
    an all_reduce when the factor is above 1 (no other collective's is) and of the (n-1)/n family when it is
    below 1."""
    if ranges and all(len(r) == 5 for r in ranges):
        narrowed = _factor_ranks(collective, [(r[0], r[3], r[4]) for r in ranges])
        if narrowed is not None:
            return narrowed
    return _factor_ranks(collective, [(r[0], r[1], r[2]) for r in ranges])


def _factor_ranks(collective: str | None, ranges: list[tuple[float, float, float]]) -> FactorRanks | None:
    if not ranges or (collective is not None and collective not in SCALE):
        return None
    best = sorted(ranges, key=lambda r: -r[0])[: max(1, -(-len(ranges) // 2))]
    low, high = max(r[1] for r in best), min(r[2] for r in best)
    if low > high:
        return None  # the rows disagree: a paste mixing benches, an edited figure
    if collective is None:
        if low > 1:
            collective = "all_reduce"
        elif high < 1 and low > 0:
            collective = RING_FAMILY[0]
        else:
            return None
    scale = SCALE[collective]
    if low <= 0 or low >= scale:
        return None
    if scale == 1 and high >= 1:
        # busbw = algbw to the printed digits: nccl-tests before NVIDIA/nccl-tests@ec1b5e2 (2020-06) printed
        # all_gather and reduce_scatter so on any rank count (factor 1, algbw over (n-1) x count)
        return None
    # scale(n-1)/n >= low  <=>  n >= scale/(scale-low); <= high  <=>  n <= scale/(scale-high)
    n_low = math.ceil(scale / (scale - low) - 1e-9)
    n_high = math.floor(scale / (scale - high) + 1e-9) if high < scale else None
    if n_low < 2 or (n_high is not None and n_high < n_low):
        return None
    return FactorRanks(collective == "all_reduce", n_low, n_high, low, high, len(best), len(ranges))


def counted_ranks(type_name: str, ranks: int) -> FactorRanks:
    """What the count column says (`count_ratio` above 1 on every row): the (n-1)/n family on `ranks`."""
    said = (
        f"the count column (size = count x {ELEMENT_BYTES[type_name]} B of {type_name} x {ranks} on every row, "
        "as all_gather, reduce_scatter, alltoall, gather and scatter print it: "
        f"{ranks} ranks)"
    )
    factor = (ranks - 1) / ranks
    return FactorRanks(False, ranks, ranks, factor, factor, 0, 0, said=said)


def one_rank(algbw_gbps: list[float]) -> FactorRanks | None:
    """One rank where every row printed busbw 0.00 (`algbw_gbps`: the algbw of each such row, None where a
    row printed a busbw above 0) and some of them moved well over `ZERO_BUSBW_MIN_ALGBW`."""
    clear = [a for a in algbw_gbps if a >= ZERO_BUSBW_MIN_ALGBW]
    if len(clear) < 2:
        return None
    said = (
        f"busbw 0.00 on every row, {len(clear)} of them at an algbw of {min(clear):g} GB/s or more: busbw = "
        "algbw x 2(n-1)/n or (n-1)/n is 0 only on one rank"
    )
    return FactorRanks(False, 1, 1, 0.0, 0.0, len(clear), len(algbw_gbps), said=said)
