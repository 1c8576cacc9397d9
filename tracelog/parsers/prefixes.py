"""Launcher prefixes a log's lines pick up on their way to the file (MPI tags, timestamps, `host: `,
NeMo-Run's task, Ray's worker), and taking them off."""

from __future__ import annotations

import re

RAY_PREFIX = r"\((?:[A-Za-z][\w.\-]*(?:\s+\w+=[^,()\s]*)?|\w+=[^,()\s]*)(?:,\s*\w+=[^,()\s]*)*\)\s+"
RAY_PREFIX_RX = re.compile(r"^\s*" + RAY_PREFIX)
"""Ray's worker prefix (`(task, pid=6679) `, `(head, rank=0, pid=3808) `) alone: no line of a log's own
starts with it, so a reader may take it off before anything else (a `host: ` prefix it may not: YAML's
`devices: 8` looks the same)."""

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
