"""The memory of a run's device: the catalog part's, or the log's own figure where the two disagree."""

from __future__ import annotations

from tracelog.analysis.inputs import RunInputs

DEVICE_MEMORY_TOLERANCE = 0.05
"""How far the device memory a log gives may differ from its catalog part's and still be that part: the
usable memory PyTorch reports is a little under the datasheet's (an H100 80GB: 79.11 GiB)."""


def device_memory_bytes(inputs: RunInputs) -> float | None:
    """The device's memory: the catalog part's, or the log's own figure (`device_memory_mib`: torchtitan's
    memory share) where that differs by more than DEVICE_MEMORY_TOLERANCE, a variant the catalog does
    not list (Grand Teton's 96 GB H100 under an H100 SXM entry) or a slice of a device (MIG)."""
    catalog = inputs.gpu.memory_bytes if inputs.gpu is not None else None
    printed = inputs.run_params.get("device_memory_mib") or ""
    if not printed.isdigit():
        return catalog
    own = int(printed) * 2**20
    if catalog is None or abs(own / catalog - 1) > DEVICE_MEMORY_TOLERANCE:
        return own
    return catalog
