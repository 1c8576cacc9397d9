"""A traceback through Megatron's package with torchrun's `[rank9]: ` in front of every line (PyTorch 2.3 on),
pasted alone: the crash it is, like the same traceback without the prefix, not a file no parser knows.

The frames are invented, in the shape of the one pasted in NVIDIA/TransformerEngine#2543 (`[rank9]:   File
".../Megatron-LM/megatron/training/training.py", line N, in train`); the exception line is this test's."""

from __future__ import annotations

from pathlib import Path

from tracelog import api
from tracelog.parsers import megatron

TRACEBACK = """\
[rank5]: Traceback (most recent call last):
[rank5]:   File "/workspace/Megatron-LM/pretrain_gpt.py", line 244, in <module>
[rank5]:     pretrain(
[rank5]:   File "/workspace/Megatron-LM/megatron/training/training.py", line 792, in pretrain
[rank5]:     iteration, num_floating_point_operations_so_far = train(
[rank5]:                                                       ^^^^^^
[rank5]:   File "/workspace/Megatron-LM/megatron/training/training.py", line 2401, in train
[rank5]:     model_chunk.set_is_first_microbatch()
[rank5]: AttributeError: 'DistributedDataParallel' object has no attribute 'set_is_first_microbatch'
"""


def test_a_rank_prefixed_traceback_through_megatron_is_a_dying_job(tmp_path: Path) -> None:
    assert megatron.detect(TRACEBACK) == 1
    assert megatron.detect(TRACEBACK.replace("/megatron/", "/trainer/")) == 0
    path = tmp_path / "job.err"
    path.write_text(TRACEBACK)
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(path)])
    assert (result.status, result.format, result.runs) == ("ingested", "megatron", 1)
    (flag,) = api.flags(db).to_dict("records")
    assert flag["severity"] == "critical" and flag["row_ref"] == "line 9"
    assert "AttributeError: 'DistributedDataParallel' object has no attribute" in flag["message"]
