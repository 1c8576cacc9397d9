"""The Hugging Face Trainer's log: logged dicts placed at the training bar's step, the run's shape from the
Trainer's start block, the model's configuration and DeepSpeed's echo, and the ways a log says no step.

The inline logs are invented, modeled on transformers' ProgressCallback/PrinterCallback output and
LLaMA-Factory's trainer_log.jsonl; their figures are not measurements."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.conftest import SAMPLES, rows_by_table
from tracelog import api, parsers
from tracelog.parsers import deepspeed, hf_trainer
from tracelog.parsers.base import head_text

SAMPLE = SAMPLES / "hf_trainer_deepspeed_zero3_llama2_7b.log"


def collect(text: str) -> dict[str, list[dict]]:
    return rows_by_table(hf_trainer.parse, text)


def params(out: dict[str, list[dict]], run: int = 0) -> dict[str, str]:
    return {p["name"]: p["value"] for p in out["runs"][run]["run_params"]}


def test_the_sample_is_the_trainers_and_not_deepspeeds() -> None:
    """The sample carries DeepSpeed's engine lines too: the Trainer's parser reads both, DeepSpeed's
    would leave every logged loss unparsed."""
    head = head_text(SAMPLE.read_bytes()[: parsers.HEAD_BYTES])
    assert parsers.detect(head, SAMPLE.name) is hf_trainer
    assert deepspeed.detect(head) > 0  # it would claim the file if the Trainer's parser did not
    pure = head_text((SAMPLES / "deepspeed_zero2_gpt2_1b3.log").read_bytes()[: parsers.HEAD_BYTES])
    assert hf_trainer.detect(pure) == 0


def test_the_sample_lands_one_row_per_logged_step(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(SAMPLE)])
    assert (result.format, result.runs) == ("hf_trainer", 1)
    rows = api.sql(
        db, "SELECT iteration, elapsed_s, lm_loss, grad_norm, learning_rate FROM iterations ORDER BY line_no"
    )
    assert rows.iteration.tolist() == list(range(10, 601, 10))
    first = rows.iloc[0]
    # line 92: `... 10/600 [00:50<44:04,  4.48s/it]` then `{'loss': 1.6036, 'grad_norm': 0.946332, ...`
    assert (first.elapsed_s, first.lm_loss, first.grad_norm, first.learning_rate) == (
        4.48, 1.6036, 0.946332, 1.11111e-05
    )  # fmt: skip
    runs = api.sql(
        db,
        "SELECT framework, gpus, dp, mbs, gbs, train_iters, zero_stage, precision, recompute, layers, hidden, "
        "heads, query_groups, ffn_hidden, vocab, swiglu, seq_len FROM runs",
    )
    assert tuple(runs.iloc[0]) == (
        "hf-trainer", 8, 8, 4, 128, 600, 3, "bf16", "full", 32, 4096, 32, 32, 11008, 32000, True, 512
    )  # fmt: skip
    # the evaluation at step 200 (its bar, 32 long, is not the training bar)
    val = api.sql(db, "SELECT iteration, value FROM iteration_metrics WHERE key = 'validation loss'")
    assert val.iteration.tolist() == [200, 400]
    # see_memory_usage: `CA 12.41 GB Max_CA 12 GB` (Max_CA rounded to whole GB) peaks at CA
    memory = api.sql(db, "SELECT max_allocated_mib, max_reserved_mib FROM memory ORDER BY line_no")
    assert memory.values.tolist() == [
        [pytest.approx(2.73 * 1024), pytest.approx(3 * 1024)],
        [pytest.approx(12.02 * 1024), pytest.approx(12.41 * 1024)],
    ]
    saved = api.sql(
        db,
        "SELECT text FROM events WHERE kind = 'checkpoint_saved' ORDER BY line_no",
    )
    assert [t.rsplit("-", 1)[1] for t in saved.text] == ["200", "400"]
    summary = api.sql(
        db, "SELECT name, value FROM run_params WHERE name IN ('train_runtime', 'step_source') ORDER BY name"
    )
    assert summary.values.tolist() == [["step_source", "tqdm bar"], ["train_runtime", "2569.7928"]]
    # the torchrun banner, DeepSpeed's memory headings, the config's path line and the closing words are kept;
    # the engine's start lines are parameters
    assert result.lines_unparsed == 14
    engine = api.sql(
        db, "SELECT value FROM run_params WHERE name LIKE 'deepspeed.%' AND line_no < 70 ORDER BY line_no"
    )
    assert engine.value.tolist() == ["nccl", "0.15.4", "BF16 ZeRO stage 3 optimizer"]


def test_a_log_without_a_bar_counts_its_steps_by_logging_steps() -> None:
    """`disable_tqdm=True`: PrinterCallback prints the dicts alone; the printed arguments say how many
    steps lie between two of them."""
    text = (
        "Training/evaluation parameters TrainingArguments(\n"
        "_n_gpu=1,\n"
        "logging_steps=25,\n"
        "max_seq_length=1024,\n"
        "per_device_train_batch_size=2,\n"
        ")\n"
        "{'loss': 2.3012, 'learning_rate': 4.9e-05, 'epoch': 0.02}\n"
        "{'loss': 2.1004, 'learning_rate': 4.8e-05, 'epoch': 0.04}\n"
        "{'loss': 2.0533, 'learning_rate': 4.7e-05, 'epoch': 0.06}\n"
    )
    out = collect(text)
    assert [r["iteration"] for r in out["iterations"]] == [25, 50, 75]
    assert [r["elapsed_s"] for r in out["iterations"]] == [None] * 3
    assert params(out)["step_source"] == "count x logging_steps"
    # TRL's truncation length is the sequence length the model takes; without packing, an upper bound
    assert out["runs"][0]["seq_len"] == 1024 and "seq_len_assumed" in params(out)
    bare = collect(text.split(")\n", 1)[1])
    assert [r["iteration"] for r in bare["iterations"]] == [1, 2, 3]
    assert params(bare)["step_source"] == "count of logged lines"
    assert [m["key"] for m in bare["iteration_metrics"]] == ["epoch"] * 3


def test_wrapped_numbers_nan_and_the_rate_in_steps_per_second(tmp_path: Path) -> None:
    """numpy 2 prints `np.float64(...)`; some versions logged the grad norm as a tensor; a rate over one
    step a second is `it/s`; a NaN loss is a NaN iteration, flagged."""
    log = tmp_path / "hf.log"
    log.write_text(
        "***** Running training *****\n"
        "  Num examples = 1,000\n"
        "  Total optimization steps = 30\n"
        "\r 33%|███▎      | 10/30 [00:06<00:12,  1.60it/s]\r" + " " * 40 + "\r"
        "{'loss': 2.5, 'grad_norm': np.float64(1.25), 'learning_rate': 1e-05, 'epoch': 0.33}\n"
        "\r 67%|██████▋   | 20/30 [00:12<00:06,  1.61it/s]\r" + " " * 40 + "\r"
        "{'loss': nan, 'grad_norm': tensor(nan, device='cuda:0'), 'learning_rate': 1e-05, 'epoch': 0.67}\n"
        "\r100%|██████████| 30/30 [00:18<00:00,  1.62it/s]\r" + " " * 40 + "\r"
        "{'loss': nan, 'grad_norm': tensor(nan, device='cuda:0'), 'learning_rate': 1e-05, 'epoch': 1.0}\n"
    )
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(log)])
    assert result.lines_unparsed == 0
    rows = api.sql(db, "SELECT iteration, elapsed_s, lm_loss, grad_norm FROM iterations ORDER BY iteration")
    assert rows.iteration.tolist() == [10, 20, 30]
    assert rows.elapsed_s.tolist() == pytest.approx([1 / 1.60, 1 / 1.61, 1 / 1.62])
    assert rows.grad_norm[0] == 1.25 and math.isnan(rows.grad_norm[1])
    flags = api.sql(db, "SELECT severity, message FROM flags WHERE rule = 'training_health'")
    assert flags.values.tolist() == [
        ["critical", "2 NaN iteration(s), the first in the interval ending at iteration 20."]
    ]


def test_llama_factory_lines_carry_their_step_and_clock() -> None:
    """LLaMA-Factory's trainer_log.jsonl: the step is printed, seconds per step come from the elapsed clock;
    a step counted again starts a new run (a resumed job appending to the same file)."""
    line = (
        '{{"current_steps": {step}, "total_steps": 11250, "loss": {loss}, "eval_loss": null, '
        '"learning_rate": 7.04e-05, "epoch": 0.39, "percentage": 0.78, "elapsed_time": "{clock}", '
        '"remaining_time": "7 days, 4:55:18"}}\n'
    )
    text = "".join(
        line.format(step=s, loss=loss, clock=c)
        for s, loss, c in [
            (87, 0.91, "1:20:52"),
            (88, 0.9, "1:21:47"),
            (90, 0.88, "1:23:38"),
            (10, 1.4, "0:09:01"),
        ]
    )
    out = collect(text)
    rows = out["iterations"]
    assert [(r["run_key"], r["iteration"]) for r in rows] == [(0, 87), (0, 88), (0, 90), (1, 10)]
    assert [r["elapsed_s"] for r in rows] == [None, 55.0, 55.5, None]
    assert [r["train_iters"] for r in out["runs"]] == [11250, 11250]
    assert params(out)["step_source"] == "logged step"


def test_a_second_training_block_is_a_second_run() -> None:
    text = (
        "***** Running training *****\n"
        "  Instantaneous batch size per device = 8\n"
        "  Total train batch size (w. parallel, distributed & accumulation) = 64\n"
        "  Gradient Accumulation steps = 2\n"
        "  Total optimization steps = 100\n"
        "{'loss': 2.0, 'learning_rate': 1e-05, 'epoch': 0.1}\n"
        "Traceback (most recent call last):\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
        "***** Running training *****\n"
        "  Continuing training from global step 40\n"
        "  Instantaneous batch size per device = 4\n"
        "{'loss': 1.8, 'learning_rate': 1e-05, 'epoch': 0.5}\n"
    )
    out = collect(text)
    assert [(r["run_key"], r.get("mbs"), r.get("gbs"), r.get("dp")) for r in out["runs"]] == [
        (0, 8, 64, 4), (1, 4, None, None)
    ]  # fmt: skip
    assert [(e["run_key"], e["kind"]) for e in out["events"]] == [
        (0, "traceback"), (0, "oom"), (1, "checkpoint_loaded")
    ]  # fmt: skip


def test_deepspeeds_step_lines_give_the_logged_steps_their_skips(tmp_path: Path) -> None:
    """An fp16 run on DeepSpeed whose loss scaler skips nearly every step (as transformers#14531 reported
    for T5): DeepSpeed's running count on its step lines, one of them written behind the bar without a
    newline, becomes each logged step's skips, and the run is flagged as barely trained."""
    bar = "  8%|#         | {0}/24128 [1:52:09<20:27:23,  3.33s/it]"
    step = (
        "[2021-11-26 03:07:16,494] [INFO] [logging.py:69:log_dist] [Rank 0] step={0}, skipped={1}, lr=[0.001]"
    )
    loss = "{'loss': 0.0, 'learning_rate': 0.001, 'epoch': 0.04}"
    log = tmp_path / "t5.log"
    log.write_text(
        "\r".join([bar.format(1990), loss])
        + "\n"
        + bar.format(1999)
        + step.format(2000, 1995)
        + "\n"
        + "\r".join([bar.format(2000), loss])
        + "\n"
        + step.format(2010, 2005)
        + "\n"
        + "\r".join([bar.format(2010), loss])
        + "\n"
    )
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(log)])
    assert (result.format, result.lines_unparsed) == ("hf_trainer", 0)
    rows = api.sql(db, "SELECT iteration, coalesce(skipped, -1) FROM iterations ORDER BY iteration")
    assert rows.values.tolist() == [[1990, -1], [2000, 0], [2010, 10]]  # none known before the first
    (flag,) = api.sql(db, "SELECT message FROM flags WHERE severity = 'critical'").message
    assert "2005 of about 2010 iterations were skipped" in flag


