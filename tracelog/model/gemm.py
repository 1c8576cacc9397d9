"""Time of one transformer layer, operation by operation: each GEMM at a sustained efficiency that depends
on the GPU, the precision and its shape, attention as one fused (flash) kernel or as materialised scores,
and the memory-bound operations from HBM bandwidth.

Per tensor-parallel rank and micro-batch, M = b·s/cp rows (tokens), h hidden, q = heads·head_dim,
kv = groups·head_dim, f the FFN width, a the heads, d the head dimension:

| op | GEMM (M × N × K) | source |
| --- | --- | --- |
| qkv | M × (q + 2kv)/t × h | Shoeybi et al. 2019 §3 (column-parallel) |
| scores | (b·a/t) × [s × s × d] | Vaswani et al. 2017 eq. 1, Q·Kᵀ |
| context | (b·a/t) × [s × d × s] | attention · V |
| proj | M × h × q/t | row-parallel output projection |
| mlp_up | M × f/t (2f/t SwiGLU) × h | column-parallel |
| mlp_down | M × h × f/t | row-parallel |
| logits | M × V/t × h | last pipeline stage only |

Forward GEMMs cost 2·M·N·K FLOPs; the backward pass computes two GEMMs of the same size per forward GEMM
(activation and weight gradients), so it costs twice the forward (Narayanan et al. 2021 §5.1).
"""

from __future__ import annotations

from dataclasses import dataclass

from tracelog.hardware import Gpu, normalize_precision, peak_tflops
from tracelog.model.attention_kernels import kernel_ratio
from tracelog.model.eager import eager_elementwise_bytes, eager_kernels
from tracelog.model.float8 import LOW_PRECISION_GEMMS
from tracelog.model.flops import ModelConfig, TrainConfig, microbatch_tokens
from tracelog.model.memory import storage_bytes, storage_precision
from tracelog.model.quantization import gemm_quantization
from tracelog.model.torch_native import compiled_loss_passes

MATMUL_SHARE: dict[str, float] = {
    "ampere": 271.2 / 312,
    "hopper": 794.5 / 989,
    "blackwell": 1745.0 / 2250,
    "cdna2": 147.0 / 191.5,
    "cdna3": 781.9 / 1300,
}
"""Best sustained BF16 matmul throughput over the dense peak, by GPU architecture: the "Maximum Achievable
Matmul FLOPS" table of S. Bekman, *Machine Learning Engineering* (stas00/ml-engineering,
compute/accelerator/README.md), measured with `mamf-finder.py` over a grid of shapes: A100 SXM 271.2 of
312, H100 SXM 794.5 of 989, B200 1745.0 of 2250, MI250X 147.0 of 191.5 (one GCD), MI300X 781.9 of 1300.
It is the ceiling of a well-shaped GEMM; shapes in training lose to the effects below."""

DEFAULT_MATMUL_SHARE = 0.75
"""For an architecture without a measured entry (Volta, Ada, Gaudi): an assumption, between the A100 and
MI300X figures above. Scale it with `compute_scale` once a run of that GPU is in the store."""

DEFAULT_FLASH_SHARE = 0.40
"""FlashAttention (Dao et al. 2022, §4: 1.7-3× faster than unfused attention on A100, about 40% of peak)."""

ALIGNMENT_FACTOR: tuple[tuple[int, float], ...] = ((64, 1.0), (8, 0.9))
"""Share of the aligned throughput a GEMM keeps by the alignment of its inner dimension K and output width
N, in elements (NVIDIA "Matrix Multiplication Background User's Guide", "Tensor Core Requirements": with
FP16/BF16, dimensions that are multiples of 8 let cuBLAS use Tensor Cores, and multiples of 64 (128
bytes) run most efficiently). 0.9 for the multiple-of-8 class is an assumption. A dimension that is not a
multiple of 8 runs without Tensor Cores: `no_tensor_core_factor`, the GPU's non-tensor FP32 rate over its
Tensor Core rate (A100: 19.5/312). That is why a head dimension of 150 (h 14400, 96 heads) or 108
(h 13824, 128 heads) slows the unfused attention GEMMs of the BigScience tr11 runs by an order of
magnitude and the whole iteration by a third."""

TRAINING_SHARE = 0.90
"""What a GEMM inside a training step keeps of its best-shape benchmark rate (MATMUL_SHARE): clocks held
lower by the power cap under sustained load on every GPU of a node, and NCCL kernels sharing SMs and
memory bandwidth with the GEMMs. A general parameter, fitted once: with it the BigScience tr11 layouts
on A100 (Megatron-DeepSpeed, 2022) come out with a median time error of a few percent. Per-GPU
calibration (`compute_scale`) refines it."""

