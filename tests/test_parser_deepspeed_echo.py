"""DeepSpeed's configuration echo read where a cut took its `DeepSpeedEngine configuration:` line: its body
lines are DeepSpeedConfig.print's (runtime/config.py: `"  {} {} {}".format(arg, dots, value)`, the name and
its dots filling 29 columns) under DeepSpeed's logger tag `[config.py:N:print]`. The samples are invented, in
the shape of DeepSpeed#4305's excerpt (an editor's line numbers in front of each line)."""

from __future__ import annotations

from tests.test_parser_deepspeed import STEP, collect

TS = "[2023-05-02 14:10:07,412]"
ENGINE = f"{TS} [INFO] [logging.py:96:log_dist] [Rank 0]"
PRINT = f"{TS} [INFO] [config.py:960:print]"
# the lines between `Creating ... optimizer` and the middle of the echo were cut, as in the excerpt
CUT_ECHO = f"""\
  7 {ENGINE} DeepSpeed info: version=0.9.2, git-hash=unknown, git-branch=unknown
  8 {ENGINE} Creating fp16 ZeRO stage 2 optimizer
 61 {PRINT}   bfloat16_enabled ............. True
 62 {PRINT}   checkpoint_parallel_write_pipeline  False
 63 {PRINT}   fp16_auto_cast ............... None
 64 {PRINT}   fp16_enabled ................. False
 65 {PRINT}   gradient_accumulation_steps .. 8
 66 {PRINT}   gradient_clipping ............ 0.5
 67 {PRINT}   train_batch_size ............. 256
 68 {PRINT}   train_micro_batch_size_per_gpu  4
 69 {PRINT}   world_size ................... 8
"""


def params(out: dict[str, list[dict]]) -> dict[str, str]:
    return {p["name"]: p["value"] for run in out["runs"] for p in run.get("run_params", [])}


def test_the_echo_s_body_is_read_without_its_header() -> None:
    out = collect(CUT_ECHO + "  70 " + STEP + "\n")
    (run,) = out["runs"]
    assert (run["zero_stage"], run["precision"], run["mbs"], run["gbs"], run["dp"]) == (2, "bf16", 4, 256, 8)
    got = params(out)
    assert got["gradient_accumulation_steps"] == "8" and got["gradient_clipping"] == "0.5"
    assert got["checkpoint_parallel_write_pipeline"] == "False"  # a name of 29 columns or more: no dots


def test_key_value_lines_not_padded_as_deepspeed_pads_them_are_not_its_echo() -> None:
    """Another tool's `key value` lines, under the same kind of logger tag or none, stay unread."""
    text = (
        f"{TS} [INFO] [config.py:88:print]   learning_rate ...... 0.001\n"  # dots do not fill 29 columns
        f"{TS} [INFO] [config.py:88:print]   fp16_enabled True\n"  # no dots
        f"{TS} [INFO] [trainer.py:412:print]   train_batch_size ............. 64\n"  # not DeepSpeed's printer
        "  gradient_accumulation_steps .. 8\n" + STEP + "\n"  # no logger tag
    )
    out = collect(text)
    (run,) = out["runs"]
    assert run.get("gbs") is None and run.get("precision") is None
    assert not {"learning_rate", "fp16_enabled", "train_batch_size", "gradient_accumulation_steps"} & set(
        params(out)
    )