def test_the_loss_scalers_overflows_without_step_lines_are_events_skips_and_the_scale(tmp_path: Path) -> None:
    """DeepSpeed prints `OVERFLOW! Rank 0 Skipping step` behind the Trainer's bar (no newline) and no step
    line at the default `steps_per_print`: each is an `overflow` event, those since the last dict are the
    next dict's skips, and the scale it reduced to is that row's (invented, the shape of a LLaMA fp16
    fine-tune's log; loss_scaler.py's words)."""
    bar = " 14%|█▍        | {0}/2724 [13:58:09<86:18:35, 132.44s/it]"
    overflow = (
        "[2023-06-07 22:16:00,018] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! Rank 0 "
        "Skipping step. Attempted loss scale: {0}, reducing to {1}"
    )
    log = tmp_path / "fp16.log"
    log.write_text(
        "\n".join(
            [
                bar.format(377),
                bar.format(378) + overflow.format(64, 32),
                bar.format(379) + overflow.format(32, 16),
                bar.format(380),
                "{'loss': 2.0491, 'learning_rate': 0.0001961913563176343, 'epoch': 0.28}",
                bar.format(381) + overflow.format(16, 8),
                bar.format(390),
                "{'loss': 2.0412, 'learning_rate': 0.0001961, 'epoch': 0.29}",
            ]
        )
        + "\n"
    )
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(log)])
    assert (result.format, result.lines_unparsed) == ("hf_trainer", 0)
    rows = api.sql(db, "SELECT iteration, skipped, loss_scale FROM iterations ORDER BY iteration")
    assert rows.values.tolist() == [[380, 2, 16.0], [390, 1, 8.0]]
    events = api.sql(db, "SELECT line_no FROM events WHERE kind = 'overflow' ORDER BY line_no")
    assert events.line_no.tolist() == [2, 3, 6]