FLASH_BACKWARD_FACTOR = 2.5
"""A fused attention's backward pass over its forward, in FLOPs: 2.5, not the 2 of every other operation.
The backward kernel recomputes the scores S = QKᵀ from the saved statistics instead of reading a stored
s x s matrix (Dao et al. 2022, §3.1 and Algorithm 4), so it runs five matrix products where the forward
runs two (QKᵀ, PV; backward: QKᵀ again, dV, dP, dQ, dK). The FlashAttention benchmarks count it so
(Dao 2023, FlashAttention-2 §4.1, and the repository's `benchmarks/benchmark_flash_attention.py`: backward
2.5 x and forward plus backward 3.5 x the forward's 4·s²·d per head), and so do the rates below that come
from them: a share of the peak "forward plus backward" is 3.5 forward passes' FLOPs over the time."""

SDPA_BENCH_FLOPS = (1 + FLASH_BACKWARD_FACTOR) * 4 * 128 * 8192 * 8192 * 128 / 2
"""FlashAttention's count (a backward of 2.5 forwards, `FLASH_BACKWARD_FACTOR`) of the attention cuDNN's SDPA
training benchmark times (NVIDIA/cudnn-frontend `benchmark/sdpa_benchmark_training`, commit d48a60e,
December 2025): one sequence of 8192 tokens, 128 query heads and 8 KV heads of dimension 128, causal (half
the tiles), BF16."""

H100_PEAK_TFLOPS = 989.4
H100_SMS = 132
"""The H100 SXM's dense BF16 peak and SM count, the GPU the Hopper benchmarks below ran on."""


def benchmark_share(forward_tflops: float, backward_tflops: float, peak_tflops: float) -> float:
    """A fused attention's share of the peak in training from its benchmark rates, forward and backward,
    each in FlashAttention's count (`FLASH_BACKWARD_FACTOR`): the 3.5 forward passes' FLOPs over the time
    of one forward and one backward, at TRAINING_SHARE like every benchmark rate (kernel benchmarks run at
    free clocks, one kernel at a time)."""
    seconds = 1 / forward_tflops + FLASH_BACKWARD_FACTOR / backward_tflops
    return (1 + FLASH_BACKWARD_FACTOR) / seconds / peak_tflops * TRAINING_SHARE


FLASH_SHARE: dict[str, float] = {
    "ampere": 0.60,
    "hopper": benchmark_share(631.338, (518 + 516) / 2, H100_PEAK_TFLOPS),
    "blackwell": SDPA_BENCH_FLOPS / ((1.389 + 4.542) * 1e-3) / 2500e12 * TRAINING_SHARE,
}
"""FlashAttention's own sustained share of the dense peak, forward plus backward: FlashAttention-2 (Dao
2023, §4.1, Fig. 4-7) reaches 50-73% of the A100 peak (up to 225 TFLOP/s end to end in GPT training,
Table 1: 72% model FLOPs). Hopper: Transformer Engine's fused attention runs cuDNN's kernels, measured
at 631.338 TFLOP/s forward (Tritonbench on an H100, batch 1, 24 heads, 4608 tokens, head dimension 128:
pytorch/pytorch#142132) and 518 and 516 TFLOP/s backward at 8k and 16k tokens (FlashAttention-3, Shah
et al. 2024, §4.1, head dimension 128 on an H100 SXM5), 0.551 of the peak forward and backward, 0.50 at
TRAINING_SHARE (`benchmark_share`; the model took 0.50 before it was derived). Blackwell: cuDNN 9.17.0 (NGC PyTorch 25.11, the base of Megatron-Bridge v0.3.0)
runs the benchmark above on a GB200 in 1.389 ms forward and 4.542 ms backward (1584 and 1211 TFLOP/s by
its own count, which is FlashAttention's), 0.519 of the 2.5 PFLOP/s BF16 peak; taken at TRAINING_SHARE like the
GEMMs, since the benchmark runs at free clocks and waits between runs so that the GPU does not throttle
(its README), 0.47. Its tensor cores are not what bounds it: at head dimension 128 the forward pass waits
on the SFUs' exponentials, whose count did not grow from H100 to B200 while the tensor cores' BF16 rate
went from 1 to 2.25 PFLOP/s, and the backward pass on shared-memory traffic (Zadouri, Hoehnerbach, Shah,
Liu, Thakkar and Dao 2026, "FlashAttention-4", arXiv 2603.05451, and the authors' Together AI blog post).
Other architectures use `DEFAULT_FLASH_SHARE`."""

