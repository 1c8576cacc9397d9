"""Trainers that run a model's own PyTorch operators one kernel each (the Hugging Face Trainer, torchtitan
without torch.compile): what the stored run says of its blocks (RMSNorm, rotary positions, a tied output
layer, torch.compile) reaches the model, and only RMSNorm written as operators pays the norm's chain. The
samples are invented, in the shape of transformers' and torchtitan's own lines."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.test_parser_torchtitan_model import SEVENTY_B
from tracelog import api
from tracelog.analysis import inputs as run_inputs
from tracelog.analysis.predictions import infer
from tracelog.model.eager import eager_elementwise_bytes, eager_kernels
from tracelog.model.flops import ModelConfig, TrainConfig
from tracelog.store import Store

# invented: a Trainer run of a Llama-shaped model as transformers 4.46 prints it (arguments, then the
# model's configuration), two logged steps and the closing summary
HF_LLAMA = """\
TrainingArguments(
bf16=True,
gradient_accumulation_steps=1,
gradient_checkpointing=False,
learning_rate=2e-05,
logging_steps=1,
per_device_train_batch_size=4,
max_seq_length=2048,
packing=True,
torch_compile={compile},
)
[INFO|configuration_utils.py:746] 2025-03-02 10:00:01,000 >> Model config LlamaConfig {{
  "architectures": [
    "LlamaForCausalLM"
  ],
  "hidden_act": "silu",
  "hidden_size": 4096,
  "intermediate_size": 14336,
  "max_position_embeddings": 8192,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "vocab_size": 128256
}}

[INFO|trainer.py:2314] 2025-03-02 10:00:30,000 >> ***** Running training *****
[INFO|trainer.py:2315] 2025-03-02 10:00:30,000 >>   Num examples = 6,400
[INFO|trainer.py:2316] 2025-03-02 10:00:30,000 >>   Num Epochs = 1
[INFO|trainer.py:2317] 2025-03-02 10:00:30,000 >>   Instantaneous batch size per device = 4
[INFO|trainer.py:2320] 2025-03-02 10:00:30,000 >>   Total train batch size (w. parallel, distributed & accumulation) = 32
[INFO|trainer.py:2321] 2025-03-02 10:00:30,000 >>   Gradient Accumulation steps = 1
[INFO|trainer.py:2322] 2025-03-02 10:00:30,000 >>   Total optimization steps = 200
  0%|          | 1/200 [00:03<10:00,  3.01s/it]  1%|          | 2/200 [00:05<09:00,  2.50s/it]{{'loss': 2.1, 'grad_norm': 1.5, 'learning_rate': 2e-05, 'epoch': 0.01}}
  1%|          | 3/200 [00:08<08:40,  2.50s/it]  2%|          | 4/200 [00:10<08:30,  2.50s/it]{{'loss': 2.0, 'grad_norm': 1.4, 'learning_rate': 2e-05, 'epoch': 0.02}}
"""

LLAMA_8B = ModelConfig(
    layers=32, hidden=4096, heads=32, seq_len=8192, vocab=128256, ffn_hidden=14336, query_groups=8, swiglu=True,
    learned_positions=False, rms_norm=True,
)  # fmt: skip
EAGER = TrainConfig(gbs=16, mbs=2, dp=8, compiled=False)


def test_a_layernorm_block_runs_its_norms_as_one_kernel_each() -> None:
    """`torch.nn.LayerNorm` is ATen's one `native_layer_norm` kernel; RMSNorm written as operators is six."""
    rms = eager_elementwise_bytes(LLAMA_8B, EAGER)
    layer_norm = eager_elementwise_bytes(replace(LLAMA_8B, rms_norm=False), EAGER)
    tokens, h = 2 * 8192, 4096
    assert rms - layer_norm == pytest.approx(tokens * 2 * 32 * h)  # two norms, 36 - 4 bytes an element
    assert eager_kernels(LLAMA_8B) - eager_kernels(replace(LLAMA_8B, rms_norm=False)) == 12
    # a GPT-style block (LayerNorm, GELU, learned positions) moves nothing more eagerly than fused
    gpt = replace(LLAMA_8B, rms_norm=False, swiglu=False, learned_positions=True)
    assert eager_elementwise_bytes(gpt, EAGER) == 0 and eager_kernels(gpt) == 0


@pytest.mark.parametrize(("compile_flag", "compiled"), [("False", False), ("True", True)])
def test_a_trainer_run_reads_its_blocks_and_torch_compile_from_the_log(
    tmp_path: Path, compile_flag: str, compiled: bool
) -> None:
    log = tmp_path / "hf.log"
    log.write_text(HF_LLAMA.format(compile=compile_flag))
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)], gpu="h100-sxm5-80gb")
    with Store(db) as store:
        (inputs,) = run_inputs.load(store)
    assert inputs.framework == "hf-trainer"
    model = infer(inputs)
    assert model.cfg is not None and model.train is not None
    assert (model.cfg.rms_norm, model.cfg.learned_positions, model.cfg.tied_embeddings) == (
        True,
        False,
        False,
    )
    assert model.train.compiled is compiled