def test_without_a_bar_or_logging_steps_the_epoch_gives_the_step_and_the_loggers_clock_its_time() -> None:
    """A LLaMA-Factory log written by its logger alone (no bar, `logging_steps` only in the YAML): the
    Trainer's epoch is step / steps-per-epoch, which the `Running training` block gives (2,182 examples,
    1 per device on 2 ranks, 64 accumulation steps: 17 steps an epoch), and the prefix's clock over the
    steps between two dicts is the step time (invented, in the shape of LLaMA-Factory's running log)."""
    block = "[INFO|2024-11-26 22:07:15] trainer.py:{0} >> {1}"
    lines = [
        block.format(2313, "***** Running training *****"),
        block.format(2314, "  Num examples = 2,182"),
        block.format(2315, "  Num Epochs = 1,000"),
        block.format(2316, "  Instantaneous batch size per device = 1"),
        block.format(2319, "  Total train batch size (w. parallel, distributed & accumulation) = 128"),
        block.format(2320, "  Gradient Accumulation steps = 64"),
        block.format(2321, "  Total optimization steps = 17,000"),
        "[INFO|2024-11-26 22:09:01] logging.py:157 >> {'loss': 2.2818, 'learning_rate': 2.5000e-06, 'epoch': 0.29}",
        "[INFO|2024-11-26 22:10:54] logging.py:157 >> {'loss': 2.2647, 'learning_rate': 5.0000e-06, 'epoch': 0.59}",
        "[INFO|2024-11-26 22:12:37] logging.py:157 >> {'loss': 2.3045, 'learning_rate': 7.5000e-06, 'epoch': 0.88}",
        # an epoch rounded to two decimals (19.38 steps): the interval the first two dicts showed places it
        "[INFO|2024-11-26 22:14:22] logging.py:157 >> {'loss': 2.8274, 'learning_rate': 1.0000e-05, 'epoch': 1.14}",
    ]
    out = collect("\n".join(lines) + "\n")
    steps = [(r["iteration"], r["elapsed_s"]) for r in out["iterations"]]
    assert steps == [(5, None), (10, 22.6), (15, 20.6), (20, 21.0)]
    assert params(out)["step_source"] == "epoch x steps per epoch"


