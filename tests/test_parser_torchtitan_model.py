"""What torchtitan's log says only by name, read for the model: the shape of a flavour, FSDP as ZeRO-3, the
activation checkpointing mode, torch.compile of the blocks and of the loss, and the checkpointer's saves. The
samples are invented, in the shape of torchtitan's own lines (train.py, parallelize_llama.py,
components/checkpoint.py, components/loss.py), but one, published, which says where it comes from."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import rows_by_table
from tracelog import api
from tracelog.parsers import torchtitan
from tracelog.parsers.torchtitan_flavors import flavor_shape

# invented: a 70B run on 256 GPUs (FSDP 32 x TP 8), the 2025 start lines, no model arguments printed
SEVENTY_B = """\
+ torchrun --nproc_per_node=8 -m torchtitan.train --job.config_file ./train_configs/llama3_70b.toml
[rank0]:[titan] 2025-06-12 10:00:01,100 - root - INFO - Starting job: Llama 3 70B training
[rank0]:[titan] 2025-06-12 10:00:02,200 - root - INFO - Building device mesh with parallelism: pp=1, dp_replicate=1, dp_shard=32, cp=1, tp=8
[rank0]:[titan] 2025-06-12 10:00:09,300 - root - INFO - Building llama3 70B
[rank0]:[titan] 2025-06-12 10:00:10,100 - root - INFO - CUDA capacity: NVIDIA H100 80GB HBM3 with 79.11GiB memory
[rank0]:[titan] 2025-06-12 10:00:10,200 - root - INFO - Model llama3 70B size: 70,553,706,496 total parameters
[rank0]:[titan] 2025-06-12 10:00:10,250 - root - INFO - Compiling the loss function with torch.compile
[rank0]:[titan] 2025-06-12 10:00:10,300 - root - INFO - Applied Tensor Parallelism to the model
[rank0]:[titan] 2025-06-12 10:00:10,400 - root - INFO - Applied selective activation checkpointing to the model
[rank0]:[titan] 2025-06-12 10:00:10,500 - root - INFO - Compiling each TransformerBlock with torch.compile
[rank0]:[titan] 2025-06-12 10:00:10,600 - root - INFO - Applied FSDP to the model
[rank0]:[titan] 2025-06-12 10:00:11,000 - root - INFO - Trainer is initialized with 16,384 tokens per DP rank, 524,288 tokens per train step, gradient accumulation steps 1, maximum context length 8192, total steps 1000 (warmup 200)
[rank0]:[titan] 2025-06-12 10:00:40,000 - root - INFO - step:  1  loss: 12.2500  grad_norm: 20.1000  memory: 60.10GiB(75.97%)  tps: 180  tflops: 85.2  mfu: 8.61%
[rank0]:[titan] 2025-06-12 10:01:11,000 - root - INFO - step: 10  loss:  9.9000  grad_norm:  4.0000  memory: 70.20GiB(88.74%)  tps: 600  tflops: 284.0  mfu: 28.72%
[rank0]:[titan] 2025-06-12 10:01:45,400 - root - INFO - step: 20  loss:  8.2000  grad_norm:  2.1000  memory: 70.20GiB(88.74%)  tps: 610  tflops: 288.7  mfu: 29.19%
[rank0]:[titan] 2025-06-12 10:01:45,900 - root - INFO - Saving the checkpoint (or staging if async is enabled).
[rank0]:[titan] 2025-06-12 10:02:21,300 - root - INFO - Finished saving the checkpoint (or staging if async is enabled)in 35.40 seconds.
[rank0]:[titan] 2025-06-12 10:02:55,700 - root - INFO - step: 30  loss:  7.5000  grad_norm:  1.4000  memory: 70.20GiB(88.74%)  tps: 605  tflops: 286.3  mfu: 28.95%
[rank12]:[rank12]:[E612 10:13:00.500112651 ProcessGroupNCCL.cpp:632] [Rank 12] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=812, OpType=_REDUCE_SCATTER_BASE) ran for 600084 milliseconds before timing out.
"""

# invented: an 8B run with DDP, full checkpointing (the 2026 class name) and one with layer-frequency SAC
EIGHT_B_DDP_FULL = """\
[rank0]:[titan] 2026-02-01 08:00:01,000 - root - INFO - Building device mesh with parallelism: pp=1, dp_replicate=8, dp_shard=1, cp=1, tp=1
[rank0]:[titan] 2026-02-01 08:00:05,000 - root - INFO - Building llama3 8B
[rank0]:[titan] 2026-02-01 08:00:06,000 - root - INFO - Applied FullAC activation checkpointing to the model
[rank0]:[titan] 2026-02-01 08:00:06,100 - root - INFO - Applied DDP to the model
[rank0]:[titan] 2026-02-01 08:00:07,000 - root - INFO - Trainer is initialized with local batch size 2, global batch size 16, gradient accumulation steps 1, sequence length 8192, total steps 100 (warmup 10)
[rank0]:[titan] 2026-02-01 08:00:20,000 - root - INFO - step:  1  loss: 12.2500  grad_norm: 15.0  memory: 50.00GiB(63.20%)  tps: 3,000  tflops: 180.0  mfu: 18.20%
[rank0]:[titan] 2026-02-01 08:00:50,000 - root - INFO - step: 10  loss:  9.8000  grad_norm:  4.0  memory: 55.00GiB(69.52%)  tps: 4,900  tflops: 294.0  mfu: 29.73%
"""
LAYER_SAC = """\
+ torchrun --nproc_per_node=8 -m torchtitan.train --job.config_file llama3_8b.toml --activation_checkpoint.selective_ac_option 2
[rank0]:[titan] 2025-03-01 08:00:01,000 - root - INFO - Building device mesh with parallelism: pp=1, dp_replicate=1, dp_shard=8, cp=1, tp=1
[rank0]:[titan] 2025-03-01 08:00:05,000 - root - INFO - Building llama3 8B
[rank0]:[titan] 2025-03-01 08:00:06,000 - root - INFO - Applied selective activation checkpointing to the model
[rank0]:[titan] 2025-03-01 08:00:20,000 - root - INFO - step:  1  loss: 12.2500  grad_norm: 15.0  memory: 50.00GiB(63.20%)  tps: 3,000  tflops: 180.0  mfu: 18.20%
[rank0]:[titan] 2025-03-01 08:00:50,000 - root - INFO - step: 10  loss:  9.8000  grad_norm:  4.0  memory: 55.00GiB(69.52%)  tps: 4,900  tflops: 294.0  mfu: 29.73%
"""


def test_flavours_give_the_shapes_of_torchtitans_llama3_configs() -> None:
    # FeedForward's width: int(2 * 4 * dim / 3) * multiplier, rounded up to multiple_of
    for name, dim, multiplier, multiple in (("llama3 8B", 4096, 1.3, 1024), ("llama3 70B", 8192, 1.3, 4096),
                                            ("Llama3  405b", 16384, 1.2, 4096)):  # fmt: skip
        shape = flavor_shape(name)
        assert shape is not None
        ffn = int(multiplier * int(2 * 4 * dim / 3))
        assert shape["ffn_hidden"] == multiple * -(-ffn // multiple)
        assert shape["hidden"] == dim and shape["vocab"] == 128256 and shape["swiglu"]
    assert flavor_shape("llama3 debugmodel") is None and flavor_shape("") is None


def test_a_seventy_b_run_gets_its_shape_fsdp_and_per_op_checkpointing(tmp_path: Path) -> None:
    (run,) = rows_by_table(torchtitan.parse, SEVENTY_B)["runs"]
    assert (run["layers"], run["hidden"], run["heads"], run["query_groups"], run["ffn_hidden"]) == (
        80, 8192, 64, 8, 28672
    )  # fmt: skip
    assert (run["zero_stage"], run["recompute"], run["mbs"], run["gbs"], run["dp"], run["tp"]) == (
        3, "op", 2, 64, 32, 8
    )  # fmt: skip
    params = {p["name"]: p["value"] for p in run["run_params"]}
    assert params["torch_compile"] == "True" and params["data_parallel"] == "FSDP"

    log = tmp_path / "titan70b.log"
    log.write_text(SEVENTY_B)
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    predicted = api.sql(
        db, "SELECT value FROM predictions WHERE subject_kind = 'run' AND metric = 'sec_per_it'"
    )
    assert len(predicted) == 1 and predicted["value"].iloc[0] > 0
    kinds = api.sql(db, "SELECT kind FROM events ORDER BY line_no")["kind"].tolist()
    assert kinds == ["checkpoint_saving", "checkpoint_saved", "timeout"]
    # the watchdog's timeout: the save names no step, so the flag names the last step logged before it
    message = api.sql(db, "SELECT message FROM flags WHERE severity = 'critical'")["message"].iloc[0]
    assert message.endswith("The last checkpoint saved before it: iteration 20 (line 17).")


def test_ddp_full_checkpointing_and_layer_frequency_sac() -> None:
    (run,) = rows_by_table(torchtitan.parse, EIGHT_B_DDP_FULL)["runs"]
    assert (run["layers"], run["zero_stage"], run["recompute"], run["dp"]) == (32, 0, "full", 8)
    # every second layer checkpointed whole is not the per-operation policy: no mode is assumed
    (run,) = rows_by_table(torchtitan.parse, LAYER_SAC)["runs"]
    assert run["zero_stage"] == 3 and "recompute" not in run


@pytest.mark.parametrize("recompute", ["op", "full"])
def test_the_run_and_the_configuration_alone_predict_alike(tmp_path: Path, recompute: str) -> None:
    text = SEVENTY_B if recompute == "op" else SEVENTY_B.replace("selective activation", "full activation")
    log = tmp_path / "t.log"
    log.write_text(text)
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    stored = api.sql(
        db, "SELECT value FROM predictions WHERE subject_kind = 'run' AND metric = 'sec_per_it'"
    )["value"].iloc[0]
    config = dict(
        layers=80, hidden=8192, heads=64, query_groups=8, ffn_hidden=28672, swiglu=True, seq_len=8192,
        vocab=128256, gbs=64, mbs=2, dp=32, tp=8, gpus=256, zero_stage=3, recompute=recompute,
        framework="torchtitan", gpu_model="h100-sxm5-80gb",
    )  # fmt: skip
    # the log compiles its blocks (`Compiling each TransformerBlock with torch.compile`): so does the
    # configuration, and an eager one is slower
    compiled = api.what_if(
        None, None, config, attention_backend="flash", run_params={"torch_compile": "True"}
    )
    alone = float(compiled.loc[compiled["metric"] == "sec_per_it", "value"].iloc[0])
    assert stored == pytest.approx(alone, rel=1e-9)
    eager = api.what_if(None, None, config, attention_backend="flash")
    assert float(eager.loc[eager["metric"] == "sec_per_it", "value"].iloc[0]) > stored


def train_of(row: dict, params: dict[str, str]):
    """The model's layout for a runs-table row and its parameters, as a stored run gets it."""
    from tracelog.analysis import inputs as run_inputs
    from tracelog.analysis.predictions import infer

    return infer(run_inputs.build(row, params)).train


