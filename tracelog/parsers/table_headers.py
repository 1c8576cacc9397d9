"""What the rows of a lab-note experiment table mean: header aliases, units in cells, placeholders.

Hand-kept tables name the same thing many ways (`Sec/it`, `s/it`, `secs/it`; `NHIDDEN`, `hidden`) and
write values with their unit (`55GB`, `181B`) or with a word instead of a number (`OOM`, `xxxx`, a bare
`GB` left unfilled). This module turns one header cell into a field and one cell into a value or a word.
Context lines above a table (`NHIDDEN=14336 / NLAYERS=72`) use the same field names.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from typing import Any

import regex

# field -> header spellings, compared after `normalise` (lower case; spaces, `_`, `-`, `#`, `.` removed)
CONFIG_ALIASES: dict[str, tuple[str, ...]] = {
    "nodes": ("nodes", "node", "nnodes", "numnodes", "nodecount"),
    "gpus": ("gpus", "gpu", "ngpus", "numgpus", "worldsize", "gpucount"),
    "gpus_per_node": ("gpus/node", "gpuspernode", "gpn", "ngpuspernode"),
    "params": ("size", "modelsize", "params", "nparams", "parameters", "numparams"),
    "dp": ("dp", "dataparallel", "dpsize", "dataparallelsize"),
    "tp": ("tp", "mp", "tensorparallel", "tpsize", "tensormodelparallelsize"),
    "pp": ("pp", "pipelineparallel", "ppsize", "pipelinemodelparallelsize"),
    "cp": ("cp", "contextparallel", "cpsize"),
    "mbs": ("mbs", "microbatch", "microbatchsize", "microbs", "trainmicrobatchsizepergpu"),
    "gbs": ("gbs", "globalbatch", "globalbatchsize", "globalbs", "trainbatchsize"),
    "seq_len": ("seq", "seqlen", "seqlength", "sequencelength", "ctx", "contextlength"),
    "layers": ("layers", "nlayers", "numlayers", "nlayer"),
    "hidden": ("hidden", "nhidden", "hiddensize", "dmodel"),
    "heads": ("heads", "nheads", "numheads", "numattentionheads", "attentionheads"),
    "ffn_hidden": ("ffn", "ffnhidden", "ffnhiddensize", "dff"),
    "vocab": ("vocab", "vocabsize", "vocablength", "paddedvocabsize"),
    "zero_stage": ("zs", "zero", "zerostage", "zerooptimizationstage"),
    "precision": ("precision", "dtype"),
    "recompute": ("recompute", "recomputegranularity"),
}
MEASURE_ALIASES: dict[str, tuple[str, ...]] = {
    "elapsed_s": (
        "sec/it",
        "secs/it",
        "s/it",
        "secperit",
        "secondsperiteration",
        "time/it",
        "itertime",
        "steptime",
    ),
    "elapsed_ms": ("ms/it", "msperit", "elapsedtimeperiteration"),
    "tflops": (
        "tflops",
        "tflop/s",
        "tflops/gpu",
        "tflop/s/gpu",
        "tflopspergpu",
        "tflopsgpu",
        "throughputpergpu",
    ),
    "mem": ("mem", "memory", "maxmem", "gpumem", "peakmem", "memused", "maxmemory", "memgb", "maxmemgb"),
    "samples_per_s": ("samples/s", "samples/sec", "samplespersec", "samplespersecond", "sps"),
    "tokens_per_s": ("tokens/s", "tok/s", "tokens/sec", "tokenspersec", "tps"),
}
OTHER_ALIASES: dict[str, tuple[str, ...]] = {
    "notes": ("notes", "note", "comment", "comments", "remarks"),
    "id": ("exp", "experiment", "run", "id", "job", "name", "trial"),
    "status": ("status", "result", "outcome"),
    "learning_rate": ("lr", "learningrate"),
}
ALIAS_FIELD = {
    alias: field
    for table in (CONFIG_ALIASES, MEASURE_ALIASES, OTHER_ALIASES)
    for field, aliases in table.items()
    for alias in aliases
}
MEASURE_FIELDS = set(MEASURE_ALIASES)
INT_FIELDS = set(CONFIG_ALIASES) - {"params", "precision", "recompute"}

# A measurement cell holding one of these words instead of a number records a run that did not finish.
FAILURE_WORDS = {
    "oom",
    "fail",
    "failed",
    "failure",
    "hang",
    "hangs",
    "hung",
    "crash",
    "crashed",
    "timeout",
    "error",
    "nan",
    "diverged",
}
# Unit multipliers for counts (`181B` parameters, `250k` vocabulary).
COUNT_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
GPUS_PER_NODE_ASSUMED = 8  # the A100/H100 nodes of the lab notes this format comes from
PRECISIONS = {
    "fp16": "fp16",
    "half": "fp16",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp32": "fp32",
    "fp8": "fp8",
}

NUMBER_RX = regex.compile(
    r"^~?\s*([-+]?(?:\d+(?:[_,]\d{3})*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z/%]*)\s*$"
)
UNIT_IN_HEADER_RX = regex.compile(r"^(.*?)\s*[\(\[]\s*([A-Za-z/%]+)\s*[\)\]]\s*$")
ASSIGNMENT_RX = regex.compile(r"\b([A-Za-z][A-Za-z0-9_]*)\s*=\s*('[^']*'|\"[^\"]*\"|[\w.+-]+(?:/[\d.]+)*)")
PARENTHETICAL_RX = regex.compile(r"\([^)]*\)")
WORD_RX = regex.compile(r"[A-Za-z0-9][\w.]*")
SEPARATOR_RX = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
CELL_SPLIT_RX = re.compile(r"(?<!\\)\|")
MARKUP_RX = regex.compile(r"[*`]|~~|<[^>]+>")


def normalise(header: str) -> str:
    return regex.sub(r"[\s_\-#.]", "", header.lower())


@dataclass(frozen=True)
class Column:
    """One header cell: its text as written, the field it feeds (None: kept only as a parameter), its unit."""

    header: str
    field: str | None
    unit: str | None = None


def column_of(header: str) -> Column:
    text = strip_markup(header)
    unit = None
    if match := UNIT_IN_HEADER_RX.match(text):
        text, unit = match.group(1), match.group(2).lower()
    field = ALIAS_FIELD.get(normalise(text))
    if field == "elapsed_s" and unit == "ms":
        field = "elapsed_ms"
    return Column(header.strip(), field, unit)


def is_experiment_header(columns: list[Column]) -> bool:
    """A table of experiments: it measured something, or it names experiments and their configuration.

    A catalogue of published models (`origin | size | layers | hidden`) has neither and is left as notes.
    """
    fields = {c.field for c in columns}
    if fields & MEASURE_FIELDS:
        return True
    known = fields - {None, "id", "notes", "status"}
    return "id" in fields and bool(known)


def strip_markup(cell: str) -> str:
    return MARKUP_RX.sub("", cell).replace("\\|", "|").strip()


@dataclass
class Cell:
    """A parsed cell: a number in the field's unit, or the word written in its place."""

    value: float | None
    word: str | None