def test_transformers_4_50_strings_a_bar_on_the_dicts_line_and_a_logger_prefix(tmp_path: Path) -> None:
    """Newer transformers prints each number as a string (`f"{v:.4g}"`); a log whose carriage returns were
    lost has the bar and the dict on one line; LLaMA-Factory logs each step's dict twice, once through its
    logger (with `throughput`), once plain. Invented lines in those shapes."""
    bar = "{p:3d}%|██        | {s}/50 [00:17<01:06,  1.67s/it]"
    text = (
        bar.format(p=20, s=10) + "{'loss': '0.6957', 'grad_norm': '0.8901', 'learning_rate': '3.333e-05', "
        "'epoch': '0.2', 'global_step/max_steps': '10/50'}\n"
        + bar.format(p=40, s=20)
        + "[INFO|2025-04-30 22:55:57] llamafactory.train.callbacks:143 >> {'loss': 0.6012, 'learning_rate': "
        "2.9e-05, 'epoch': 0.4, 'throughput': 1828.21}\n"
        "{'loss': 0.6012, 'grad_norm': 0.75, 'learning_rate': 2.9e-05, 'epoch': 0.4}\n"
    )
    head = head_text(text.encode())
    assert parsers.detect(head, "x.log") is hf_trainer
    out = collect(text)
    rows = out["iterations"]
    assert [(r["iteration"], r["lm_loss"], r["grad_norm"], r["elapsed_s"]) for r in rows] == [
        (10, 0.6957, 0.8901, 1.67), (20, 0.6012, 0.75, 1.67)
    ]  # fmt: skip
    metrics = {(m["iteration"], m["key"]): m["value"] for m in out["iteration_metrics"]}
    assert metrics == {(10, "epoch"): 0.2, (20, "epoch"): 0.4, (20, "throughput"): 1828.21}
    assert "unparsed" not in out


