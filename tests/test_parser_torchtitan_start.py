"""torchtitan logs pasted from their start: cut before the first step, the spring-2025 start line, and a
pipeline-parallel run logged from a rank that holds no loss."""

from __future__ import annotations

from tests.conftest import rows_by_table
from tracelog import parsers
from tracelog.parsers import torchtitan

# Verbatim lines of pytorch/torchtitan#4628 (September 2026, the loggers named after their modules), up to the
# line the pull request's example cuts.
SETUP_ONLY = """\
[rank0]:[titan] 2026-09-11 23:05:40,871 - torchtitan.observability.structured_logger.jsonl_handler - INFO - Structured logging -> JSONL: /data/users/lty/torchtitan/outputs/structured_logs/training.global_rank_0.20260911-230540-X6XTOY.jsonl
[rank0]:[titan] 2026-09-11 23:05:41,719 - torchtitan.distributed.utils - WARNING - ENV[TORCH_NCCL_ASYNC_ERROR_HANDLING] = 1 will be overridden to 3 based on job config
[rank0]:NCCL version 2.30.7+cuda13.3
[rank0]:
[rank0]:[2026-09-11 23:05:42] devvm7508:2914395:2914395 [0] misc/ibvwrap.cc:185 (wrap_ibv_alloc_pd) NCCL WARN lib wrapper not initialized.
[rank0]:[titan] 2026-09-11 23:05:43,256 - torchtitan.distributed.parallel_dims - INFO - Building device mesh with parallelism: pp=1, dp_replicate=1, dp_shard=7, cp=1, tp=1, ep=1
[rank0]:[titan] 2026-09-11 23:05:44,150 - torchtitan.distributed.parallel_dims - INFO - Successfully created meshes with active dimensions: ['batch', 'loss', 'dp', 'dp_shard']
[rank0]:[titan] 2026-09-11 23:05:44,151 - torchtitan.tools.utils - INFO - [GC] Initial GC collection took 0.00 seconds
[rank0]:[titan] 2026-09-11 23:05:44,762 - torchtitan.trainer - INFO - Building llama3 debugmodel
"""

# Verbatim lines of pytorch/torchtitan#810 (January 2025, before the `[titan]` logger), their trailing blanks
# dropped: the launch, then the NCCL watchdog's abort before the first step.
CRASH_AT_START = """\
(pytorch) [vasiliy@devgpu005.snc8 ~/local/torchtitan (main)]$ with-proxy CONFIG_FILE="./train_configs/debug_model.toml" NGPU=2 CUDA_VISIBLE_DEVICES=0,1 ./run_llama_train.sh
...
[rank0]:2025-01-28 13:23:00,193 - root - INFO - Training starts at step 1, with local batch size 8, global batch size 16, sequence length 2048, total steps 10 (warmup 2)
[rank0]:[rank0]:[E128 13:23:00.788972321 ProcessGroupNCCL.cpp:1897] [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered
[rank0]:CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
"""

# Verbatim lines of pytorch/torchtitan#1232 (May 2025): Llama 3 70B with pipeline_parallel_degree 16 over 2
# nodes, logged from rank 0, which holds the first stage.
PIPELINE_FIRST_STAGE = """\
+ NGPU=8
+ export LOG_RANK=0,15
[rank0]:[titan] 2025-05-28 21:11:37,626 - root - INFO - Trainer is initialized with local batch size 2, global batch size 2, sequence length 4096, total steps 10 (warmup 2).
[rank0]:[titan] 2025-05-28 21:11:37,626 - root - INFO - Training starts at step 1.
[rank0]:[titan] 2025-05-28 21:13:37,816 - root - INFO - step:  1  loss: -1.0000  memory: 36.90GiB(46.63%)  tps: 4  tflops: 0.90  mfu: 0.29%
[rank0]:[titan] 2025-05-28 21:13:37,816 - root - INFO - Synchronizing and adjusting timeout for all ProcessGroups to 0:01:40
[rank0]:[titan] 2025-05-28 21:14:39,054 - root - INFO - step:  2  loss: -1.0000  memory: 42.78GiB(54.06%)  tps: 8  tflops: 1.81  mfu: 0.58%
[rank0]:[titan] 2025-05-28 21:15:40,293 - root - INFO - step:  3  loss: -1.0000  memory: 42.78GiB(54.06%)  tps: 8  tflops: 1.81  mfu: 0.58%
"""


