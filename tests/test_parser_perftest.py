"""The perftest parser: one bench per invocation (back to back, after shell prompts, under pdsh prefixes,
interleaved), the header as params, rows converted to GB/s from MB/sec, MiB/sec and Gb/sec, the server
side, bidirectional runs, latency tables, cut and failed runs, and detection.

Every output below is invented (its figures are not measurements), written line by line in the layout
perftest prints (github.com/linux-rdma/perftest at 00b55b6: `ctx_print_test_info`, `RESULT_FMT*` and
`REPORT_FMT*` of src/perftest_parameters.h, `ctx_print_pingpong_data`, tabs where perftest prints them),
and modeled on published outputs: a ConnectX-7 NDR client session of four back-to-back runs with
`Conflicting CPU frequency values detected` between the result header and the row (a public how-to on
connecting two GPU servers), the server side of perftest issue #234, the `-b -q 2` runs of
Mellanox/ngc_multinode_perf issue #108, the `Couldn't connect to` client of perftest pull request #228.
"""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLES, rows_by_table
from tracelog import parsers
from tracelog.parsers import nccl_tests, nvbandwidth, p2p, perftest
from tracelog.parsers.base import head_text

MIB = 1048576 / 1e9  # GB per MiB: perftest's "MB/sec" is 2^20 bytes a second

HEADER = """\
---------------------------------------------------------------------------------------
                    {title}
 Dual-port       : OFF\t\tDevice         : {device}
 Number of qps   : {qps}\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 PCIe relax order: ON\t\tLock-free      : OFF
 ibv_wr* API     : ON\t\tUsing Enhanced Reorder      : OFF
 TX depth        : 128
 CQ Moderation   : 1
 CQE Poll Batch  : Dynamic
 Mtu             : 4096[B]
 Link type       : {link}
 Max inline data : 0[B]
 rdma_cm QPs\t : OFF
 Data ex. method : Ethernet
---------------------------------------------------------------------------------------
 local address: LID 0x11 QPN 0x004a PSN 0xbe352e RKey 0x1fff00 VAddr 0x007e6f4ed11000
 remote address: LID 0x12 QPN 0x0049 PSN 0x4601da RKey 0x1fff00 VAddr 0x007778e64eb000
---------------------------------------------------------------------------------------
"""
BW_MIB = " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n"
BW_MB = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
BW_GBIT = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
LAT = (
    " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   "
    "99% percentile[usec]   99.9% percentile[usec] \n"
)
DASHES = "-" * 87 + "\n"
CPU = "Conflicting CPU frequency values detected: 3295.212000 != 4999.302000. CPU Frequency is not max.\n"


def header(title: str = "RDMA_Write BW Test", device: str = "mlx5_0", link: str = "IB", qps: int = 1) -> str:
    return HEADER.format(title=title, device=device, link=link, qps=qps)


# A client session on one NDR node: MiB/sec (perftest 24.07 on), a latency run, --report_gbits, prompts
# between them, perftest's clock warning between the result header and its row.
SESSION = (
    "gpu07@h100-node-07:~$ ib_send_bw -d mlx5_0 h100-node-08\n"
    "Disabling dynamic polling\n"
    + header("Send BW Test")
    + BW_MIB
    + CPU
    + " 65536      1000             46567.34            46557.03\t\t     0.744912\n"
    + DASHES
    + "gpu07@h100-node-07:~$ \n"
    + "gpu07@h100-node-07:~$ ib_send_lat -d mlx5_0 h100-node-08\n"
    + header("Send Latency Test")
    + LAT
    + CPU
    + " 2       1000          1.24           5.19         1.27     \t       1.27        \t0.00   \t\t1.37    \t\t5.19   \n"
    + DASHES
    + "gpu07@h100-node-07:~$ ib_write_bw -d mlx5_0 -i 1 --report_gbits h100-node-08\n"
    + header()
    + BW_GBIT
    + " 65536      5000             392.38             392.34 \t\t     0.748336\n"
    + DASHES
)


def collect(text: str | bytes) -> dict[str, list[dict]]:
    return rows_by_table(perftest.parse, text)


