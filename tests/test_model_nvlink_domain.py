"""A GB200/GB300 NVL72 rack is one NVLink domain across 18 hosts of 4 GPUs (multi-node NVLink): the model's
node is the rack, for benches and runs alike, and what the domain spans is said among the assumptions.

The published figure is coreweave/nccl-tests#43 (72 ranks of a GB200 NVL72 rack); the one-host figures
of tests/test_model_nvls.py keep holding (B200 is not in a rack-wide domain)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracelog import api, hardware
from tracelog.analysis import inputs as run_inputs
from tracelog.errors import TracelogError
from tracelog.model.collectives import bench_placement, link_for, plateau_busbw
from tracelog.store import Store


def test_hosts_of_a_domain_and_their_nics() -> None:
    gb200 = hardware.gpu("gb200")
    assert hardware.domain_hosts(gb200, 4) == 18
    assert hardware.domain_hosts(gb200, 72) == 1  # given as the rack already (the fidelity rows)
    assert hardware.domain_hosts(gb200, 5) == 1  # hosts that do not tile a rack: left as they are
    assert hardware.domain_hosts(hardware.gpu("b200-sxm-180gb"), 8) == 1
    nics = hardware.domain_fabric(hardware.fabric_of("ib-ndr", 4), 18)
    assert (nics.id, nics.links, nics.scope) == ("ib-ndr-x72", 72, "node")
    assert nics.unidirectional_gbps == pytest.approx(72 * hardware.link("ib-ndr").unidirectional_gbps)


def test_a_rack_all_reduce_is_nvls_inside_one_domain() -> None:
    place, assumed = bench_placement(hardware.gpu("gb200"), 72, 18, 4, None)
    assert (place.ranks, place.nodes, place.fabric, place.nvls) == (72, 1, None, True)
    assert any("18 hosts of 4 gb200" in a and "NVLink domain" in a for a in assumed)
    busbw, algo = plateau_busbw("all_reduce", place)
    assert algo.name == "nvls"
    # coreweave/nccl-tests#43: 846.82 GB/s in place at 8 GiB on a GB200 NVL72 rack
    assert 0.8 < 846.82 / busbw < 1.2
    # two hosts of the rack: the 8-GPU NVLS figure, not two hosts' NICs (B200's 8-GPU board: 838)
    two, _ = plateau_busbw("all_reduce", bench_placement(hardware.gpu("gb200"), 8, 2, 4, None)[0])
    eight, _ = plateau_busbw("all_reduce", bench_placement(hardware.gpu("b200-sxm-180gb"), 8, 1, 8, None)[0])
    assert two == pytest.approx(eight)


def test_beyond_one_domain_the_model_says_it_does_not_know() -> None:
    with pytest.raises(TracelogError, match="20 NVLink domains"):
        bench_placement(hardware.gpu("gb200"), 1440, 360, 4, hardware.fabric_of("ib-ndr", 4))
    # a B200 pair of hosts still crosses its NICs
    place, _ = bench_placement(hardware.gpu("b200-sxm-180gb"), 16, 2, 8, None)
    assert place.nodes == 2 and place.fabric is not None


def test_a_run_on_rack_hosts_keeps_tensor_parallelism_on_nvlink() -> None:
    row = {
        "run_id": 1, "framework": "megatron", "layers": 32, "hidden": 8192, "heads": 64, "seq_len": 8192,
        "vocab": 128256, "tp": 8, "pp": 2, "dp": 9, "mbs": 1, "gbs": 144, "gpus": 144, "gpus_per_node": 4,
        "gpu_model": "gb200", "precision": "bf16", "fabric": "ib-ndr", "nics_per_node": 4,
    }  # fmt: skip
    got = run_inputs.build(row, {})
    assert got.gpus_per_node == 72 and got.fabric is not None and got.fabric.id == "ib-ndr-x72"
    assert any("NVLink domains of 72" in a for a in got.assumptions)
    assert link_for(8, got.gpus_per_node, got.gpu, got.fabric).id == "nvlink5"  # 8 ranks over 2 hosts
    plain = run_inputs.build({**row, "gpu_model": "b200-sxm-180gb", "gpus_per_node": 8}, {})
    assert plain.gpus_per_node == 8 and not any("NVLink domain" in a for a in plain.assumptions)


RACK = """\
# Invented: a GB200 NVL72 rack all_reduce in the shape nccl-tests prints with a shortened device list
# (the last rank only), its busbw made up around the published 839-847 GB/s (coreweave/nccl-tests#43).
# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank 71 Group  0 Pid  30211 on rack07-tray18 device  3 [0x01] NVIDIA GB200
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
  1073741824     268435456     float     sum      -1   3100.0  346.37  683.11      0   3090.0  347.49  685.32      0
  2147483648     536870912     float     sum      -1   5600.0  383.48  756.31      0   5580.0  384.85  759.02      0
  4294967296    1073741824     float     sum      -1    10100  425.25  838.68      0    10090  425.67  839.51      0
  8589934592    2147483648     float     sum      -1    20200  425.24  838.67      0    20150  426.30  840.76      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 780.08
#
"""


def test_a_rack_bench_is_held_to_the_domain(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "nvl72.txt"
    path.write_text(RACK)
    api.ingest(store, [str(path)])
    ranks, nodes, per_node = store.con.execute("SELECT ranks, nodes, gpus_per_node FROM benches").fetchone()
    assert (ranks, nodes, per_node) == (72, 18, 4)
    measured, predicted = store.con.execute(
        "SELECT measured, predicted FROM comparisons WHERE subject_kind = 'collective' AND metric = 'peak_busbw_gbps'"
    ).fetchone()
    assert measured == pytest.approx(838.68)  # the out-of-place peak
    assert 0.8 < measured / predicted < 1.0  # the NVLS plateau of 72 GPUs, not a missing prediction
    detail = store.scalar(
        "SELECT detail FROM predictions WHERE subject_kind = 'collective' AND metric = 'inputs'"
    )
    assert "NVLink domain" in detail
    assert store.scalar("SELECT count(*) FROM flags WHERE rule = 'low_bandwidth'") == 0


def test_the_planner_takes_a_rack_as_its_node() -> None:
    llama70b = dict(
        gpus=144, gpu="gb200", layers=80, hidden=8192, heads=64, seq_len=8192, vocab=128256, gbs=144,
        ffn_hidden=28672, query_groups=8, swiglu=True, recompute="none", sequence_parallel=True,
        distributed_optimizer=True, fabric="ib-ndr", top=None,
    )  # fmt: skip
    frame = api.plan(None, api.PlanRequest(**llama70b, gpus_per_node=4, nics_per_node=4))
    assert any("NVLink domains of 72 GPUs" in note for note in frame.attrs["notes"])
    assert any("ib-ndr-x72" in note for note in frame.attrs["notes"])  # the 18 trays' NICs together
    # TP 8 over two trays of the rack: on NVLink, as fast as the same layout planned with the rack as a node
    rack = api.plan(None, api.PlanRequest(**llama70b, gpus_per_node=72, nics_per_node=72))
    key = ["tp", "pp", "dp", "mbs"]
    both = frame.merge(rack, on=key, suffixes=("", "_rack"))
    assert len(both) > 0 and (both["tp"] == 8).any()
    assert (both["pred_sec_per_it"] - both["pred_sec_per_it_rack"]).abs().max() < 1e-9
