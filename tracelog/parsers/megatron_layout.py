"""The fast path of the Megatron parser: iteration and timer lines cut by position.

The lines of one log print the same keys in the same order, so a layout learned from one line the regex
path read (`megatron_lines`) cuts the others with a few vectorised string kernels. A layout is kept only
if it reads its example line exactly as the regexes do, and a line that does not fit it goes to the
regexes: a layout changes how fast a result is found, never the result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import polars as pl
import regex

from tracelog.parsers.megatron_lines import (
    ITER_FIELDS,
    ITERATION_COLUMNS,
    ITERATION_DTYPES,
    TIMESTAMP_RX,
    attach_iteration,
    iteration_anchors,
    iterations_by_regex,
    timers_by_regex,
)


@dataclass(frozen=True)
class PipeLayout:
    """Where the values sit in a `key: value | key: value |` line, learned from one example line.

    The lines of one log print the same keys in the same order, so once one line is understood the others
    can be cut by position: split on `|`, check that each part starts with the example's key, cast the text
    after it. That is a few vectorised string kernels per value instead of one regex search of the whole
    line per key. `fits` says which lines have the layout; lines that do not (a key more or less, a value
    that is not a plain number) are left to the parser's regex path, so a layout changes how fast a result
    is found, never the result.
    """

    parts: tuple[str, ...]
    keys: tuple[str | None, ...]  # per part: its text through ": ", or None for a part without a colon

    @classmethod
    def learn(cls, line: str, skip: int = 1) -> PipeLayout | None:
        """The layout of `line`; the first `skip` parts are the caller's (an `iteration N/M` head)."""
        parts = line.split("|")
        keys: list[str | None] = [None] * min(skip, len(parts))
        for part in parts[skip:]:
            colon = part.find(":")
            if colon < 0:
                keys.append(None)
            elif part[colon + 1 : colon + 2] == " " and part[colon + 2 :].find(":") < 0:
                keys.append(part[: colon + 2])
            else:
                return None
        return cls(tuple(parts), tuple(keys))

    def __len__(self) -> int:
        return len(self.parts)

    def split(self, lines: pl.DataFrame, *keep: str) -> pl.DataFrame:
        """`keep` columns and the parts of each line, `_p0`...: one more than the layout has (null past the
        end of the line), so a line with more parts shows a value there (the rest of the line: only
        whether it is null is read).

        `splitn` writes each part position to a compact column of its own; the kernels that follow then
        read memory in order instead of striding through whole lines. It cuts a third off `split_exact`,
        whose parts before the last are the same and whose last is null on the same lines.
        """
        fields = [f"_p{k}" for k in range(len(self.parts) + 1)]
        parts = pl.col("line").str.splitn("|", len(self.parts) + 1).struct.rename_fields(fields)
        return lines.select(*keep, parts.alias("_parts")).unnest("_parts")

    def fits(self, skip: int = 1, checked: frozenset[int] = frozenset()) -> pl.Expr:
        """True where the split line has this layout: as many parts, the same keys, the same colon-less parts.

        Parts in `checked` the caller has compared whole already. Whether the values are numbers is the
        caller's check too (see `text` and `plain_number`).
        """
        count = len(self.parts)
        checks = [pl.col(f"_p{count}").is_null(), pl.col(f"_p{count - 1}").is_not_null()]
        for k in range(skip, count):
            if k in checked:
                continue
            key, part = self.keys[k], pl.col(f"_p{k}")
            checks.append(part.str.starts_with(key) if key is not None else part == self.parts[k])
        return pl.all_horizontal(checks)

    def text(self, k: int) -> pl.Expr:
        """The text after the key of part `k`, spaces stripped (other whitespace makes it not a number)."""
        key = self.keys[k]
        assert key is not None
        return pl.col(f"_p{k}").str.slice(len(key)).str.strip_chars(" ")


