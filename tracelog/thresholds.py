"""Every threshold a flag rule uses, named, documented and overridable.

Override from the CLI with `--threshold NAME=VALUE` (repeatable) or from Python by passing
`Thresholds(name=value)`. The defaults are deliberately conservative: a flag should be worth reading.
"""

from __future__ import annotations

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
    # A message size is latency-bound when its busbw is below this share of the bench's plateau.
    latency_bound: float = 0.50
    # A p2p pair (or link) below this share of the median of its peers is an outlier.
    p2p_outlier: float = 0.70
    # Pipeline bubble fraction (p-1)/m above this deserves a look.
    pipeline_bubble: float = 0.10
    # Wave quantization: efficiency of the last wave below this is flagged.
    wave_efficiency: float = 0.90
    # Training health: a loss this many times the running median of the previous lines is a spike.
    loss_spike: float = 1.5
    # sec/it of the last fifth of steady lines over the first fifth above this is a drift.
    sec_it_drift: float = 1.10
    # A single logged interval this many times the steady median is a straggler step.
    straggler: float = 1.25

    def with_overrides(self, overrides: Mapping[str, str | float]) -> Thresholds:
        names = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise TracelogError(f"unknown threshold {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        return replace(self, **{k: float(v) for k, v in overrides.items()})


DEFAULT = Thresholds()
