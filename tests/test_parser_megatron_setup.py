"""A Megatron-DeepSpeed log still in its setup is Megatron's by `pretrain`'s first prints (`time to initialize
megatron (seconds):`, `[after megatron is initialized] datetime:`), though DeepSpeed's logger lines come
next: a live log landed then keeps its format, and the iteration lines it grows are read
(bigscience-workshop/Megatron-DeepSpeed#356's `[default0]:` excerpt was taken for DeepSpeed's)."""

from __future__ import annotations

from pathlib import Path

from tracelog import api, parsers
from tracelog.parsers import deepspeed
from tracelog.parsers.base import head_text

# Invented, in the shape of a torchrun `--tee` Megatron-DeepSpeed job cut in its setup.
SETUP = """\
[default0]:> compiling and loading fused kernels ...
[default0]:time to initialize megatron (seconds): 312.044
[default0]:[after megatron is initialized] datetime: 2023-03-14 09:12:40
[default0]:building GPT model ...
[default0]:[2023-03-14 09:12:40,118] [INFO] [utils.py:827:see_memory_usage] Before Building Model
[default0]:[2023-03-14 09:12:40,119] [INFO] [utils.py:828:see_memory_usage] MA 0.0 GB         Max_MA 0.0 GB         CA 0.0 GB         Max_CA 0 GB
[default0]:[2023-03-14 09:12:40,119] [INFO] [utils.py:836:see_memory_usage] CPU Virtual Memory:  used = 41.2 GB, percent = 8.1%
[default0]:SEED_LAYERS=False BASE_SEED=1234 SEED_FN=None
"""
STEPS = "".join(
    f"[default0]: iteration {i:8d}/  200000 | consumed samples: {i * 256:12d} | elapsed time per iteration (ms): "
    f"{6100.0 + i:.1f} | learning rate: 1.000E-05 | global batch size:   256 | lm loss: {9.5 - i / 100:.6E} | "
    "loss scale: 4096.0 | grad norm: 2.310 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    for i in (10, 20, 30)
)


def test_a_setup_with_deepspeeds_logger_lines_is_megatrons() -> None:
    head = head_text(SETUP.encode())
    assert parsers.detect(head, "job.out").FORMAT == "megatron"
    assert deepspeed.detect(head) == 0


def test_a_live_log_landed_in_its_setup_reads_the_steps_it_grows(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    db = tmp_path / "t.duckdb"
    log.write_text(SETUP)
    (first,) = api.ingest(db, [str(log)])
    assert first.format == "megatron"
    log.write_text(SETUP + STEPS)
    api.ingest(db, [str(log)])
    rows = api.sql(db, "SELECT iteration, elapsed_s FROM iterations ORDER BY iteration").values.tolist()
    assert rows == [[10, 6.11], [20, 6.12], [30, 6.13]]
