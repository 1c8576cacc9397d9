"""A Megatron-DeepSpeed console pasted as a markdown block quote (`> ` before every line), dying in its
first step with plain and rich (box-drawn) tracebacks: timers named as printed, and a traceback's own
lines (quoted source lines, the box, the words between chained exceptions) no error lines of their own."""

from __future__ import annotations

from tests.test_parser_megatron import collect

# Modeled on Sam Foreman's Megatron-DeepSpeed notes on Polaris (2023-08): paths shortened, box trimmed.
QUOTED_LOG = """\
> [after dataloaders are built] datetime: 2023-08-08 16:29:10
> (min, max) time across ranks (ms):
>     model-and-optimizer-setup ......................: (3283.61, 3283.61)
>     train/valid/test-data-iterators-setup ..........: (30231.95, 30231.95)
> training ...
> [before the start of training step] datetime: 2023-08-08 16:29:10
> /lib/python3.10/site-packages/torch/distributed/distributed_c10d.py:2387: UserWarning: a private function
>   warnings.warn(
> Traceback (most recent call last):
>   File "/deepspeed/runtime/engine.py", line 2033, in _take_model_step
>     self.lr_scheduler.step(**(lr_kwargs or {}))
> TypeError: WarmupLR.step() got an unexpected keyword argument 'increment'
>
> During handling of the above exception, another exception occurred:
>
> ╭──────────────── Traceback (most recent call last) ────────────────╮
> │ /deepspeed/runtime/engine.py:2033 in _take_model_step              │
> │   2032 │   │   │   │   try:                                        │
> │ ❱ 2033 │   │   │   │   │   self.lr_scheduler.step(**(lr_kwargs))  │
> │   2034 │   │   │   │   except TypeError:                           │
> ╰────────────────────────────────────────────────────────────────────╯
> TypeError: WarmupLR.step() got an unexpected keyword argument 'increment'
"""


def test_a_block_quoted_logs_timers_are_named_without_the_quote() -> None:
    timers = collect(QUOTED_LOG)["timers"]
    assert [(t["name"], t["time_min_ms"], t["time_ms"]) for t in timers] == [
        ("model-and-optimizer-setup", 3283.61, 3283.61),
        ("train/valid/test-data-iterators-setup", 30231.95, 30231.95),
    ]


def test_only_the_exceptions_own_lines_are_error_lines() -> None:
    events = collect(QUOTED_LOG)["events"]
    kinds = {e["line_no"]: e["kind"] for e in events}
    assert [n for n, kind in kinds.items() if kind == "error"] == [12, 22]
    assert kinds[14] == kinds[16] == kinds[20] == "traceback"
    assert 8 not in kinds  # Python's echo of the line that warned, quoted too
    assert kinds[7] == "warning"
