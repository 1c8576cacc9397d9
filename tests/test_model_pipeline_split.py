"""How DeepSpeed's pipeline partition spreads layers over stages, and what each stage holds in memory:
held against the BigScience tr11 chronicles (prequel lines 875 and 900) and DeepSpeed's own rules."""

from __future__ import annotations

import pytest

from tracelog import api
from tracelog.analysis import inputs as run_inputs
from tracelog.model.flops import ModelConfig, TrainConfig, stage_layers, stage_split
from tracelog.model.memory import (
    activation_bytes_per_layer,
    activations_per_gpu,
    deepspeed_pipe_buffers,
    embedding_params_per_gpu,
    layers_in_flight,
    memory_per_gpu,
    stage_memory,
    transformer_params_per_gpu,
)

BLOOM_LAYOUT = dict(gbs=2048, mbs=2, tp=4, pp=12, dp=8, recompute="full", zero_stage=1, precision="bf16")


def test_type_transformer_fills_every_stage_but_the_last() -> None:
    # chronicles-prequel line 875: "78/12=6.5 - so the last stage has 1 block, while the rest have 7"
    assert stage_split(78, 12) == (7, 7, 1)
    assert stage_layers(78, 12) == 7
    # p divides L (Megatron-LM's requirement): every stage the same
    assert stage_split(72, 12) == (6, 6, 6)
    assert stage_split(72, 1) == (72, 72, 72)


def test_embedding_slots_give_the_first_and_last_stage_one_layer_less() -> None:
    # line 900: 'type:transformer|embedding' "so we use 2 layers less, to match `2+nlayers*PP` math to get
    # a perfect balance giving each embedding layer its own slot": 70 layers + 2 embeddings = 6 x 12
    assert stage_split(70, 12, embedding_slots=True) == (5, 6, 5)
    # the 206B of line 957: 82 + 2 = 84 = 7 x 12, so the first stage holds 6 layers and the embedding
    assert stage_split(82, 12, embedding_slots=True) == (6, 7, 6)
    # 72 + 2 = 74 slots over 12: the fullest stage holds 7, one more than without the slots
    assert stage_layers(72, 12, embedding_slots=True) == 7
    assert stage_layers(72, 12) == 6


def test_the_first_stage_holds_its_layers_and_the_embedding_a_middle_stage_only_layers() -> None:
    cfg = ModelConfig(layers=82, hidden=14336, heads=128, seq_len=2048, vocab=250880)
    train = TrainConfig(**BLOOM_LAYOUT, fp32_grads=True, framework="megatron-deepspeed", embedding_slots=True)  # type: ignore[arg-type]
    one_layer = transformer_params_per_gpu(cfg, TrainConfig(gbs=2048, mbs=2, tp=4, pp=82, dp=8))
    assert transformer_params_per_gpu(cfg, train, "first") == pytest.approx(6 * one_layer)
    assert transformer_params_per_gpu(cfg, train, "middle") == pytest.approx(7 * one_layer)
    assert transformer_params_per_gpu(cfg, train) == pytest.approx(7 * one_layer)  # the fullest sets the pace
    assert embedding_params_per_gpu(cfg, train, "middle") == 0
    # V·h/t = 250880 x 14336 / 4 = 899M parameters: more than one 617M-parameter layer (line 900: "250k
    # embedding matrix takes as much space as a single transformer layer"), so the first stage is busiest
    assert embedding_params_per_gpu(cfg, train, "first") > one_layer
    first = stage_memory(cfg, train, stage="first")
    middle = stage_memory(cfg, train, stage="middle")
    assert first.total > middle.total
    assert memory_per_gpu(cfg, train).total == first.total


def test_a_middle_stage_is_the_busiest_when_the_embedding_is_small() -> None:
    # a 32k vocabulary at h 4096 is 0.5 of a layer's parameters: the stage of 7 layers outweighs 6 + embedding
    cfg = ModelConfig(layers=82, hidden=4096, heads=32, seq_len=2048, vocab=32000)
    train = TrainConfig(**BLOOM_LAYOUT, fp32_grads=True, framework="megatron-deepspeed", embedding_slots=True)  # type: ignore[arg-type]
    middle = stage_memory(cfg, train, stage="middle")
    assert middle.total > stage_memory(cfg, train, stage="first").total
    assert memory_per_gpu(cfg, train).total == middle.total


