"""NVLink SHARP (NCCL's NVLS and NVLSTree) in the bench model, and what a bench's log says NCCL could choose.

The figures the tests check against are published measurements named beside them; the model's one
constant per GPU generation comes from another one (tracelog/model/nvls.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracelog import api
from tracelog.hardware import fabric_of, gpu
from tracelog.model.collectives import bench_placement, plateau_busbw, predict_nccl
from tracelog.model.nvls import NcclOffer, allowed_algorithms, nccl_version, offer_from
from tracelog.store import Store


def _plateau(gpu_id: str, nodes: int = 1, allowed: frozenset[str] | None = None, fabric=None):
    place, _ = bench_placement(gpu(gpu_id), 8 * nodes, nodes, 8, fabric, allowed)
    return plateau_busbw("all_reduce", place)


@pytest.mark.parametrize(
    ("gpu_id", "published", "source"),
    [
        ("h200-sxm-141gb", 475, "NVIDIA/nccl-tests#272, 8 x H200, NCCL 2.20.3"),
        ("h800-sxm5-80gb", 215, "NVIDIA/nccl#1374, 8 x H800"),
        ("b200-sxm-180gb", 830, "NVIDIA/nccl#1807, 8 x B200 '830+', NCCL 2.27.1"),
    ],
)
def test_one_node_all_reduce_reduces_in_the_switch(gpu_id: str, published: float, source: str) -> None:
    busbw, algo = _plateau(gpu_id)
    assert algo.name == "nvls"
    assert abs(busbw / published - 1) < 0.03, source


def test_the_ring_alone_where_nccl_is_told_so_or_too_old() -> None:
    nvls, _ = _plateau("h100-sxm5-80gb")
    ring, algo = _plateau("h100-sxm5-80gb", allowed=NcclOffer(algo="Ring").allowed("all_reduce"))
    assert algo.name == "ring" and ring == pytest.approx(0.78 * 450)
    assert nvls == pytest.approx(275 / 450 * 450 * 2 * 7 / 8)  # ~480 (NVIDIA/nccl-tests#212)
    old, algo = _plateau("h100-sxm5-80gb", allowed=NcclOffer(version=(2, 16)).allowed("all_reduce"))
    assert algo.name == "ring" and old == ring
    off, algo = _plateau("h100-sxm5-80gb", allowed=NcclOffer(nvls_enable="0").allowed("all_reduce"))
    assert algo.name == "ring"
    # A100 has no NVLink SHARP, and PCIe cards with a bridge have no switch
    assert _plateau("a100-sxm4-80gb")[1].name == "ring"
    assert _plateau("h100-pcie-80gb")[1].name == "ring"


def test_nvlstree_across_nodes_is_bounded_by_the_nics() -> None:
    ndr = fabric_of("ib-ndr-x8", None)
    two, algo = _plateau("h100-sxm5-80gb", 2, fabric=ndr)
    four, algo4 = _plateau("h100-sxm5-80gb", 4, fabric=ndr)
    assert algo.name == algo4.name == "nvlstree"
    # two nodes: the switch bounds it (each byte crosses the NICs once per direction); four: half the NICs
    assert two == pytest.approx(275 * 2 * 15 / 16)
    assert four == pytest.approx(0.96 * 400 / 2 * 2 * 31 / 32)
    # 8 x H100 over 8 x 400 Gb/s measured 430 GB/s on two nodes and 320 on four (NVIDIA/nccl#1221)
    assert abs(430 / two - 1) < 0.2 and abs(320 / four - 1) < 0.2


def test_small_messages_stay_on_the_ring() -> None:
    place, _ = bench_placement(gpu("h100-sxm5-80gb"), 8, 1, 8, None)
    assert predict_nccl("all_reduce", 64 * 1024, place).algorithm == "ring"  # NVLS pays 25 us first
    assert predict_nccl("all_reduce", 2**32, place).algorithm == "nvls"


@pytest.mark.parametrize(
    ("setting", "op", "expected"),
    [
        ("Ring", "all_reduce", {"ring"}),
        ("ring,TREE", "all_gather", {"ring", "tree"}),
        ("^NVLS,nvlstree", "all_reduce", {"ring", "tree", "collnetdirect", "collnetchain", "pat"}),
        ("ring;allreduce:nvls", "all_reduce", {"nvls"}),
        ("ring;allreduce:nvls", "all_gather", {"ring"}),
        ("allreduce:tree", "broadcast", None),
        (None, "all_reduce", None),
    ],
)
def test_nccl_algo_is_read_as_nccl_parses_it(setting, op, expected) -> None:
    got = allowed_algorithms(setting, op)
    assert (set(got) if got is not None else None) == expected


def test_versions_and_commands() -> None:
    assert nccl_version("2.23.4+cuda12.6") == (2, 23)
    assert nccl_version("22304") == (2, 23)
    assert nccl_version("2708") == (2, 7)  # nccl-library before 2.9
    offer = offer_from(
        {
            "command": "mpirun -np 16 -x NCCL_DEBUG=INFO -x NCCL_ALGO=Ring ./build/all_reduce_perf -b 8 -e 8G",
            "nccl-library": "21602",
        }
    )
    assert offer == NcclOffer(version=(2, 16), algo="Ring", nvls_enable=None)
    # NCCL's own line wins over the command; its parameter printout ends with a dot
    assert offer_from({"command": "NCCL_ALGO=Tree ./all_reduce_perf", "env NCCL_ALGO": "NVLS"}).algo == "NVLS"
    assert offer_from({"env NCCL_NVLS_ENABLE": "0."}).nvls_enable == "0"
    # nccl-tests' JSON (-J): its version and its environment's NCCL_* variables
    assert offer_from({"nccl_version": "22703", "NCCL_ALGO": "Tree"}) == NcclOffer((2, 27), "Tree", None)


ONE_NODE = """\
# nccl-tests version 2.13.9 nccl-headers=21903 nccl-library=21903
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 8 minBytes 1073741824 maxBytes 4294967296 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
{devices}
dgx01:1201:1201 [0] NCCL INFO NCCL_ALGO set by environment to {algo}
dgx01:1201:1207 [1] NCCL INFO NCCL_ALGO set by environment to {algo}
dgx01:1201:1201 [0] NCCL INFO comm 0x55d0c0 rank 0 nranks 8 cudaDev 0 busId 18000 - Init COMPLETE
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
  1073741824     268435456     float     sum      -1   {t1}  {a1}  {b1}      0   {t1}  {a1}  {b1}      0
  2147483648     536870912     float     sum      -1   {t2}  {a2}  {b2}      0   {t2}  {a2}  {b2}      0
  4294967296    1073741824     float     sum      -1   {t3}  {a3}  {b3}      0   {t3}  {a3}  {b3}      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : {b3}
