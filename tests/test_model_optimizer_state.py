"""Adam's state as the run keeps it: Megatron-core's precision-aware optimizer, read from the run's own
arguments (Megatron-LM's arguments block, NeMo 2's OptimizerConfig repr) into the memory model."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_parser_nemo import collect as collect_nemo
from tracelog import api
from tracelog.analysis import inputs as run_inputs
from tracelog.analysis.optimizer_state import adam_state_bytes, precision_aware_bytes
from tracelog.model.memory import memory_per_gpu, state_bytes

GiB = 2**30

# Invented figures in the shape of Megatron-LM's arguments block (megatron/training/arguments.py
# `_print_args`): a Llama-3-8B-like model on 64 H100s with the precision-aware optimizer and bf16 moments.
MEGATRON_LOG = """\
using world size: 64, data-parallel size: 16, context-parallel size: 1, tensor-model-parallel size: 4, pipeline-model-parallel size: 1
------------------------ arguments ------------------------
  accumulate_allreduce_grads_in_fp32 .............. True
  bf16 ............................................ True
  exp_avg_dtype ................................... {exp_avg}
  exp_avg_sq_dtype ................................ {exp_avg_sq}
  ffn_hidden_size ................................. 14336
  fp8_recipe ...................................... delayed
  global_batch_size ............................... 256
  group_query_attention ........................... True
  hidden_size ..................................... 4096
  main_grads_dtype ................................ torch.float32
  main_params_dtype ............................... torch.float32
  micro_batch_size ................................ 1
  num_attention_heads ............................. 32
  num_layers ...................................... 32
  num_query_groups ................................ 8
  padded_vocab_size ............................... 128256
  pipeline_model_parallel_size .................... 1
  recompute_granularity ........................... selective
  seq_length ...................................... 8192
  sequence_parallel ............................... True
  swiglu .......................................... True
  tensor_model_parallel_size ...................... 4
  transformer_impl ................................ transformer_engine
  use_distributed_optimizer ....................... True
  use_precision_aware_optimizer ................... {aware}
  world_size ...................................... 64
-------------------- end of arguments ---------------------
 [2025-07-02 10:21:40] iteration       10/     500 | consumed samples:         2560 | elapsed time per iteration (ms): 5120.4 | learning rate: 3.000000E-04 | global batch size:   256 | lm loss: 9.871234E+00 | loss scale: 1.0 | grad norm: 4.123 | number of skipped iterations:   0 | number of nan iterations:   0 |
 [2025-07-02 10:22:31] iteration       20/     500 | consumed samples:         5120 | elapsed time per iteration (ms): 5101.9 | learning rate: 3.000000E-04 | global batch size:   256 | lm loss: 8.912345E+00 | loss scale: 1.0 | grad norm: 2.981 | number of skipped iterations:   0 | number of nan iterations:   0 |
"""


def _ingest(tmp_path: Path, **args: str) -> run_inputs.RunInputs:
    tmp_path.mkdir()
    log = tmp_path / "train.log"
    log.write_text(MEGATRON_LOG.format(**args))
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)], gpu="h100-sxm5-80gb")
    with api.connect(db) as store:
        (inputs,) = run_inputs.load(store)
    return inputs


def test_megatron_lms_precision_aware_arguments_reach_the_memory_model(tmp_path: Path) -> None:
    """bf16 moments (2 + 2) and fp32 master weights kept by Transformer Engine as their 16 trailing bits
    (2): 6 bytes a parameter of Adam state, not 12; sharded over DP 16 by the distributed optimizer."""
    plain = _ingest(tmp_path / "a", exp_avg="torch.float32", exp_avg_sq="torch.float32", aware="False")
    aware = _ingest(tmp_path / "b", exp_avg="torch.bfloat16", exp_avg_sq="torch.bfloat16", aware="True")
    assert plain.train is not None and aware.train is not None and plain.cfg is not None
    assert plain.train.adam_state_bytes == 12 and aware.train.adam_state_bytes == 6
    assert state_bytes(plain.train).total == pytest.approx(2 + 4 + 12 / 16)
    assert state_bytes(aware.train).total == pytest.approx(2 + 4 + 6 / 16)
    before = memory_per_gpu(plain.cfg, plain.train).optimizer
    after = memory_per_gpu(aware.cfg, aware.train).optimizer  # type: ignore[arg-type]
    assert after == pytest.approx(before / 2)


@pytest.mark.parametrize(
    ("params", "precision", "expected"),
    [
        ({}, "bf16", 12),  # fp32 master weights and moments
        ({"use_precision_aware_optimizer": "True"}, "bf16", 4 + 4 + 2),  # master as bf16 remainders
        ({"use_precision_aware_optimizer": "True", "store_param_remainders": "False"}, "bf16", 12),
        ({"use_precision_aware_optimizer": "True"}, "fp16", 12),  # remainders only complete a bf16 weight
        (
            {
                "use_precision_aware_optimizer": "True",
                "exp_avg_dtype": "fp8",
                "exp_avg_sq_dtype": "torch.uint8",
            },
            "bf16",
            1 + 1 + 2,
        ),
        (
            {"use_precision_aware_optimizer": "True", "main_params_dtype": "torch.float16"},
            "bf16",
            4 + 4 + 2,
        ),
        # an FP8 current-scaling recipe with fp32 master weights: Megatron-core keeps its own fp32 copy
        ({"use_precision_aware_optimizer": "True", "fp8_recipe": "tensorwise"}, "fp8", 4 + 4 + 4),
        ({"use_precision_aware_optimizer": "True", "fp8_recipe": "delayed"}, "fp8", 4 + 4 + 2),
        ({"use_precision_aware_optimizer": "False", "exp_avg_dtype": "torch.bfloat16"}, "bf16", 12),
    ],
)
def test_adam_state_bytes_by_the_runs_arguments(
    params: dict[str, str], precision: str, expected: float
) -> None:
    assert adam_state_bytes(params, precision) == expected
    if params.get("use_precision_aware_optimizer") == "True":
        assert precision_aware_bytes(params, precision) == expected


def test_nemo2s_optimizer_config_keeps_the_state_dtypes() -> None:
    """NeMo 2 prints Megatron-core's OptimizerConfig repr when it sets the optimizer up (invented values,
    the field order of megatron/core/optimizer/optimizer_config.py)."""
    out = collect_nemo(
        "[NeMo I 2025-09-12 08:01:44 utils:554] Setting up optimizer with config OptimizerConfig("
        "optimizer='adam', lr=0.0001, min_lr=1e-05, weight_decay=0.1, fp8_recipe='delayed', fp16=False, "
        "bf16=True, params_dtype=torch.bfloat16, use_precision_aware_optimizer=True, "
        "store_param_remainders=True, main_grads_dtype=torch.float32, main_params_dtype=torch.float32, "
        "exp_avg_dtype=torch.bfloat16, exp_avg_sq_dtype=torch.bfloat16, loss_scale=None, "
        "use_distributed_optimizer=True, overlap_param_gather_with_optimizer_step=False)\n"
        "Training epoch 0, iteration 0/99 | lr: 1e-05 | global_batch_size: 64 | global_step: 0 | "
        "reduced_train_loss: 12.03 | train_step_timing in s: 9.81\n"
    )
    (run,) = out["runs"]
    params = {p["name"]: p["value"] for p in run["run_params"]}
    assert params["use_precision_aware_optimizer"] == "True"
    assert (params["exp_avg_dtype"], params["exp_avg_sq_dtype"]) == ("torch.bfloat16", "torch.bfloat16")
    assert (params["main_params_dtype"], params["fp8_recipe"]) == ("torch.float32", "delayed")
    assert "min_lr" not in params and "params_dtype" not in params
    assert adam_state_bytes(params, "bf16") == 2 + 2 + 2


# Invented in the shape of a NeMo 1 job (megatron_gpt_pretraining.py prints the experiment configuration
# as YAML, then Lightning's bar), with the optimizer block of dgxc-benchmarking's Nemotron-4 340B
# configuration (NVIDIA/dgxc-benchmarking @35a9aec nemotron/nemotron4-340b-synth.yaml:182-186); the model
# shrunk to 8 layers so that a handful of lines carry it.
NEMO1_LOG = """\
[NeMo I 2024-11-20 10:00:01 megatron_gpt_pretraining:37]

    ************** Experiment configuration ***********