# a torchtitan Llama 3 8B run on 8 GPUs with FSDP2, as the runs table holds it
ROW_8B = {
    "run_id": 1, "framework": "torchtitan", "layers": 32, "hidden": 4096, "heads": 32, "query_groups": 8,
    "ffn_hidden": 14336, "swiglu": True, "seq_len": 8192, "vocab": 128256, "gbs": 16, "mbs": 2, "dp": 8,
    "gpus": 8, "zero_stage": 3, "precision": "bf16", "gpu_model": "h100-sxm5-80gb",
}  # fmt: skip


def test_fsdp2_overlaps_its_gathers_and_reductions() -> None:
    row = ROW_8B

    train = train_of(row, {})
    assert train is not None and train.overlap_grad_reduce and train.overlap_param_gather
    # DDP (ZeRO 0) in torchtitan, or ZeRO-3 in another framework, says nothing of overlap by itself
    assert not train_of(row | {"zero_stage": 0}, {}).overlap_param_gather
    assert not train_of(row | {"framework": "deepspeed"}, {}).overlap_param_gather


def test_a_run_without_torch_compile_runs_its_elementwise_work_eagerly() -> None:
    eager = train_of(ROW_8B, {})
    compiled = train_of(ROW_8B, {"torch_compile": "True"})
    megatron = train_of(ROW_8B | {"framework": "megatron", "zero_stage": 0}, {})
    assert eager is not None and compiled is not None and megatron is not None
    assert (eager.compiled, compiled.compiled, megatron.compiled) == (False, True, True)


