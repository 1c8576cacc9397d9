"""The model of a perftest bench (its NIC's line rate times the wire efficiency at its MTU) and the
`nic_bandwidth` flag: raised under 90 % of it, never raised on a healthy port, a bidirectional sum held
against both directions, the NIC's speed taken from the fabric (a node's NICs shared out) or assumed from
the printed link type, and the bench through `benches` and `show bench:N`.

The outputs are invented, in the layout the parser tests use (tests/test_parser_perftest.py: perftest
26.01's header and report formats).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import tracelog.api as api
from tests.conftest import SAMPLES
from tests.test_parser_perftest import BW_GBIT, BW_MIB, DASHES, header
from tracelog.cli import cli
from tracelog.model.nic import nic_plateau
from tracelog.store import Store

SAMPLE = SAMPLES / "perftest_ib_write_bw_ndr_8nics.txt"


def run(
    device: str, gbits: float, title: str = "RDMA_Write BW Test", size: int = 1048576, link: str = "IB"
) -> str:
    rate = gbits * 1e9 / 8 / size / 1e6
    return (
        f"gpu@node-a:~$ ib_write_bw -d {device} -s {size} -F --report_gbits node-b\n"
        + header(title, device=device, link=link)
        + BW_GBIT
        + f" {size:<7}    5000             {gbits * 1.001:<7.2f}            {gbits:<7.2f}\t\t     {rate:.6f}\n"
        + DASHES
    )


def flags_of(db: Path | str, text: str, tmp_path: Path, **given: str) -> list[tuple]:
    path = tmp_path / "perftest.txt"
    path.write_text(text)
    (result,) = api.ingest(db, [str(path)], **given)
    assert not isinstance(result, api.IngestFailure), result
    with Store(db) as store:
        return store.con.execute(
            "SELECT b.bench_id, f.severity, round(f.measured, 3), round(f.expected, 3), f.message FROM flags f "
            "JOIN benches b ON b.bench_id = f.subject_id WHERE f.rule = 'nic_bandwidth' ORDER BY f.flag_id"
        ).fetchall()


def test_the_plateau_is_the_line_rate_less_the_headers_of_each_packet() -> None:
    ndr = nic_plateau(50.0, 4096, "IB", bidirectional=False)
    assert ndr.plateau_gbps == pytest.approx(50 * 4096 / (4096 + 26))  # 49.685 GB/s, 397.5 Gb/s
    assert ndr.plateau_gbps * 8 == pytest.approx(397.48, abs=0.01)
    roce = nic_plateau(50.0, 1024, "Ethernet", bidirectional=False)  # RoCE at a 1500-byte Ethernet MTU
    assert roce.wire_efficiency == pytest.approx(1024 / 1106)
    both = nic_plateau(50.0, 4096, "IB", bidirectional=True)
    assert both.allowed_gbps == 100.0 and both.plateau_gbps == pytest.approx(2 * ndr.plateau_gbps)
    assert nic_plateau(25.0, None, "IB", False).mtu_bytes == 4096  # no Mtu line: ConnectX's largest
    # a published ConnectX-7 NDR run (392.34 Gb/s at 64 KiB) and Azure's NDR acceptance floor (375 Gb/s) both
    # clear the 90 % the flag asks for
    assert 392.34 / 8 / ndr.plateau_gbps == pytest.approx(0.987, abs=0.001)
    assert 375 / 8 / ndr.plateau_gbps > 0.9


def test_a_slow_nic_is_flagged_and_the_healthy_ones_are_not(any_db, tmp_path: Path) -> None:
    text = run("mlx5_0", 392.41) + run("mlx5_5", 215.31) + run("mlx5_6", 360.02)
    found = flags_of(any_db, text, tmp_path, fabric="ib-ndr-x8")
    # 215.31 Gb/s = 26.914 GB/s against 50 GB/s x 4096/4122 = 49.685 (one of the node's 8 NDR NICs);
    # 360.02 Gb/s is 90.6 %: under Azure's floor but over the flag's 90 %
    assert [row[:4] for row in found] == [(2, "warning", 26.914, 49.685)]
    assert found[0][4].startswith(
        "ib_write_bw on mlx5_5: 26.9 GB/s (215 Gb/s) at 1 MiB, 54% of the 49.7 GB/s"
    )
    assert "one direction: 50 GB/s (400 Gb/s) of ib-ndr-x8, one of its 8 NICs" in found[0][4]


def test_a_bidirectional_run_is_held_against_both_directions(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    title = "RDMA_Write Bidirectional BW Test"
    # 783.94 Gb/s summed: 98.6 % of 2 x 397.5, healthy; 420 Gb/s summed is 53 % of it, though above one
    # direction's 400: a -b run is never held against the one-way figure
    found = flags_of(
        db, run("mlx5_0", 783.94, title) + run("mlx5_1", 420.0, title), tmp_path, fabric="ib-ndr"
    )
    assert [row[:4] for row in found] == [(2, "warning", 52.5, 99.369)]
    assert "both directions summed: 2 x 50 GB/s (800 Gb/s) of ib-ndr" in found[0][4]


def test_without_a_fabric_the_speed_is_assumed_from_the_link_type(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    # an HDR port at 196 Gb/s: healthy against HDR, half of the NDR assumed when no fabric is named
    found = flags_of(db, run("mlx5_0", 196.12), tmp_path)
    assert [row[:2] for row in found] == [(1, "info")]
    assert "assumed" in found[0][4] and "ib-ndr, assumed from `Link type : IB`" in found[0][4]
    assert flags_of(tmp_path / "hdr.duckdb", run("mlx5_0", 196.12), tmp_path, fabric="ib-hdr-x8") == []


def test_roce_at_mtu_1024_is_held_to_its_own_efficiency(tmp_path: Path) -> None:
    # 100 GbE RoCE at RDMA MTU 1024: 12.5 GB/s x 1024/1106 = 11.573 GB/s; 85 Gb/s (10.625 GB/s) is 91.8 %
    text = run("mlx5_0", 85.0, link="Ethernet").replace("4096[B]", "1024[B]")
    assert flags_of(tmp_path / "t.duckdb", text, tmp_path, fabric="roce-100g") == []
    with Store(tmp_path / "t.duckdb") as store:
        (predicted,) = store.con.execute(
            "SELECT value FROM predictions WHERE metric = 'nic_plateau_gbps'"
        ).fetchone()
    assert predicted == pytest.approx(12.5 * 1024 / 1106)


def test_small_messages_alone_hold_no_plateau(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    text = run("mlx5_0", 84.33, size=4096)  # latency-bound by its size, not a slow NIC
    assert flags_of(db, text, tmp_path, fabric="ib-ndr") == []
    with Store(db) as store:
        assert store.scalar("SELECT count(*) FROM comparisons WHERE metric = 'nic_plateau_gbps'") == 0


def test_the_sample_through_benches_show_and_flags(tmp_path: Path) -> None:
    db = str(tmp_path / "t.duckdb")
    runner = CliRunner()
    result = runner.invoke(cli, ["--db", db, "ingest", str(SAMPLE)])
    assert result.exit_code == 0, result.output
    listed = runner.invoke(cli, ["--db", db, "benches", "--tool", "perftest", "--format", "csv"])
    lines = listed.output.strip().splitlines()
    assert len(lines) == 12  # 11 runs
    assert (
        sum(",ib_write_bw," in line for line in lines) == 10 and sum(",failed" in line for line in lines) == 1
    )
    shown = runner.invoke(cli, ["--db", db, "show", "bench:6", "--format", "json"])
    assert shown.exit_code == 0, shown.output

    parts = json.loads(shown.output)
    assert [(r["size_bytes"], round(r["bw_avg_gbps"], 4)) for r in parts["perftest"]] == [(1048576, 26.9138)]
    assert {r["metric"]: round(r["model"], 3) for r in parts["model"]} == {
        "nic_plateau_gbps": 49.685,
        "nic_line_rate_gbps": 50.0,
    }
    assert [f["rule"] for f in parts["flags"]] == ["nic_bandwidth"]
    assert {p["name"]: p["value"] for p in parts["params"]}["Device"] == "mlx5_5"
    with Store(db) as store:
        flags = store.con.execute("SELECT rule, severity, subject_id FROM flags ORDER BY flag_id").fetchall()
    assert flags == [("bench_incomplete", "critical", 7), ("nic_bandwidth", "warning", 6)]


def test_mib_per_second_lands_the_same_plateau(tmp_path: Path) -> None:
    # 46557.03 MiB/s is 48.819 GB/s: 98.3 % of NDR at MTU 4096
    text = (
        header("Send BW Test")
        + BW_MIB
        + " 65536      1000             46567.34            46557.03\t\t     0.744912\n"
    )
    with_dashes = text + DASHES
    assert flags_of(tmp_path / "t.duckdb", with_dashes, tmp_path, fabric="ib-ndr") == []
    with Store(tmp_path / "t.duckdb") as store:
        assert (
            store.scalar("SELECT round(ratio, 3) FROM comparisons WHERE metric = 'nic_plateau_gbps'") == 0.983
        )
