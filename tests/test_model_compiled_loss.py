"""torchtitan's compiled loss (`model.torch_native`, from torchtitan bbb1b616e of 2025-04-02): what it keeps
of the logits and how often it reads them, each against a hand computation, and how a run or a
configuration says it ran."""

from __future__ import annotations

import pytest

from tracelog import hardware
from tracelog.analysis import inputs as run_inputs
from tracelog.analysis.what_if import configuration_defaults, what_if
from tracelog.model.flops import ModelConfig, TrainConfig
from tracelog.model.gemm import HBM_SHARE, KERNEL_OVERHEAD_S, cross_entropy_seconds
from tracelog.model.memory import activations_per_gpu
from tracelog.model.torch_native import loss_bytes_per_logit

H200 = hardware.gpu("h200-sxm-141gb")
# Llama 3.1 8B as torchtitan builds it (models/llama/__init__.py llama3_configs "8B")
LLAMA3_8B = ModelConfig(
    layers=32, hidden=4096, heads=32, query_groups=8, seq_len=8192, vocab=128256, ffn_hidden=14336,
    swiglu=True, bias=False, tied_embeddings=False, learned_positions=False, dropout=False, rms_norm=True,
)  # fmt: skip
LOGITS = 2 * 8192 * 128256  # one micro-batch of 2 x 8192 tokens over the whole vocabulary


def titan(**kw) -> TrainConfig:
    base = dict(
        gbs=64, mbs=2, dp=32, zero_stage=3, flash_attention=True, framework="torchtitan", recompute="op"
    )
    return TrainConfig(**(base | kw))


def test_a_compiled_loss_keeps_the_logits_and_their_gradient_not_two_fp32_copies():
    # eagerly 2 + 4 + 4 bytes a logit (bf16 logits, their fp32 copy, log_softmax's fp32 output); compiled,
    # the bf16 logits the partitioner saves and the bf16 gradient the backward writes: 2 + 2
    assert loss_bytes_per_logit(titan()) == 10
    assert loss_bytes_per_logit(titan(cross_entropy="compiled")) == 4
    eager = activations_per_gpu(LLAMA3_8B, titan())
    compiled = activations_per_gpu(LLAMA3_8B, titan(cross_entropy="compiled"))
    assert eager - compiled == pytest.approx(6 * LOGITS)


def test_under_loss_parallel_the_compiled_loss_keeps_two_fp32_buffers_at_its_peak():
    # TP 8: DTensor's loss-parallel handlers; the forward's end holds the logits, the zeroed fp32 buffer of
    # the one-hot label and the fp32 softmax-minus-label the partitioner saves: 2 + 4 + 4, as eagerly
    tp = dict(tp=8, dp=4, gbs=16, sequence_parallel=True)
    assert loss_bytes_per_logit(titan(cross_entropy="compiled", **tp)) == 10
    assert activations_per_gpu(LLAMA3_8B, titan(cross_entropy="compiled", **tp)) == pytest.approx(
        activations_per_gpu(LLAMA3_8B, titan(**tp))
    )


def bandwidth_seconds(moved: float, kernels: int) -> float:
    return moved / (H200.memory_bandwidth_gbps * 1e9 * HBM_SHARE) + kernels * KERNEL_OVERHEAD_S


def test_a_compiled_loss_reads_the_logits_once_forward_and_once_backward():
    # forward: one online-softmax reduction over the bf16 logits (2 bytes); backward: read them, write
    # their bf16 gradient (2 + 2); one kernel each
    forward, backward = cross_entropy_seconds(LLAMA3_8B, titan(cross_entropy="compiled"), H200)
    assert forward == pytest.approx(bandwidth_seconds(2 * LOGITS, 1))
    assert backward == pytest.approx(bandwidth_seconds(4 * LOGITS, 1))
    eager_forward, eager_backward = cross_entropy_seconds(LLAMA3_8B, titan(), H200)
    assert eager_forward + eager_backward > 8 * (forward + backward)