SDPA_FRAMEWORKS = ("torchtitan", "nanotron", "hf-trainer", "nemo-automodel", "composer")
"""Trainers whose attention never materialises the s x s scores: torchtitan's models call PyTorch's
`scaled_dot_product_attention` (a flash or memory-efficient kernel) or FlexAttention; nanotron's Llama
calls `flash_attn_varlen_func` (nanotron/models/llama.py, `CoreAttention`); the Hugging Face models load
with `attn_implementation="sdpa"` wherever a model supports it (transformers since 4.36), NeMo Automodel's
too (or Transformer Engine's fused attention, its `model.backend.attn: te`); llm-foundry's MPT under
Composer calls flash-attn's `flash_attn_varlen_func` (`attn_impl: flash`, llmfoundry/models/layers/
attention.py) or SDPA (`attn_impl: torch`). Their attention runs the
FlashAttention-2 kernels, not Transformer Engine's cuDNN ones (`SDPA_FLASH_SHARE`)."""

SDPA_FLASH_SHARE: dict[str, float] = {"hopper": benchmark_share(329.483, (318 + 322) / 2, H100_PEAK_TFLOPS)}
"""Attention's share of the dense BF16 peak where the trainer calls PyTorch's SDPA (`SDPA_FRAMEWORKS`): on
Hopper its flash backend is FlashAttention-2, which runs at a third of the peak; PyTorch made the faster
cuDNN backend opt-in again after 2.5 (pytorch/pytorch#138649, #138522) and prefers it by default on sm90
only with a bundled cuDNN above 9.15 (2.10 and later, `check_prefer_cudnn_attention`). Measured:
Tritonbench's flash_attention operator on an H100 with a December 2024 nightly, batch 1, 24 heads, 4608
tokens, head dimension 128: SDPA 329.483 TFLOP/s against cuDNN's 631.338 (pytorch/pytorch#142132), over
the H100 SXM's 989.4 dense BF16 peak. The backward pass runs at the same third (FlashAttention-3, Shah et
al. 2024, backward speed for head dimension 128 on an H100 SXM5: FlashAttention-2 318 TFLOP/s at 8k tokens
and 322 at 16k, cuDNN 518 and 516): 0.326 of the peak forward and backward, 0.29 at TRAINING_SHARE like
every benchmark rate (`benchmark_share`; the model took the forward figure alone, 0.333, before). Ampere
keeps FLASH_SHARE, which is FlashAttention-2's own, measured in training."""

FLASH_SHARE_BY_COMPUTE_CAPABILITY: dict[str, float] = {
    "10.3": SDPA_BENCH_FLOPS / ((1.158 + 4.256) * 1e-3) / 2500e12 * TRAINING_SHARE,
}
"""Where a variant of an architecture runs attention at its own rate, by CUDA compute capability (catalog
`compute_capability`). Blackwell Ultra (10.3: GB300, B300) doubles the SFUs' exponential throughput
(NVIDIA technical blog, "Making Softmax More Efficient with NVIDIA Blackwell Ultra": 10.7 against 5
TeraExponentials/s), which the forward pass is bound by; the same cuDNN 9.17.0 benchmark on a GB300 runs
it in 1.158 ms forward (1.20x GB200's) and 4.256 ms backward (1.07x: shared memory did not grow), 0.569 of
the same peak, 0.51 at TRAINING_SHARE: 1.095x GB200's attention, not the 2x of the exponentials. The
earlier cuDNN 9.13.1 (NGC 25.09, the base of Megatron-Bridge v0.2.0; the same benchmark, commit 0b1577c)
measured 15% less on GB300 (0.487) and on B200 (0.443 of 2.25 PFLOP/s); the model does not know a run's
cuDNN, and `compute_scale` absorbs it per GPU."""


FRAMEWORK_SHARE: dict[str, float] = {"megatron": 1.0, "megatron-deepspeed": 0.785, "deepspeed": 0.785}
"""What the framework's own kernels keep of the rates above, relative to Megatron-LM (whose published
A100 runs, Narayanan et al. 2021 Table 1 and Korthikanti et al. 2022 Table 5, the other parameters
reproduce within a few percent). Megatron-DeepSpeed as BigScience ran it in 2022 lacks Megatron-LM's
gradient-accumulation fusion and runs its pipeline through DeepSpeed's engine; its tr11 layouts on A100
run about a fifth slower than the same operations predict. A general parameter per framework, fitted
once on the tr11 notes (the share at which their mean log error is 0: 0.785 since DeepSpeed's pipeline
sends are a TP rank's share, `timing.DEEPSPEED_PIPE_GATHERS`; 0.80 before); `compute_scale` refines it per
GPU and precision."""

