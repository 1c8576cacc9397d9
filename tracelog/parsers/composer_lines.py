"""The lines around Composer's metric blocks in an llm-foundry log: its launchers' and its own, what each
means for the run (a launch, the start of training, the parameter count, a checkpoint, a failed rank).

llm-foundry printed its progress bare until late 2023 (`print('Building trainer...')` in
scripts/train/train.py) and through its logger since (`log.info`, same words; `llmfoundry/command_utils/
train.py` from July 2024), which the `python_log_level` it sets by default (`debug`) shows.
"""

from __future__ import annotations

import re

from tracelog.parsers.composer_block import EVAL_HEADER_RX, HEADER_RX, LINE_RX, pairs_of
from tracelog.parsers.composer_config import RULE

TORCHRUN_RX = re.compile(r"^\s*\[(?:rank|default)(\d+)\]:\s?")
LOGGER_RX = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): rank(\d+)\[\d+\]\[[^\]]*\]: "
    r"(DEBUG|INFO|WARNING|ERROR|CRITICAL): ([\w.]+): (.*)$"
)
"""llm-foundry's `logging.basicConfig` format (train.py, 2023-; command_utils/train.py since July 2024):
`%(asctime)s: rank{global_rank}[%(process)d][%(threadName)s]: %(levelname)s: %(name)s: %(message)s`."""
DUMP_RX = re.compile(r"^-{10}(Begin|End) global rank (\d+) (?:STDOUT|STDERR|logs)-{10}\s*$")
EXITED_RX = re.compile(r"^Global rank \d+ \(PID \d+\) exited with code -?\d+")
LAUNCH_RX = re.compile(
    r"^(?:Building tokenizer|Building train loader|Building eval loader|Initializing model|Building trainer"
    r"|Initializing dist with device|Logging config)\.*$"
    r"|^(?:INFO:composer\.cli\.launcher:)?Starting distributed environment on local node"
)
"""What llm-foundry prints before its trainer exists, bare or behind its logger (train.py), and a launcher's
first words (composer/cli/launcher.py; torchrun's banner): after a batch, the next launch."""
START_RX = re.compile(r"^(?:Starting training|Building Lora config|Model built!|Done)\.*$")
PARAMS_RX = re.compile(r"^(?:cfg\.)?n_params=([\d.]+(?:e\+?\d+)?)\s*$")
PRECISION_RX = re.compile(r"^Using precision Precision\.(\w+)")
CHECKPOINT_RX = re.compile(
    r"^(?:(Trainer checkpoint|Model weights) loaded from"
    r"|Global rank 0 (done saving) checkpoint|(Saving) (?:monolithic|sharded) checkpoints? to)"
    r"|^(Autoresuming) training from checkpoint|^(Loading) checkpoint from "
)
COMMAND_RX = re.compile(r"(?:^|[\s/])train\.py\s+\S+\.ya?ml(?:\s|$)")
"""A launch of llm-foundry's trainer as a shell, a paste (`$ `) or `set -x` (`+ `) shows it: `composer -n 8
train.py yamls/pretrain/mpt-7b.yaml ...`, `torchrun --nproc-per-node=8 train.py ...`."""
NPROC_RX = re.compile(r"--nproc[_-]per[_-]node[= ](\d+)\b|\bcomposer\s+(?:-n|--nproc)[= ](\d+)\b")
NNODES_RX = re.compile(r"--nnodes[= ](\d+)\b")
EVAL_INTERVAL_RX = re.compile(r"^(\d+)ba$")
TIME_UNITS = {"seconds": 1.0, "minutes": 60.0, "hours": 3600.0, "days": 86400.0}  # SpeedMonitor's time_unit
PRECISIONS = {"AMP_BF16": "bf16", "AMP_FP16": "fp16", "AMP_FP8": "fp8", "FP32": "fp32", "BF16": "bf16"}


def detect(head: str) -> int:
    """A progress header followed by Composer's `Train`/`Eval` lines, or by a metric on its own line (2022);
    else Composer's `Config:` block or llm-foundry's logger around its start lines (a launch that died
    before its first batch)."""
    headers = metrics = 0
    for raw in head.split("\n"):
        line = TORCHRUN_RX.sub("", raw, count=1)
        header = HEADER_RX.match(line)
        if header and header.group("colon"):
            headers += 1
            metrics += bool(pairs_of(header.group("rest"))[0])
        elif LINE_RX.match(line) and line[:1] in "\t ":
            metrics += 1
        elif EVAL_HEADER_RX.match(line):
            headers += 1
    if headers and metrics >= 2:
        return 45
    if f"{RULE}\nConfig:\n" in head and "\ncomposer_version: " in head:
        return 30
    if re.search(
        r": rank\d+\[\d+\]\[\w+\]: INFO: (?:llmfoundry[\w.]*|__main__): Building trainer\.\.\.", head
    ):
        return 30
    # the trainer's own loggers through llm-foundry's format (`... rank0[11406][MainThread]: INFO:
    # composer.trainer.trainer: Run name: ...`): a paste or a launch that stops before its first batch
    named = (LOGGER_RX.match(TORCHRUN_RX.sub("", line, count=1)) for line in head.split("\n"))
    if sum(1 for m in named if m and m.group(4).startswith(("composer.", "llmfoundry"))) >= 2:
        return 30
    return 0