def test_a_relaunch_after_the_summary_is_a_new_run_and_evaluation_figures_stay_the_evaluations() -> None:
    text = (
        "***** Running training *****\n"
        "  Num examples = 5,995\n"
        "  Total optimization steps = 20\n"
        "{'loss': 2.0, 'learning_rate': 1e-05, 'epoch': 0.5}\n"
        "***** Running Evaluation *****\n"
        "  Num examples = 667\n"
        "{'train_runtime': 60.1, 'train_samples_per_second': 9.9, 'train_steps_per_second': 0.33, "
        "'train_loss': 2.0, 'epoch': 1.0}\n"
        "100%|██████████| 20/20 [01:00<00:00,  3.01s/it]\n"
        "{'loss': 6.4573, 'learning_rate': 1e-05, 'epoch': 0.05}\n"
    )
    out = collect(text)
    assert [(r["run_key"], r["iteration"], r["elapsed_s"]) for r in out["iterations"]] == [
        (0, 1, None),
        (1, 1, None),
    ]
    assert [p["value"] for p in out["runs"][0]["run_params"] if p["name"] == "num_examples"] == ["5995"]


def test_an_fp16_scalers_overflow_beside_a_finite_loss_is_no_nan(tmp_path: Path) -> None:
    """The Trainer keeps no skip count: `'grad_norm': nan` beside a finite loss is the fp16 scaler's
    overflow, unless the run has no scaler (bf16) or the loss beside it is 0.0 (weights gone NaN)."""
    lines = [
        f"{{'loss': {loss}, 'grad_norm': {norm}, 'learning_rate': 1e-05, 'epoch': 0.{k}}}"
        for k, (loss, norm) in enumerate(
            [
                (2.0, 1.0),
                (1.9, 1.0),
                (1.8, "nan"),
                (1.7, 1.0),
                (1.6, 1.0),
                (1.5, 1.0),
                (1.4, "inf"),
                (1.3, 1.0),
            ]
        )
    ]
    for precision, nan_flags in (("fp16", 0), ("bf16", 1)):
        log = tmp_path / f"{precision}.log"
        args = f"TrainingArguments(\n{precision}=True,\nlogging_steps=10,\n)\n"
        log.write_text(args + "\n".join(lines) + "\n")
        db = tmp_path / f"{precision}.duckdb"
        api.ingest(db, [str(log)], parser="hf_trainer")
        flags = api.sql(db, "SELECT message FROM flags WHERE message LIKE '%NaN%'").message.tolist()
        assert len(flags) == nan_flags, (precision, flags)
        if nan_flags:
            assert flags[0].startswith("2 NaN iteration(s), the first in the interval ending at iteration 30")


def test_one_dict_is_the_trainers_unless_deepspeeds_step_lines_claim_the_log() -> None:
    """A pasted single step of TRL's GRPO trainer (invented values, 4.50 strings behind its bar) is the
    Trainer's; the same dict quoted in a DeepSpeed log with its `step=N, skipped=K` lines stays DeepSpeed's."""
    bar = "  4%|▍         | 9/200 [03:00<1:04:17, 20.20s/it]"
    one = (
        bar
        + "{'loss': '-0.007415', 'grad_norm': '0.2584', 'learning_rate': '9.6e-07', 'num_tokens': '4.996e+04'}\n"
    )
    assert parsers.detect(head_text(one.encode()), "grpo.log") is hf_trainer
    (row,) = collect(one)["iterations"]
    assert (row["iteration"], row["lm_loss"], row["elapsed_s"]) == (9, -0.007415, 20.2)
    quoted = "{'loss': 0.0, 'learning_rate': 0.001, 'epoch': 0.04}\n" + (
        "[2021-11-26 03:07:16,494] [INFO] [logging.py:69:log_dist] [Rank 0] step=2000, skipped=1995, lr=[0.001]\n"
    )
    assert parsers.detect(head_text(quoted.encode()), "t5.log") is deepspeed


def test_llamafactorys_pair_is_one_step_and_a_different_dict_after_a_bar_is_the_next() -> None:
    """LLaMA-Factory prints a step through its logger (four decimals) and then the Trainer's dict: one
    row, with or without a bar before them. A dict that says another loss, learning rate or epoch is
    another step even when no bar moved in between (a log whose bar redraws were lost). Invented lines
    in those shapes."""
    logger = "[INFO|2024-12-08 01:09:59] llamafactory.train.callbacks:157 >> "
    bar = "  1%|▍         | {s}/6249 [08:38<11:33:05,  6.74s/it]"
    text = (
        logger + "{'loss': 0.0, 'learning_rate': 4.9985e-05, 'epoch': 0.03}\n"
        "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 4.998452110450943e-05, 'epoch': 0.03}\n"
        + bar.format(s=75)
        + logger
        + "{'loss': 0.0, 'learning_rate': 4.9982e-05, 'epoch': 0.04}\n"
        "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 4.998223113110496e-05, 'epoch': 0.04}\n"
        + bar.format(s=80)
        + "{'loss': 60.5735, 'grad_norm': nan, 'learning_rate': 8.0e-06, 'epoch': 0.12}\n"
        "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 1.6e-05, 'epoch': 0.24}\n"
    )
    rows = collect(text)["iterations"]
    steps = [(r["iteration"], r["lm_loss"], r["learning_rate"]) for r in rows]
    assert steps == [(1, 0.0, 4.9985e-05), (75, 0.0, 4.9982e-05), (80, 60.5735, 8e-06), (81, 0.0, 1.6e-05)]
    assert [math.isnan(r["grad_norm"]) for r in rows] == [True, True, True, True]  # from the Trainer's dicts