def test_the_logs_own_device_memory_counts_where_the_catalog_part_differs() -> None:
    from tracelog.analysis import inputs as run_inputs
    from tracelog.analysis.device_memory import device_memory_bytes
    from tracelog.analysis.predictions import infer

    row = {"run_id": 1, "framework": "torchtitan", "gpu_model": "h100-sxm5-80gb", "gpus": 8}
    catalog = 80 * 2**30  # the catalog counts its GB in binary units
    # torchtitan's `memory: 60.12GiB(76.00%)` share of an H100 80GB: 81,003 MiB, within 5 % of the part's
    near = infer(run_inputs.build(row, {"device_memory_mib": "81003"}))
    assert near.gpu is not None and near.gpu.memory_bytes == catalog
    assert device_memory_bytes(near) == catalog
    # a 96 GB variant under the same name, or a 20 GB MIG slice: the log's own figure
    assert device_memory_bytes(infer(run_inputs.build(row, {"device_memory_mib": "98304"}))) == 98304 * 2**20
    assert device_memory_bytes(infer(run_inputs.build(row, {"device_memory_mib": "20480"}))) == 20480 * 2**20
    assert device_memory_bytes(infer(run_inputs.build(row, {}))) == catalog


def test_predict_takes_a_torchtitan_configuration_on_the_command_line(tmp_path: Path) -> None:
    """`tracelog predict --framework torchtitan --recompute op --torch-compile`: the library's figures for
    the same keys; compiled faster than eager, as torchtitan's Table 1 measures."""
    import json

    from click.testing import CliRunner

    from tracelog.cli import cli

    shape = [
        "--gpu", "h100-sxm5-80gb", "--framework", "torchtitan", "--layers", "32", "--hidden", "4096",
        "--heads", "32", "--query-groups", "8", "--ffn-hidden", "14336", "--swiglu", "--seq", "8192",
        "--vocab", "128256", "--gbs", "16", "--mbs", "2", "--dp", "8", "--zero", "3", "--recompute", "op",
    ]  # fmt: skip

    def seconds(*extra: str) -> float:
        out = CliRunner().invoke(
            cli, ["--db", str(tmp_path / "none.duckdb"), "predict", *shape, *extra, "--format", "json"]
        )
        assert out.exit_code == 0, out.output
        return next(row["value"] for row in json.loads(out.output) if row["metric"] == "sec_per_it")

    compiled, eager = seconds("--torch-compile"), seconds("--no-torch-compile")
    assert eager == pytest.approx(seconds())  # torchtitan's default: not compiled
    assert 1.10 < eager / compiled < 1.25
    library = api.predict(
        None, gpu="h100-sxm5-80gb", framework="torchtitan", layers=32, hidden=4096, heads=32, query_groups=8,
        ffn_hidden=14336, swiglu=True, seq_len=8192, vocab=128256, gbs=16, mbs=2, dp=8, zero_stage=3,
        recompute="op", run_params={"torch_compile": "True"},
    )  # fmt: skip
    assert compiled == pytest.approx(float(library.loc[library["metric"] == "sec_per_it", "value"].iloc[0]))


