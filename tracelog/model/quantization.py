"""GEMM dimension quantization: partial tiles and partial waves (NVIDIA Deep Learning Performance docs,
"Matrix Multiplication Background User's Guide", §3.1 tile quantization, §3.2 wave quantization)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tracelog.errors import TracelogError
from tracelog.hardware import Gpu

DEFAULT_TILE = (256, 128)
"""The largest cuBLAS thread-block tile the guide discusses (§2.3), the one it uses for its examples."""


@dataclass(frozen=True)
class Quantization:
    """Tiles and waves of one GEMM's output and the efficiency each leaves (1.0 = no waste)."""

    tiles: int
    tile_efficiency: float
    waves: int
    wave_efficiency: float

    @property
    def efficiency(self) -> float:
        return self.tile_efficiency * self.wave_efficiency


def tile_quantization(
    m: int, n: int, tile_m: int = DEFAULT_TILE[0], tile_n: int = DEFAULT_TILE[1]
) -> tuple[int, float]:
    """Guide §3.1: tiles = ⌈M/Mt⌉·⌈N/Nt⌉; efficiency = M·N / (tiles·Mt·Nt), the useful share of the work
    the tiles do."""
    if min(m, n, tile_m, tile_n) < 1:
        raise TracelogError("GEMM and tile sizes must be positive")
    tiles = math.ceil(m / tile_m) * math.ceil(n / tile_n)
    return tiles, (m * n) / (tiles * tile_m * tile_n)


def wave_quantization(tiles: int, sms: int, tiles_per_sm: int = 1) -> tuple[int, float]:
    """Guide §3.2: waves = ⌈tiles/(SMs·tiles per SM)⌉; efficiency = tiles / (waves·SMs·tiles per SM), the
    share of SM slots busy across all waves."""
    if tiles < 1 or sms < 1 or tiles_per_sm < 1:
        raise TracelogError("tiles, SMs and tiles per SM must be positive")
    slots = sms * tiles_per_sm
    waves = math.ceil(tiles / slots)
    return waves, tiles / (waves * slots)


def gemm_quantization(
    m: int,
    n: int,
    gpu_or_sms: Gpu | int,
    tile_m: int = DEFAULT_TILE[0],
    tile_n: int = DEFAULT_TILE[1],
    tiles_per_sm: int = 1,
) -> Quantization:
    """Both effects for an M×N output on a GPU (or an SM count)."""
    sms = gpu_or_sms if isinstance(gpu_or_sms, int) else gpu_or_sms.sm_count
    if not sms:
        raise TracelogError(f"{getattr(gpu_or_sms, 'id', gpu_or_sms)} has no SM count in the catalog")
    tiles, tile_eff = tile_quantization(m, n, tile_m, tile_n)
    waves, wave_eff = wave_quantization(tiles, sms, tiles_per_sm)
    return Quantization(tiles, tile_eff, waves, wave_eff)


def hidden_per_tp_rank(hidden: int, tp: int) -> int:
    """h / t, the GEMM width each tensor-parallel rank sees; TracelogError if t does not divide h."""
    if tp < 1 or hidden % tp:
        raise TracelogError(f"tensor parallel size {tp} does not divide hidden size {hidden}")
    return hidden // tp


def is_multiple(value: int, multiple: int) -> bool:
    """Whether a GEMM dimension is a multiple of `multiple` (64 and 128 keep Tensor Core tiles whole;
    guide §2.2: dimensions multiple of 64/128 bytes-worth of elements run most efficiently)."""
    return value % multiple == 0


def tp_alignment(hidden: int, tp: int, multiples: tuple[int, ...] = (64, 128)) -> dict[int, bool]:
    """For each multiple, whether h/t is a multiple of it: `{64: True, 128: False}`."""
    per_rank = hidden_per_tp_rank(hidden, tp)
    return {k: is_multiple(per_rank, k) for k in multiples}
