"""Every threshold a flag rule uses, named, documented and overridable.

Override from the CLI with `--threshold NAME=VALUE` (repeatable) or from Python by passing
`Thresholds(name=value)`. The defaults are deliberately conservative: a flag should be worth reading.
An override is a finite number inside the threshold's range (`RANGES`): a share of a spec or of a plateau
lies in (0, 1], a multiple of a median is at least 1, a relative difference is not negative.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from tracelog.errors import TracelogError


@dataclass(frozen=True)
class Thresholds:
    # Memory: peak reserved over device memory (Megatron's `max reserved`, a table's Mem column).
    oom_warning: float = 0.90
    oom_critical: float = 0.95
    # Efficiency: measured over predicted (TFLOPs) or predicted over measured (sec/it) below this.
    efficiency_gap: float = 0.80
    # The log's own TFLOPs against the one recomputed from sec/it: relative difference above this.
    tflops_formula_mismatch: float = 0.05
    # Bandwidth: large-message busbw or p2p bandwidth over the unidirectional spec below this is low.
    low_bandwidth: float = 0.60
    # A bandwidth within this band of the bidirectional spec, and healthy against the unidirectional
    # one, reads as the duplex confusion (nccl-tests busbw and p2p unidirectional are one direction).
    duplex_band_low: float = 0.30
    duplex_band_high: float = 0.50
    # perftest: a NIC's large-message bandwidth under this share of the plateau its line rate allows at the
    # MTU it ran (model/nic.py: 99.4 % of NDR at MTU 4096; healthy ConnectX-7 runs reach 98-99 % of that,
    # Azure's acceptance floor for an NDR port, 375 Gb/s, is 94 %).
    nic_bandwidth: float = 0.90
    # A message size is latency-bound when its busbw is below this share of the bench's plateau.
    latency_bound: float = 0.50
    # A message size of 1 MiB or more whose busbw is below this share of the best a smaller size reached:
    # the curve collapsed (bandwidth only rises with size on a healthy path).
    bandwidth_collapse: float = 0.50
    # A p2p pair (or link) below this share of the median of its peers is an outlier.
    p2p_outlier: float = 0.70
    # A p2p pair with P2P enabled below this share of its P2P-off bandwidth took a detour (PCIe ACS redirect).
    p2p_slower: float = 0.70
    # Pipeline bubble fraction (p-1)/m above this deserves a look.
    pipeline_bubble: float = 0.10
    # Wave quantization: efficiency of the last wave below this is flagged.
    wave_efficiency: float = 0.90
    # Training health: a loss this many times the running median of the previous lines is a spike.
    loss_spike: float = 1.5
    # Training health: a run whose optimizer skipped more than this share of its steps barely trained
    # (fp16 overflow on most steps), where a calibrating loss scale skips a few dozen at the start.
    skipped_share: float = 0.5
    # Not learning: a grad norm of exactly 0 on every steady line counts once there are this many of them
    # (fewer say little: a log of 2 lines, the first steps of a run).
    not_learning_lines: float = 5
    # Not learning: a loss identical, to its printed precision, on this many consecutive lines of
    # different iterations (with Megatron's 7 significant digits two equal lines are already rare).
    flat_loss_lines: float = 20
    # sec/it of the last fifth of steady lines over the first fifth above this is a drift.
    sec_it_drift: float = 1.10
    # A single logged interval this many times the steady median is a straggler step.
    straggler: float = 1.25
    # nccl-tests -I 1 per-process times: a process (or node) is slow at a size when its median iteration
    # time is above this multiple of the median process's (of the other nodes'). 1.10 is twice the 5% CV
    # past which nccl-tests' tools/analyze_perf_json.py marks a size as noisy, so run-to-run noise alone
    # does not reach it.
    straggler_process: float = 1.10
    # ... and it is a straggler when it is slow at this share of the sizes x placements it ran: at most
    # sizes, so that one noisy size (small messages are latency noise) does not name a process.
    straggler_share: float = 0.75
    # p99 over median iteration time above this at a size is jitter: analyze_perf_json.py's default spike
    # threshold (`--threshold 1.5`, an iteration 1.5x the average).
    jitter: float = 1.5

    def with_overrides(self, overrides: Mapping[str, str | float]) -> Thresholds:
        """A copy with these thresholds changed; an unknown name, a value that is not a finite number or
        one outside the threshold's range is refused with the range."""
        names = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise TracelogError(f"unknown threshold {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        changed = replace(self, **{k: checked(k, v) for k, v in overrides.items()})
        for low, high in (("oom_warning", "oom_critical"), ("duplex_band_low", "duplex_band_high")):
            if getattr(changed, low) > getattr(changed, high):
                raise TracelogError(
                    f"threshold {low} ({getattr(changed, low):g}) must not exceed {high} "
                    f"({getattr(changed, high):g})"
                )
        return changed


# (lowest, highest, lowest excluded): where each threshold means something.
SHARE = (0.0, 1.0, True)  # a share of a spec, a plateau, a prediction or of device memory: (0, 1]
MULTIPLE = (1.0, math.inf, False)  # a multiple of a median or of a first stretch: [1, inf)
RELATIVE = (0.0, math.inf, False)  # a relative difference or a fraction of time: [0, inf)
LINES = (2.0, math.inf, False)  # a count of logged lines: at least 2 to say a value stayed
RANGES: dict[str, tuple[float, float, bool]] = {
    "oom_warning": SHARE,
    "oom_critical": SHARE,
    "efficiency_gap": SHARE,
    "tflops_formula_mismatch": RELATIVE,
    "low_bandwidth": SHARE,
    "duplex_band_low": SHARE,
    "duplex_band_high": SHARE,
    "nic_bandwidth": SHARE,
    "latency_bound": SHARE,
    "bandwidth_collapse": SHARE,
    "p2p_outlier": SHARE,
    "p2p_slower": SHARE,
    "pipeline_bubble": (0.0, 1.0, False),  # (p-1)/m of the step: [0, 1]
    "wave_efficiency": SHARE,
    "loss_spike": MULTIPLE,
    "skipped_share": SHARE,
    "not_learning_lines": LINES,
    "flat_loss_lines": LINES,
    "sec_it_drift": MULTIPLE,
    "straggler": MULTIPLE,
    "straggler_process": MULTIPLE,
    "straggler_share": SHARE,
    "jitter": MULTIPLE,
}


def describe_range(name: str) -> str:
    low, high, open_low = RANGES[name]
    upper = "inf)" if math.isinf(high) else f"{high:g}]"
    return f"{'(' if open_low else '['}{low:g}, {upper}"


def checked(name: str, value: str | float) -> float:
    """The override as a float, or the project's error naming the threshold and its range."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    low, high, open_low = RANGES[name]
    inside = math.isfinite(number) and (number > low if open_low else number >= low) and number <= high
    if not inside:
        raise TracelogError(
            f"threshold {name}={value!s} is not a number in {describe_range(name)} (default {getattr(DEFAULT, name):g})"
        )
    return number


DEFAULT = Thresholds()
