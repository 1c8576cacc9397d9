"""A DeepSpeed job's stderr that holds nothing but what killed it, claimed by the DeepSpeed parser.

DeepSpeed's fp16 loss scaler ends a run whose scale fell to its minimum with `Exception: Current loss scale
already at minimum - cannot decrease scale anymore. Exiting run.` (runtime/fp16/loss_scaler.py,
`DynamicLossScaler.update_scale`), raised through the engine's `step`. A Slurm `--error` file or a pasted
crash holds that traceback alone: its header may be cut off by the paste and its frames interleaved across
ranks (deepspeedai/DeepSpeedExamples#419). The parser reads such a file as it reads the end of a log: the
traceback and the exception become events, and the health rules say the run died of it.
"""

from __future__ import annotations

import re

MIN_SCALE_EXIT = "Current loss scale already at minimum - cannot decrease scale anymore"
DEEPSPEED_FRAME_RX = re.compile(
    r'^(?:\[(?:rank|default)\d+\]:)?\s*File "[^"\n]*\bdeepspeed/[^"\n]*\.py", line \d+', re.M
)
"""A traceback's frame in DeepSpeed's package (`File ".../deepspeed/runtime/engine.py", line 2087, in step`),
bare or behind torchrun's `[rank3]:`."""


def died_alone(head: str) -> int:
    """1, the lowest claim of any parser, where the head is a DeepSpeed job's death: the minimum-scale exit,
    or a traceback through DeepSpeed's package (two of its frames at least, the first line maybe lost);
    0 otherwise."""
    return int(MIN_SCALE_EXIT in head or len(DEEPSPEED_FRAME_RX.findall(head)) >= 2)
