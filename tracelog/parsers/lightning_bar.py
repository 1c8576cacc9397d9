"""Lightning's tqdm progress bar as NeMo draws it: where one redraw starts and ends on a line, and which
training step a redraw stands for.

Sources: tqdm's `tqdm.format_num` (`tqdm/std.py`: a postfix number is printed `'{0:.3g}'`, exponent zeros
dropped, whenever that is shorter than `str(n)`); Lightning's `Tqdm.format_num` (pads the number, keeps
tqdm's notation) and `TQDMProgressBar` (`on_train_batch_end`: the training bar's count is
`train_batch_idx + _val_processed` before Lightning 2.0, whose bar totals train and validation batches
together; from 2.0 on it counts training batches only).
"""

from __future__ import annotations

import math
import re

from tracelog.parsers.prefixes import RAY_PREFIX

# Lightning's TQDM bar (`Epoch 0:  3%|▎  | 9000/301500 [1:42:42<55:37:46, v_num=0, reduced_train_loss=...]`);
# some releases draw its description as `Epoch 0: :` (NVIDIA/NeMo#7957, 2023-11). A run of unknown length
# (`max_steps=-1` over an iterable dataset) has no total: tqdm prints it `?` (`tqdm.format_meter`: `total_fmt`
# of a None total), as in `614/? [23:53<00:00, v_num=, ...]` (NVIDIA/NeMo#11900, now NVIDIA-NeMo/Speech).
BAR_RX = re.compile(r"Epoch (\d+):\s*(?::\s*)?(?:\d+%\|[^|]*\|\s*)?(\d+)/(\d+|\?)\s*\[([^\]]*)\]?")
BAR_START = r"Epoch \d+:\s*(?::\s*)?\d+%\|"
BAR_START_RX = re.compile(BAR_START)
# A carriage return as a terminal copy shows it: `^M` (caret and M), with the cursor-up tqdm writes before
# it (`ESC[A`, to go back to its line from the validation bar's) left as `[A` or `^[[A`. Only where a redraw
# starts behind it: a `^M` in a regex (`^Model`) or a path is text.
CARET_CR = r"(?:(?:\^\[)?\[A)*\^M(?=" + BAR_START + ")"
CARET_CR_RX = re.compile(CARET_CR)
# Where each redraw of a bar starts: a carriage return (or its `^M`), or (where a paste lost them) the next
# redraw's `Epoch 0: :   0%|` glued on, with Ray's `(task, pid=6679) ` prefix before it (SkyPilot's `sky
# launch`).
REDRAW_SPLIT_RX = re.compile(r"\r|" + CARET_CR + r"|(?:" + RAY_PREFIX + r")?(?=" + BAR_START + ")")
RATE_RX = re.compile(r"^\s*(\d+(?:\.\d+)?)(s/it|it/s)\s*$")
SCIENTIFIC_RX = re.compile(r"^\s*[+-]?\d(?:\.\d*)?[eE]([+-]?\d+)\s*$")
# tqdm rounds a postfix number to three significant digits where that prints shorter (`3.1e+4` is 3.10e4)
TQDM_DIGITS = 3


def is_redraws(text: str) -> bool:
    """Whether a line holds redraws of the bar to cut apart: carriage returns, a `^M` before a redraw, or
    two redraws glued without either."""
    return (
        "\r" in text
        or ("^M" in text and CARET_CR_RX.search(text) is not None)
        or (text.count("Epoch ") > 1 and len(BAR_START_RX.findall(text)) > 1)
    )


def rounded_bounds(raw: str) -> tuple[float, float] | None:
    """The values a number the bar printed in scientific notation stands for (`3.1e+4`: 30950 to 31050, as
    tqdm printed 3.10e4), or None for a number printed whole (`6023.0`)."""
    match = SCIENTIFIC_RX.match(raw)
    if match is None:
        return None
    exponent = int(match.group(1))
    half = 0.5 * 10.0 ** (exponent - (TQDM_DIGITS - 1))
    value = float(raw)
    return value - half, value + half


def bar_step(count: int, global_step: str | None, offset: int | None) -> tuple[int, int | None]:
    """The step one redraw stands for, and the offset (bar count less step) to read the next one with.

    A `global_step` printed whole is the step. One tqdm rounded (`3.1e+4`) stands for any of a hundred
    steps; the bar's count is exact, but it is not the step where the bar counts validation batches too
    (before Lightning 2.0: `34103/1100000` at step 31003). So the step is the count less the last redraw's
    offset, held within the rounding's range (a validation's batches drawn in a stretch of rounded steps
    move the count, not the step); with no offset yet, the count where it falls within the range (Lightning
    2.0's bar), else the rounded value, which later redraws count on from: three redraws of `3.1e+4` three
    batches apart are three steps three apart, not one step drawn three times.
    """
    value = None
    if global_step is not None:
        try:
            value = float(global_step)
        except ValueError:
            value = None
    if value is None or not math.isfinite(value):
        return count, offset
    bounds = rounded_bounds(global_step or "")
    if bounds is None:
        step = int(value)
        return step, count - step
    low, high = bounds
    if offset is not None:
        step = min(max(count - offset, math.ceil(low)), math.floor(high))
        return step, count - step
    if low <= count <= high:
        return count, 0
    step = round(value)
    return step, count - step


def logged_number(raw: str) -> float | None:
    """A number as the bar or NeMo's printer formats it; a NaN or infinite loss stays one (the bar prints a
    NaN loss as `nan.0`)."""
    try:
        return float(raw)
    except ValueError:
        text = raw.strip().lower()
        for word, value in (("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf)):
            if text == word or text.startswith(word + "."):
                return value
        return None
