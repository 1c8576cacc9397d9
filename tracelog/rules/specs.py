"""Which link a benchmark ran over, from the hardware catalog: the one place rules look up specs."""

from __future__ import annotations

from typing import Any


def gpu_for(gpu_model: str | None, gpu_name: str | None) -> Any:
    """The catalog GPU by id (as the user gave it) or by the name the tool printed; None if unknown."""
    try:
        from tracelog import hardware
    except ImportError:
        return None
    if gpu_model:
        try:
            return hardware.gpu(gpu_model)
        except Exception:  # an unknown id given by the user stays unknown here; `hardware` explains
            return None
    return hardware.match_gpu(gpu_name) if gpu_name else None


def bench_link(
    gpu_model: str | None,
    gpu_name: str | None,
    nodes: int | None,
    ranks: int | None,
    gpus_per_node: int | None,
) -> Any:
    """The intra-node link of a single-node benchmark (NVLink or PCIe of its GPU); None across nodes,
    where the fabric is the user's to name."""
    if nodes is not None and nodes > 1:
        return None
    if nodes is None and ranks and gpus_per_node and ranks > gpus_per_node:
        return None
    gpu = gpu_for(gpu_model, gpu_name)
    if gpu is None:
        return None
    from tracelog import hardware

    return hardware.gpu_intra_node_link(gpu)