def parse_number(text: str) -> tuple[float, str] | None:
    match = NUMBER_RX.match(text)
    if not match:
        return None
    return float(match.group(1).replace("_", "").replace(",", "")), match.group(2).lower()


def parse_count(text: str, unit: str | None = None) -> int | None:
    """`181B`, `1.3B`, `350M`, `250k`, `2048`: a count; a bare number takes the header's unit (`Size (B)`)."""
    parsed = parse_number(strip_markup(text))
    if parsed is None:
        return None
    value, suffix = parsed
    suffix = suffix or (unit or "")
    if suffix not in COUNT_SUFFIX:
        return None
    scaled = value * COUNT_SUFFIX[suffix]
    return round(scaled) if _fits_int64(scaled) else None


def parse_int(text: str) -> int | None:
    parsed = parse_number(strip_markup(text))
    if parsed is None or parsed[1] not in ("", "k"):
        return None
    value = parsed[0] * (1000 if parsed[1] == "k" else 1)
    return int(value) if _fits_int64(value) and value == int(value) else None


def _fits_int64(value: float) -> bool:
    """A count or integer cell the store's BIGINT columns can hold; 1e308 or inf reads as no value."""
    return math.isfinite(value) and abs(value) < 2**63


def parse_config(field: str, text: str, unit: str | None = None) -> object:
    """The value of a configuration cell or context assignment, or None if it does not read as one."""
    clean = strip_markup(text)
    if field == "params":
        return parse_count(clean, unit)
    if field == "vocab":
        return parse_count(clean, unit)
    if field == "precision":
        return PRECISIONS.get(clean.lower())
    if field == "recompute":
        lowered = clean.lower()
        return lowered if lowered in ("none", "selective", "full") else None
    if field in INT_FIELDS:
        return parse_int(clean)
    return None