def test_ms_swifts_dicts_name_their_step_total_memory_and_clock() -> None:
    """ms-swift adds `'global_step/max_steps': '5/16'`, `'memory(GiB)'` (the devices' largest
    max_memory_reserved) and `'elapsed_time': '28s'` to the Trainer's dict (invented figures)."""
    line = (
        "{{'loss': {loss}, 'grad_norm': 2.44835496, 'learning_rate': 0.0001, 'token_acc': 0.56, 'epoch': 0.06, "
        "'global_step/max_steps': '{s}/16', 'percentage': '6.25%', 'elapsed_time': '{t}', 'remaining_time': "
        "'2m 6s', 'memory(GiB)': {m}, 'train_speed(iter/s)': 0.118837}}\n"
    )
    text = line.format(loss=2.93, s=1, t="8s", m=24.8) + line.format(loss=2.91, s=5, t="1m 8s", m=57.91)
    out = collect(text)
    assert [(r["iteration"], r["elapsed_s"]) for r in out["iterations"]] == [(1, None), (5, 15.0)]
    assert out["runs"][0]["train_iters"] == 16
    assert [(m["iteration"], m["max_reserved_mib"]) for m in out["memory"]] == [
        (1, pytest.approx(24.8 * 1024)),
        (5, pytest.approx(57.91 * 1024)),
    ]
    assert not any(m["key"] == "memory(GiB)" for m in out["iteration_metrics"])


def test_a_run_that_logs_no_dict_gets_its_steps_from_the_training_bar() -> None:
    """The Trainer logs every `logging_steps` (500 by default): a shorter run prints its bar and its closing
    summary only. The bar the `Running training` block names gives each step's time (tqdm's rate); a bar
    of another length (a data loader's) gives nothing. Invented lines in those shapes, the bar's carriage
    returns kept."""
    bar = "{p:3d}%|██        | {s}/{t} [00:{e:02d}<00:50, {r}s/it]"
    text = (
        "***** Running training *****\n"
        "  Total optimization steps = 4\n"
        + "\r".join(bar.format(p=10, s=s, t=30, e=s, r="0.50") for s in (1, 2, 3))
        + "\n"
        + "\r".join(
            bar.format(p=25 * s, s=s, t=4, e=s * 3, r=r)
            for s, r in ((0, "0.00"), (1, "3.10"), (1, "3.05"), (2, "2.90"), (3, "2.95"), (4, "2.93"))
        )
        + "\n{'train_runtime': 12.1, 'train_samples_per_second': 2.6, 'train_steps_per_second': 0.33, "
        "'train_loss': 1.9, 'epoch': 1.0}\n"
    )
    out = collect(text)
    rows = [(r["iteration"], r["elapsed_s"], r["lm_loss"]) for r in out["iterations"]]
    assert rows == [(1, 3.05, None), (2, 2.9, None), (3, 2.95, None), (4, 2.93, None)]
    params = {p["name"]: p["value"] for p in out["runs"][0]["run_params"]}
    assert params["step_source"] == "tqdm bar, no logged dict"


def test_a_logs_tail_with_the_closing_train_runtime_dict_is_the_trainers() -> None:
    # The end of an axolotl run in the shape its user pasted (axolotl-ai-cloud/axolotl#1092): the last bar,
    # warnings, `train()`'s closing dict and a traceback; no step dict and no Running block in it.
    tail = (
        " 100%|██████████| 773/773 [11:41:18<00:00, 50.90s/it]\n"
        "{'train_runtime': 42088.2092, 'train_samples_per_second': 8.1, 'train_steps_per_second': 0.018, "
        "'train_loss': 0.7072060618641152, 'epoch': 1.0}\n"
        "Traceback (most recent call last):\n"
    )
    assert parsers.detect(head_text(tail.encode()), "tail.log").FORMAT == "hf_trainer"
    assert params(collect(tail))["train_runtime"] == "42088.2092"