def test_under_loss_parallel_it_reads_them_three_times_and_writes_fp32_twice():
    # the row maximum all-reduced between the reductions: amax (2), exp-sum (2), the zeroed one-hot (4),
    # softmax minus one-hot (4 + 2 + 4); backward reads that fp32 result and writes the bf16 gradient
    train = titan(cross_entropy="compiled", tp=8, dp=4, gbs=16, sequence_parallel=True)
    shard = 2 * 8192 * 126 * 128  # V padded to a multiple of 128 x 8, over 8 ranks
    forward, backward = cross_entropy_seconds(LLAMA3_8B, train, H200)
    assert forward == pytest.approx(bandwidth_seconds(18 * shard, 4))
    assert backward == pytest.approx(bandwidth_seconds(6 * shard, 1))


def run(params: dict[str, str], framework: str = "torchtitan") -> run_inputs.RunInputs:
    row = dict(
        run_id=1, framework=framework, layers=32, hidden=4096, heads=32, seq_len=8192, vocab=128256,
        gbs=64, mbs=2, dp=32, gpus=32, zero_stage=3, recompute="op", gpu_model="h200-sxm-141gb",
    )  # fmt: skip
    return run_inputs.build(row, params)


@pytest.mark.parametrize(
    ("params", "loss"),
    [
        ({"torch_compile": "True", "compiled_loss": "True"}, "compiled"),
        ({"compiled_loss": "True"}, "compiled"),  # since 2025-08 the loss compiles without the blocks
        ({"torch_compile": "True"}, "unfused"),  # a log of 2024: the blocks compiled, the loss not
        ({}, "unfused"),
    ],
)
def test_a_run_says_whether_its_loss_was_compiled(params: dict[str, str], loss: str):
    train = run(params).train
    assert train is not None and train.cross_entropy == loss


def test_a_configuration_without_a_log_compiles_the_loss_with_the_blocks_as_torchtitan_does_today():
    assert configuration_defaults("torchtitan", {"torch_compile": "True"})["compiled_loss"] == "True"
    assert configuration_defaults("torchtitan", {"torch_compile": "False"})["compiled_loss"] == "False"
    # a run from before 2025-04 says otherwise, and is heard
    said = {"torch_compile": "True", "compiled_loss": "False"}
    assert configuration_defaults("torchtitan", said)["compiled_loss"] == "False"
    assert "compiled_loss" not in configuration_defaults("hf-trainer", {"torch_compile": "True"})


def test_predict_takes_the_loss_as_compiled_with_the_blocks_unless_told():
    config = dict(
        layers=32, hidden=4096, heads=32, query_groups=8, ffn_hidden=14336, swiglu=True, seq_len=8192,
        vocab=128256, gbs=64, mbs=2, dp=32, gpus=32, zero_stage=3, recompute="op", precision="bf16",
        framework="torchtitan", gpu_model="h200-sxm-141gb",
    )  # fmt: skip

    def activations_gib(**params: str) -> float:
        table = what_if(None, None, config, run_params={"torch_compile": "True", **params})
        return float(table.loc[table["metric"] == "activations_mib", "value"].iloc[0])

    # the eager loss's 6 more bytes a logit, 11.7 GiB at this micro-batch
    assert activations_gib(compiled_loss="False") - activations_gib() == pytest.approx(6 * LOGITS / 2**30)
    assert activations_gib(compiled_loss="True") == activations_gib()


def test_the_cli_says_so_with_compiled_loss(tmp_path):
    import json
    import shlex

    from click.testing import CliRunner

    from tracelog.cli import cli

    command = shlex.split(
        "predict --gpu h200-sxm-141gb --framework torchtitan --layers 32 --hidden 4096 --heads 32 "
        "--query-groups 8 --ffn-hidden 14336 --swiglu --seq 8192 --vocab 128256 --gbs 64 --mbs 2 --dp 32 "
        "--zero 3 --recompute op --torch-compile --format json"
    )

    def activations(*more: str) -> float:
        result = CliRunner().invoke(cli, ["--db", str(tmp_path / "t.duckdb"), *command, *more])
        assert result.exit_code == 0, result.output
        (row,) = [r for r in json.loads(result.output) if r["metric"] == "activations_mib"]
        return float(row["value"])

    assert activations() == activations("--compiled-loss") < activations("--no-compiled-loss")