def mem_mib(value: float, unit: str) -> float | None:
    """Memory in MiB. Lab notes copy `GB` from nvidia-smi, whose figures are MiB; `80GB` means a full
    80 GiB A100, so one GB written in a table is taken as 1024 MiB (GiB), like MB as MiB."""
    if unit in ("", "gb", "gib", "g"):
        return value * 1024.0
    if unit in ("mb", "mib", "m"):
        return value
    if unit in ("tb", "tib"):
        return value * 1024.0 * 1024.0
    return None


def parse_measure(field: str, text: str, unit: str | None = None) -> Cell:
    """A measurement cell in the unit of its column (`elapsed_s` seconds, `mem` MiB, `tflops` TFLOP/s).

    A blank cell is (None, None); a word or a bare unit (`OOM`, `xxxx`, `GB`) is (None, word)."""
    clean = strip_markup(text)
    if not clean:
        return Cell(None, None)
    parsed = parse_number(clean)
    if parsed is None:
        return Cell(None, clean)
    value, suffix = parsed
    suffix = suffix or (unit or "")
    if field == "mem":
        mib = mem_mib(value, suffix)
        return Cell(mib, None) if mib is not None else Cell(None, clean)
    if field == "elapsed_s" and suffix in ("ms", "msec"):
        return Cell(value / 1000.0, None)
    if field == "elapsed_ms":
        return Cell(value / (1.0 if suffix in ("s", "sec") else 1000.0), None)
    return Cell(value, None)


def is_failure(word: str) -> bool:
    return word.strip().lower().rstrip("!.") in FAILURE_WORDS


def parse_context(line: str) -> list[tuple[str, str, str]] | None:
    """`NHIDDEN=14336 / NLAYERS=72` above a table: [(name as written, field, value)], or None for prose.

    A context line is mostly assignments: at least one names a known field, and besides them (and any
    parenthesised remark) it has no more words than assignments, at most three (`20B model: TP=8, ...`,
    `all NHEADS=64 (above too)`). Prose that mentions `PP=6/DP=8` in a sentence is not context.
    """
    text = strip_markup(line).lstrip("-*> ").strip()
    if "=" not in text:
        return None
    assignments = ASSIGNMENT_RX.findall(text)
    known = [(name, ALIAS_FIELD.get(normalise(name)), value) for name, value in assignments]
    if not any(
        field in CONFIG_ALIASES and parse_config(field, value) is not None for _, field, value in known
    ):
        return None
    rest = PARENTHETICAL_RX.sub(" ", ASSIGNMENT_RX.sub(" ", text))
    words = WORD_RX.findall(rest)
    if len(words) > max(3, len(assignments)):
        return None
    return [(name, field or "", value) for name, field, value in known]


def split_row(line: str) -> list[str]:
    text = line.strip()
    if text.startswith("|"):
        text = text[1:]
    if text.endswith("|") and not text.endswith("\\|"):
        text = text[:-1]
    return [cell.strip() for cell in CELL_SPLIT_RX.split(text)]