def params(out: dict[str, list[dict]], key: int = 0) -> dict[str, str]:
    return {p["name"]: p["value"] for p in out.get("bench_params", []) if p["bench_key"] == key}


def rows(out: dict[str, list[dict]], key: int = 0) -> list[dict]:
    return [r for r in out.get("perftest", []) if r["bench_key"] == key]


def test_each_run_of_a_session_is_a_bench_with_its_rows() -> None:
    out = collect(SESSION)
    benches = [(b["collective"], b["status"], b["hosts"]) for b in out["benches"]]
    assert benches == [
        ("ib_send_bw", "complete", ["h100-node-07"]),
        ("ib_send_lat", "complete", ["h100-node-07"]),
        ("ib_write_bw", "complete", ["h100-node-07"]),
    ]
    assert "unparsed" not in out
    (send,) = rows(out, 0)
    assert (send["size_bytes"], send["iters"], send["msg_rate_mpps"]) == (65536, 1000, 0.744912)
    (lat,) = rows(out, 1)
    assert (lat["t_min_us"], lat["t_typical_us"], lat["t_p99_us"], lat["t_p999_us"]) == (
        1.24,
        1.27,
        1.37,
        5.19,
    )
    assert lat["bw_avg_gbps"] is None
    warnings = [(e["bench_key"], e["kind"]) for e in out["events"]]
    assert warnings == [(0, "warning"), (1, "warning")]  # the write run printed no clock warning


def test_bandwidth_units_are_converted_to_gb_per_second() -> None:
    out = collect(SESSION)
    # by hand: 46557.03 MiB/s x 1,048,576 B/MiB = 48,818,584,289 B/s; 392.34 Gb/s / 8 = 49.0425 GB/s
    assert rows(out, 0)[0]["bw_avg_gbps"] == pytest.approx(48.818584289, rel=1e-9)
    assert rows(out, 0)[0]["bw_peak_gbps"] == pytest.approx(46567.34 * MIB)
    assert rows(out, 2)[0]["bw_avg_gbps"] == pytest.approx(49.0425)
    # perftest before 24.07 printed the same 2^20 figure under "MB/sec"
    old = collect(
        header()
        + BW_MB
        + " 65536      5000             46567.34            46557.03\t\t     0.744912\n"
        + DASHES
    )
    assert rows(old)[0]["bw_avg_gbps"] == pytest.approx(48.818584289, rel=1e-9)
    assert params(old)["units"] == "MB/sec (stored as GB/s, 1e9 bytes/s)"


def test_a_figure_set_in_markdown_bold_is_read() -> None:
    """linux-rdma/perftest#65 pasted its rows with the average in bold (`**5544.28**`, verbatim from
    https://github.com/linux-rdma/perftest/issues/65); the stars are markup, not perftest's."""
    published = (
        "#bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
        "1024       1000             0.00               **5544.28**\t\t   5.677340\n"
    )
    out = collect(header(title="Send BW Test") + published)
    (row,) = rows(out)
    assert row["bw_avg_gbps"] == pytest.approx(5544.28 * MIB) and row["msg_rate_mpps"] == 5.67734
    assert "unparsed" not in out


def test_a_copy_without_its_dashed_lines_and_the_iterations_mark_keeps_its_rows() -> None:
    """Invented, in the shape of openucx/ucx#8852's paste of `ib_read_bw -a`: pasted outside a code block,
    so markdown took its dashed lines for rules, and its result header reads `iterations` without `#`."""
    text = "\n".join(
        [
            "[root@gpu-b2 ~]#ib_read_bw  gpu-b1  -a -F -d mlx5_2",
            "                    RDMA_Read BW Test",
            " Dual-port       : OFF          Device         : mlx5_2",
            " Number of qps   : 1            Transport type : IB",
            " Link type       : IB",
            " Outstand reads  : 16",
            " local address: LID 0x0b QPN 0x0e11 PSN 0x1a2b3c OUT 0x10 RKey 0x0a0b0c VAddr 0x007f11aa22b000",
            " remote address: LID 0x0c QPN 0x0e42 PSN 0x4d5e6f OUT 0x10 RKey 0x0d0e0f VAddr 0x007f33cc44d000",
            " #bytes     iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]",
            " 2          1000             4.91               4.70               2.462110",
            " 4          1000             9.80               9.77               2.560881",
            " 65536      1000             11201.44           11195.02           0.179120",
        ]
    )
    out = collect(text + "\n")
    assert [r["size_bytes"] for r in rows(out)] == [2, 4, 65536]
    assert rows(out)[-1]["bw_avg_gbps"] == pytest.approx(11195.02 * MIB)
    assert params(out)["Outstand reads"] == "16" and "unparsed" not in out


