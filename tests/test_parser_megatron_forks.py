"""Keys that forks of Megatron-LM add to its iteration line, read alike by the fast layout path and the
regex path."""

from __future__ import annotations

import pytest

from tests.test_parser_megatron_newest import collect

# Verbatim, modelscope/ms-swift#7832 (January 2026, `megatron sft` of Qwen3-Omni): ms-swift's trainer adds
# `memory(GiB)`, `elapsed time` and `remaining time`; the third line is cut where the excerpt ends.
SWIFT = """\
[2026-01-20 08:33:58] iteration        5/     206 | consumed samples:          320 | elapsed time per iteration (ms): 100512.9 | memory(GiB): 21.54 | elapsed time: 10m 7s | remaining time: 6h 47m 4s | learning rate: 4.854369E-06 | global batch size:    64 | lm loss: 1.180399E+00 | load_balancing_loss: 1.268389E+00 | loss scale: 1.0 | grad norm: 1.105 | number of skipped iterations:   0 | number of nan iterations:   0 |
 [2026-01-20 08:42:14] iteration       10/     206 | consumed samples:          640 | elapsed time per iteration (ms): 99158.9 | memory(GiB): 21.56 | elapsed time: 18m 23s | remaining time: 6h 0m 26s | learning rate: 9.708738E-06 | global batch size:    64 | lm loss: 1.190541E+00 | load_balancing_loss: 1.278186E+00 | loss scale: 1.0 | grad norm: 0.826 | number of skipped iterations:   0 | number of nan iterations:   0 |
 [2026-01-20 08:50:29] iteration       15/     206 | consumed samples:          960 | elapsed time per iteration (ms): 98998.0 | memory(GiB): 21.56 | elapsed time: 26m 38s | remaining time: 5h 39m 12s | learning rate: 9.987198E-06 | global batch size:    64 | lm loss: 1.178630E+00 | load_balancing_loss: 1.
"""


@pytest.mark.parametrize("fast", [True, False])
def test_ms_swifts_memory_on_the_iteration_line_is_a_memory_row(fast: bool) -> None:
    """`memory(GiB)` is the printing rank's peak reserved memory (`torch.cuda.max_memory_reserved()`):
    a memory row of its iteration, as Megatron's own `memory (MB)` report gives; the line cut inside its
    last figure keeps its memory."""
    out = collect(SWIFT, fast)
    rows = [(m["iteration"], m["rank"], m["max_reserved_mib"]) for m in out["memory"]]
    assert rows == [
        (5, None, pytest.approx(21.54 * 1024)),
        (10, None, pytest.approx(21.56 * 1024)),
        (15, None, pytest.approx(21.56 * 1024)),
    ]
    assert [r["elapsed_s"] for r in out["iterations"]] == pytest.approx([100.5129, 99.1589, 98.998])
    metrics = {(m["iteration"], m["key"]): m["text"] for m in out["iteration_metrics"]}
    assert metrics[(10, "remaining time")] == "6h 0m 26s"
