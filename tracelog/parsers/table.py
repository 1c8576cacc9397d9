"""Experiment tables from hand-kept lab notes: markdown (`| Nodes | Size | DP | TP | ... | TFLOPs |`) or CSV.

Each data row of an experiment table is one run (`framework` = `table`). Its configuration cells become run
columns, its measurements one `iterations` row (iteration 0: `elapsed_s` from Sec/it, `tflops_reported`
from TFLOPs) and one `memory` row (`max_reserved_mib` from Mem; a `GB` written in lab notes is read as GiB,
1024 MiB, see `table_headers.mem_mib`), and every cell is kept verbatim as a run parameter. A word
where a number belongs (`OOM`, `xxxx`, an unfilled `GB`) leaves the value NULL and becomes the run's
`status`: an OOM row is a result, a configuration that did not fit.

Context lines such as `NHIDDEN=14336 / NLAYERS=72` apply to the next table only; the prose around a table
(from the section heading down to it, and after it up to the next table or heading) becomes the runs'
`notes`. Prose, headings, code blocks and other tables count as parsed: they are understood as notes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracelog.parsers.base import Batch, LineSource, batches_of, guarded
from tracelog.parsers.table_headers import (
    CONFIG_ALIASES,
    PRECISIONS,
    Column,
    column_of,
    context_values,
    csv_cells,
    derive_world,
    is_experiment_header,
    is_failure,
    is_separator,
    parse_context,
    row_values,
    split_row,
    strip_markup,
)

FORMAT = "table"
VERSION = "1"

NOTES_CHARS = 2000  # prose kept on each side of a table
FLUSH_ROWS = 2000
PROSE_LINES = 400  # lines of prose held while waiting for the next table (memory stays flat)

HEADING_RX = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE_RX = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
# Name parts for configuration columns, in order; extra ones only where they vary within the table.
NAME_PARTS = (("dp", "dp"), ("tp", "tp"), ("pp", "pp"), ("cp", "cp"), ("mbs", "mbs"))
VARYING_PARTS = (
    ("zero_stage", "zs"),
    ("gbs", "gbs"),
    ("heads", "nh"),
    ("hidden", "h"),
    ("layers", "l"),
    ("seq_len", "seq"),
)


def detect(head: str) -> int:
    """Markdown with an experiment table (header row + `---` row), or CSV whose header is one."""
    lines = head.split("\n")
    in_code = False
    for i, line in enumerate(lines[:-1]):
        if FENCE_RX.match(line):
            in_code = not in_code
        elif (
            not in_code
            and "|" in line
            and is_separator(lines[i + 1])
            and is_experiment_header([column_of(c) for c in split_row(line)])
        ):
            return 40
    first = next((ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")), "")
    cells = csv_cells(first) if "|" not in first else None
    if cells and len(cells) >= 3 and is_experiment_header([column_of(c) for c in cells]):
        return 30
    return 0


@dataclass
class _Table:
    header_line: int
    columns: list[Column]
    title: str
    section: str | None
    context: list[tuple[int, list[tuple[str, str, str]]]]
    precision_hint: str | None
    before: str
    rows: list[tuple[int, list[str]]] = field(default_factory=list)
    varying: set[str] | None = None


class _Parser:
    """Line-at-a-time state machine: headings, code fences, context lines, tables and the prose between."""

    def __init__(self, source_name: str) -> None:
        stem = (
            Path(source_name).stem if source_name not in ("-", "") and not source_name.startswith("<") else ""
        )
        self.fallback_title = stem or "table"
        self.title: str | None = None
        self.section: str | None = None
        self.precision_hint: str | None = None
        self.fence: str | None = None
        self.held: tuple[int, str] | None = None
        self.table: _Table | None = None  # the table whose rows are being read
        self.plain_table = False  # rows being read belong to a table that is not an experiment table
        self.awaiting_notes: _Table | None = None  # finished, collecting the prose after it
        self.after: list[str] = []
        self.prose: list[str] = []
        self.context: list[tuple[int, list[tuple[str, str, str]]]] = []
        self.csv_columns: list[Column] | None = None
        self.mode: str | None = None  # markdown or csv, decided by the first meaningful line
        self.preamble: list[tuple[int, str]] = []
        # Until its first experiment table a file may be no lab notes at all (`--parser table` on another
        # tool's output): its lines are held, and go to `unparsed` if no table comes (or, past
        # `PROSE_LINES * 2`, the older half, too far from any table to be its context).
        self.before_any_table: list[tuple[int, str]] | None = []
        self.run_key = 0
        self.names: set[str] = set()
        self.out: dict[str, list[dict[str, Any]]] = {}

    # ---- output -------------------------------------------------------------------------------------
    def batches(self) -> Iterator[Batch]:
        for table in ("runs", "iterations", "memory", "iteration_metrics", "unparsed"):
            rows = self.out.pop(table, None)
            if rows:
                if table == "runs":
                    yield Batch(table, rows)
                else:
                    yield from batches_of(table, rows)

    def pending_rows(self) -> int:
        return sum(len(rows) for rows in self.out.values())

    def _emit(self, table: str, row: dict[str, Any]) -> None:
        self.out.setdefault(table, []).append(row)

    # ---- lines --------------------------------------------------------------------------------------
    def feed(self, line_no: int, line: str) -> None:
        if self.before_any_table is not None and line.strip():
            self.before_any_table.append((line_no, line))
            if len(self.before_any_table) > 2 * PROSE_LINES:
                self._unparsed(self.before_any_table[:PROSE_LINES])
                del self.before_any_table[:PROSE_LINES]
        if self.mode is None:
            if (not line.strip() or line.lstrip().startswith("#")) and len(self.preamble) < PROSE_LINES:
                self.preamble.append((line_no, line))  # a markdown heading or a CSV comment: undecided
                return
            self._decide(line_no, line)
        elif self.mode == "csv":
            self._feed_csv(line_no, line)
        else:
            self._feed_markdown(line_no, line)

    def _decide(self, line_no: int, line: str) -> None:
        """CSV if the first line that is neither blank nor `#` is a delimited experiment header."""
        cells = csv_cells(line) if "|" not in line else None
        columns = [column_of(c) for c in cells] if cells and len(cells) >= 3 else []
        preamble, self.preamble = self.preamble, []
        if columns and is_experiment_header(columns):
            self.mode = "csv"
            for number, text in preamble:
                self._feed_csv(number, text)
            self._start_table(line_no, columns)
            return
        self.mode = "markdown"
        for number, text in preamble:
            self._feed_markdown(number, text)
        self._feed_markdown(line_no, line)

    def _feed_markdown(self, line_no: int, line: str) -> None:
        if self.held is not None:
            held_no, held = self.held
            self.held = None
            if is_separator(line):
                columns = [column_of(c) for c in split_row(held)]
                if is_experiment_header(columns):
                    self._start_table(held_no, columns)
                else:
                    self._note(held)
                    self._note(line)
                    self.plain_table = True
                return
            self._prose_or_context(held_no, held)
        if self.table is not None or self.plain_table:
            if "|" in line and line.strip():
                if self.plain_table:
                    self._note(line)
                else:
                    self._row(line_no, line)
                return
            self._end_table()
        if self.fence is not None:
            if line.lstrip().startswith(self.fence):
                self.fence = None
            self._note(line)
            return
        if match := FENCE_RX.match(line):
            self.fence = match.group(1)[0] * 3
            self._note(line)
            return
        if match := HEADING_RX.match(line):
            self._heading(len(match.group(1)), match.group(2), line)
            return
        if "|" in line and line.strip():
            self.held = (line_no, line)
            return
        self._prose_or_context(line_no, line)

    def _feed_csv(self, line_no: int, line: str) -> None:
        if not line.strip():
            return
        if line.lstrip().startswith("#"):
            self._prose_or_context(line_no, line.lstrip()[1:])
            return
        assert self.table is not None
        cells = csv_cells(line) or [line.strip()]
        self._add_row(line_no, cells)

    def _prose_or_context(self, line_no: int, line: str) -> None:
        assignments = parse_context(line)
        if assignments:
            self.context.append((line_no, assignments))
        self._note(line)

    def _note(self, line: str) -> None:
        self.prose.append(line)
        if len(self.prose) > PROSE_LINES:
            del self.prose[: PROSE_LINES // 2]
        if self.awaiting_notes is not None and len(self.after) < PROSE_LINES:
            self.after.append(line)

    def _heading(self, level: int, text: str, line: str) -> None:
        self._finish_notes()
        if level == 1 and self.title is None:
            self.title = text.split(":")[0].strip() or text
        self.section = text
        self.precision_hint = PRECISIONS.get(text.strip().lower())
        self.prose = [line]

    # ---- tables -------------------------------------------------------------------------------------
    def _unparsed(self, lines: list[tuple[int, str]]) -> None:
        for line_no, text in lines:
            self._emit("unparsed", {"line_no": line_no, "text": text})

    def _start_table(self, line_no: int, columns: list[Column]) -> None:
        self.before_any_table = None  # the lines before it were its notes and context
        self._finish_notes()
        context, self.context = self.context, []
        hint = self.precision_hint
        self.table = _Table(
            line_no,
            columns,
            self.title or self.fallback_title,
            self.section,
            context,
            hint,
            _tail(self.prose),
        )
        self.prose = []

    def _row(self, line_no: int, line: str) -> None:
        if is_separator(line):
            return
        self._add_row(line_no, split_row(line))

    def _add_row(self, line_no: int, cells: list[str]) -> None:
        table = self.table
        assert table is not None
        if not any(strip_markup(c) for c in cells):
            return
        width = len(table.columns)
        if len(cells) > width and any(c.strip() for c in cells[width:]):
            self._emit("unparsed", {"line_no": line_no, "text": " | ".join(cells)})
            return
        table.rows.append((line_no, (cells + [""] * width)[:width]))
        if len(table.rows) >= FLUSH_ROWS:
            self._build(table, "")
            table.rows = []

    def _end_table(self) -> None:
        if self.table is not None:
            self.awaiting_notes = self.table
            self.after = []
        self.table = None
        self.plain_table = False

    def _finish_notes(self) -> None:
        """The prose after a table ends at the next table or heading: its runs can now be written."""
        if self.table is not None or self.plain_table:
            self._end_table()
        if self.awaiting_notes is not None:
            self._build(self.awaiting_notes, _head(self.after))
        self.awaiting_notes = None
        self.after = []

    def finish(self) -> None:
        if self.mode is None:
            self.mode = "markdown"
            for number, text in self.preamble:
                self._feed_markdown(number, text)
        if self.held is not None:
            self._prose_or_context(*self.held)
            self.held = None
        self._finish_notes()
        if self.before_any_table:  # no experiment table in the whole file: nothing of it was read
            self._unparsed(self.before_any_table)
        self.before_any_table = None

    # ---- runs ---------------------------------------------------------------------------------------
    def _build(self, table: _Table, after: str) -> None:
        rows = [row_values(table.columns, cells) for _, cells in table.rows]
        if table.varying is None:
            table.varying = {
                f for f, _ in VARYING_PARTS if len({r[0].get(f) for r in rows if r[0].get(f) is not None}) > 1
            }
        for (line_no, cells), (columns, measures, words, explicit_status) in zip(
            table.rows, rows, strict=True
        ):
            self._run(table, line_no, cells, columns, measures, words, explicit_status, after)

    def _run(
        self,
        table: _Table,
        line_no: int,
        cells: list[str],
        columns: dict[str, Any],
        measures: dict[str, float],
        words: list[str],
        explicit_status: str | None,
        after: str,
    ) -> None:
        key = self.run_key
        self.run_key += 1
        params: list[dict[str, Any]] = [
            {"name": col.header, "value": cell, "line_no": line_no}
            for col, cell in zip(table.columns, cells, strict=True)
        ]
        params.append({"name": "table_line", "value": str(table.header_line), "line_no": table.header_line})
        if table.section:
            params.append({"name": "section", "value": table.section, "line_no": None})
        values = dict(columns)
        for ctx_line, assignments in table.context:
            for name, _field, value in assignments:
                params.append({"name": name, "value": value, "line_no": ctx_line})
        for field_name, value in context_values(table.context).items():
            values.setdefault(field_name, value)
        if table.precision_hint:
            values.setdefault("precision", table.precision_hint)
        derive_world(values, params, line_no)
        cell_notes = [c.strip() for col, c in zip(table.columns, cells, strict=True) if col.field == "notes"]
        failure = next((w for w in words if is_failure(w)), None)
        status = explicit_status or failure or (words[0] if words else None)
        record: dict[str, Any] = {
            "run_key": key,
            "name": self._name(table, values, cells, line_no),
            "framework": FORMAT,
            "status": status,
            "notes": "\n\n".join(p for p in [*cell_notes, table.before, after] if p) or None,
            "line_start": line_no,
            "line_end": line_no,
            **{k: v for k, v in values.items() if k in CONFIG_ALIASES or k == "gpus_per_node"},
            "run_params": params,
        }
        if "tflops" in measures or any(c.field == "tflops" for c in table.columns):
            record["tflops_formula"] = "lab notes: TFLOPs per GPU as recorded"
        self._emit("runs", record)
        elapsed = measures.get("elapsed_s", measures.get("elapsed_ms"))
        if elapsed is not None or "tflops" in measures or "samples_per_s" in measures:
            self._emit(
                "iterations",
                {
                    "run_key": key,
                    "iteration": 0,
                    "elapsed_s": elapsed,
                    "tflops_reported": measures.get("tflops"),
                    "samples_per_s": measures.get("samples_per_s"),
                    "global_batch_size": values.get("gbs"),
                    "line_no": line_no,
                },
            )
        if "mem" in measures:
            self._emit(
                "memory",
                {"run_key": key, "iteration": 0, "max_reserved_mib": measures["mem"], "line_no": line_no},
            )
        if "tokens_per_s" in measures:
            text = next(c for col, c in zip(table.columns, cells, strict=True) if col.field == "tokens_per_s")
            self._emit(
                "iteration_metrics",
                {
                    "run_key": key,
                    "iteration": 0,
                    "key": "tokens per second",
                    "value": measures["tokens_per_s"],
                    "text": text,
                    "line_no": line_no,
                },
            )

    def _name(self, table: _Table, values: dict[str, Any], cells: list[str], line_no: int) -> str:
        parts = [table.title]
        for col, cell in zip(table.columns, cells, strict=True):
            if col.field == "id" and strip_markup(cell):
                text = strip_markup(cell)
                parts.append(f"{col.header.lower()}{text}" if text[0].isdigit() else text)
                break
        if values.get("nodes") is not None and any(c.field == "nodes" for c in table.columns):
            parts.append(f"{values['nodes']}n")
        elif values.get("gpus") is not None and any(c.field == "gpus" for c in table.columns):
            parts.append(f"{values['gpus']}gpu")
        parts += [f"{label}{values[f]}" for f, label in NAME_PARTS if values.get(f) is not None]
        varying = table.varying or set()
        parts += [f"{label}{values[f]}" for f, label in VARYING_PARTS if f in varying and f in values]
        name = " ".join(parts)
        if name in self.names:
            name = f"{name} (line {line_no})"
        self.names.add(name)
        return name


def _tail(lines: list[str]) -> str:
    text = _squeeze(lines)
    return text if len(text) <= NOTES_CHARS else "…" + text[-NOTES_CHARS:]


def _head(lines: list[str]) -> str:
    text = _squeeze(lines)
    return text if len(text) <= NOTES_CHARS else text[:NOTES_CHARS] + "…"


def _squeeze(lines: list[str]) -> str:
    return re.sub(r"\n{3,}", "\n\n", "\n".join(line.rstrip() for line in lines)).strip()


@guarded
def parse(source: LineSource) -> Iterator[Batch]:
    parser = _Parser(source.name)
    for line_no, line in source.lines():
        parser.feed(line_no, line)
        if parser.pending_rows() >= FLUSH_ROWS:
            yield from parser.batches()
    parser.finish()
    yield from parser.batches()