#
"""


def _one_node(algbw: float, algo: str) -> str:
    """An invented 8 x H100 all_reduce at a flat `algbw`, NCCL told `NCCL_ALGO=algo` (printed by ranks 0, 1)."""
    devices = "\n".join(
        f"#  Rank {r:2d} Group  0 Pid   1201 on      dgx01 device {r:2d} [0x{r:02x}] NVIDIA H100 80GB HBM3"
        for r in range(8)
    )
    fill = {"devices": devices, "algo": algo}
    for i, size in enumerate((2**30, 2**31, 2**32), start=1):
        t = size / (algbw * 1e3)
        fill |= {f"t{i}": f"{t:.1f}", f"a{i}": f"{algbw:.2f}", f"b{i}": f"{algbw * 1.75:.2f}"}
    return ONE_NODE.format(**fill)


def test_a_bench_held_to_the_algorithm_its_log_forced(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "ar_ring.txt"
    path.write_text(_one_node(200.0, "Ring"))  # 350 GB/s busbw: a healthy ring
    api.ingest(store, [str(path)])
    (bench,) = store.con.execute("SELECT bench_id FROM benches").fetchone()
    params = dict(
        store.con.execute("SELECT name, value FROM bench_params WHERE bench_id = ?", [bench]).fetchall()
    )
    assert params["env NCCL_ALGO"] == "Ring"
    assert (
        store.scalar("SELECT count(*) FROM bench_params WHERE name = 'env NCCL_ALGO'") == 1
    )  # 2 ranks said it
    assert store.scalar("SELECT count(*) FROM unparsed WHERE text LIKE '%set by environment%'") == 0
    measured, predicted = store.con.execute(
        "SELECT measured, predicted FROM comparisons WHERE subject_kind = 'collective' AND metric = 'peak_busbw_gbps'"
    ).fetchone()
    assert predicted == pytest.approx(0.78 * 450)  # not NVLS's 481: NCCL was not allowed it
    assert measured / predicted == pytest.approx(350 / 351, rel=1e-3)
    detail = store.scalar(
        "SELECT detail FROM predictions WHERE subject_kind = 'collective' AND metric = 'model_plateau_busbw_gbps'"
    )
    assert '"NCCL_ALGO": "Ring"' in detail and '"nccl_version": "2.19"' in detail


def test_an_unforced_bench_is_held_to_nvls(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "ar_default.txt"
    text = "\n".join(line for line in _one_node(272.0, "x").splitlines() if "NCCL_ALGO" not in line)
    path.write_text(text + "\n")
    api.ingest(store, [str(path)])
    measured, predicted = store.con.execute(
        "SELECT measured, predicted FROM comparisons WHERE subject_kind = 'collective' AND metric = 'peak_busbw_gbps'"
    ).fetchone()
    assert predicted == pytest.approx(275 * 1.75)
    assert measured == pytest.approx(476.0)
    assumptions = store.scalar(
        "SELECT detail FROM predictions WHERE subject_kind = 'collective' AND metric = 'inputs'"
    )
    assert assumptions is None  # the header's nccl-library=21903 says NCCL 2.19: nothing assumed
    # at NVLS's plateau: no low-bandwidth flag, as there would be none at the ring's either
    assert store.scalar("SELECT count(*) FROM flags WHERE rule = 'low_bandwidth'") == 0


def test_nvls_without_a_printed_version_is_said_to_be_assumed(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "ar_old_tests.txt"
    lines = _one_node(272.0, "x").splitlines()
    text = "\n".join(line for line in lines if "NCCL_ALGO" not in line and "nccl-tests version" not in line)
    path.write_text(text + "\n")
    api.ingest(store, [str(path)])
    detail = store.scalar(
        "SELECT detail FROM predictions WHERE subject_kind = 'collective' AND metric = 'inputs'"
    )
    assert "NCCL 2.17 or later (NVLS" in detail