def collect(text: str) -> dict[str, list[dict]]:
    return rows_by_table(torchtitan.parse, text)


def test_a_log_cut_before_its_first_step_is_known_by_the_trainers_logger() -> None:
    """Nothing but setup lines: torchtitan's logger (`[titan] ... - torchtitan.trainer - INFO - `, named
    `root` before) on two lines at least says whose log it is, and its mesh gives the layout."""
    assert parsers.detect(SETUP_ONLY, "job.out") is torchtitan
    others = {p.FORMAT: p.detect(SETUP_ONLY) for p in parsers.PARSERS if p is not torchtitan}
    assert max(others.values()) < torchtitan.detect(SETUP_ONLY), others
    (run,) = collect(SETUP_ONLY)["runs"]
    assert (run["gpus"], run["dp"], run["tp"], run["pp"], run["zero_stage"]) == (7, 7, 1, 1, 3)
    assert {p["name"]: p["value"] for p in run["run_params"]}["model"] == "llama3 debugmodel"


def test_a_crash_before_the_first_step_is_known_by_the_launch_script_and_the_start_line() -> None:
    """Before the `[titan]` logger: the launch script (`./run_llama_train.sh`) and the trainer's start line
    with its batch and step totals; the watchdog's abort is the run's error."""
    assert parsers.detect(CRASH_AT_START, "job.out") is torchtitan
    out = collect(CRASH_AT_START)
    (run,) = out["runs"]
    assert (run["gpus_per_node"], run["mbs"], run["gbs"], run["seq_len"], run["train_iters"]) == (
        2,
        8,
        16,
        2048,
        10,
    )
    assert [e["kind"] for e in out["events"]] == ["error"]


def test_one_start_line_or_a_launch_alone_is_no_claim() -> None:
    """`Training starts at step 1` without its batch sizes is any trainer's wording, and a `run_train.sh`
    is any project's script: neither says torchtitan."""
    anyones = "2025-01-28 13:23:00,193 - INFO - Training starts at step 1\n$ bash run_train.sh\n"
    assert torchtitan.detect(anyones) == 0
    one_own_line = CRASH_AT_START.splitlines()[2] + "\n"
    assert torchtitan.detect(one_own_line) == 0


def test_a_rank_without_the_last_pipeline_stage_prints_no_loss() -> None:
    """`loss: -1.0000` is what a rank that holds no last pipeline stage prints (torchtitan computes the loss
    on the last stage only): no loss, and a run parameter says why; the spring-2025 start line (no
    accumulation yet) gives the batch, the sequence, the steps and the data-parallel degree."""
    out = collect(PIPELINE_FIRST_STAGE)
    (run,) = out["runs"]
    assert [(r["iteration"], r["lm_loss"], r["tflops_reported"]) for r in out["iterations"]] == [
        (1, None, 0.9), (2, None, 1.81), (3, None, 1.81)
    ]  # fmt: skip
    assert (run["mbs"], run["gbs"], run["seq_len"], run["train_iters"], run["dp"]) == (2, 2, 4096, 10, 1)
    params = {p["name"]: p["value"] for p in run["run_params"]}
    assert params["loss_not_logged"] == "rank 0 prints -1.0: it holds no last pipeline stage"
    assert "gradient_accumulation_steps" not in params


def test_the_last_stages_rank_gives_the_loss_the_first_rank_did_not() -> None:
    """Invented lines in the shape of pytorch/torchtitan#1232 with `LOG_RANK=0,15` reaching both ranks:
    rank 0's line comes first and holds no loss; rank 15's line of the same step gives it."""
    line = (
        "[rank{r}]:[titan] 2025-05-28 21:1{m}:37,816 - root - INFO - step:  {s}  loss: {loss}  "
        "memory: 42.78GiB(54.06%)  tps: 8  tflops: 1.81  mfu: 0.58%\n"
    )
    text = "".join(
        line.format(r=r, m=s, s=s, loss=loss)
        for s in (1, 2)
        for r, loss in ((0, "-1.0000"), (15, f"{12.0 - s:.4f}"))
    )
    rows = collect(text)["iterations"]
    assert [(r["iteration"], r["rank"], r["lm_loss"]) for r in rows] == [(1, 0, 11.0), (2, 0, 10.0)]