def test_deepspeed_keeps_one_stage_output_per_pipe_buffer() -> None:
    # TrainSchedule.num_pipe_buffers = max(2, min(stages - stage_id + 1, micro_batches))
    train = TrainConfig(**BLOOM_LAYOUT, framework="megatron-deepspeed")  # type: ignore[arg-type]
    assert (deepspeed_pipe_buffers(train, "first"), deepspeed_pipe_buffers(train, "middle")) == (13, 12)
    assert deepspeed_pipe_buffers(train, "last") == 2
    few = TrainConfig(**{**BLOOM_LAYOUT, "gbs": 48}, framework="megatron-deepspeed")  # type: ignore[arg-type]
    assert deepspeed_pipe_buffers(few, "first") == 3  # m = 48 / (8 x 2) = 3 micro-batches
    megatron = TrainConfig(**BLOOM_LAYOUT)  # type: ignore[arg-type]
    assert deepspeed_pipe_buffers(megatron, "first") == 0
    cfg = ModelConfig(layers=72, hidden=14336, heads=64, seq_len=2048, vocab=250000)
    sbh = 2048 * 2 * 14336
    checkpoints = 6 * 12 * 2 * sbh  # 6 layer inputs x 12 micro-batches in flight x 2 bytes
    rebuilt = activation_bytes_per_layer(2048, 2, 14336, 64, 4)
    assert activations_per_gpu(cfg, megatron) == pytest.approx(checkpoints + rebuilt)
    assert activations_per_gpu(cfg, train) == pytest.approx(checkpoints + rebuilt + 13 * 2 * sbh)


def test_the_partition_method_is_read_from_the_run() -> None:
    row = {
        "run_id": 1, "framework": "megatron-deepspeed", "layers": 70, "hidden": 14336, "heads": 112,
        "seq_len": 2048, "vocab": 250880, "tp": 4, "pp": 12, "dp": 8, "mbs": 2, "gbs": 2048,
        "gpus": 384, "precision": "bf16", "zero_stage": 1,
    }  # fmt: skip
    slots = run_inputs.build(row, {"pp_partition_method": "type:transformer|embedding"})
    plain = run_inputs.build(row, {"pp_partition_method": "type:transformer"})
    assert slots.train is not None and slots.train.embedding_slots
    assert plain.train is not None and not plain.train.embedding_slots
    as_config = run_inputs.build({**row, "pp_partition_method": "type:transformer|embed"}, {})
    assert as_config.train is not None and as_config.train.embedding_slots