def test_the_header_and_the_command_are_params() -> None:
    found = params(collect(SESSION), 2)
    assert found["title"] == "RDMA_Write BW Test"
    assert found["test"] == "ib_write_bw"
    assert (found["Device"], found["Link type"], found["Mtu"]) == ("mlx5_0", "IB", "4096[B]")
    assert (found["Number of qps"], found["Connection type"], found["Transport type"]) == ("1", "RC", "IB")
    assert found["rdma_cm QPs"] == "OFF" and found["Lock-free"] == "OFF"
    assert found["command"] == "ib_write_bw -d mlx5_0 -i 1 --report_gbits h100-node-08"
    assert (found["peer"], found["ib port"], found["side"], found["bidirectional"]) == (
        "h100-node-08",
        "1",
        "client",
        "no",
    )
    assert found["units"] == "Gb/sec (stored as GB/s, 1e9 bytes/s)"
    assert params(collect(SESSION), 1)["units"] == "usec"


# The server of a one-way write test: its banner first, no TX depth, the client's figures (perftest prints
# `print_full_bw_report(&rem_bw_rep)`), -D 10 so no peak (0.00) after its WARNING.
SERVER = (
    "\n************************************\n"
    "* Waiting for client to connect... *\n"
    "************************************\n"
    + header(link="Ethernet").replace(" TX depth        : 128\n", "")
    + BW_MB
    + " 65536      664644           0.00               4153.80\t\t   0.066461\n"
    + DASHES
)


def test_the_server_side() -> None:
    out = collect(" WARNING: BW peak won't be measured in this run.\n" + SERVER)
    (bench,) = out["benches"]
    assert bench["status"] == "complete" and bench["line_start"] == 1
    found = params(out)
    assert (found["side"], found["Link type"]) == ("server", "Ethernet")
    (row,) = rows(out)
    assert row["bw_peak_gbps"] == 0.0 and row["bw_avg_gbps"] == pytest.approx(4153.80 * MIB)
    assert [(e["bench_key"], e["kind"]) for e in out["events"]] == [(0, "warning")]


# `-b -q 2 --report_gbits --report-both`: the summed table, then each side's.
BIDIRECTIONAL = (
    "$ ib_write_bw -d mlx5_3 -b -q 2 -F --report_gbits --report-both clx-host-108\n"
    + header("RDMA_Write Bidirectional BW Test", device="mlx5_3", qps=2)
    + BW_GBIT
    + " 65536      10000            783.41             782.96 \t\t     1.493379\n"
    + DASHES
    + "\n Local results: \n"
    + DASHES
    + BW_GBIT
    + " 65536      10000            391.80             391.52 \t\t     0.746765\n"
    + DASHES
    + "\n Remote results: \n"
    + DASHES
    + BW_GBIT
    + " 65536      10000            391.61             391.44 \t\t     0.746614\n"
)


def test_a_bidirectional_run_sums_both_directions_and_keeps_each_side() -> None:
    out = collect(BIDIRECTIONAL)
    (bench,) = out["benches"]
    assert bench["collective"] == "ib_write_bw"
    found = params(out)
    assert (found["bidirectional"], found["Number of qps"], found["Device"]) == ("yes", "2", "mlx5_3")
    assert [(r["report"], r["bw_avg_gbps"]) for r in rows(out)] == [
        (None, pytest.approx(782.96 / 8)),
        ("local", pytest.approx(391.52 / 8)),
        ("remote", pytest.approx(391.44 / 8)),
    ]
    # the last table has no closing line, the summed one had: the run's result is whole
    assert bench["status"] == "complete"