LOW_PRECISION_SHARE: dict[str, float] = {"fp8": 14.426 / 7.993 / 2, "fp4": 13.102 / 3.764 / 6}
"""What a low-precision GEMM keeps of its share of the dense peak next to a BF16 GEMM's (MATMUL_SHARE is
measured in BF16). FP8: on H100 the same GEMMs run 1.805 times as fast in FP8 as in BF16, not the 2 times of
the peaks (meta-pytorch/float8_experimental pull request 298, `benchmarks/profile_linear_float8.py` on a
norm-FFN-norm block: GEMM time 14.426 ms in BF16, 7.993 ms in FP8), so 0.90; measured on Hopper and applied
to FP8 on every architecture (on a B300 Transformer Engine's guide below measures 0.915 for MXFP8 and 0.96
for per-tensor FP8; taking 0.96 for Blackwell was tried and left out, docs/MODEL.md). NVFP4: Transformer
Engine's GEMM profiling guide (docs/examples/gemm_profiling/gemm_profiling.rst,
`benchmarks/gemm/benchmark_gemm.py --pre-quantize` on a B300 SXM6 AC, the 12 GEMMs of a layer with h 4096,
FFN 16384, M 15872) times a layer's GEMMs at 13.102 ms in BF16 and 3.764 ms in NVFP4: 3.48 times as fast
where the peaks differ 6 times (13.5 against 2.25 PFLOP/s), so an NVFP4 GEMM keeps 0.58 of a BF16 GEMM's
share of its own peak. The same guide's MXFP8 (7.161 ms, 0.915) and per-tensor FP8 (6.812 ms, 0.96) show
that it is the FP4 kernels, not the Blackwell tensor cores in general, that run far from their peak. Taken
as a share of each GPU's own FP4 peak: on GB200, whose FP4 peak is 4 times its BF16 (not 6), NVFP4 runs 2.3
times as fast as BF16, 1.3 times FP8."""

LOW_PRECISION_CAST_FACTOR: dict[str, float] = {"fp8": 1.0, "fp4": (6.453 - 3.764) / (9.147 - 6.812)}
"""Quantization work per element of a low-precision recipe next to FP8's (the `fp8_casts` operation):
Transformer Engine's GEMM profiling guide (above) times the same B300 layer with quantization (autocast) and
without (pre-quantized); what quantizing costs is the difference: 2.335 ms per layer with per-tensor FP8
(9.147 - 6.812), 2.689 ms with NVFP4 (6.453 - 3.764), whose recipe adds random Hadamard transforms on the
weight-gradient inputs, stochastic rounding of the gradients, 16x16 2D scaling of the weights and a
per-tensor amax pass: 1.15 times FP8's."""

ROWS_HALF = 256
"""Rows M at which the small-GEMM penalty halves a GEMM's rate: a GEMM of M rows keeps M/(M + ROWS_HALF)
of its large-shape rate. Fewer rows mean fewer output tiles to spread over the SMs, less reuse of each
weight tile loaded (arithmetic intensity grows with M, NVIDIA "Matrix Multiplication Background" §2.1),
and cuBLAS kernels tuned for the large shapes; in training M = b·s/cp, so a micro-batch of 1 at s = 2048
runs its GEMMs 20% below a micro-batch of 8. A general parameter, fitted on the micro-batch sweeps of the
BigScience tr11 notes (MBS 1, 2, 4, 8 at fixed layout)."""

INNER_HALF = 132
"""Inner dimension K at which a GEMM keeps half its rate, on an H100: every output tile runs a prologue and
an epilogue (loading the first K-slices, writing C) whose time does not shrink with K, so a GEMM of K =
k keeps k/(k + K½) of what a very long one does. Fitted on the H100 SXM BF16 entries of OpenXLA's
measured matmul table (xla/service/gpu/model/matmul_interpolator_data.h, `sm_90`: the 108 of its 375
shapes of 10 GFLOP or more) with the model's own tile and wave quantization, a rate ceiling and a fixed
time per call fitted beside it (`benchmarks/fit_inner_half.py`): K½ = 132 takes the fit's rms log error
from 0.077 to 0.029. The table's own K sweep, 4 × (4096 × 4096 × K), against K = 4096: 0.636, 0.783,
0.910, 0.962 at K = 256, 512, 1024, 2048 (the model: 0.681, 0.821, 0.914, 0.970). Other GPUs scale it
by their dense BF16 rate per SM over the H100's (`inner_factor`): the fixed part of a tile is a time,
and the faster each SM consumes K, the more K it takes to hide it. The same table's B200 entries
(`sm_100`) check it: fitted alone they give K½ = 258 (rms log error 0.118 to 0.053), where the scaling
puts 268. No training run was used to set it."""