def plain_number(text: pl.Expr, dtype: Any) -> tuple[pl.Expr, pl.Expr]:
    """`text` as a number of `dtype`, and whether it is one number as a regex path would read it.

    Floats: anything a float cast reads (digits, exponent, nan, inf), the cast the regex path applies to
    what it extracted. Integers: bare digits only, as a `(\\d+)` pattern reads them (no sign).
    """
    if dtype in (pl.Int64, pl.Int32):
        value = text.cast(pl.UInt64, strict=False).cast(dtype, strict=False)
        return value, value.is_not_null() & ~text.str.starts_with("+")
    value = text.cast(dtype, strict=False)
    return value, value.is_not_null()


@dataclass(frozen=True)
class IterationLayout:
    """An iteration line's layout, learned from one line the regex path read.

    Part 0 is a head (`head`: constant text, or `head` + `[timestamp]` + `tail` when `stamped`), `iteration`,
    the number, `/` at `slash`, the total. Every other part is a key and a plain number (`columns`: column ->
    part), an unknown key whose value must stay free of `:`, `[` and `iteration` (`free`, so no regex could
    match differently inside it), or a part without a colon that must be the same on every line. On a line
    that fits, everything the regex path reads outside those numbers and the timestamp is what it read on the
    example line (`example`): rank, extra keys, missing keys.
    """

    parts: PipeLayout
    head: str
    stamped: bool
    tail: str
    slash: int
    columns: dict[str, int]
    free: tuple[int, ...]
    example: dict[str, Any]

    @property
    def number_at(self) -> int:
        return len(self.head) + (21 + len(self.tail) if self.stamped else 0) + len("iteration")

    def read(self, lines: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        """(rows of the lines that fit, the lines that do not).

        Three passes of vectorised kernels: split, cut the texts out and check the shape, cast and check.
        """
        split = self.parts.split(lines, "line_no")
        p0 = pl.col("_p0")
        number_at = self.number_at
        # A part printed the same on every line of the block (batch size, loss scale, skipped, ...) holds
        # the example's value: one comparison per line instead of cutting, stripping and casting.
        train = p0.str.slice(self.slash + 1)
        same = split.select(
            (train == self.parts.parts[0][self.slash + 1 :]).all().alias("train_iters"),
            *(
                (pl.col(f"_p{k}") == self.parts.parts[k]).all().alias(name)
                for name, k in self.columns.items()
            ),
        ).row(0, named=True)
        read = [name for name in ("train_iters", *self.columns) if not same[name]]
        texts = {
            "iteration": p0.str.slice(number_at, self.slash - number_at).str.strip_chars(),
            **({"train_iters": train.str.strip_chars()} if "train_iters" in read else {}),
            **{name: self.parts.text(k) for name, k in self.columns.items() if name in read},
        }
        whole = frozenset(k for name, k in self.columns.items() if name not in read)
        shape = [self.parts.fits(checked=whole), p0.str.slice(self.slash, 1) == "/"]
        if self.stamped:
            stamp = p0.str.slice(len(self.head) + 1, 19)
            texts["stamp"] = stamp
            shape.append(p0.str.starts_with(self.head + "["))
            shape.append(
                p0.str.slice(len(self.head) + 20, len(self.tail) + 11) == "]" + self.tail + "iteration "
            )
            shape.append(stamp.str.contains(TIMESTAMP_SHAPE))
        else:
            shape.append(p0.str.starts_with(self.head + "iteration "))
        shape.extend(~self.parts.text(k).str.contains(r"[:\[]|iteration") for k in self.free)
        split = split.select(
            "line_no",
            *(text.alias(f"_t_{name}") for name, text in texts.items()),
            pl.all_horizontal(shape).alias("_shape"),
        )
        values, checks = [], [pl.col("_shape")]
        for name in ("iteration", *read):
            value, ok = plain_number(pl.col(f"_t_{name}"), ITERATION_DTYPES[name])
            values.append(value.alias(name))
            checks.append(ok)
        if self.stamped:
            values.append(
                pl.col("_t_stamp")
                .str.replace("T", " ", literal=True)
                .str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False, cache=False)
                .alias("ts")
            )
        split = split.select("line_no", *values, pl.all_horizontal(checks).fill_null(False).alias("_fit"))
        fit = split["_fit"]
        everything = bool(fit.all())
        out = []
        for name in ITERATION_COLUMNS:
            if name in ("line_no", "iteration", *read):
                out.append(pl.col(name))
            elif name == "ts" and self.stamped:
                out.append(pl.col("ts"))
            else:
                out.append(pl.lit(self.example[name], dtype=ITERATION_DTYPES[name]).alias(name))
        if everything:  # the common block: no copy of the lines that fit, none of those that do not
            return split.select(out), lines.clear()
        return split.filter(fit).select(out), lines.filter(~fit)