def test_all_sizes_and_a_table_cut_short() -> None:
    sizes = [2**k for k in range(1, 24)]
    lines = [
        f" {s:<7}    5000           {s * 0.005:<7.2f}            {s * 0.005:<7.2f}\t\t   0.500000\n"
        for s in sizes
    ]
    whole = "# ib_write_bw -a -d mlx5_0 node1\n" + header() + BW_MB + "".join(lines) + DASHES
    out = collect(whole)
    assert [r["size_bytes"] for r in rows(out)] == sizes
    assert params(out)["sizes"] == "2-8388608 (23 sizes)"
    assert out["benches"][0]["status"] == "complete"
    cut = collect(
        "# ib_write_bw -a -d mlx5_0 node1\n" + header() + BW_MB + "".join(lines[:12]) + " 8192       5000"
    )
    assert len(rows(cut)) == 12 and cut["benches"][0]["status"] == "partial"
    assert cut["unparsed"] == [{"line_no": 34, "text": " 8192       5000"}]  # a row cut mid-line
    (event,) = [e for e in cut["events"] if e["kind"] == "incomplete"]
    assert "stops after 12 row(s)" in event["text"]


def test_a_header_without_a_table_is_partial() -> None:
    out = collect(header() + BW_GBIT)
    assert out["benches"][0]["status"] == "partial"
    assert "perftest" not in out


def test_a_client_that_could_not_connect_is_a_failed_bench_of_its_command() -> None:
    text = (
        "[root@gpu-a12 ~]# ib_write_bw -d mlx5_4 --report_gbits 10.10.4.12\n"
        "Couldn't connect to 10.10.4.12:18515\n"
        "Unable to open file descriptor for socket connection Unable to init the socket connection\n"
        "[root@gpu-a12 ~]# ib_write_bw -d mlx5_5 --report_gbits 10.10.5.12\n"
        + header(device="mlx5_5")
        + BW_GBIT
        + " 65536      5000             392.38             392.34 \t\t     0.748336\n"
        + DASHES
    )
    out = collect(text)
    assert [
        (b["collective"], b["status"], b["hosts"], b["line_start"], b["line_end"]) for b in out["benches"]
    ] == [
        ("ib_write_bw", "failed", ["gpu-a12"], 1, 3),
        ("ib_write_bw", "complete", ["gpu-a12"], 4, 26),
    ]
    assert params(out, 0)["Device"] == "mlx5_4" and params(out, 0)["peer"] == "10.10.4.12"
    kinds = [(e["bench_key"], e["kind"]) for e in out["events"]]
    assert kinds == [(0, "error"), (0, "error"), (0, "incomplete")]


def test_a_server_that_failed_after_its_banner_is_a_failed_bench() -> None:
    text = (
        "************************************\n* Waiting for client to connect... *\n"
        "************************************\n ethernet_read_keys: Couldn't read remote address\n"
        " Unable to read to socket/rdma_cm\n"
    )
    (bench,) = collect(text)["benches"]
    assert bench["status"] == "failed" and bench["line_start"] == 2


def test_pdsh_prefixes_keep_each_hosts_runs_apart_even_interleaved() -> None:
    # `pdsh -w node[01-02] ib_write_bw -d mlx5_0 --report_gbits peer`: the two outputs' lines interleaved
    one = (
        header()
        + BW_GBIT
        + " 65536      5000             392.38             392.34 \t\t     0.748336\n"
        + DASHES
    )
    two = one.replace("392.38             392.34", "203.11             202.87").replace("mlx5_0", "mlx5_1")
    a, b = one.splitlines(), two.splitlines()
    mixed = "".join(f"node01: {x}\nnode02: {y}\n" for x, y in zip(a, b, strict=True))
    out = collect(mixed)
    assert "unparsed" not in out
    assert sorted((b["hosts"][0], b["status"]) for b in out["benches"]) == [
        ("node01", "complete"),
        ("node02", "complete"),
    ]
    by_host = {b["hosts"][0]: b["bench_key"] for b in out["benches"]}
    assert rows(out, by_host["node01"])[0]["bw_avg_gbps"] == pytest.approx(49.0425)
    assert rows(out, by_host["node02"])[0]["bw_avg_gbps"] == pytest.approx(202.87 / 8)
    assert params(out, by_host["node02"])["Device"] == "mlx5_1"