[NeMo I 2024-11-20 10:00:01 megatron_gpt_pretraining:38]
    trainer:
      num_nodes: 2
      devices: 8
      precision: bf16
    model:
      micro_batch_size: 1
      global_batch_size: 32
      tensor_model_parallel_size: 8
      pipeline_model_parallel_size: 1
      encoder_seq_length: 4096
      num_layers: 8
      hidden_size: 18432
      ffn_hidden_size: 73728
      num_attention_heads: 96
      num_query_groups: 8
      megatron_amp_O2: true
      sequence_parallel: true
      optim:
        name: distributed_fused_adam
        bucket_cap_mb: 50
        grad_sync_dtype: bf16
{dtype}        overlap_grad_sync: true
Epoch 0: :  10%|#         | 10/100 [01:01<09:09, reduced_train_loss=9.210, global_step=9.000, consumed_samples=320.0, train_step_timing in s=6.110]
Epoch 0: :  20%|##        | 20/100 [02:02<08:08, reduced_train_loss=8.120, global_step=19.00, consumed_samples=640.0, train_step_timing in s=6.090]
"""


@pytest.mark.parametrize(
    ("dtype_line", "expected"),
    [
        ("        dtype: bf16\n", 2 + 2),  # state in the model's dtype: no master copy, bf16 moments
        ("", 4 + 4 + 2),  # fp32 moments, master weights as the 16-bit remainders of a bf16 model
    ],
)
def test_nemo1s_distributed_adam_keeps_its_state_in_optim_dtype(
    tmp_path: Path, dtype_line: str, expected: float
) -> None:
    log = tmp_path / "nemo1.log"
    log.write_text(NEMO1_LOG.format(dtype=dtype_line))
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)], gpu="h100-sxm5-80gb")
    with api.connect(db) as store:
        (inputs,) = run_inputs.load(store)
    assert inputs.run_params["model.optim.name"] == "distributed_fused_adam"
    assert inputs.train is not None and inputs.train.distributed_optimizer  # Apex shards the state
    assert inputs.train.adam_state_bytes == expected
    assert state_bytes(inputs.train).optimizer == pytest.approx(expected / inputs.train.dp)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"model.optim.name": "distributed_fused_adam"}, 10),  # O2 unsaid: NeMo's GPT configs set it
        ({"model.optim.name": "distributed_fused_adam", "model.fp8_params": "true"}, 12),  # store_params
        ({"model.optim.name": "distributed_fused_adam", "model.optim.dtype": "bf16"}, 4),
        ({"model.optim.name": "distributed_fused_adam", "model.optim.store_params": "true"}, 12),
        ({"model.optim.name": "distributed_fused_adam", "model.megatron_amp_O2": "false"}, 12),
        ({"model.optim.name": "fused_adam"}, 12),
    ],
)
def test_nemo1_state_bytes_follow_setup_optimization(params: dict[str, str], expected: float) -> None:
    assert adam_state_bytes(params, "bf16") == expected
