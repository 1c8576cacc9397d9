"""NCCL's communicator buffers in the memory model: which communicators a process holds, which NCCL
releases allocate their buffers at start, and the `NCCL version` line of a log that decides it.

The NCCL lines put before the bundled Megatron-LM sample are written as NCCL prints them with
NCCL_DEBUG=INFO behind the launcher's `0: ` prefix; host names are invented."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SAMPLES
from tracelog import api
from tracelog.model.flops import ModelConfig, TrainConfig
from tracelog.model.memory import (
    NCCL_COMMUNICATOR_BYTES,
    MemoryOptions,
    communicator_sizes,
    memory_per_gpu,
    nccl_bytes,
    nccl_connects_eagerly,
)

MIB = 2**20
MEGATRON = (SAMPLES / "megatron_lm_llama3_8b_h100.log").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("version", "eager"),
    [
        ("2.7.8+cuda10.2", True),
        ("2.10.3+cuda11.3", True),
        ("2.21.5", True),
        ("2.22.3", False),  # lazy connection establishment, June 2024
        ("2.27.5+cuda12.9", False),
        ("3.0.1", False),
        (None, False),
        ("unknown", False),
    ],
)
def test_releases_before_2_22_allocate_buffers_at_start(version: str | None, eager: bool) -> None:
    assert nccl_connects_eagerly(version) is eager


def test_megatron_holds_a_communicator_per_parallel_dimension() -> None:
    """BLOOM's layout (TP4 PP12 DP8): the world, tensor, data, pipeline and model-parallel groups on every
    stage, and the two-rank embedding group on the first and last stage only."""
    train = TrainConfig(gbs=2048, mbs=2, tp=4, pp=12, dp=8, framework="megatron-deepspeed")
    assert sorted(communicator_sizes(train, "first")) == [2, 4, 8, 12, 48, 384]
    assert sorted(communicator_sizes(train, "middle")) == [4, 8, 12, 48, 384]
    assert nccl_bytes(train, "first") == 5 * 688 * MIB + 544 * MIB
    assert nccl_bytes(train, "middle") == 5 * 688 * MIB


def test_plain_data_parallel_and_one_gpu() -> None:
    """DeepSpeed ZeRO on 16 GPUs runs everything on the world's group; one GPU communicates with no one."""
    assert communicator_sizes(TrainConfig(gbs=16, mbs=1, dp=16, framework="deepspeed")) == [16]
    assert communicator_sizes(TrainConfig(gbs=2, mbs=2, framework="megatron")) == []
    # a narrower dimension gets its own group outside Megatron too
    assert sorted(communicator_sizes(TrainConfig(gbs=8, mbs=1, tp=2, dp=4, framework="deepspeed"))) == [
        2,
        4,
        8,
    ]
    assert NCCL_COMMUNICATOR_BYTES["pair"] < NCCL_COMMUNICATOR_BYTES["group"]


def test_buffers_count_in_the_total_not_in_what_the_allocator_reserves() -> None:
    cfg = ModelConfig(layers=24, hidden=2048, heads=16, seq_len=2048, vocab=50304)
    train = TrainConfig(gbs=64, mbs=1, tp=2, pp=2, dp=4, recompute="full", framework="megatron")
    lazy = memory_per_gpu(cfg, train, MemoryOptions())
    eager = memory_per_gpu(cfg, train, MemoryOptions(nccl_eager=True))
    assert lazy.nccl == 0
    assert eager.nccl == nccl_bytes(train, "first") > 0
    assert eager.reserved == pytest.approx(lazy.reserved)
    assert eager.total == pytest.approx(lazy.total + eager.nccl)


def test_near_capacity_the_allocator_yields_the_room_nccl_takes() -> None:
    """The caching allocator frees cached blocks before it fails, so its reserve shrinks by what NCCL
    holds outside it, down to its floor."""
    cfg = ModelConfig(layers=24, hidden=2048, heads=16, seq_len=2048, vocab=50304)
    train = TrainConfig(gbs=64, mbs=1, tp=2, pp=2, dp=4, recompute="full", framework="megatron")
    base = memory_per_gpu(cfg, train, MemoryOptions())
    capacity = base.allocated + base.cuda_context + 0.1 * base.allocated  # room for a 10 % reserve
    lazy = memory_per_gpu(cfg, train, MemoryOptions(capacity_bytes=capacity))
    eager = memory_per_gpu(cfg, train, MemoryOptions(capacity_bytes=capacity, nccl_eager=True))
    assert lazy.total == pytest.approx(capacity)
    assert eager.allocator < lazy.allocator
    assert eager.total >= capacity


def _nccl_lines(version: str) -> str:
    prefix = "0: gpu-node-01:4247:4247 [0] NCCL INFO"
    return (
        f"{prefix} Bootstrap : Using ib0:10.148.8.41<0>\n"
        f"{prefix} NCCL version {version}\n"
        f"{prefix} NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.148.8.41<0>\n"
    )


def _nccl_mib(tmp_path: Path, text: str) -> list[float]:
    log = tmp_path / "run.log"
    log.write_text(text, encoding="utf-8")
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    frame = api.sql(db, "SELECT value FROM predictions WHERE metric = 'nccl_mib' ORDER BY subject_id")
    return [float(v) for v in frame["value"]]


def test_a_log_that_names_an_eager_nccl_gets_its_buffers(tmp_path: Path) -> None:
    """The sample's runs are TP4 PP1 DP16 on 64 H100s: the world (64), tensor (4), data (16) and
    model-parallel (4) groups, 4 x 688 MiB."""
    assert _nccl_mib(tmp_path, _nccl_lines("2.18.1+cuda12.1") + MEGATRON) == [4 * 688.0, 4 * 688.0]
    db = tmp_path / "t.duckdb"
    facts = api.sql(db, "SELECT DISTINCT value, detail FROM hardware_sources WHERE fact = 'nccl_version'")
    assert facts.to_dict("records") == [{"value": "2.18.1", "detail": "line 2 (NCCL)"}]


@pytest.mark.parametrize("text", [_nccl_lines("2.23.4+cuda12.6") + MEGATRON, MEGATRON])
def test_a_lazy_or_unnamed_nccl_adds_nothing(tmp_path: Path, text: str) -> None:
    assert _nccl_mib(tmp_path, text) == [0.0, 0.0]
