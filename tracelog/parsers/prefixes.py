"""Launcher prefixes a log's lines pick up on their way to the file (MPI tags, timestamps, `host: `,
NeMo-Run's task, Ray's worker), and taking them off."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

RAY_PREFIX = r"\((?:[A-Za-z][\w.\-]*(?:\s+\w+=[^,()\s]*)?|\w+=[^,()\s]*)(?:,\s*\w+=[^,()\s]*)*\)\s+"
RAY_PREFIX_RX = re.compile(r"^\s*" + RAY_PREFIX)
"""Ray's worker prefix (`(task, pid=6679) `, `(head, rank=0, pid=3808) `) alone: no line of a log's own
starts with it, so a reader may take it off before anything else (a `host: ` prefix it may not: YAML's
`devices: 8` looks the same)."""

TORCHRUN_BANNER = "Setting OMP_NUM_THREADS environment variable for each process"
"""What torchrun prints once per node as it starts its processes (torch.distributed.run): a launch begins,
so the parsers of trainers it starts (torchtitan, the Hugging Face Trainer, Composer) take it for a new run."""

# Launcher prefixes fabric benchmarks and job logs pick up: Open MPI's `[1,0]<stdout>:`, a timestamp (ISO,
# with its zone: `[2025-11-20T14:55:23+08:00]`), pdsh's `host: `, NeMo-Run's task and rank (`retraining/0 `),
# Ray's worker (`(head, rank=0, pid=3808) `, as SkyPilot runs a job).
PREFIX_RX = re.compile(
    r"^\s*(?:\[\d+,\d+\]<std(?:out|err)>:"
    r"|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+"
    r"|\[\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]\s*"
    r"|\[[A-Za-z][\w.\-]*(?::\d+)?\]:\s?"
    r"|[A-Za-z][\w.\-]*/\d+\s+"
    # Ray's `(name, key=value, ...)`: each key after a comma, no value holding one (unambiguous: a line
    # without its `)` fails at once, not after trying every split of its `key=value` runs)
    r"|" + RAY_PREFIX + r"|(?P<host>[A-Za-z0-9][\w.\-]*):\s+)"
)


def strip_prefix(line: str, limit: int = 3) -> tuple[str, str | None]:
    """The line without launcher prefixes (MPI tags, `host: `, timestamps; `limit` of them at most), and
    the host one named. A `word: ` is a host's prefix here, so a reader whose own lines start with one
    (`algbw: 44.9 GBps`) strips one prefix at a time and tries its line after each."""
    host = None
    for _ in range(limit):
        match = PREFIX_RX.match(line)
        if not match or match.end() == 0:
            break
        host = match.group("host") or host
        line = line[match.end() :]
    return line, host


RANK_TAG_RX = re.compile(r"^\s*(\[\d+\])(?=\s)")


def without_rank_tags(line: str) -> str:
    """The line without the rank tag MPICH's and Intel MPI's `mpiexec -l` (`-prepend-rank`) put in front of
    each piece a rank writes, `[0] `: in front of the line and, where the program wrote a line in pieces
    (nccl-tests prints a row's columns one `printf` at a time), inside it too (`...  sum      -1[0]
    1626.5 ...`, NVIDIA/nccl#1453). Only the tag that leads the line is taken off, wherever it stands."""
    match = RANK_TAG_RX.match(line)
    return line.replace(match.group(1), " ") if match else line


# An editor's line-number column pasted along with the text (vim's `:set number`: `  3      0   2.61`;
# `cat -n`: `     3\t...`): the number, then one blank or tab, or nothing on an empty line.
GUTTER_RX = re.compile(r"^\s{0,12}(\d{1,9})(?:[ \t]|$)")
GUTTER_LINES = 8  # the lines that must each carry their own number before the column is read through
DIGIT_LED_RX = re.compile(r"^\s*\d")


def without_gutter(lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """`lines` (line number, text) with an editor's line-number column taken off, where the file's first
    lines (GUTTER_LINES of them, or 3 or more before a line without) start with a number one more on each
    line, empty lines included, and one of them holds more than a number-led row: a matrix's own rows
    (`0  2.61 ...`, `1  11.09 ...`) are numbered one more each line too, but nothing else is. The column
    is taken off while the lines carry the next number; the first that does not ends it, and it and the
    lines after it are read as they are."""
    iterator = iter(lines)
    held: list[tuple[int, str]] = []
    expected: int | None = None
    breaker: tuple[int, str] | None = None  # the first line that does not carry the next number
    for line_no, text in iterator:
        number = _gutter_number(text)
        if number is None or (expected is not None and number != expected):
            breaker = (line_no, text)
            break
        held.append((line_no, text))
        expected = number + 1
        if len(held) == GUTTER_LINES:
            break
    stripped = [(n, _after_gutter(t)) for n, t in held]
    if len(held) < 3 or all(DIGIT_LED_RX.match(t) for _, t in stripped):
        yield from held
    else:
        yield from stripped
        while breaker is None:  # the column runs on past the first lines
            following = next(iterator, None)
            if following is None:
                return
            if _gutter_number(following[1]) != expected:
                breaker = following
            else:
                expected = (expected or 0) + 1
                yield following[0], _after_gutter(following[1])
    if breaker is not None:
        yield breaker
    yield from iterator


def _gutter_number(text: str) -> int | None:
    match = GUTTER_RX.match(text)
    return int(match.group(1)) if match else None


def _after_gutter(text: str) -> str:
    match = GUTTER_RX.match(text)
    return text[match.end() :] if match else text