TIMESTAMP_SHAPE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}$"
PLAIN_HEAD_RX = regex.compile(r" +[0-9]+ */ *[0-9]+ *")
ITER_FIELD_RX = {name: regex.compile(pattern) for name, (pattern, _) in ITER_FIELDS.items()}
LAYOUTS_KEPT = 8
LEARN_TRIES = 4


def learn_iteration_layout(line: str) -> IterationLayout | None:
    """The layout of one iteration line, or None when it is not a shape the fast path reads exactly."""
    parts = PipeLayout.learn(line)
    if parts is None:
        return None
    part0 = parts.parts[0]
    at = part0.find("iteration")
    if at < 0 or not PLAIN_HEAD_RX.fullmatch(part0[at + len("iteration") :]):
        return None
    head, stamped, tail = part0[:at], False, ""
    stamp = TIMESTAMP_RX.search(line)
    if stamp is not None and stamp.end() <= at and stamp.end() - stamp.start() == 21:
        head, stamped, tail = part0[: stamp.start()], True, part0[stamp.end() : at]
    columns: dict[str, int] = {}
    free = []
    for k, key in enumerate(parts.keys):
        if key is None:
            continue
        claims = [name for name, rx in ITER_FIELD_RX.items() if rx.search(key + "0")]
        if len(claims) > 1 or any(name in ("iteration", "train_iters") for name in claims):
            return None
        if not claims:
            free.append(k)
            continue
        match = ITER_FIELD_RX[claims[0]].search(key + "0")
        if claims[0] in columns or match is None or match.start(1) != len(key):
            return None
        columns[claims[0]] = k
    if any(
        rx.search(part0) for name, rx in ITER_FIELD_RX.items() if name not in ("iteration", "train_iters")
    ):
        return None
    example_frame = pl.DataFrame(
        {"line_no": [0], "line": [line]}, schema={"line_no": pl.Int64, "line": pl.String}
    )
    slow = iterations_by_regex(example_frame)
    if slow.is_empty():
        return None
    layout = IterationLayout(
        parts=parts,
        head=head,
        stamped=stamped,
        tail=tail,
        slash=part0.index("/", at),
        columns=columns,
        free=tuple(free),
        example=slow.row(0, named=True),
    )
    fast, _ = layout.read(example_frame)
    return layout if fast.fill_nan(None).equals(slow.fill_nan(None)) else None


L = TypeVar("L", IterationLayout, "TimerLayout")


def learn_layouts(
    left: pl.DataFrame, layouts: list[L], learn: Callable[[str], L | None]
) -> tuple[list[tuple[L, pl.DataFrame]], pl.DataFrame]:
    """Layouts learned from the lines no kept layout fits, newest first in `layouts` (at most
    LAYOUTS_KEPT), each with the rows it read; and the lines still left for the regexes.

    Each pass either reads at least one line (`left` shrinks) or moves `skipped` on, so the loop ends
    after at most `left.height + LEARN_TRIES` passes. A layout learned from a line it then does not read
    in the block (a value only one line prints differently, e.g. `nan iterations: x`) reads nothing and
    is not kept: its line is skipped and goes to the regexes."""
    found: list[tuple[L, pl.DataFrame]] = []
    skipped = 0
    while left.height > skipped and skipped < LEARN_TRIES:
        learned = learn(left["line"][skipped])
        rows, rest = learned.read(left) if learned is not None else (left.head(0), left)
        if learned is None or rows.is_empty():
            skipped += 1
            continue
        layouts.insert(0, learned)
        del layouts[LAYOUTS_KEPT:]
        left = rest
        found.append((learned, rows))
    return found, left


