"""Iteration lines a terminal folded at its width, cut mid-word (`global batch si` / `ze:     8`), are read as
the lines Megatron printed; the shape of NVIDIA-NeMo/Megatron-Bridge#536, pasted from an 86-column
terminal, with invented figures."""

from __future__ import annotations

from tests.test_parser_megatron import collect
from tracelog import parsers
from tracelog.parsers.base import head_text

PAD = " " * 32  # the rest of the last row, up to the terminal's 86 columns
VOCAB = " > padded vocab (size: 10000) with 112 dummy tokens (new size: 10112)"
FOLDED = f"""\
 [2025-09-03 04:48:57] iteration      170/     200 | consumed samples:         1360 |
elapsed time per iteration (ms): 631.7 | learning rate: 5.120034E-05 | global batch si
ze:     8 | lm loss: 3.702214E-01 | loss scale: 1.0 | grad norm: 0.215 | number of ski
pped iterations:   0 | number of nan iterations:   0 |
{VOCAB}
{VOCAB}
 [2025-09-03 04:49:39] iteration      180/     200 | consumed samples:         1440 |
elapsed time per iteration (ms): 628.9 | learning rate: 4.410276E-05 | global batch si
ze:     8 | lm loss: 3.511090E-01 | loss scale: 1.0 | grad norm: 0.287 | number of ski
pped iterations:   0 | number of nan iterations:   0 | {PAD}{VOCAB}
{VOCAB}
"""


def test_a_folded_iteration_line_is_read_whole() -> None:
    out = collect(FOLDED)
    rows = [
        (
            r["iteration"],
            r["elapsed_s"],
            r["lm_loss"],
            r["global_batch_size"],
            r["grad_norm"],
            r["skipped"],
            r["nan"],
            r["line_no"],
        )
        for r in out["iterations"]
    ]
    assert rows == [
        (170, 0.6317, 0.3702214, 8, 0.215, 0, 0, 1),
        (180, 0.6289, 0.351109, 8, 0.287, 0, 0, 7),
    ]
    assert "unparsed" not in out and "iteration_metrics" not in out
    # the padded-vocab line the paste glued behind the last row is read as the line it is
    assert out["runs"][-1]["vocab"] == 10112


def test_a_folded_log_is_detected_as_megatron() -> None:
    assert parsers.detect(head_text(FOLDED.encode()), "train.log").FORMAT == "megatron"
