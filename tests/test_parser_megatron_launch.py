"""How a Megatron job was launched, where its log says so: an MPI launch's ranks as the GPUs."""

from __future__ import annotations

import pytest

from tests.test_parser_megatron_newest import collect


@pytest.mark.parametrize("fast", [True, False])
def test_an_mpi_launch_gives_the_gpus_where_no_world_size_is_printed(fast: bool) -> None:
    """A job launched by `mpirun --np 8` (each process one of Megatron's ranks, as Megatron-LM's MPI
    scripts run it under Singularity) prints no world size in a paste that starts at its command: the
    ranks are its GPUs, the per-node count its GPUs per node. A printed world size wins, and a launch of
    torchrun per node under mpirun says no GPU count (lines in those shapes; figures invented)."""
    launch = (
        "$ mpirun --np 16 --npernode 8 singularity exec --nv ./pytorch.sif bash train_gpt3_mpi.sh ./ckpt\n"
    )
    step = (
        " [2024-09-03 15:54:54] iteration       10/  500000 | consumed samples:        10240 | elapsed time per "
        "iteration (ms): 13035.3 | learning rate: 1.000000E-05 | global batch size:  1024 | lm loss: 9.1E+00 |\n"
    )
    out = collect(launch + step, fast)
    (run,) = out["runs"]
    assert (run["gpus"], run["gpus_per_node"]) == (16, 8)
    assert {p["name"]: p["value"] for p in run["run_params"]}["mpi_ranks"] == "16"
    assert "unparsed" not in out
    world = "using world size: 32, data-parallel size: 4, context-parallel size: 1, tensor-model-parallel size: 8\n"
    (run,) = collect(launch + world + step, fast)["runs"]
    assert run["gpus"] == 32 and "gpus_per_node" not in run
    per_node = "mpirun -np 2 --npernode 1 torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 8\n"
    out = collect(per_node + step, fast)
    assert "gpus" not in out["runs"][0] and [u["line_no"] for u in out["unparsed"]] == [1]


@pytest.mark.parametrize("fast", [True, False])
def test_torchrun_rank_prefixes_are_kept_as_ranks_seen_not_as_the_gpu_count(fast: bool) -> None:
    """A Megatron-Bridge job under torchrun whose ranks each print PyTorch's warning at exit behind their
    `[rankN]:` prefix, out of order (the shape of a NeMo 25.09 log, NVIDIA-NeMo/Megatron-Bridge#1500): the
    highest rank plus one is how many ranks the log shows at least, kept as `ranks_seen`; a log may show
    only some ranks, so it is no GPU count, and where a world size is printed it adds nothing. Invented lines in
    that shape."""
    step = (
        " [2025-10-06 03:27:02] iteration       10/      10 | consumed samples:          640 | elapsed time per "
        "iteration (ms): 4650.2 | learning rate: 1.000000E-05 | global batch size:    64 | lm loss: 9.1E+00 |\n"
    )
    warning = (
        "[rank{}]:[W1006 03:29:2{}.926188014 ProcessGroupNCCL.cpp:1505] Warning: WARNING: destroy_process_group() "
        "was not called before program exit, which can leak resources.\n"
    )
    text = step + "".join(warning.format(rank, rank) for rank in (0, 2, 1, 5, 3, 4))
    (run,) = collect(text, fast)["runs"]
    assert {p["name"]: p["value"] for p in run["run_params"]}["ranks_seen"] == "6"
    assert "gpus" not in run
    world = "using world size: 8, data-parallel size: 8, context-parallel size: 1, tensor-model-parallel size: 1\n"
    for known in (step, world + text):  # no prefix, or a world size printed: nothing to add
        (run,) = collect(known, fast)["runs"]
        assert "ranks_seen" not in {p["name"] for p in run.get("run_params", [])}
