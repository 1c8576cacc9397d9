"""Fabric benchmarks end to end: the sample logs through `tracelog ingest` and the library, checked in SQL,
and the `benches` listing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import tracelog.api as api
from tests.conftest import CORPUS, SAMPLES, corpus_files
from tracelog import parsers
from tracelog.cli import cli
from tracelog.parsers import allreduce_bench
from tracelog.store import Store

BENCH_SAMPLES = sorted([*SAMPLES.glob("nccl_*.txt"), *SAMPLES.glob("p2p_*.txt"), *SAMPLES.glob("topo_*.txt")])
FORMAT_OF = {"nccl": "nccl_tests", "p2p": "p2p", "topo": "topo"}


def ingest(db: Path, *paths: Path) -> None:
    results = api.ingest(str(db), [str(p) for p in paths])
    failures = [r for r in results if isinstance(r, api.IngestFailure)]
    assert not failures, failures


def sql(db: Path, query: str, params: list | None = None) -> list[tuple]:
    with Store(db) as store:
        return store.con.execute(query, params or []).fetchall()


def test_cli_ingests_every_bench_sample(db_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["--db", str(db_path), "ingest", *map(str, BENCH_SAMPLES)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == len(BENCH_SAMPLES)
    for path, line in zip(BENCH_SAMPLES, lines, strict=True):
        assert line.startswith(str(path)) and f"ingested as {FORMAT_OF[path.name.split('_')[0]]}" in line
    formats = sql(db_path, "SELECT format, count(*) FROM sources GROUP BY ALL ORDER BY 1")
    assert formats == [("nccl_tests", 6), ("p2p", 2), ("topo", 2)]


def test_nccl_benches_in_sql(db_path: Path) -> None:
    ingest(db_path, *sorted(SAMPLES.glob("nccl_*.txt")))
    rows = sql(
        db_path,
        """
        SELECT regexp_extract(s.path, '[^/]+$') AS file, b.bench_key, b.collective, b.ranks, b.nodes, b.gpus_per_node,
               b.gpu_name, b.dtype, b.status, b.wrong_total, b.out_of_bounds, count(c.size_bytes) AS rows
        FROM benches b JOIN sources s USING (source_id) LEFT JOIN collectives c USING (bench_id)
        GROUP BY ALL ORDER BY file, b.bench_key
        """,
    )
    assert rows == [
        (
            "nccl_all_reduce_8xa100.txt",
            0,
            "all_reduce",
            8,
            1,
            8,
            "NVIDIA A100-SXM4-80GB",
            "float",
            "complete",
            0,
            0,
            62,
        ),
        (
            "nccl_broadcast_graph_srun_4xl40s.txt",
            0,
            "broadcast",
            4,
            1,
            4,
            "NVIDIA L40S",
            "float",
            "complete",
            None,
            0,
            26,
        ),
        (
            "nccl_failures_back_to_back_8xh100.txt",
            0,
            "all_reduce",
            8,
            1,
            8,
            "NVIDIA H100 80GB HBM3",
            "float",
            "data_error",
            5,
            2,
            26,
        ),
        (
            "nccl_failures_back_to_back_8xh100.txt",
            1,
            "reduce_scatter",
            8,
            1,
            8,
            "NVIDIA H100 80GB HBM3",
            "float",
            "failed",
            0,
            None,
            14,
        ),
        (
            "nccl_failures_back_to_back_8xh100.txt",
            2,
            "alltoall",
            8,
            1,
            8,
            "NVIDIA H100 80GB HBM3",
            "float",
            "partial",
            0,
            None,
            16,
        ),
        (
            "nccl_mpi_all_reduce_2x8xh100.txt",
            0,
            "all_reduce",
            16,
            2,
            8,
            "NVIDIA H100 80GB HBM3",
            "bfloat16",
            "complete",
            0,
            0,
            30,
        ),
        (
            "nccl_old_layout_4xv100.txt",
            0,
            "all_reduce",
            4,
            1,
            4,
            "Tesla V100-SXM2-32GB",
            "float",
            "complete",
            None,
            0,
            50,
        ),
        # NCCL_TESTS_SPLIT="MOD 2": 8 ranks, the printed communicator is rank 0's group of 4
        ("nccl_split_per_iter_cputime_2x4xh100.txt", 0, "all_reduce", 4, 2, 2)
        + ("NVIDIA H100 80GB HBM3", "float", "complete", 0, 0, 18),
        ("nccl_split_per_iter_cputime_2x4xh100.txt", 1, "all_gather", 4, 1, 4)
        + ("NVIDIA H100 80GB HBM3", "float", "complete", 0, 0, 8),
    ]
    hosts = sql(db_path, "SELECT hosts FROM benches WHERE ranks = 16")
    assert hosts == [(["gpu-node-a01", "gpu-node-a02"],)]
    # every collective row of a bench lies within the bench's lines
    outside = sql(
        db_path,
        "SELECT count(*) FROM collectives c JOIN benches b USING (bench_id) "
        "WHERE c.line_no NOT BETWEEN b.line_start AND b.line_end",
    )
    assert outside == [(0,)]


def test_events_of_the_failures_sample(db_path: Path) -> None:
    ingest(db_path, SAMPLES / "nccl_failures_back_to_back_8xh100.txt")
    events = sql(
        db_path,
        "SELECT b.bench_key, e.kind, e.line_no FROM events e JOIN benches b USING (bench_id) ORDER BY e.line_no",
    )
    assert [(k, kind) for k, kind, _ in events] == [
        (0, "out_of_bounds"),
        (0, "avg_busbw"),
        (1, "nccl_warn"),
        (1, "error"),
        (1, "error"),
        (1, "incomplete"),
        (2, "xid"),
        (2, "incomplete"),
    ]
    unparsed = sql(db_path, "SELECT line_no, text FROM unparsed ORDER BY line_no")
    assert [n for n, _ in unparsed] == [1, 62, 87]
    # Line 93, cut off without a newline, waits for one (held back, neither parsed nor unparsed).
    (source,) = sql(db_path, "SELECT lines_total, lines_unparsed, bytes_pending FROM sources")
    last = (SAMPLES / "nccl_failures_back_to_back_8xh100.txt").read_bytes().rsplit(b"\n", 1)[1]
    assert source == (92, 3, len(last)) and len(last) > 0


def test_p2p_and_topo_in_sql(db_path: Path) -> None:
    ingest(db_path, *sorted(SAMPLES.glob("p2p_*.txt")), *sorted(SAMPLES.glob("topo_*.txt")))
    matrices = sql(
        db_path,
        "SELECT b.ranks, p.matrix, count(*), count(DISTINCT p.src), count(DISTINCT p.dst) "
        "FROM p2p p JOIN benches b USING (bench_id) WHERE p.matrix <> 'access_peer' GROUP BY ALL",
    )
    for ranks, matrix, cells, srcs, dsts in matrices:
        assert (cells, srcs, dsts) == (ranks * ranks, ranks, ranks), matrix
    assert {m for r, m, *_ in matrices if r == 8} - {m for r, m, *_ in matrices if r == 4} == {
        "bandwidth_uni_p2p_on_reads",
        "latency_gpu_p2p_on_reads",
        "latency_cpu_p2p_on_reads",
    }
    links = sql(
        db_path,
        "SELECT host, count(*), count(*) FILTER (link_kind = 'X'), max(link_count) FROM links GROUP BY host ORDER BY host",
    )
    assert links == [("h100-node-07", 256, 16, 18), ("l40s-03", 25, 5, None), ("l40s-04", 25, 5, None)]
    affinity = sql(
        db_path, "SELECT value FROM bench_params WHERE name = 'GPU3 CPU Affinity' ORDER BY bench_id"
    )
    assert affinity == [("0-55,112-167",), ("32-63,96-127",), ("32-63,96-127",)]


def test_flags_follow_bench_status_and_wrong_values(db_path: Path) -> None:
    ingest(db_path, SAMPLES / "nccl_failures_back_to_back_8xh100.txt")
    flags = sql(
        db_path,
        "SELECT b.bench_key, f.rule FROM flags f JOIN benches b ON f.subject_id = b.bench_id "
        "WHERE f.subject_kind = 'bench' AND f.rule IN ('nccl_data_error', 'bench_incomplete') ORDER BY 1",
    )
    assert flags == [(0, "nccl_data_error"), (1, "bench_incomplete"), (2, "bench_incomplete")]


def test_a_grown_log_completes_its_bench(any_db: Path, tmp_path: Path) -> None:
    """On both backends: the bench of a grown file is updated, not added again (a DuckLake store settles
    updates unlike appends: they conflict with any other writer)."""
    db_path = any_db
    full = (SAMPLES / "nccl_all_reduce_8xa100.txt").read_text()
    cut = full.index("   268435456")
    log = tmp_path / "all_reduce.log"
    log.write_text(full[:cut])
    ingest(db_path, log)
    last_row_line = full[:cut].count("\n")
    assert sql(db_path, "SELECT status, line_end FROM benches") == [("partial", last_row_line)]
    log.write_text(full)
    results = api.ingest(str(db_path), [str(log)])
    assert results[0].status == "appended"
    assert sql(db_path, "SELECT count(*), status, avg_busbw_gbps FROM benches GROUP BY ALL") == [
        (1, "complete", 88.9937)
    ]
    assert sql(db_path, "SELECT count(*), count(DISTINCT (size_bytes, placement)) FROM collectives") == [
        (62, 62)
    ]


def test_benches_listing(db_path: Path) -> None:
    ingest(db_path, *BENCH_SAMPLES)
    table = api.benches(str(db_path))
    assert list(table.columns) == [
        "bench_id",
        "source",
        "tool",
        "op",
        "ranks",
        "nodes",
        "gpus_per_node",
        "gpu",
        "dtype",
        "peak_busbw_gbps",
        "peak_size_bytes",
        "avg_busbw_gbps",
        "status",
    ]
    a100 = table[table["source"].str.endswith("nccl_all_reduce_8xa100.txt")].iloc[0]
    text = (SAMPLES / "nccl_all_reduce_8xa100.txt").read_text()
    printed = [
        (float(t[7]), int(t[0]))
        for t in (line.split() for line in text.splitlines() if re.match(r"^\s+\d+\s+\d+\s+float", line))
    ] + [
        (float(t[11]), int(t[0]))
        for t in (line.split() for line in text.splitlines() if re.match(r"^\s+\d+\s+\d+\s+float", line))
    ]
    peak = max(bw for bw, _ in printed)
    assert a100["peak_busbw_gbps"] == peak
    assert a100["peak_size_bytes"] == min(size for bw, size in printed if bw == peak)
    assert a100["avg_busbw_gbps"] == 88.9937
    assert (a100["tool"], a100["op"], a100["ranks"], a100["gpu"], a100["status"]) == (
        "nccl-tests",
        "all_reduce",
        8,
        "NVIDIA A100-SXM4-80GB",
        "complete",
    )
    p2p_rows = table[table["tool"] == "p2pBandwidthLatencyTest"]
    assert p2p_rows["peak_busbw_gbps"].isna().all() and len(p2p_rows) == 2
    only_nccl = api.benches(str(db_path), tool="nccl-tests")
    assert set(only_nccl["tool"]) == {"nccl-tests"} and len(only_nccl) == 9
    assert list(only_nccl["status"]).count("complete") == 6


CORPUS_ALLREDUCE = corpus_files("allreduce_bench")


@pytest.mark.skipif(
    not CORPUS_ALLREDUCE, reason="the shared corpus (../shared/corpus/allreduce_bench) is not here"
)
@pytest.mark.parametrize("path", CORPUS_ALLREDUCE, ids=lambda p: p.name)
def test_all_reduce_bench_outputs_ingest(db_path: Path, path: Path) -> None:
    ingest(db_path, path)
    text = path.read_text()
    printed = [float(x) for x in re.findall(r"^\s*busbw:\s*([\d.]+)\s*Gbps", text, re.MULTILINE)]
    ranks = len(set(re.findall(r"^(\d+) data size:", text, re.MULTILINE)))
    hosts = set(re.findall(r"^([\w.-]+):\d+:\d+ \[\d+\] NCCL INFO", text, re.MULTILINE))
    ((fmt,),) = sql(db_path, "SELECT format FROM sources")
    assert fmt == "allreduce_bench"
    (bench,) = sql(db_path, "SELECT tool, collective, ranks, nodes, gpus_per_node, status FROM benches")
    assert bench == ("all_reduce_bench", "all_reduce", ranks, len(hosts), ranks // len(hosts), "complete")
    rows = sql(db_path, "SELECT busbw_gbps, algbw_gbps, size_bytes FROM collectives ORDER BY line_no")
    assert [round(b * 8, 4) for b, _, _ in rows] == printed  # printed in Gbps (bits), stored in GB/s
    factor = 2 * (ranks - 1) / ranks  # nccl-tests doc/PERFORMANCE.md, all_reduce
    for busbw, algbw, size in rows:
        assert size == 4_000_000_000
        assert busbw == pytest.approx(algbw * factor, rel=1e-4)


PROSE = """From a public repository, experiments/bandwidth/: outputs of a PyTorch all_reduce benchmark script
(torch.distributed, 4 GB payload), interleaved with NCCL INFO lines from every rank: per rank `duration`,
`algo throughput: ... bps, ... Gbps`, `busbw: ... Gbps` (note: Gbps, bits). The later version prints
`The average bandwidth of all_reduce with a 4.0GB payload (5 trials, 16 ranks):` and `busbw: 120 GBps`.
- n1_all_reduce_bench.txt: 1 node, 4x V100 32GB.
"""
PROSE_FILES = sorted(CORPUS.glob("*/SOURCES.md")) + sorted(CORPUS.glob("README.md"))


@pytest.mark.parametrize(
    "text",
    [PROSE, *(p.read_text() for p in PROSE_FILES)],
    ids=["prose", *(str(p.relative_to(CORPUS)) for p in PROSE_FILES)],
)
def test_prose_about_the_tools_is_not_taken_for_their_output(
    db_path: Path, tmp_path: Path, text: str
) -> None:
    notes = tmp_path / "SOURCES.md"
    notes.write_text(text)
    (result,) = api.ingest(str(db_path), [str(notes)])
    assert isinstance(result, api.IngestFailure)
    assert "no parser recognises this file" in str(result.error)


ALL_REDUCE_HEADS = {
    "per-rank": "0 data size: 4.0 GB\nNCCL version 2.7.8+cuda10.2\n3:\n duration: 0.6125 sec\n"
    " algo throughput: 104487664227.6784 bps, 104.4877 Gbps\n busbw: 78.3657  Gbps\n",
    "data size only": "local_rank: 0\n0 data size: 4.0 GB\n1 data size: 4.0 GB\n",
    "summary": "The average bandwidth of all_reduce with a 4.0GB payload (5 trials, 16 ranks):\n"
    " algbw: 64.461 GBps (515.7 Gbps)\n busbw: 120.864 GBps (966.9 Gbps)\n",
    "srun labels": "0: 0 data size: 4.0 GB\n0:  algo throughput: 104487664227.6784 bps, 104.4877 Gbps\n",
    "mpi tags": "[1,0]<stdout>: algo throughput: 104487664227.6784 bps, 104.4877 Gbps\n",
}


@pytest.mark.parametrize("head", ALL_REDUCE_HEADS.values(), ids=ALL_REDUCE_HEADS.keys())
def test_all_reduce_bench_output_is_detected(head: str) -> None:
    assert parsers.detect(head, "<test>") is allreduce_bench


@pytest.mark.skipif(not CORPUS_ALLREDUCE, reason="the shared corpus is not here")
@pytest.mark.parametrize("path", CORPUS_ALLREDUCE, ids=lambda p: p.name)
def test_published_all_reduce_bench_outputs_are_detected_from_their_head(path: Path) -> None:
    head = path.read_bytes()[: parsers.HEAD_BYTES].decode(errors="replace")
    assert parsers.detect(head, str(path)) is allreduce_bench


def test_a_torchrun_prefixed_summary_is_read_whole(db_path: Path, tmp_path: Path) -> None:
    """Invented, in the shape of the later script run by torchrun with `--tee`/`--role` prefixes on GKE
    (`[host:0]:`): `algbw: ...` behind the prefix had been taken for a second, host-like prefix, and the
    bench called failed for want of its busbw."""
    prefix = "[gke-a3-cluster-node-pool-2dccbe7f-j25n:0]:"
    out = tmp_path / "allreduce.txt"
    out.write_text(
        f"{prefix}The average bandwidth of all_reduce with a 4.0GB payload (5 trials, 16 ranks):\n"
        f"{prefix} algbw: 44.947 GBps (359.6 Gbps)\n"
        f"{prefix} busbw: 84.275 GBps (674.2 Gbps)\n"
        f"{prefix}\n"
    )
    ingest(db_path, out)
    assert sql(db_path, "SELECT status, ranks FROM benches") == [("complete", 16)]
    assert sql(db_path, "SELECT algbw_gbps, busbw_gbps FROM collectives") == [(44.947, 84.275)]
    assert not [f for f in sql(db_path, "SELECT severity FROM flags") if f[0] == "critical"]


def test_gpu_option_holds_a_p2p_excerpt_against_the_unidirectional_spec(
    db_path: Path, tmp_path: Path
) -> None:
    """An excerpt without device lines: only --gpu names the GPU, so only it brings the NVLink spec."""
    values = [[1581.5 if s == d else 274.0 + (s + d) % 3 for d in range(8)] for s in range(8)]
    excerpt = tmp_path / "a100_uni_excerpt.txt"
    excerpt.write_text(
        "[...]\nUnidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)\n"
        "   D\\D"
        + "".join(f"{d:>7}" for d in range(8))
        + "\n"
        + "".join(f"{s:>6} " + " ".join(f"{v:.2f}" for v in row) + "\n" for s, row in enumerate(values))
        + "[...]\n"
    )
    results = api.ingest(str(db_path), [str(excerpt)], gpu="a100-sxm4-80gb")
    assert not [r for r in results if isinstance(r, api.IngestFailure)]
    assert sql(db_path, "SELECT gpu_name, gpu_model, status FROM benches") == [
        (None, "a100-sxm4-80gb", "partial")
    ]
    flags = sql(db_path, "SELECT rule, severity, measured, expected, message FROM flags ORDER BY rule")
    rules = [f[0] for f in flags]
    assert "low_bandwidth" not in rules
    (duplex,) = [f for f in flags if f[0] == "duplex_confusion"]
    assert duplex[1] == "info" and duplex[2] == pytest.approx(275.0) and duplex[3] == 300.0
    assert "92% of the 300 GB/s unidirectional spec (healthy)" in duplex[4]
    (incomplete,) = [f for f in flags if f[0] == "bench_incomplete"]
    assert "1 of the 9 matrices of a full output printed (bandwidth_uni_p2p_on)" in incomplete[4]


def test_without_gpu_a_p2p_excerpt_has_no_spec_to_hold(db_path: Path, tmp_path: Path) -> None:
    excerpt = tmp_path / "excerpt.txt"
    excerpt.write_text(
        "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)\n   D\\D     0      1\n"
        "     0 1581.48 274.55\n     1 274.70 1581.48\n"
    )
    ingest(db_path, excerpt)
    assert sql(db_path, "SELECT rule FROM flags") == [("bench_incomplete",)]


def test_old_layout_counts_out_of_bounds_results_only_in_its_footer(db_path: Path, tmp_path: Path) -> None:
    """nccl-tests before `#wrong` printed each row's largest error and counted the failures only in its
    footer. The sample's footer edited to a failure (its rows as printed): a critical flag on that line."""
    sample = (SAMPLES / "nccl_old_layout_4xv100.txt").read_text()
    assert "# Out of bounds values : 0 OK" in sample
    failed = tmp_path / "old_layout_failed.txt"
    failed.write_text(sample.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 2 FAILED"))
    ingest(db_path, SAMPLES / "nccl_old_layout_4xv100.txt", failed)
    flags = sql(
        db_path,
        "SELECT subject_id, severity, row_ref, measured, message FROM flags WHERE rule = 'nccl_data_error'",
    )
    footer = 1 + sample.splitlines().index("# Out of bounds values : 0 OK")
    assert flags == [
        (
            2,
            "critical",
            f"line {footer}",
            2.0,
            "nccl-tests counted 2 out-of-bounds result(s) (the largest error printed: 1e-07): the collective "
            "returned corrupted data.",
        )
    ]


def test_a_summary_across_nodes_is_held_to_its_fabric(db_path: Path, tmp_path: Path) -> None:
    """all_reduce_bench's summary prints no time: the time its algbw means (size / algbw) gives the model a
    point, so two 4-GPU nodes at 3.5 GB/s busbw are flagged against their four Slingshot NICs (invented
    figures in the shape of a run whose NCCL lacked its network plugin)."""
    out = tmp_path / "allreduce_2nodes.txt"
    out.write_text(
        "The average bandwidth of all_reduce with a 4.0GB payload (20 trials, 8 ranks):\n"
        " algbw: 2.019 GBps (16.1 Gbps)\n"
        " busbw: 3.533 GBps (28.3 Gbps)\n"
    )
    result = CliRunner().invoke(
        cli,
        ["--db", str(db_path), "ingest", str(out), "--gpu", "gh200-96gb", "--gpus-per-node", "4"]
        + ["--fabric", "slingshot11-x4"],
    )
    assert result.exit_code == 0, result.output
    predicted = sql(db_path, "SELECT count(*) FROM predictions WHERE subject_kind = 'collective'")
    assert predicted[0][0] > 0
    (flag,) = sql(db_path, "SELECT severity, message FROM flags WHERE rule = 'low_bandwidth'")
    assert flag[0] == "warning" and "3.5 GB/s" in flag[1] and "slingshot11-x4" in flag[1]


def test_a_second_command_after_a_cut_bench_and_an_error_over_the_tolerance(
    db_path: Path, tmp_path: Path
) -> None:
    """Two invocations pasted into one note, the first cut before its footer (invented rows in the shape of
    nccl-tests#104's sendrecv on two GTX 1080): the second command starts the second bench; the first's
    `error` column of 3e+02 on uint8 is corruption nccl-tests' footer would have counted; the second's last
    row, cut inside its in-place half, keeps its out-of-place half."""
    head = [
        "#                                               out-of-place                       in-place          ",
        "#       size         count      type     time   algbw   busbw  error     time   algbw   busbw  error",
        "#        (B)    (elements)               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
    ]
    out = tmp_path / "note.txt"
    out.write_text(
        "\n".join(
            [
                "./build/sendrecv_perf -b 8 -e 196M -g 2 -d uint8",
                *head,
                "    37748744      37748744     uint8    11732    3.22    3.22  0e+00    11698    3.23    3.23  3e+02",
                "./build/sendrecv_perf -b 36M -e 36M -g 2 -d uint8",
                *head,
                "    37748736      37748736     uint8   6485.7    5.82    5.82  0e+00   6496.1",
                "",
            ]
        )
    )
    ingest(db_path, out)
    benches = sql(db_path, "SELECT bench_id, collective FROM benches ORDER BY bench_id")
    assert benches == [(1, "sendrecv"), (2, "sendrecv")]
    rows = sql(
        db_path, "SELECT bench_id, placement, busbw_gbps FROM collectives ORDER BY bench_id, placement"
    )
    assert rows == [(1, "in-place", 3.23), (1, "out-of-place", 3.22), (2, "out-of-place", 5.82)]
    (flag,) = sql(db_path, "SELECT subject_id, severity, measured FROM flags WHERE rule = 'nccl_data_error'")
    assert flag == (1, "critical", 300.0)


# Invented, in the shape of coreweave/nccl-tests#43's GB200 NVL72 run: a driver that does not know the board
# yet lists every rank as `NVIDIA Graphics Device`; two nodes of four GPUs here.
PLACEHOLDER_NAMED = (
    "# nThread 1 nGpus 1 minBytes 536870912 maxBytes 2147483648 step: 2(factor) warmup iters: 5 iters: 20\n"
    "#\n"
    "# Using devices\n"
    + "".join(
        f"#  Rank {r:2d} Group  0 Pid  {20100 + r} on gb-node-{r // 4:02d} device  {r % 4} [0x01] "
        "NVIDIA Graphics Device\n"
        for r in range(8)
    )
    + "#\n"
    "#                                                              out-of-place                       in-place\n"
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n"
    "   536870912     134217728     float     sum      -1   4109.2  130.65  228.64      0   4097.5  131.02  229.29      0\n"
    "  1073741824     268435456     float     sum      -1   7911.0  135.73  237.53      0   7904.3  135.84  237.72      0\n"
    "  2147483648     536870912     float     sum      -1    15580  137.83  241.21      0    15566  137.96  241.43      0\n"
    "# Out of bounds values : 0 OK\n"
    "# Avg bus bandwidth    : 235.97\n"
)


def test_a_gpu_the_driver_could_not_name_is_kept_as_printed_and_said_so(tmp_path: Path) -> None:
    log = tmp_path / "nvl72.txt"
    log.write_text(PLACEHOLDER_NAMED)
    db = tmp_path / "t.duckdb"
    ingest(db, log)
    assert sql(db, "SELECT ranks, nodes, gpus_per_node, gpu_name, gpu_model FROM benches") == [
        (8, 2, 4, "NVIDIA Graphics Device", None)
    ]
    ((detail,),) = sql(db, "SELECT detail FROM predictions WHERE metric = 'inputs'")
    assert (
        "the log names the GPU 'NVIDIA Graphics Device', which is no catalog GPU's name: the name the NVIDIA "
        "driver gives a GPU its name table does not know yet" in detail
    )
    assert "give --gpu" in detail
