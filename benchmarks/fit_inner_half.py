"""Fit `model.gemm.INNER_HALF`, the inner dimension K at which a GEMM keeps half its rate, on OpenXLA's
measured matmul table for the H100 (run on demand; not part of the tests).

The table is `xla/service/gpu/model/matmul_interpolator_data.h` of the OpenXLA repository (also vendored in
TensorFlow at `third_party/xla/...`): a text protobuf whose `sm_90` entries give, for each batched GEMM
b × (m × n × k), its measured rate in FLOP/s per data type. Download it and give its path:

    python benchmarks/fit_inner_half.py matmul_interpolator_data.h
    python benchmarks/fit_inner_half.py matmul_interpolator_data.h --arch sm_100 --gpu b200-sxm-180gb

The second, where the file has B200 entries, checks how `inner_factor` scales K½ to another GPU.

Each entry's time is modelled as the model times a GEMM: its FLOPs over the dense BF16 peak times a ceiling
C, the model's own tile and wave quantization (`gemm.quantization_efficiency`) and k/(k + K½), plus a fixed
time t0 per call. C, K½ and t0 are fitted by least squares on the log of the time, over the entries of at
least `--min-gflop` GFLOP (smaller ones are launch-bound); the fit without the K term is printed beside it.
Plain numpy: a grid over K½ and t0, C by golden-section search.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

from tracelog import hardware
from tracelog.model.gemm import quantization_efficiency

ENTRY = re.compile(
    r"b:\s*(\d+)\s+m:\s*(\d+)\s+n:\s*(\d+)\s+k:\s*(\d+)\s+flops\s*\{\s*key:\s*\"BF16xBF16->BF16\"\s*value:\s*(\d+)",
    re.IGNORECASE,
)


def read_table(path: Path, arch: str = "sm_90") -> np.ndarray:
    """The (b, m, n, k, FLOP/s) rows of one architecture's BF16 entries."""
    text = path.read_text()
    start = text.find(f'key: "{arch}"')
    if start < 0:
        raise SystemExit(f"{path}: no entries for {arch}")
    following = text.find('key: "sm_', start + 1)
    block = text[start : following if following > 0 else len(text)]
    rows = [tuple(float(x) for x in match.groups()) for match in ENTRY.finditer(block)]
    if not rows:
        raise SystemExit(f"{path}: no BF16 entries under {arch}")
    return np.array(rows)


def _golden(f, lo: float, hi: float, steps: int = 40) -> float:
    ratio = (5**0.5 - 1) / 2
    a, b = lo, hi
    for _ in range(steps):
        c, d = b - ratio * (b - a), a + ratio * (b - a)
        if f(c) < f(d):
            b = d
        else:
            a = c
    return (a + b) / 2


def fit(table: np.ndarray, gpu_id: str, with_inner: bool = True) -> dict[str, float]:
    gpu = hardware.gpu(gpu_id)
    b, m, n, k, rate = table.T
    flops = 2 * b * m * n * k
    measured = np.log(flops / rate)
    quant = np.array(
        [quantization_efficiency(int(mi), int(ni), gpu, int(bi)) for bi, mi, ni in zip(b, m, n, strict=True)]
    )
    peak = gpu.peak_tflops["bf16"] * 1e12
    best = {"rms": np.inf}
    for half in np.arange(0, 801, 2.0) if with_inner else [0.0]:
        shape = quant * k / (k + half)
        for t0 in np.arange(0, 15.01, 0.25) * 1e-6:

            def err(c: float, shape: np.ndarray = shape, t0: float = t0) -> float:
                return float(np.mean((np.log(flops / (peak * c * shape) + t0) - measured) ** 2))

            c = _golden(err, 0.3, 1.0)
            rms = err(c) ** 0.5
            if rms < best["rms"]:
                best = {"rms": rms, "ceiling": c, "inner_half": half, "t0_us": t0 * 1e6}
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table", type=Path, help="matmul_interpolator_data.h")
    parser.add_argument("--min-gflop", type=float, default=10.0, help="smallest entry fitted (GFLOP)")
    parser.add_argument("--arch", default="sm_90", help="the table's key: sm_90 (H100), sm_100 (B200)")
    parser.add_argument("--gpu", default="h100-sxm5-80gb", help="the catalog GPU the table ran on")
    args = parser.parse_args(argv)
    table = read_table(args.table, args.arch)
    b, m, n, k, _ = table.T
    kept = table[2 * b * m * n * k >= args.min_gflop * 1e9]
    print(f"{len(table)} {args.arch} BF16 entries, {len(kept)} of at least {args.min_gflop:g} GFLOP")
    for label, with_inner in (("with k/(k + K½)", True), ("without", False)):
        r = fit(kept, args.gpu, with_inner)
        print(
            f"  {label:16s} K½ {r['inner_half']:5.0f}   ceiling {r['ceiling']:.3f}   "
            f"t0 {r['t0_us']:5.2f} us   rms log error {r['rms']:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