def iterations_by_layout(
    candidates: pl.DataFrame, layouts: list[IterationLayout]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(rows of the candidate lines that fit a learned layout, the candidate lines left for the regexes)."""
    done = []
    left = candidates
    for layout in list(layouts):
        if left.is_empty():
            break
        rows, left = layout.read(left)
        done.append(rows)
    learned, left = learn_layouts(left, layouts, learn_iteration_layout)
    done += [rows for _, rows in learned]
    done = [rows for rows in done if not rows.is_empty()]
    if not done:
        return candidates.head(0).select("line_no"), left
    return (done[0] if len(done) == 1 else pl.concat(done).sort("line_no")), left


@dataclass(frozen=True)
class TimerLayout:
    """A `time (ms) |` line's layout: which parts hold a timer, and its name as the regex path reads it."""

    parts: PipeLayout
    names: tuple[str, ...]
    keyed: tuple[int, ...]

    def read(self, lines: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        """(line_no, run_key and one value column per timer of the lines that fit, the lines that do not)."""
        split = self.parts.split(lines, "line_no", "run_key")
        values, checks = [], [self.parts.fits()]
        for i, k in enumerate(self.keyed):
            value, ok = plain_number(self.parts.text(k), pl.Float64)
            values.append(value.alias(f"_v{i}"))
            checks.append(ok)
        split = split.select(
            "line_no", "run_key", *values, pl.all_horizontal(checks).fill_null(False).alias("_fit")
        )
        fit = split["_fit"]
        if fit.all():
            return split.drop("_fit"), lines.clear()
        return split.filter(fit).drop("_fit"), lines.filter(~fit)

    def unpivot(self, lines: pl.DataFrame) -> pl.DataFrame:
        """One row per timer, in line order then part order, like the regex path's rows."""
        count, height = len(self.names), lines.height
        row = pl.int_range(0, height * count, eager=True)
        times = np.column_stack([lines[f"_v{i}"].to_numpy() for i in range(count)]).ravel()
        return lines.select("line_no", "run_key", "iteration")[row // count].select(
            "line_no",
            "run_key",
            pl.Series("name", self.names).gather(row % count),
            pl.Series("time_ms", times),
            pl.lit(None, dtype=pl.Float64).alias("time_min_ms"),
            "iteration",
        )


def learn_timer_layout(line: str) -> TimerLayout | None:
    parts = PipeLayout.learn(line)
    if parts is None:
        return None
    keyed = tuple(k for k, key in enumerate(parts.keys) if key is not None)
    example = pl.DataFrame(
        {"line_no": [0], "run_key": [0], "line": [line]},
        schema={"line_no": pl.Int64, "run_key": pl.Int32, "line": pl.String},
    )
    no_anchors = iteration_anchors(None, {})
    slow = timers_by_regex(example, no_anchors)
    if slow.height != len(keyed) or not keyed:
        return None
    layout = TimerLayout(parts, tuple(slow["name"].to_list()), keyed)
    fitted, _ = layout.read(example)
    if fitted.is_empty():
        return None
    fast = layout.unpivot(attach_iteration(fitted, no_anchors))
    return layout if fast.select(slow.columns).equals(slow) else None


def timers_by_layout(
    timers: pl.DataFrame, layouts: list[TimerLayout]
) -> list[tuple[TimerLayout, pl.DataFrame]]:
    """The timer lines that fit a learned layout, per layout (learning new ones from lines that fit none)."""
    out: list[tuple[TimerLayout, pl.DataFrame]] = []
    left = timers
    for layout in list(layouts):
        if left.is_empty():
            return out
        fitted, left = layout.read(left)
        out.append((layout, fitted))
    learned, _ = learn_layouts(left, layouts, learn_timer_layout)
    return out + learned
