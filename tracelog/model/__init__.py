"""The analytic model: pure functions from a run's configuration and the hardware catalog to predicted
FLOPs, memory, collective bandwidth and iteration time. No files, no database."""

from tracelog.model.collectives import (
    BUSBW_FACTOR,
    DEFAULT_ALPHA_US,
    DEFAULT_LINK_EFFICIENCY,
    CollectivePrediction,
    algbw,
    busbw,
    fit_alpha_beta,
    link_for,
    predict_collective,
    predict_curve,
)
from tracelog.model.flops import (
    ModelConfig,
    TrainConfig,
    flops_6nd,
    flops_bloom,
    flops_megatron_lm,
    flops_narayanan,
    hardware_flops,
    mfu,
    model_params,
    params_from_config,
    tflops_per_gpu,
)
from tracelog.model.memory import (
    MemoryBreakdown,
    activation_bytes_per_layer,
    fits,
    memory_per_gpu,
    state_bytes,
    zero_state_bytes,
)
from tracelog.model.quantization import gemm_quantization, tile_quantization, tp_alignment, wave_quantization
from tracelog.model.roofline import Roofline, linear_layer_roofline
from tracelog.model.timing import (
    DEFAULT_COMPUTE_EFFICIENCY,
    TimeBreakdown,
    bubble_fraction,
    predict_iteration,
)

__all__ = [
    "BUSBW_FACTOR",
    "DEFAULT_ALPHA_US",
    "DEFAULT_COMPUTE_EFFICIENCY",
    "DEFAULT_LINK_EFFICIENCY",
    "CollectivePrediction",
    "MemoryBreakdown",
    "ModelConfig",
    "Roofline",
    "TimeBreakdown",
    "TrainConfig",
    "activation_bytes_per_layer",
    "algbw",
    "bubble_fraction",
    "busbw",
    "fit_alpha_beta",
    "fits",
    "flops_6nd",
    "flops_bloom",
    "flops_megatron_lm",
    "flops_narayanan",
    "gemm_quantization",
    "hardware_flops",
    "linear_layer_roofline",
    "link_for",
    "memory_per_gpu",
    "mfu",
    "model_params",
    "params_from_config",
    "predict_collective",
    "predict_curve",
    "predict_iteration",
    "state_bytes",
    "tflops_per_gpu",
    "tile_quantization",
    "tp_alignment",
    "wave_quantization",
    "zero_state_bytes",
]