def test_the_same_dict_from_every_nodes_launcher_prefix_is_one_step() -> None:
    """LLaMA-Factory launched on four nodes through pdsh (its issue 813): each node's main process logs
    every dict and pdsh puts the node's address before it, in whichever order the nodes flush. The first
    print is the step's; a node printing the same dict again is another step. Invented values."""
    hosts = ("10.96.202.43", "10.96.202.17", "10.96.202.16", "10.96.202.40")
    dicts = (
        "{'loss': 1.9021, 'learning_rate': 4.99998e-05, 'epoch': 0.0}",
        "{'loss': 0.8129, 'learning_rate': 4.99995e-05, 'epoch': 0.0}",
        "{'loss': 0.6417, 'learning_rate': 4.99989e-05, 'epoch': 0.0}",
        "{'eval_loss': 0.6530, 'eval_runtime': 12.1, 'epoch': 0.0}",
    )
    orders = (hosts, hosts, (hosts[2], hosts[0], hosts[3], hosts[1]), (hosts[1], *hosts[2:], hosts[0]))
    lines = [f"{host}: {d}" for d, order in zip(dicts, orders, strict=True) for host in order]
    lines.append(f"{hosts[1]}: {dicts[2]}")  # one node again: the same figures, the next step
    text = "\n".join(lines) + "\n"
    assert parsers.detect(head_text(text.encode()), "train.log") is hf_trainer
    out = collect(text)
    steps = [(r["iteration"], r["lm_loss"], r["line_no"]) for r in out["iterations"]]
    assert steps == [(1, 1.9021, 1), (2, 0.8129, 5), (3, 0.6417, 9), (4, 0.6417, 17)]
    assert [
        (m["iteration"], m["key"], m["value"]) for m in out["iteration_metrics"] if m["key"] != "epoch"
    ] == [
        (3, "validation loss", 0.653),
        (3, "eval_runtime", 12.1),
    ]
    assert "unparsed" not in out
    # a log read while it grows: each head's steps are the whole log's first ones
    for cut in range(1, len(lines)):
        head = collect("\n".join(lines[:cut]) + "\n").get("iterations", [])
        assert [(r["iteration"], r["lm_loss"]) for r in head] == [s[:2] for s in steps[: len(head)]]


def test_llmtuners_callback_logger_pairs_with_the_trainers_dict_and_its_clock_gives_the_step_time() -> None:
    """LLaMA-Factory before 0.6 (`llmtuner`) logs each step through Python's logging in the example
    scripts' format (`%m/%d/%Y %H:%M:%S - INFO - name - `), then the Trainer prints its own dict: one
    step, its time the clock's between two of them. Invented lines in the shape of its issue 2810."""
    block = "[INFO|trainer.py:{0}] 2024-03-12 11:24:23,876 >>   {1}"
    callback = "03/12/2024 11:{0} - INFO - llmtuner.extras.callbacks - "
    text = "\n".join(
        [
            block.format(1815, "Instantaneous batch size per device = 2"),
            block.format(1820, "Total optimization steps = 1,548"),
            callback.format("24:33") + "{'loss': 0.9210, 'learning_rate': 4.9999e-05, 'epoch': 0.01}",
            "{'loss': 0.921, 'grad_norm': 0.4127, 'learning_rate': 4.999871292419044e-05, 'epoch': 0.01}",
            callback.format("24:42") + "{'loss': 0.8805, 'learning_rate': 4.9995e-05, 'epoch': 0.02}",
            "{'loss': 0.8805, 'grad_norm': nan, 'learning_rate': 4.999485182928687e-05, 'epoch': 0.02}",
            callback.format("25:06") + "{'loss': 0.8412, 'learning_rate': 4.9988e-05, 'epoch': 0.03}",
        ]
    )
    assert parsers.detect(head_text(text.encode()), "train.log") is hf_trainer
    out = collect(text + "\n")
    rows = [(r["iteration"], r["lm_loss"], r["elapsed_s"], r["line_no"]) for r in out["iterations"]]
    assert rows == [(1, 0.921, None, 3), (2, 0.8805, 9.0, 5), (3, 0.8412, 24.0, 7)]
    assert out["iterations"][0]["grad_norm"] == 0.4127 and math.isnan(out["iterations"][1]["grad_norm"])
    assert out["runs"][0]["train_iters"] == 1548
    assert "unparsed" not in out


