"""Write a large, realistic Megatron-LM log for the ingest benchmark.

Each logged iteration has its iteration line (timestamp, samples, sec/it, TFLOP/s, a learning rate that
warms up and decays, a falling loss, grad norm), a `time (ms)` timer line and a noise line (NCCL INFO, a
rank-prefixed torch warning, a dataloader message); every 100 iterations a memory report. The values move
from line to line as in a real run, so the parser cannot lean on repeated text that real logs do not have.
Text comes from a handful of templates, so 1 GB takes seconds to write, not minutes.

    python benchmarks/generate_megatron_log.py 1000 benchmarks/out/megatron-1000mb.log   # size in MB
"""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

ARGS = """------------------------ arguments ------------------------
  bf16 ............................................ True
  global_batch_size ............................... 1024
  hidden_size ..................................... 8192
  lr .............................................. 0.00015
  micro_batch_size ................................ 1
  num_attention_heads ............................. 64
  num_layers ...................................... 80
  pipeline_model_parallel_size .................... 8
  seq_length ...................................... 4096
  tensor_model_parallel_size ...................... 8
  train_iters ..................................... 9000000
  world_size ...................................... 512
-------------------- end of arguments ---------------------
"""
NOISE = [
    "node042:1234:5678 [3] NCCL INFO Channel 07/0 : 3[3] -> 4[4] via P2P/CUMEM/read\n",
    "[rank12]:[W1104 10:00:00.000000000 ProcessGroupNCCL.cpp:4115] Rank 12 using GPU 4 to perform barrier\n",
    "/usr/lib/python3/dist-packages/torch/utils/checkpoint.py:91: UserWarning: None of the inputs have requires_grad=True\n",
    " > loading shuffle-idx mapping from /data/gpt_text_document_train_indexmap_1024000ns_4096sl_1234s_shuffle_idx.npy\n",
    "INFO:megatron.core.datasets.blended_megatron_dataset_builder:Building dataset splits with cls=GPTDataset\n",
]
TRAIN_ITERS = 9_000_000
PEAK_LR = 1.5e-4
WARMUP = 2000


def learning_rate(iteration: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak (Megatron's default schedule)."""
    if iteration < WARMUP:
        return PEAK_LR * iteration / WARMUP
    done = (iteration - WARMUP) / (TRAIN_ITERS - WARMUP)
    return PEAK_LR * (0.1 + 0.45 * (1 + math.cos(math.pi * done)))


def write_log(path: Path, megabytes: int, seed: int = 0) -> int:
    rng = random.Random(seed)
    target = megabytes * 1_000_000
    written = 0
    iteration = 0
    with path.open("w", encoding="utf-8") as out:
        out.write(ARGS)
        while written < target:
            chunk = []
            for _ in range(1000):
                iteration += 1
                ms = 5200.0 + rng.random() * 80
                second = iteration * 5
                stamp = f"2024-11-{4 + second // 86400 % 25:02d} {second // 3600 % 24:02d}:{second // 60 % 60:02d}:{second % 60:02d}"
                loss = 2.0 + 9.0 / math.sqrt(1 + iteration / 50) + rng.random() * 0.05
                chunk.append(
                    f" [{stamp}] iteration {iteration:8d}/{TRAIN_ITERS:8d} |"
                    f" consumed samples: {iteration * 1024:12d} | elapsed time per iteration (ms): {ms:.1f} |"
                    f" throughput per GPU (TFLOP/s/GPU): {1_900_000 / ms:.1f} | learning rate: {learning_rate(iteration):.6E} |"
                    f" global batch size:  1024 | lm loss: {loss:.6E} | loss scale: 1.0 |"
                    f" grad norm: {rng.random() + 0.2:.3f} | number of skipped iterations:   0 |"
                    f" number of nan iterations:   0 |\n"
                )
                chunk.append(
                    f"time (ms) | forward-compute: {ms * 0.32:.2f} | backward-compute: {ms * 0.61:.2f} |"
                    f" optimizer: {ms * 0.02:.2f} | batch-generator: {0.8 + rng.random():.2f}\n"
                )
                chunk.append(NOISE[iteration % len(NOISE)])
                if iteration % 100 == 0:
                    chunk.append(
                        f"[Rank 0] (after {iteration} iterations) memory (MB) | allocated: 30210.5 |"
                        f" max allocated: 61012.1 | reserved: 68040.0 | max reserved: 68040.0\n"
                    )
            text = "".join(chunk)
            out.write(text)
            written += len(text)
    return written


if __name__ == "__main__":
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    target = (
        Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).parent / "out" / f"megatron-{size}mb.log"
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"{target}: {write_log(target, size) / 1e6:.0f} MB")