def _megatron_interleaved_in_flight(p: int, v: int, m: int, rank: int, chunk_layers: list[int]) -> int:
    """Layer x micro-batch passes rank `rank` holds when its first backward pass starts, by walking
    Megatron-core's interleaved schedule: `num_warmup_microbatches` = 2(p - 1 - rank) + (v - 1)·p forward
    passes, then the first steady-state one, each of model chunk (k // p) % v (`get_model_chunk_id`,
    megatron/core/pipeline_parallel/schedules.py)."""
    warmup = min(m * v, 2 * (p - 1 - rank) + (v - 1) * p)
    forwards = min(m * v, warmup + 1)
    return sum(chunk_layers[(k // p) % v] for k in range(forwards))


@pytest.mark.parametrize(("p", "v", "m"), [(4, 2, 8), (16, 4, 384), (8, 5, 16), (4, 3, 4)])
def test_an_interleaved_stage_holds_what_megatrons_schedule_has_in_flight(p: int, v: int, m: int) -> None:
    """Each stage of an interleaved pipeline holds its warm-up's forward passes; the middle and last
    stages hold far more than 1F1B's p - 1 and one micro-batch (16 x 4 chunks: 77 and 49 chunk passes)."""
    cfg = ModelConfig(layers=2 * p * v, hidden=1024, heads=16, seq_len=2048, vocab=32000)
    train = TrainConfig(gbs=m, mbs=1, pp=p, dp=1, vp=v, recompute="none", sequence_parallel=False)
    per_layer = activations_per_gpu(cfg, train, stage="middle") / layers_in_flight(cfg, train, "middle")
    for stage, rank in (("first", 0), ("middle", 1), ("last", p - 1)):
        expected = _megatron_interleaved_in_flight(p, v, m, rank, [2] * v)
        assert layers_in_flight(cfg, train, stage) == expected
        logits = 4 * cfg.seq_len * cfg.vocab if stage == "last" else 0
        assert activations_per_gpu(cfg, train, stage=stage) == pytest.approx(expected * per_layer + logits)
    # the first stage is Korthikanti et al.'s k·p·(1 + (p - 1)/(p·v)) with k = 2v layers a stage, where
    # the batch has that many passes (m = p, v = 3: all 12 chunk passes are in flight, not 15)
    if m * v >= v * p + p - 1:
        assert layers_in_flight(cfg, train, "first") == pytest.approx(
            2 * v * min(p, m) * (1 + (p - 1) / (p * v))
        )


def test_an_interleaved_stage_short_of_a_layer_lacks_it_in_its_first_or_last_chunk() -> None:
    """Embedding and loss slots (126 layers + 2 over PP 16 x VP 4: chunks of 2, the first chunk of the
    first stage and the last chunk of the last with one): the first stage holds 2p - 1 passes of its
    one-layer chunk, the last stage one."""
    p, v, m = 16, 4, 384
    cfg = ModelConfig(layers=126, hidden=1024, heads=16, seq_len=2048, vocab=32000)
    train = TrainConfig(gbs=m, mbs=1, pp=p, dp=1, vp=v, embedding_slots=True)
    assert stage_split(126, p, embedding_slots=True) == (7, 8, 7)
    first = _megatron_interleaved_in_flight(p, v, m, 0, [1, 2, 2, 2])
    last = _megatron_interleaved_in_flight(p, v, m, p - 1, [2, 2, 2, 1])
    assert (layers_in_flight(cfg, train, "first"), first) == (127, 127)
    assert (layers_in_flight(cfg, train, "middle"), layers_in_flight(cfg, train, "last"), last) == (
        154,
        97,
        97,
    )


# Invented figures in the shape of Megatron-LM's arguments block: 30 layers that split over PP 4 x VP 2
# only once the embedding and the loss take a layer's slot each (30 + 2 = 32 = 4 x 2 x 4).
MEGATRON_SLOTS_LOG = """\
------------------------ arguments ------------------------
  account_for_embedding_in_pipeline_split ......... True
  account_for_loss_in_pipeline_split .............. {loss}
  bf16 ............................................ True
  ffn_hidden_size ................................. 28672
  global_batch_size ............................... 256
  hidden_size ..................................... 8192
  micro_batch_size ................................ 1
  num_attention_heads ............................. 64
  num_layers ...................................... 30
  num_query_groups ................................ 8
  padded_vocab_size ............................... 128256
  pipeline_model_parallel_size .................... 4
  seq_length ...................................... 8192
  sequence_parallel ............................... True
  swiglu .......................................... True
  tensor_model_parallel_size ...................... 8
  transformer_impl ................................ transformer_engine
  use_distributed_optimizer ....................... True
  virtual_pipeline_model_parallel_size ............ 2
  world_size ...................................... 64
-------------------- end of arguments ---------------------
 [2025-11-03 09:12:40] iteration       10/     100 | consumed samples:         2560 | elapsed time per iteration (ms): 9120.4 | learning rate: 1.000000E-04 | global batch size:   256 | lm loss: 9.120000E+00 | loss scale: 1.0 | grad norm: 3.210 | number of skipped iterations:   0 | number of nan iterations:   0 |
"""


@pytest.mark.parametrize(("loss", "slots"), [("True", True), ("False", False)])
def test_megatrons_embedding_and_loss_slots_come_from_its_arguments(tmp_path, loss: str, slots: bool) -> None:
    """`--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split` (Megatron-core
    `get_num_layers_to_build`): the first and last stages hold 7 layers, the others 8, and the first
    stage's first chunk holds 3 of them."""
    log = tmp_path / "train.log"
    log.write_text(MEGATRON_SLOTS_LOG.format(loss=loss))
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)], gpu="h100-sxm5-80gb")
    with api.connect(db) as store:
        (run,) = run_inputs.load(store)
    assert run.train is not None and run.cfg is not None
    assert run.train.embedding_slots is slots
    if slots:
        assert stage_split(30, 4, run.train.embedding_slots) == (7, 8, 7)
        # rank 0: 2·3 + 1·4 + 1 = 11 chunk passes of 4 layers, 2p - 1 = 7 of them one layer short
        assert layers_in_flight(run.cfg, run.train, "first") == 11 * 4 - 7
        assert layers_in_flight(run.cfg, run.train, "middle") == (2 * 2 + 4 + 1) * 4