def test_deepspeeds_timer_lines_are_read_at_the_steps_deepspeeds_parser_gives_them() -> None:
    """The Trainer on DeepSpeed with `wall_clock_breakdown` (DeepSpeed issue 1436, the Trainer's bar glued
    before a timer line): the timer lines were left unparsed once the Trainer's block made the log the
    Trainer's. They are read as the DeepSpeed parser reads them: the lines after the bar at 507 are step
    508's, the engine's after the step line of 510 that step's. Invented lines in that shape."""
    ds = "[2021-10-08 20:18:{s:02d},393] [INFO] [logging.py:68:log_dist] [Rank 0] "
    forward = "rank=0 time (ms) | forward: {f} | backward: 747.31 | backward_inner: 514.96 | step: 663.59"
    optimizer = (
        "rank=0 time (ms) | optimizer_allgather: 3.30 | optimizer_gradients: 76.24 | optimizer_step: 574.38"
    )
    bar = " 51%|█████     | {n}/1000 [15:{s:02d}<16:42,  2.03s/it]"
    lines = [
        "[INFO|trainer.py:1196] 2021-10-08 20:03:14,212 >> ***** Running training *****",
        "[INFO|trainer.py:1197] 2021-10-08 20:03:14,212 >>   Num examples = 4000",
        "[INFO|trainer.py:1204] 2021-10-08 20:03:14,212 >>   Total optimization steps = 1000",
        ds.format(s=46) + forward.format(f="316.00"),
        bar.format(n=507, s=32) + ds.format(s=48) + optimizer,
        ds.format(s=48) + forward.format(f="316.87"),
        bar.format(n=508, s=34),
        ds.format(s=50) + forward.format(f="317.02"),
        ds.format(s=54) + "step=510, skipped=0, lr=[4.9e-05], mom=[(0.9, 0.999)]",
        ds.format(s=54) + forward.format(f="318.40"),
    ]
    text = "\n".join(lines) + "\n"
    out = collect(text)
    assert "unparsed" not in out
    timers = [(t["iteration"], t["name"], t["time_ms"], t["rank"], t["line_no"]) for t in out["timers"]]
    assert [t for t in timers if t[1] in ("forward", "optimizer_step")] == [
        (None, "forward", 316.0, 0, 4),  # before any bar or step line: a tail's, of no known step
        (508, "optimizer_step", 574.38, 0, 5),
        (508, "forward", 316.87, 0, 6),
        (509, "forward", 317.02, 0, 8),
        (510, "forward", 318.4, 0, 10),
    ]
    assert len(timers) == 4 * 4 + 3  # four forward lines of four timers, one of the optimizer's three
    ds_out = rows_by_table(deepspeed.parse, text)
    assert timers == [
        (t["iteration"], t["name"], t["time_ms"], t["rank"], t["line_no"]) for t in ds_out["timers"]
    ]


def test_a_first_dict_before_any_bar_takes_the_step_of_the_bar_drawn_again_after_it() -> None:
    """tqdm's `write` prints the dict over the bar, then draws the bar again where it stood: the first
    dict of a paste that starts before any bar is at the step of the bar right after it (6), not the
    first of a count; the bar that follows (7) is the next dict's. In the shape of a LLaMA-Factory
    terminal copy (MIMIGenRec#3: bars on their own lines, a blank line after each dict, an erased bar of
    spaces before the next); figures invented."""
    bar = "  2%|▏         | {s}/390 [01:{t}<1:26:53, {r}s/it]"
    text = "\n".join(
        [
            "{'loss': 11.9034, 'grad_norm': 0.52, 'learning_rate': 1e-06, 'epoch': 0.15}",
            "",
            bar.format(s=6, t=33, r="13.58"),
            bar.format(s=7, t=46, r="13.26"),
            " " * 49,
            "{'loss': 11.8582, 'grad_norm': 0.49, 'learning_rate': 2e-06, 'epoch': 0.18}",
            "",
            bar.format(s=7, t=46, r="13.26"),
            bar.format(s=8, t=58, r="13.05"),
            " " * 49,
            "{'loss': 11.8021, 'grad_norm': 0.47, 'learning_rate': 3e-06, 'epoch': 0.21}",
        ]
    )
    out = collect(text + "\n")
    rows = [(r["iteration"], r["lm_loss"], r["elapsed_s"]) for r in out["iterations"]]
    assert rows == [(6, 11.9034, 13.58), (7, 11.8582, 13.26), (8, 11.8021, 13.05)]
    assert [(m["iteration"], m["value"]) for m in out["iteration_metrics"]] == [
        (6, 0.15),
        (7, 0.18),
        (8, 0.21),
    ]
    (run,) = out["runs"]
    assert [p["value"] for p in run["run_params"] if p["name"] == "step_source"] == ["tqdm bar"]
    # a lone dict and the bar drawn again after it, the end of the paste: the bar's step too
    (lone,) = collect("\n".join(text.split("\n")[:3]) + "\n")["iterations"]
    assert lone["iteration"] == 6
