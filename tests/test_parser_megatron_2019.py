"""The first public Megatron-LM (2019) printed its iteration keys without a colon and its reserved memory as
`cached`; a line whose figure no key names is said to be read only in part."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_parser_megatron_newest import collect
from tracelog import api

# In the shape pretrain_bert.py printed them from July to December 2019 (Megatron-LM abe36e2e5f:
# `' learning rate {:.3E} |'`, `' lm loss {:.6E} |'`, `' nsp loss {:.6E} |'`, `' loss scale {:.1f} |'`) and
# utils.report_memory (`' | cached: {}'`); figures invented.
BERT_2019 = """\
 iteration      100/   20000 | elapsed time per iteration (ms): 320.4 | learning rate 1.010E-06 | lm loss 1.021733E+01 | nsp loss 6.932120E-01 | loss scale 65536.0 |
after 100 iterations memory (MB) | allocated: 5101.25 | max allocated: 7850.5 | cached: 9310.0 | max cached: 9312.0
time (ms) | forward: 130.11 | backward: 180.02 | optimizer: 18.20 | batch generator: 45.00 | data loader: 44.10
 iteration      200/   20000 | elapsed time per iteration (ms): 312.9 | learning rate 2.020E-06 | lm loss 9.401250E+00 | nsp loss 2.503115E-01 | loss scale 65536.0 |
time (ms) | forward: 126.50 | backward: 166.00 | optimizer: 18.19 | batch generator: 46.00 | data loader: 45.00
"""


@pytest.mark.parametrize("fast", [True, False])
def test_the_2019_keys_without_a_colon_and_cached_memory_are_read(fast: bool) -> None:
    out = collect(BERT_2019, fast)
    rows = [(r["iteration"], r["lm_loss"], r["learning_rate"], r["loss_scale"]) for r in out["iterations"]]
    assert rows == [(100, 10.21733, 1.01e-06, 65536.0), (200, 9.40125, 2.02e-06, 65536.0)]
    nsp = [(m["iteration"], m["key"], m["value"]) for m in out["iteration_metrics"]]
    assert nsp == [(100, "nsp loss", 0.693212), (200, "nsp loss", 0.2503115)]
    (memory,) = out["memory"]
    assert (memory["iteration"], memory["reserved_mib"], memory["max_reserved_mib"]) == (100, 9310.0, 9312.0)
    assert "unparsed" not in out and "events" not in out


def test_the_first_release_leads_with_the_epoch() -> None:
    """March 2019 (Megatron-LM fb4cbdc277) printed ` epoch 0 |` before the iteration; invented figures."""
    line = (
        " epoch  0 | iteration      {0}/   50000 | elapsed time per iteration (ms): 410.2 | learning rate "
        "{1} | lm loss {2} | nsp loss 3.110E-01 |\n"
    )
    out = collect(line.format(50, "5.000E-07", "1.052E+01") + line.format(100, "1.000E-06", "9.875E+00"))
    assert [(r["iteration"], r["lm_loss"]) for r in out["iterations"]] == [(50, 10.52), (100, 9.875)]
    assert {m["key"] for m in out["iteration_metrics"]} == {"epoch", "nsp loss"}


def test_a_figure_no_key_names_leaves_its_line_counted_as_unparsed(tmp_path: Path) -> None:
    """An iteration line with a part that holds a figure but no `key:` (here a spelling no rewrite knows,
    invented) keeps what was read, and says the rest was not: an event, and the line among the unparsed."""
    log = tmp_path / "odd.log"
    log.write_text(
        " iteration       10/     100 | elapsed time per iteration (ms): 300.0 | lm loss: 9.1 | 1234.5 tok/s |\n"
        " iteration       20/     100 | elapsed time per iteration (ms): 301.0 | lm loss: 8.7 |\n"
    )
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(log)], parser="megatron")
    assert result.lines_unparsed == 1
    assert api.sql(db, "SELECT iteration, lm_loss FROM iterations ORDER BY 1").values.tolist() == [
        [10, 9.1],
        [20, 8.7],
    ]
    (event,) = api.sql(db, "SELECT line_no, kind, text FROM events").itertuples(index=False)
    assert (event.line_no, event.kind) == (1, "unread_figures") and "1234.5 tok/s" in event.text
    assert api.sql(db, "SELECT line_no FROM unparsed").line_no.tolist() == [1]