def test_crlf_and_colour_codes_change_nothing() -> None:
    messy = ("\r\n".join(f"\x1b[0m{line}" for line in SESSION.splitlines()) + "\r\n").encode()
    assert collect(messy) == collect(SESSION)


def test_a_latency_run_with_a_duration() -> None:
    text = (
        header("RDMA_Read Latency Test")
        + " #bytes        #iterations       t_avg[usec]    tps average\n"
        + " 2             1922337            1.56           640781.12\n"
        + DASHES
    )
    out = collect(text)
    (row,) = rows(out)
    assert (row["size_bytes"], row["iters"], row["t_avg_us"], row["tps"]) == (2, 1922337, 1.56, 640781.12)
    assert out["benches"][0]["collective"] == "ib_read_lat"
    assert "bidirectional" not in params(out)


def test_a_negative_average_is_dropped_with_an_event() -> None:
    # perftest issue #82: a negative BW average printed by a run whose clock went backwards
    out = collect(
        header("Send BW Test")
        + BW_GBIT
        + " 65536      2000             0.00               -1.93\t\t   -0.003681\n"
        + DASHES
    )
    (row,) = rows(out)
    assert row["bw_avg_gbps"] is None
    assert any(e["kind"] == "bad_value" and "bw_avg_gbps" in e["text"] for e in out["events"])


@pytest.mark.parametrize(
    ("head", "score"),
    [
        (SESSION, 60),
        (BW_GBIT + " 65536      5000             392.38             392.34 \t\t     0.748336\n", 55),
        ("$ ib_write_bw -d mlx5_0 node1\nCouldn't connect to node1:18515\n", 40),
        ("$ ib_write_bw -d mlx5_0 node1\n", 0),
        ("RDMA_Write BW Test\n", 0),
    ],
    ids=["session", "result table", "failed client", "prompt alone", "title alone"],
)
def test_detection(head: str, score: int) -> None:
    assert perftest.detect(head_text(head.encode())) == score


@pytest.mark.parametrize(
    "path",
    sorted(
        [*SAMPLES.glob("p2p_*.txt"), *SAMPLES.glob("nccl_*.txt"), *SAMPLES.glob("nvbandwidth_*.txt")]
        + [*SAMPLES.glob("topo_*.txt")]
    ),
    ids=lambda p: p.name,
)
def test_other_bench_outputs_are_not_claimed(path) -> None:
    head = head_text(path.read_bytes()[: parsers.HEAD_BYTES])
    assert perftest.detect(head) == 0


def test_the_other_bench_parsers_do_not_claim_perftest() -> None:
    head = head_text(SESSION.encode())
    assert nccl_tests.detect(head) == nvbandwidth.detect(head) == p2p.detect(head) == 0
    assert parsers.detect(head, "<test>") is perftest


def test_ingest_lands_every_run_on_both_backends(any_db, tmp_path) -> None:
    import tracelog.api as api
    from tracelog.store import Store

    path = tmp_path / "perftest_session.txt"
    path.write_text(SESSION)
    (result,) = api.ingest(any_db, [str(path)])
    assert not isinstance(result, api.IngestFailure), result
    with Store(any_db) as store:
        con = store.con
        assert con.execute("SELECT format, lines_unparsed FROM sources").fetchall() == [("perftest", 0)]
        benches = con.execute(
            "SELECT tool, collective, status, hosts FROM benches ORDER BY bench_id"
        ).fetchall()
        assert benches == [
            ("perftest", "ib_send_bw", "complete", ["h100-node-07"]),
            ("perftest", "ib_send_lat", "complete", ["h100-node-07"]),
            ("perftest", "ib_write_bw", "complete", ["h100-node-07"]),
        ]
        got = con.execute(
            "SELECT b.collective, p.size_bytes, round(p.bw_avg_gbps, 4), p.t_typical_us "
            "FROM perftest p JOIN benches b USING (bench_id) ORDER BY p.line_no"
        ).fetchall()
        assert got == [
            ("ib_send_bw", 65536, 48.8186, None),
            ("ib_send_lat", 2, None, 1.27),
            ("ib_write_bw", 65536, 49.0425, None),
        ]