def test_an_eager_trainer_run_is_predicted_slower_than_the_same_run_compiled(tmp_path: Path) -> None:
    seconds = {}
    for flag in ("False", "True"):
        log = tmp_path / f"hf-{flag}.log"
        log.write_text(HF_LLAMA.format(compile=flag))
        db = tmp_path / f"{flag}.duckdb"
        api.ingest(db, [str(log)], gpu="h100-sxm5-80gb", gpus_per_node=8)
        frame = api.sql(db, "SELECT value FROM predictions WHERE metric = 'sec_per_it'")
        seconds[flag] = float(frame["value"].iloc[0])
    # RMSNorm, the rotary product and SwiGLU as separate kernels: torchtitan's Table 1 measures eager
    # 1.16 times compiled for the same block at 8k tokens; at 2k the GEMMs are shorter, the same bytes
    assert 1.05 < seconds["False"] / seconds["True"] < 1.35


def test_a_stored_torchtitan_run_that_compiled_is_predicted_compiled(tmp_path: Path) -> None:
    """torchtitan's `Compiling each TransformerBlock with torch.compile` is kept as `torch_compile` and read
    back from the store (the run parameters the model loads), not only from a command line."""
    log = tmp_path / "titan70b.log"
    log.write_text(SEVENTY_B)
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    with Store(db) as store:
        ((row, params),) = run_inputs.load_rows(store)
    assert params["torch_compile"] == "True"
    model = infer(run_inputs.build(row, params))
    assert model.cfg is not None and model.cfg.rms_norm
    assert model.train is not None and model.train.compiled
    params.pop("torch_compile")
    eager = infer(run_inputs.build(row, params))
    assert eager.train is not None and not eager.train.compiled


def test_a_composer_run_is_eager_unless_its_configuration_compiles(tmp_path: Path) -> None:
    """Composer runs the model's operators eagerly unless `compile_config` is given (None by default), and
    llm-foundry's MPT attention is FlashAttention-2's, as SDPA's flash backend runs it."""
    from tests.test_parser_composer import SAMPLE
    from tracelog.model.gemm import SDPA_FRAMEWORKS

    db = tmp_path / "c.duckdb"
    api.ingest(db, [str(SAMPLE)], complete=True)
    with Store(db) as store:
        rows = run_inputs.load_rows(store, "run_id = 1")
    ((row, params),) = rows
    assert not any(name.startswith("compile_config") for name in params)
    eager = infer(run_inputs.build(row, params))
    assert eager.train is not None and eager.train.framework == "composer" and not eager.train.compiled
    assert "composer" in SDPA_FRAMEWORKS
    compiled = infer(run_inputs.build(row, {**params, "compile_config.mode": "default"}))
    assert compiled.train is not None and compiled.train.compiled
    empty = infer(run_inputs.build(row, {**params, "compile_config": "None"}))
    assert empty.train is not None and not empty.train.compiled

    # the same log with a `compile_config` in its echo (invented: llm-foundry's key, Composer's default mode),
    # stored and read back as the refresh reads it
    text = SAMPLE.read_text().replace(
        "precision: amp_bf16\nfsdp_config:\n",
        "precision: amp_bf16\ncompile_config:\n  mode: default\nfsdp_config:\n",
        1,
    )
    assert "compile_config:" in text
    (tmp_path / "compiled.log").write_text(text)
    api.ingest(tmp_path / "k.duckdb", [str(tmp_path / "compiled.log")], complete=True)
    with Store(tmp_path / "k.duckdb") as store:
        rows = run_inputs.load_rows(store, "TRUE")
    said = [(row, params) for row, params in rows if params.get("compile_config.mode") == "default"]
    assert len(said) == 1 and len(rows) == 2  # the launch whose echo holds it
    stored = infer(run_inputs.build(*said[0]))
    assert stored.train is not None and stored.train.compiled


def test_composers_mixed_precision_mode_sets_the_reduction_dtype(tmp_path: Path) -> None:
    """composer/trainer/mosaic_fsdp_utils.py `get_mixed_precision` (v0.16.4, v0.17.2): DEFAULT (also an
    `fsdp_config` without the key) reduces in fp32, PURE in the training precision; DDP reduces nothing
    through FSDP."""
    from tests.test_parser_composer import SAMPLE

    db = tmp_path / "c.duckdb"
    api.ingest(db, [str(SAMPLE)], complete=True)
    with Store(db) as store:
        ((row, params),) = run_inputs.load_rows(store, "run_id = 1")
    assert params["fsdp_config.mixed_precision"] == "PURE"
    for mode, fp32 in (("PURE", False), ("DEFAULT", True), ("FULL", True)):
        run = infer(run_inputs.build(row, {**params, "fsdp_config.mixed_precision": mode}))
        assert run.train is not None and run.train.fp32_reduce is fp32, mode
    unset = {k: v for k, v in params.items() if k != "fsdp_config.mixed_precision"}
    run = infer(run_inputs.build(row, unset))
    assert run.train is not None and run.train.fp32_reduce
    named = infer(run_inputs.build(row, {**unset, "fsdp_config.mixed_precision.reduce_dtype": "bf16"}))
    assert named.train is not None and not named.train.fp32_reduce