def test_the_oom_rule_holds_a_run_to_the_device_memory_the_model_takes(tmp_path: Path) -> None:
    """Invented: a run on a 96 GB H100 variant that PyTorch names as the 80 GB part (the Grand Teton hosts of
    torchtitan's benchmarks). Its memory share says 96 GiB: 88 GiB is 92 % of it, a warning, not 110 % of
    the catalog part's 80 GiB; the rule and the model's capacity are the same figure."""
    line = (
        "[rank0]:[titan] 2025-01-02 10:00:{0:02d},000 - root - INFO - step: {1:2d}  loss:  7.0000  "
        "grad_norm:  1.0000  memory: 88.00GiB(91.67%)  tps: 6,000  tflops: 360.00  mfu: 36.40%"
    )
    log = tmp_path / "titan96.log"
    log.write_text(
        "[rank0]:[titan] 2025-01-02 09:59:00,000 - root - INFO - CUDA capacity: NVIDIA H100 80GB HBM3 with "
        "95.00GiB memory\n" + "\n".join(line.format(10 * i, 10 * i) for i in range(1, 4)) + "\n"
    )
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    (flag,) = api.sql(
        db, "SELECT severity, expected, message FROM flags WHERE rule = 'oom_proximity'"
    ).itertuples(index=False)
    assert flag.severity == "warning" and flag.expected == round(88.00 / 91.67 * 102400)  # 98,300 MiB
    assert "88.0 GiB is 92% of the 96 GiB of the GPU" in flag.message
    capacity = api.sql(db, "SELECT value FROM predictions WHERE metric = 'gpu_capacity_mib'")["value"]
    assert list(capacity) == [flag.expected]


