"""Time and size of `tracelog report` over a large synthetic store.

    python benchmarks/report_bench.py                 # 100 runs, 1,000,000 iterations
    python benchmarks/report_bench.py 400 4000000     # runs, iterations

The store is generated with SQL alone (DuckDB `range()`): runs with tags and configurations, iterations
with warm-up, loss-scale changes, skipped and NaN lines, memory for 64 ranks per run, predictions, flags,
and ten nccl-tests benches, a p2p matrix and a topology. The report is then written by the real CLI in a
child process; the figures are the wall time of that process (imports and the inlined Vega bundle
included), its peak RSS, and the size of the HTML file. The budget: under 10 s and under 20 MB for 100
runs and 1M iterations.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import duckdb

from tracelog.store import Store

OUT = Path(__file__).parent / "out"


def generate(path: Path, runs: int, iterations: int) -> None:
    for leftover in (path, path.with_suffix(".duckdb.wal")):
        leftover.unlink(missing_ok=True)
    Store(path).close()  # the schema
    per_run = iterations // runs
    con = duckdb.connect(str(path))
    con.execute(
        "INSERT INTO sources (path, fingerprint, bytes, format, parser_version, lines_total, lines_parsed, "
        "lines_unparsed) VALUES ('synthetic.log', 'x', 0, 'megatron', 'bench', 0, 0, 0)"
    )
    con.execute(
        f"""
        INSERT INTO runs (run_id, source_id, run_key, name, framework, nodes, gpus, gpus_per_node, tp, pp, dp,
                          mbs, gbs, seq_len, layers, hidden, heads, precision, gpu_model, line_start, line_end)
        SELECT r, 1, r, 'synthetic-' || r || '-dp' || (1 << (r % 4)) || '-tp' || (8 >> (r % 4)), 'megatron',
               8, 64, 8, 8 >> (r % 4), 8, 1 << (r % 4), 1 + r % 4, 2048, 2048, 64, 8192, 64, 'bf16',
               'a100-sxm4-80gb', 1, {per_run}
        FROM range(1, {runs} + 1) t(r)
        """
    )
    con.execute(f"INSERT INTO run_tags SELECT r, 'exp', 'sweep-' || (r % 5) FROM range(1, {runs} + 1) t(r)")
    con.execute(
        f"""
        INSERT INTO iterations (run_id, iteration, train_iters, elapsed_s, learning_rate, global_batch_size,
                                lm_loss, loss_scale, grad_norm, skipped, nan, samples_per_s, tflops_reported,
                                line_no)
        SELECT r, i, {per_run}, 10 + r / 10 + CASE WHEN i % 997 = 0 THEN 5 ELSE (i % 13) / 50 END
                  + CASE WHEN i < 20 THEN 30 ELSE 0 END,
               1e-4, 2048, CASE WHEN i % 4999 = 0 THEN NULL ELSE 11 * exp(-i / 3000) + 2 + (i % 7) / 100 END,
               CASE WHEN i < 10 THEN 65536 >> i ELSE 4096 END, 1.0,
               CASE WHEN i < 10 OR i % 2503 = 0 THEN 1 ELSE 0 END, CASE WHEN i % 4999 = 0 THEN 1 ELSE 0 END,
               200, 140 - r / 10, 100 + i
        FROM range(1, {runs} + 1) a(r), range(1, {per_run} + 1) b(i)
        """
    )
    con.execute(
        f"""
        INSERT INTO memory (run_id, rank, iteration, allocated_mib, max_allocated_mib, reserved_mib,
                            max_reserved_mib, line_no)
        SELECT r, k, 10, 50000, 60000 + k * 100, 62000, 64000 + k * 150 + r * 20, 50 + k
        FROM range(1, {runs} + 1) a(r), range(64) b(k)
        """
    )
    con.execute(
        f"""
        INSERT INTO predictions (subject_kind, subject_id, metric, value, unit, formula)
        SELECT 'run', r, metric, value, unit, 'megatron' FROM range(1, {runs} + 1) t(r),
               (VALUES ('sec_per_it', 10.0, 's'), ('tflops_per_gpu', 150.0, 'TFLOP/s'),
                       ('compute_s', 8.0, 's'), ('bubble_s', 1.0, 's'), ('tp_comm_s', 0.6, 's'),
                       ('dp_comm_s', 0.4, 's')) m(metric, value, unit)
        """
    )
    con.execute(
        f"""
        INSERT INTO flags (rule, severity, subject_kind, subject_id, measured, expected, message, hint)
        SELECT 'training_health', 'warning', 'run', r, 1, 0, 'NaN iterations after warm-up.', 'Look at the loss.'
        FROM range(1, {runs} + 1) t(r)
        """
    )
    con.execute(
        """
        INSERT INTO benches (bench_id, source_id, bench_key, tool, collective, ranks, nodes, gpus_per_node,
                             gpu_name, gpu_model, status, line_start)
        SELECT b, 1, b, CASE WHEN b <= 10 THEN 'nccl-tests' WHEN b = 11 THEN 'p2pBandwidthLatencyTest'
                             ELSE 'nvidia-smi-topo' END,
               CASE WHEN b <= 10 THEN 'all_reduce' END, 8, 1, 8, 'NVIDIA A100-SXM4-80GB', 'a100-sxm4-80gb',
               'complete', b * 100
        FROM range(1, 13) t(b);
        INSERT INTO collectives (bench_id, size_bytes, placement, time_us, algbw_gbps, busbw_gbps, wrong, line_no)
        SELECT b, 1 << e, p, 10, 1, (200 + b) * (1 << e) / ((1 << e) + 4000000), 0, e
        FROM range(1, 11) a(b), range(3, 34) c(e), (VALUES ('out-of-place'), ('in-place')) d(p);
        INSERT INTO p2p SELECT 11, 'bandwidth_uni_p2p_on', s, d, CASE WHEN s = d THEN 1500 ELSE 270 END,
               'GB/s', s FROM range(8) a(s), range(8) b(d);
        INSERT INTO links SELECT 12, 'node', 'GPU' || a, 'GPU' || b, CASE WHEN a = b THEN 'X' ELSE 'NV12' END,
               12, a FROM range(8) x(a), range(8) y(b);
        """
    )
    con.close()


def measure(runs: int, iterations: int) -> None:
    OUT.mkdir(exist_ok=True)
    db, html = OUT / f"report-{runs}x{iterations}.duckdb", OUT / f"report-{runs}x{iterations}.html"
    start = time.perf_counter()
    generate(db, runs, iterations)
    print(f"generated {runs} runs, {iterations:,} iterations in {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    command = [sys.executable, "-m", "tracelog", "--db", str(db), "report", "-o", str(html)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    size_mb = html.stat().st_size / 1e6
    print("runs  iterations  seconds  html_mb  peak_rss_mb")
    print(f"{runs:4d}  {iterations:10,d}  {seconds:7.2f}  {size_mb:7.2f}  {peak_mb:11.0f}")


if __name__ == "__main__":
    arguments = [int(a) for a in sys.argv[1:]]
    measure(*(arguments or [100, 1_000_000]))