INNER_REFERENCE = 4096
"""The K at which the matmul ceilings (`MATMUL_SHARE`) are taken to hold: the largest K of the table above,
where its best rates lie (810 TFLOP/s against the 794.5 of the H100's ceiling)."""

KERNEL_OVERHEAD_S = 15e-6
"""Fixed cost of one kernel on the critical path: the launch (≈5 µs, CUDA C Best Practices Guide §11,
"kernel launch overhead") plus the ramp and tail of a kernel that does not fill the GPU at its start
and end, and the framework's per-operation host work. A general parameter: it is what makes a small
micro-batch (few rows) run each GEMM below its large-shape efficiency."""

HBM_SHARE = 0.80
"""Share of the HBM datasheet bandwidth an elementwise kernel sustains (BabelStream-style copy/triad
kernels reach 80-90% on A100 and H100; an assumption for the fused element-wise kernels of a layer)."""


@dataclass(frozen=True)
class Op:
    """One operation of one layer's forward pass on one GPU and micro-batch. `kind` is gemm, attention
    (one fused kernel) or memory (element-wise, bandwidth-bound); `shape` (M, N, K) of one GEMM, `batch`
    how many of them run in one batched call; `flops` what it executes; `efficiency` the share of the
    dense peak it sustains (0 for memory-bound operations)."""

    name: str
    kind: str
    flops: float
    bytes: float
    time_s: float
    efficiency: float
    shape: tuple[int, int, int] | None = None
    batch: int = 1


def flash_share(
    gpu: Gpu, framework: str = "megatron", kernel: str | None = None, head_dim: int = 128
) -> float:
    """Fused attention's sustained share of the dense BF16 peak on `gpu`: for a named `kernel` of an earlier
    generation (`model.attention_kernels`), FlashAttention-2's share on the architecture times the kernel's
    ratio to it at `head_dim`; for a trainer that calls PyTorch's SDPA, or a run that names FlashAttention-2,
    its architecture's SDPA_FLASH_SHARE where one is known; else its compute capability's entry
    (FLASH_SHARE_BY_COMPUTE_CAPABILITY), else its architecture's (FLASH_SHARE), else the default."""
    if kernel is not None:
        flash2 = SDPA_FLASH_SHARE.get(gpu.architecture) or FLASH_SHARE.get(
            gpu.architecture, DEFAULT_FLASH_SHARE
        )
        return flash2 * kernel_ratio(kernel, gpu.architecture, head_dim)
    if framework in SDPA_FRAMEWORKS and gpu.architecture in SDPA_FLASH_SHARE:
        return SDPA_FLASH_SHARE[gpu.architecture]
    by_cc = FLASH_SHARE_BY_COMPUTE_CAPABILITY.get(gpu.compute_capability or "")
    return by_cc if by_cc is not None else FLASH_SHARE.get(gpu.architecture, DEFAULT_FLASH_SHARE)


def matmul_share(gpu: Gpu) -> float:
    return MATMUL_SHARE.get(gpu.architecture, DEFAULT_MATMUL_SHARE) * TRAINING_SHARE


def no_tensor_core_factor(gpu: Gpu, precision: str = "bf16") -> float:
    """Non-tensor FP32 peak over the Tensor Core peak of `precision` (A100 bf16: 19.5/312 = 1/16): the rate
    left to a GEMM whose dimensions keep it off the Tensor Cores. 1/16 when the catalog lacks either."""
    fp32, tensor = gpu.peak_tflops.get("fp32"), gpu.peak_tflops.get(normalize_precision(precision))
    return fp32 / tensor if fp32 and tensor and tensor > fp32 else 1 / 16


def inner_factor(k: int, gpu: Gpu) -> float:
    """What a GEMM of inner dimension `k` keeps of the matmul ceiling next to one of K = INNER_REFERENCE:
    k/(k + K½) over the same at the reference, K½ = INNER_HALF scaled by the GPU's dense BF16 rate per SM
    over the H100's; at most 1. 1.0 without an SM count or a BF16 peak in the catalog."""
    peak = gpu.peak_tflops.get("bf16") or gpu.peak_tflops.get("fp16")
    if not gpu.sm_count or not peak:
        return 1.0
    half = INNER_HALF * (peak / gpu.sm_count) / (H100_PEAK_TFLOPS / H100_SMS)
    return min(1.0, (k / (k + half)) / (INNER_REFERENCE / (INNER_REFERENCE + half)))