def is_separator(line: str) -> bool:
    return "-" in line and bool(SEPARATOR_RX.match(line))


def csv_cells(line: str) -> list[str] | None:
    """The cells of a delimited line (comma, tab or semicolon, whichever splits it most), or None."""
    counts = {d: line.count(d) for d in (",", "\t", ";")}
    delimiter = max(counts, key=lambda d: counts[d])
    if counts[delimiter] < 2:
        return None
    # A bare CR inside a line (a file with mixed line ends) is a space to the csv module, not an error.
    try:
        return [c.strip() for c in next(csv.reader([line.replace("\r", " ")], delimiter=delimiter))]
    except csv.Error:  # a quoted field past the csv module's field limit (128 KiB): not a table row
        return None


def row_values(
    header: list[Column], cells: list[str]
) -> tuple[dict[str, Any], dict[str, float], list[str], str | None]:
    """(configuration, measurements, words found where numbers belong, explicit status) of one row."""
    columns: dict[str, Any] = {}
    measures: dict[str, float] = {}
    words: list[str] = []
    status: str | None = None
    for col, cell in zip(header, cells, strict=True):
        if col.field is None:
            continue
        if col.field in MEASURE_FIELDS:
            parsed = parse_measure(col.field, cell, col.unit)
            if parsed.value is not None:
                measures.setdefault(col.field, parsed.value)
            elif parsed.word is not None:
                words.append(parsed.word)
        elif col.field == "status":
            status = strip_markup(cell) or status
        elif col.field in CONFIG_ALIASES and col.field not in columns:
            value = parse_config(col.field, cell, col.unit)
            if value is not None:
                columns[col.field] = value
    return columns, measures, words, status


def context_values(context: list[tuple[int, list[tuple[str, str, str]]]]) -> dict[str, Any]:
    """Fields the context lines set; a field given two different values above one table is ambiguous
    (the lab note describes several set-ups) and is not applied."""
    seen: dict[str, set[Any]] = {}
    for _, assignments in context:
        for _name, field_name, raw in assignments:
            if field_name in CONFIG_ALIASES:
                value = parse_config(field_name, raw)
                if value is not None:
                    seen.setdefault(field_name, set()).add(value)
    return {f: next(iter(v)) for f, v in seen.items() if len(v) == 1}


def derive_world(values: dict[str, Any], params: list[dict[str, Any]], line_no: int) -> None:
    """GPUs from nodes (8 per node unless the table says otherwise), DP from GPUs / (TP × PP × CP).

    Each assumption is recorded as a run parameter; a table whose DP × TP × PP disagrees with its GPU
    count keeps both figures (the mismatch is a parameter too)."""
    nodes, gpus, per_node = values.get("nodes"), values.get("gpus"), values.get("gpus_per_node")
    tp, pp, cp, dp = values.get("tp"), values.get("pp"), values.get("cp") or 1, values.get("dp")
    if gpus is None and nodes is not None:
        if per_node is None:
            per_node = GPUS_PER_NODE_ASSUMED
            params.append({"name": "gpus_assumed_per_node", "value": str(per_node), "line_no": line_no})
        gpus = values["gpus"] = nodes * per_node
    elif gpus is None and dp and tp and pp:
        gpus = values["gpus"] = dp * tp * pp * cp
        params.append({"name": "gpus_from", "value": "dp * tp * pp", "line_no": line_no})
    if dp is None and gpus and tp and pp and gpus % (tp * pp * cp) == 0:
        values["dp"] = gpus // (tp * pp * cp)
        params.append({"name": "dp_derived", "value": "gpus / (tp * pp * cp)", "line_no": line_no})
    elif dp and tp and pp and gpus and dp * tp * pp * cp != gpus:
        params.append(
            {"name": "gpus_mismatch", "value": f"dp*tp*pp*cp = {dp * tp * pp * cp}", "line_no": line_no}
        )
