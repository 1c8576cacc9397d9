"""PyTorch Lightning's model summary, as a NeMo 2 job prints it before training.

`ModelSummary` writes a text table and its totals with the figure first (`2.0 B     Total params`);
`RichModelSummary` (lightning/pytorch/callbacks/rich_model_summary.py) draws the table in box characters
and its totals with the label first (`Total params: 6.5 B`). The counts are Lightning's
`get_human_readable_count`: three significant figures at most, in thousands (`K`), millions (`M`),
billions (`B`) or trillions (`T`). Under Megatron they count the module of one model-parallel rank: the
whole model's only where neither tensor nor pipeline parallelism splits it.
"""

from __future__ import annotations

import re
from typing import Any

TOTAL_LABELS = (
    r"Trainable params|Non-trainable params|Total params|Total estimated model params size \(MB\)"
    r"|Modules in (?:train|eval) mode|Total Flops"
)
COUNT = r"[\d.,]+\s*[KMBT]?"
TOTAL_RX = re.compile(r"^\s*(" + COUNT + r")\s+(" + TOTAL_LABELS + r")\s*$")
RICH_TOTAL_RX = re.compile(r"^\s*(" + TOTAL_LABELS + r"):\s*(" + COUNT + r")\s*$")
TABLE_RX = re.compile(
    r"^\s*(?:\d+\s*)?\|\s*[\w.]+\s*\|\s*\w+\s*\|.*\|\s*\w*\s*$|^-{20,}\s*$"  # the text table
    r"|^\s*[┏┗┡└┌][━─┳┻╇┴┬\s]+[┓┛┩┘┐]\s*$"  # the rich table's rules
    r"|^\s*┃\s*┃\s*Name\s*┃\s*Type\s*┃\s*Params\s*┃.*┃\s*$"  # its head
    r"|^\s*│\s*\d+\s*│\s*[\w.]+\s*│\s*\w+\s*│.*│\s*$"  # a module's row
)
UNITS = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


def summary_line(body: str) -> tuple[str, str] | bool:
    """A totals line as (label, count as printed); True for a line of the table; False otherwise."""
    if match := TOTAL_RX.match(body):
        return match.group(2), match.group(1).strip()
    if match := RICH_TOTAL_RX.match(body):
        return match.group(1), match.group(2).strip()
    return bool(TABLE_RX.match(body))


def count(printed: str) -> int | None:
    """A count as Lightning prints it (`6.5 B`, `2.1 M`, `452`) as a number, or None."""
    match = re.fullmatch(r"([\d.,]+)\s*([KMBT]?)", printed.strip())
    if match is None:
        return None
    try:
        return round(float(match.group(1).replace(",", "")) * UNITS[match.group(2)])
    except ValueError:
        return None


def whole_model_params(said: dict[str, str], columns: dict[str, Any]) -> tuple[int, str] | None:
    """The model's size from the summary's `lightning Total params` run parameter, and how it was told:
    where the run's columns and parameters say no tensor, pipeline or expert parallelism splits the model,
    or say nothing of them (then the whole model is an assumption, said so, as the DeepSpeed parser's
    `gpus_from` says its own); None where a split is printed or there is no total."""
    total = count(said.get("lightning Total params", ""))
    experts = [v for k, v in said.items() if k.endswith("expert_model_parallel_size") and v != "1"]
    if not total or experts or (columns.get("tp") or 1) * (columns.get("pp") or 1) != 1:
        return None
    how = "Lightning's model summary (Total params, as rounded there)"
    if columns.get("tp") is None or columns.get("pp") is None:
        how += "; rank 0's shard, the whole model assumed: no tensor or pipeline parallelism printed"
    return total, how