def alignment_factor(*dims: int, no_tensor_core: float = 1 / 16) -> float:
    """The worst alignment class among `dims` (ALIGNMENT_FACTOR; `no_tensor_core` below multiples of 8)."""
    worst = 1.0
    for dim in dims:
        factor = next((f for multiple, f in ALIGNMENT_FACTOR if dim % multiple == 0), no_tensor_core)
        worst = min(worst, factor)
    return worst


def quantization_efficiency(m: int, n: int, gpu: Gpu, batch: int = 1) -> float:
    """Tile × wave efficiency of an M×N output (NVIDIA guide §3.1, §3.2), the best of the thread-block
    tiles cuBLAS picks among (256×128, 128×256, 128×128, guide §2.3); a batched call fills the waves with
    the tiles of all its GEMMs. 1.0 without an SM count in the catalog."""
    if not gpu.sm_count:
        return 1.0
    best = 0.0
    for tile in ((256, 128), (128, 256), (128, 128)):
        q = gemm_quantization(m, n, gpu.sm_count, *tile)
        tiles = q.tiles * batch
        waves = -(-tiles // gpu.sm_count)
        best = max(best, q.tile_efficiency * tiles / (waves * gpu.sm_count))
    return best


def gemm_efficiency(
    m: int,
    n: int,
    k: int,
    gpu: Gpu,
    batch: int = 1,
    compute_scale: float = 1.0,
    precision: str = "bf16",
    inner: bool = True,
) -> float:
    """Sustained share of the dense peak of one GEMM: the architecture's matmul ceiling in training
    (MATMUL_SHARE × TRAINING_SHARE) × tile and wave quantization × alignment of K and N × the rows
    factor M/(M + ROWS_HALF) × with `inner` the inner-dimension factor (`inner_factor`) × `compute_scale`
    (calibration), at most 1. The attention's batched products (scores, context) take no inner factor:
    their K is a head dimension, below the smallest K it was fitted on, and their rate is the one the
    unfused-attention rows were fitted with."""
    aligned = alignment_factor(k, n, no_tensor_core=no_tensor_core_factor(gpu, precision))
    rows = m / (m + ROWS_HALF)
    low = LOW_PRECISION_SHARE.get(normalize_precision(precision), 1.0)
    share = matmul_share(gpu) * quantization_efficiency(m, n, gpu, batch) * aligned * rows * low
    if inner:
        share *= inner_factor(k, gpu)
    return min(1.0, share * compute_scale)


def _gemm(
    name: str, m: int, n: int, k: int, gpu: Gpu, peak_flops: float, act_bytes: int, compute_scale: float,
    batch: int = 1, precision: str = "bf16", kernels: int = 1, inner: bool = True,
) -> Op:  # fmt: skip
    """A GEMM's time: the larger of its FLOPs at its efficiency and its HBM traffic (read A and B, write C)
    at HBM_SHARE of the bandwidth (the roofline of FORMULAS.md), plus the fixed cost of each of its
    `kernels` (one for a strided-batched call; one per GEMM where a "grouped" call loops over them)."""
    flops = 2.0 * m * n * k * batch
    eff = gemm_efficiency(m, n, k, gpu, batch, compute_scale, precision, inner)
    moved = (m * k + k * n + m * n) * batch * act_bytes
    flop_s = flops / (peak_flops * eff)
    memory_s = moved / (gpu.memory_bandwidth_gbps * 1e9 * HBM_SHARE)
    time_s = max(flop_s, memory_s) + kernels * KERNEL_OVERHEAD_S
    return Op(name, "gemm", flops, moved, time_s, eff, (m, n, k), batch)


def _memory(name: str, moved: float, gpu: Gpu, kernels: int = 1) -> Op:
    time_s = moved / (gpu.memory_bandwidth_gbps * 1e9 * HBM_SHARE) + kernels * KERNEL_OVERHEAD_S
    return Op(name, "memory", 0.0, moved, time_s, 0.0)


def layer_forward_ops(cfg: ModelConfig, train: TrainConfig, gpu: Gpu, compute_scale: float = 1.0) -> list[Op]:
    """The forward operations of one transformer layer on one tensor-parallel rank for one micro-batch.
    Attention with `train.flash_attention` is one fused kernel that skips the masked half of a causal
    score matrix (Dao et al. 2022 §3.1, block-sparse causal tiles); unfused it computes the full s×s
    scores, then a fused scale-mask-softmax and dropout read and write them (Megatron
    `FusedScaleMaskSoftmax`, Korthikanti et al. 2022 §4.1: 2as²b + as²b bytes of scores and mask).
    Element-wise work: two layer norms (read and write s·b·h), two bias-dropout-residual adds (read two,
    write one, plus a one-byte mask), the bias-activation of the MLP (GeLU: read and write its width;
    SwiGLU: read two halves, write one); with sequence parallelism they run on s·b·h/t."""
    linear_precision = normalize_precision(train.precision)
    # FP8 training runs only the linear layers' GEMMs in FP8; attention and everything else in BF16
    precision = storage_precision(linear_precision)
    peak_flops = peak_tflops(gpu, precision) * 1e12
    linear_peak = peak_tflops(gpu, linear_precision) * 1e12
    act = storage_bytes(linear_precision)
    t = train.tp
    s = cfg.seq_len // train.cp
    s_kv = cfg.seq_len  # context parallelism splits the queries; each rank attends to all keys
    m = microbatch_tokens(cfg, train)
    h, d = cfg.hidden, cfg.head_dim
    q, kv = cfg.q_width, cfg.kv_width
    heads_per_rank = max(1, cfg.heads // t)
    ffn = cfg.token_ffn
    up = 2 * ffn if cfg.swiglu else ffn
    scale = compute_scale * FRAMEWORK_SHARE.get(train.framework, 1.0)

    def linear(name: str, rows: int, cols: int, inner: int) -> Op:
        return _gemm(name, rows, cols, inner, gpu, linear_peak, act, scale, precision=linear_precision)

    ops = [linear("qkv", m, (q + 2 * kv) // t, h)]
    batch = train.mbs * heads_per_rank
    if train.flash_attention:
        flops = 4.0 * batch * s * s_kv * d / 2  # QKᵀ and AV, causal: half the tiles
        no_tc = no_tensor_core_factor(gpu, precision)
        kernel = train.attention_kernel
        share = flash_share(gpu, train.framework, kernel, d) * alignment_factor(d, no_tensor_core=no_tc)
        eff = min(1.0, share * scale)
        moved = 4 * batch * s * d * act  # Q, K, V read, O written; the scores stay on chip
        ops.append(
            Op("attention", "attention", flops, moved, flops / (peak_flops * eff) + KERNEL_OVERHEAD_S, eff)
        )
    else:
        ops.append(_gemm("scores", s, s_kv, d, gpu, peak_flops, act, scale, batch, precision, inner=False))
        scores = batch * s * s_kv
        ops.append(_memory("softmax_dropout", scores * (2 * act + 2 * act + 1), gpu, kernels=2))
        ops.append(_gemm("context", s, d, s_kv, gpu, peak_flops, act, scale, batch, precision, inner=False))
    ops.append(linear("proj", m, h, q // t))
    ops.append(linear("mlp_up", m, up // t, h))
    ops.append(linear("mlp_down", m, h, ffn // t))
    if linear_precision in LOW_PRECISION_GEMMS:
        # Transformer Engine casts each linear GEMM's input to FP8 and writes its transpose for the weight
        # gradient (`cast_transpose`): read 2 bytes, write 1 + 1 per element of the four inputs; NVFP4's
        # recipe does more per element (LOW_PRECISION_CAST_FACTOR)
        inputs = m * (h + q // t + h + ffn // t)
        cast = LOW_PRECISION_CAST_FACTOR.get(linear_precision, 1.0)
        ops.append(_memory("fp8_casts", inputs * (act + 2) * cast, gpu, kernels=4))
    rows = m * h / (t if train.sequence_parallel else 1)
    activation = m * (up // t) * act + m * (ffn // t) * act
    ops += [
        _memory("layernorms", 2 * 2 * rows * act, gpu, kernels=2),
        _memory("bias_dropout_residual", 2 * rows * (3 * act + 1), gpu, kernels=2),
        _memory("activation", activation, gpu),
    ]
    if not train.compiled and (kernels := eager_kernels(cfg)):
        ops.append(_memory("eager_elementwise", eager_elementwise_bytes(cfg, train), gpu, kernels=kernels))
    return ops


def vocab_shard(cfg: ModelConfig, train: TrainConfig) -> int:
    """One tensor-parallel rank's share of the vocabulary: V padded to a multiple of 128·t (Megatron's
    `--make-vocab-size-divisible-by` 128), split over the t ranks."""
    return -(-cfg.vocab // (128 * train.tp)) * 128


def logits_forward_op(cfg: ModelConfig, train: TrainConfig, gpu: Gpu, compute_scale: float = 1.0) -> Op:
    """The output layer of the last pipeline stage: M × V/t × h, vocabulary split over TP ranks (Megatron
    pads V to a multiple of 128·t, `--make-vocab-size-divisible-by`)."""
    # the output layer stays in BF16 under FP8 training (LOW_PRECISION_GEMMS)
    precision = storage_precision(train.precision)
    peak_flops = peak_tflops(gpu, precision) * 1e12
    act = storage_bytes(precision)
    m = microbatch_tokens(cfg, train)
    scale = compute_scale * FRAMEWORK_SHARE.get(train.framework, 1.0)
    return _gemm(
        "logits", m, vocab_shard(cfg, train), cfg.hidden, gpu, peak_flops, act, scale, precision=precision
    )


CROSS_ENTROPY_BYTES: dict[str, tuple[int, int, int, int]] = {
    "unfused": (38, 14, 7, 2),
    "fused": (22, 6, 3, 1),
    "te": (2, 4, 1, 1),
}
"""Bytes moved per logit element by the vocabulary-parallel cross entropy of one micro-batch, forward and
backward, and the kernels of each pass. `unfused`: Megatron's `vocab_parallel_cross_entropy`
(megatron/core/tensor_parallel/cross_entropy.py; the same passes in Megatron-LM 2021 and BigScience's
Megatron-DeepSpeed), one memory-bound pass per step over the M × V/t logits in fp32: `.float()` (read 2,
write 4), max (read 4), subtract the max in place (read 4, write 4), `exp` in place (4 + 4), sum (4), divide
in place (4 + 4): 38 bytes; backward, multiply the saved softmax by the loss gradient in place (4 + 4) and
cast it back for the output layer's GEMMs (read 4, write 2): 14 bytes. `fused`
(`--cross-entropy-loss-fusion`, `fused_vocab_parallel_cross_entropy`, the same file's jit-fused steps; on
by default in NeMo 2 and Megatron-Bridge's `GPTModelProvider`): cast and max (2 + 4), subtract, exp and sum
(4 + 4), divide (4 + 4); backward one pass to bf16 (4 + 2). `te` (`--cross-entropy-fusion-impl te`,
Transformer Engine's `parallel_cross_entropy`, transformer_engine/pytorch/triton/cross_entropy.py, what
Megatron-Bridge's performance scripts set): an online softmax reads the bf16 logits once, and the
backward reads them again and writes the gradient in their place. The output layer's GEMM is timed apart
(`logits_forward_op`); with a vocabulary large next to the hidden size (Nemotron's 256k against h 4096, 62
logits per hidden value) the unfused loss takes 6 % of Nemotron 8B's step (NeMo 24.07, TP 2: 1.31 s)."""


def cross_entropy_seconds(cfg: ModelConfig, train: TrainConfig, gpu: Gpu) -> tuple[float, float]:
    """Forward and backward seconds of the loss over one micro-batch's logits on the last pipeline stage,
    bandwidth-bound (`CROSS_ENTROPY_BYTES`, or a compiled PyTorch loss's passes,
    `torch_native.compiled_loss_passes`), on the padded vocabulary shard V/t of M = b·s/cp tokens."""
    elements = microbatch_tokens(cfg, train) * vocab_shard(cfg, train)
    if train.cross_entropy == "compiled":  # PyTorch's, under torch.compile (`model.torch_native`)
        forward_b, backward_b, forward_k, backward_k = compiled_loss_passes(train)
    else:
        forward_b, backward_b, forward_k, backward_k = CROSS_ENTROPY_BYTES[train.cross_entropy]
    forward = _memory("cross_entropy", elements * forward_b, gpu, kernels=forward_k).time_s
    backward = _memory("cross_entropy_backward", elements * backward_b, gpu, kernels=backward_k).time_s
    return forward, backward


def optimizer_step_seconds(local_params: float, gpu: Gpu) -> float:
    """Adam over the parameters whose optimizer state this GPU holds, bandwidth-bound: read fp32 master
    weight, gradient, momentum and variance (16 B), write the three states (12 B) and the 16-bit weight
    (2 B): 30 bytes per parameter (multi-tensor Adam, one pass; Rajbhandari et al. 2020 §3 state sizes)."""
    return local_params * 30 / (gpu.memory_bandwidth_gbps * 1e9 * HBM_SHARE)