# published, verbatim: dudeperf3ct/dudeperf3ct.github.io, content/projects/train_llm_part2.md at 2824d847 ("an
# example log from running smoke test": torchtitan on 2 H100, a Llama 3.2 1B through its transformers backend,
# 2026-01), as its W&B log view shows it, each line's time on a line of its own and an elision
SMOKE_TEST = """\
2026-01-09 19:01:15
[titan] 2026-01-09 19:01:15,186 - root - INFO - CUDA capacity: NVIDIA H100 80GB HBM3 with 79.18GiB memory
2026-01-09 19:01:15
[titan] 2026-01-09 19:01:15,198 - root - INFO - Model transformers_modeling_backend_custom llama32_1b_tok32k size: 1,040,254,976 total parameters
2026-01-09 19:01:15
[titan] 2026-01-09 19:01:15,198 - root - INFO - Compiling the loss function with torch.compile
2026-01-09 19:01:15
[titan] 2026-01-09 19:01:15,214 - root - INFO - Compiling each TransformerBlock with torch.compile
2026-01-09 19:01:15
[titan] 2026-01-09 19:01:15,216 - root - INFO - Applied DDP to the model
2026-01-09 19:01:15
[titan] 2026-01-09 19:01:15,281 - root - INFO - Peak FLOPS used for computing MFU: 9.890e+14
2026-01-09 19:01:15
[titan] 2026-01-09 19:01:15,282 - root - INFO - CUDA memory usage for model: 2.07GiB(2.62%)
...
2026-01-09 19:02:58
[titan] 2026-01-09 19:02:58,105 - root - INFO - step: 100  loss:  9.4939  grad_norm: 18.2500  memory: 72.82GiB(91.97%)  tps: 55,314  tflops: 412.06  mfu: 41.66%
2026-01-09 19:03:41
[titan] 2026-01-09 19:03:41,340 - root - INFO - [GC] Performing periodic GC collection took 0.00 seconds
2026-01-09 19:03:42
[titan] 2026-01-09 19:03:42,734 - root - INFO - step: 150  loss:  8.5498  grad_norm: 70.0000  memory: 72.82GiB(91.97%)  tps: 55,069  tflops: 410.23  mfu: 41.48%
2026-01-09 19:04:26
[titan] 2026-01-09 19:04:26,189 - root - INFO - [GC] Performing periodic GC collection took 0.00 seconds
2026-01-09 19:04:27
[titan] 2026-01-09 19:04:27,595 - root - INFO - step: 200  loss:  8.1258  grad_norm: 208.0000  memory: 72.82GiB(91.97%)  tps: 54,783  tflops: 408.11  mfu: 41.26%
2026-01-09 19:05:11
[titan] 2026-01-09 19:05:11,142 - root - INFO - [GC] Performing periodic GC collection took 0.00 seconds
"""


def test_a_compiled_loss_is_read_from_its_line() -> None:
    assert torchtitan.detect(SMOKE_TEST) > 0
    tables = rows_by_table(torchtitan.parse, SMOKE_TEST)
    (run,) = tables["runs"]
    params = {p["name"]: p["value"] for p in run["run_params"]}
    assert params["compiled_loss"] == "True" and params["torch_compile"] == "True"
    assert run["zero_stage"] == 0  # `Applied DDP`
    assert [r["iteration"] for r in tables["iterations"]] == [100, 150, 200]
    # a log of 2024 compiled its blocks only: no loss line, no `compiled_loss`
    (old,) = rows_by_table(torchtitan.parse, SEVENTY_B.replace("Compiling the loss", "Compiling the lost"))[
        "runs"
    ]
    assert "compiled_loss" not in {p["name"] for p in old["run_params"]}


def test_a_stored_run_with_a_compiled_loss_is_predicted_with_it(tmp_path: Path) -> None:
    from tracelog.analysis import inputs as run_inputs
    from tracelog.store import Store

    log = tmp_path / "smoke.log"
    log.write_text(SMOKE_TEST)
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    with Store(db) as store:
        ((row, params),) = run_inputs.load_rows(store)
    assert params["compiled_loss"] == "True"
    train = train_of(row | {"layers": 16, "hidden": 2048, "heads": 32, "seq_len": 8192, "vocab": 32768,
                            "gbs": 12, "mbs": 6, "dp": 2}, params)  # fmt: skip
    assert train is not None and train.cross_entropy == "compiled"


def test_a_context_length_of_zero_is_no_sequence_and_no_error() -> None:
    """A start line whose context length reads 0 (a mangled log: fuzzing found it) says nothing of the
    sequence or the batch, where the tokens per step were divided by it."""
    zero = SEVENTY_B.replace("maximum context length 8192", "maximum context length 0")
    assert zero != SEVENTY_B
    (run,) = rows_by_table(torchtitan.parse, zero)["runs"]
    (whole,) = rows_by_table(torchtitan.parse, SEVENTY_B)["runs"]
    assert run["train_iters"] == whole["train_iters"] == 1000
    assert whole["seq_len"] == 8192 and whole["gbs"] == 524_288 // 8192
    assert "gbs" not in run and run.get("seq_len") != 0
