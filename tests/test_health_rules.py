"""Training-health flags on small logs written to show one problem each."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

import tracelog
from tracelog import api
from tracelog.analysis.rules import health
from tracelog.analysis.scope import Scope
from tracelog.store import Store, progress
from tracelog.thresholds import DEFAULT, Thresholds

from .conftest import SAMPLES


def write_log(path: Path, rows: list[dict]) -> Path:
    lines = []
    for i, row in enumerate(rows, start=1):
        loss = row.get("loss", 3.0)
        lines.append(
            f" iteration {i:8d}/ 1000 | consumed samples: {i * 64:8d} | elapsed time per iteration (ms): "
            f"{row.get('ms', 1000.0):.1f} | learning rate: 1.0E-04 | global batch size:    64 | lm loss: {loss:.6E} | "
            f"loss scale: {row.get('scale', 1.0):.1f} | number of skipped iterations: {row.get('skipped', 0):3d} | "
            f"number of nan iterations: {row.get('nan', 0):3d} |"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def flags_for(tmp_path: Path, rows: list[dict], **overrides: float) -> list[dict]:
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(write_log(tmp_path / "run.log", rows))])
    if overrides:
        tracelog.api.refresh(db, thresholds={k: str(v) for k, v in overrides.items()})
    return tracelog.api.flags(db).to_dict("records")


def ingest_with_tail(tmp_path: Path, tail: list[str], steps: int = 20) -> Path:
    """A healthy run of `steps` iterations whose log ends in these lines, ingested; the database."""
    path = write_log(tmp_path / "run.log", [{} for _ in range(steps)])
    path.write_text(path.read_text() + "\n".join(tail) + "\n")
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(path)])
    return db


def test_healthy_run_has_no_flags(tmp_path: Path) -> None:
    assert flags_for(tmp_path, [{"loss": 3.0 - i * 0.01} for i in range(30)]) == []


def test_nan_iteration_is_critical_and_points_at_the_line(tmp_path: Path) -> None:
    rows = [{} for _ in range(20)]
    rows[12] = {"nan": 1, "loss": float("nan")}
    (flag,) = flags_for(tmp_path, rows)
    assert flag["severity"] == "critical" and "NaN" in flag["message"]
    assert flag["row_ref"] == "line 13"


def test_a_nan_loss_without_the_frameworks_count_is_a_nan_iteration(tmp_path: Path) -> None:
    # A log that prints no NaN count of its own (NeMo's bar, DeepSpeed's scripts, an old Megatron line)
    # tells of one by a loss printed as NaN.
    rows = [{} for _ in range(30)]
    rows[17] = {"loss": float("nan")}
    path = write_log(tmp_path / "run.log", rows)
    path.write_text(path.read_text().replace("number of nan iterations:   0 |", ""))
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(path)])
    assert api.sql(db, "SELECT count(nan) FROM iterations").iloc[0, 0] == 0
    (nan,) = [f for f in tracelog.api.flags(db).to_dict("records") if "NaN" in f["message"]]
    assert (nan["severity"], nan["row_ref"], nan["measured"]) == ("critical", "line 18", 1.0)


def test_a_nan_grad_norm_on_a_step_not_skipped_is_a_nan_iteration(tmp_path: Path) -> None:
    """Megatron-DeepSpeed in bf16 prints `grad norm: nan` with no loss and a NaN count of 0 (invented lines
    in the shape of bigscience-workshop/Megatron-DeepSpeed#396); the same on a skipped step is the fp16
    loss scaler's overflow, which the skip count already tells."""
    line = (
        " iteration {i:8d}/  250000 | consumed samples: {s:10d} | elapsed time per iteration (ms): 2350.1 | "
        "learning rate: 6.000E-05 | global batch size:   512 | {loss}loss scale: {scale} | grad norm: {norm} | "
        "number of skipped iterations: {skipped:3d} | number of nan iterations:   0 |"
    )
    rows = [dict(loss="lm loss: 2.310000E+00 | ", scale="1.0", norm="0.312", skipped=0) for _ in range(24)]
    rows[20] = dict(loss="", scale="1.0", norm="nan", skipped=0)
    rows[21] = dict(loss="", scale="1.0", norm="nan", skipped=0)
    log = tmp_path / "run.log"
    log.write_text("".join(line.format(i=i + 1, s=(i + 1) * 512, **r) + "\n" for i, r in enumerate(rows)))
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    (flag,) = tracelog.api.flags(db).to_dict("records")
    assert (flag["severity"], flag["row_ref"], flag["measured"]) == ("critical", "line 21", 2.0)
    # the fp16 case: skipped steps with an infinite norm are overflows, not NaN iterations
    fp16 = [dict(r, scale="65536.0") for r in rows]
    fp16[20] = dict(loss="", scale="32768.0", norm="inf", skipped=1)
    fp16[21] = dict(loss="lm loss: 2.300000E+00 | ", scale="32768.0", norm="0.3", skipped=0)
    log.write_text("".join(line.format(i=i + 1, s=(i + 1) * 512, **r) + "\n" for i, r in enumerate(fp16)))
    (tmp_path / "b").mkdir()
    api.ingest(tmp_path / "b" / "t.duckdb", [str(log)])
    assert not [
        f for f in tracelog.api.flags(tmp_path / "b" / "t.duckdb").to_dict("records") if "NaN" in f["message"]
    ]


def test_a_run_that_skipped_most_of_its_steps_is_critical_not_calibrating(tmp_path: Path) -> None:
    # Every line but the last two skipped its step: the loss scaler overflowing throughout, which the
    # warm-up cut (leading lines with skips) would otherwise have called calibration ("info").
    rows = [{"skipped": 1 if i < 18 else 0} for i in range(20)]
    (flag,) = flags_for(tmp_path, rows)
    assert (
        flag["severity"] == "critical" and "18 of about 20 iterations were skipped (90.0%)" in flag["message"]
    )
    assert (flag["row_ref"], flag["measured"]) == ("line 1", 0.9)


def test_a_few_skips_at_the_start_stay_calibration(tmp_path: Path) -> None:
    rows = [{"skipped": 1 if i < 3 else 0} for i in range(30)]
    (flag,) = flags_for(tmp_path, rows)
    assert flag["severity"] == "info" and "3 skipped iteration(s) during warm-up" in flag["message"]
    (tmp_path / "lower").mkdir()
    (strict,) = flags_for(tmp_path / "lower", rows, skipped_share=0.05)
    assert strict["severity"] == "critical" and "3 of about 30" in strict["message"]


def test_a_line_megatron_printed_without_its_loss_is_a_nan_iteration(tmp_path: Path) -> None:
    """Megatron prints a loss only when its average is above 0, so a NaN loss leaves the line without one
    (Megatron-DeepSpeed#434); a skipped step's line has none either, and is no NaN."""
    rows = [{} for _ in range(30)]
    log = write_log(tmp_path / "run.log", rows)
    lines = log.read_text().splitlines()
    lines[24] = lines[24].replace("lm loss: 3.000000E+00 | ", "")
    lines[10] = (
        lines[10].replace("lm loss: 3.000000E+00 | ", "").replace("iterations:   0 |", "iterations:   1 |", 1)
    )
    log.write_text("\n".join(lines) + "\n")
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    flags = tracelog.api.flags(db).to_dict("records")
    (nan,) = [f for f in flags if "NaN" in f["message"]]
    assert (nan["severity"], nan["row_ref"], nan["measured"]) == ("critical", "line 25", 1.0)
    assert "1 of them a line without its loss" in nan["message"]


def test_a_line_cut_before_its_loss_is_no_nan_iteration(tmp_path: Path) -> None:
    """A log wrapped at a fixed width (a document quoting it, a terminal's paste) cuts iteration lines
    before their loss; such a line printed neither the learning rate nor anything after the loss, and its
    loss was not left out by Megatron."""
    log = write_log(tmp_path / "run.log", [{} for _ in range(30)])
    lines = log.read_text().splitlines()
    for i in (20, 21, 22):
        lines[i] = lines[i][
            : lines[i].index(" rate: ") + 1
        ]  # `... elapsed time per iteration (ms): 1000.0 | learning`
    log.write_text("\n".join(lines) + "\n")
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    assert api.sql(db, "SELECT count(*) FILTER (lm_loss IS NULL) FROM iterations").iloc[0, 0] == 3
    assert [f for f in tracelog.api.flags(db).to_dict("records") if "NaN" in f["message"]] == []


@pytest.mark.parametrize(
    ("scale", "says"),
    [
        (65536.0, "the fp16 loss scaler hit overflows"),
        (1.0, "with a loss scale of 1.0 there is no fp16 scaler"),
    ],
)
def test_skips_are_blamed_on_the_loss_scaler_only_where_there_is_one(
    tmp_path: Path, scale: float, says: str
) -> None:
    # argonne-lcf's `--train-range-to-skip` and Megatron's `--iterations-to-skip` skip steps in bf16 too
    rows = [{"scale": scale} for _ in range(30)]
    rows[20]["skipped"] = 1
    (flag,) = flags_for(tmp_path, rows)
    assert flag["severity"] == "warning" and says in flag["message"], flag["message"]


# Invented, in the shape of an fp16 fine-tuning job's output as DeepSpeed 0.5 printed it (logging.py's
# log_dist, timer.py's throughput line) behind the Trainer's progress bar: the log starts at step 2000, so
# the count on the first step line is of every step before it.
T5_TAIL = [
    "{'loss': 0.0, 'learning_rate': 0.001, 'epoch': 0.04}",
    "  8%|#         | 1999/24128 [1:52:09<20:27:23,  3.33s/it]"
    "[2021-11-26 03:07:16,494] [INFO] [logging.py:69:log_dist] [Rank 0] step=2000, skipped=1995, "
    "lr=[0.001, 0.001], mom=[0.0, 0.0]",
    "[2021-11-26 03:07:16,494] [INFO] [timer.py:181:stop] 0/2000, SamplesPerSec=9.526738918021234",
    "[2021-11-26 03:40:31,102] [INFO] [logging.py:69:log_dist] [Rank 0] step=2010, skipped=2005, "
    "lr=[0.001, 0.001], mom=[0.0, 0.0]",
]


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        (4, "2005 of about 2010 iterations were skipped (99.8%)"),
        # cut after its first step line (as transformers#14531 quotes it): the running count alone tells
        (3, "1995 of about 2000 iterations were skipped (99.8%)"),
    ],
    ids=["two-step-lines", "one-step-line"],
)
def test_deepspeeds_running_count_on_a_tails_first_line_tells_of_a_run_that_never_trained(
    tmp_path: Path, lines: int, says: str
) -> None:
    path = tmp_path / "t5.log"
    path.write_text("\n".join(T5_TAIL[:lines]) + "\n")
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(path)])
    (flag,) = [f for f in tracelog.api.flags(db).to_dict("records") if f["severity"] == "critical"]
    assert says in flag["message"], flag["message"]
    assert flag["row_ref"] == "line 2"  # the step line glued behind the bar


def test_a_collective_timeout_is_critical_and_names_where_the_run_died(tmp_path: Path) -> None:
    # Invented, in the words PyTorch's NCCL watchdog and torchrun's elastic agent print (ProcessGroupNCCL
    # .cpp, torch/distributed/elastic/multiprocessing/api.py), after 20 healthy iterations.
    crash = [
        "[rank3]:[E1003 18:37:01.832146912 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=6463, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
        "ran for 600017 milliseconds before timing out.",
        "[rank3]:[E1003 18:37:01.833637681 ProcessGroupNCCL.cpp:621] [Rank 3] Some NCCL operations have failed "
        "or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
        "corrupted/incomplete data.",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "E1003 18:37:09.599000 3036 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: -6) "
        "local_rank: 3 (pid: 3042) of binary: /usr/bin/python",
    ]
    db = ingest_with_tail(tmp_path, crash)
    kinds = api.sql(db, "SELECT line_no, kind FROM events ORDER BY line_no")
    assert kinds.values.tolist() == [[21, "timeout"], [22, "timeout"], [23, "crash"], [24, "crash"]]
    (flag,) = tracelog.api.flags(db).to_dict("records")
    assert (flag["severity"], flag["row_ref"], flag["measured"]) == ("critical", "line 21", 4.0)
    assert "It died at line 21: [rank3]" in flag["message"] and "failed (exitcode: -6)" in flag["message"]
    assert "An error came before it" not in flag["message"]


def test_the_error_that_came_before_the_fatal_timeout_is_named(tmp_path: Path) -> None:
    """One rank fails (an exception ends its traceback) and the others time out waiting for it: the
    timeout is what the job died of, the exception why (invented, in the shape of a Megatron-DeepSpeed job
    whose rank 4 found no index file)."""
    crash = [
        "[rank4]: Traceback (most recent call last):",
        "[rank4]: FileNotFoundError: [Errno 2] No such file or directory: 'index-cache/26070e1f_doc_idx.npy'",
        "[rank0]:[E328 00:21:12.920872216 ProcessGroupNCCL.cpp:683] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000)",
    ]
    db = ingest_with_tail(tmp_path, crash)
    (flag,) = tracelog.api.flags(db).to_dict("records")
    assert (flag["severity"], flag["row_ref"]) == ("critical", "line 23")
    assert "An error came before it, at line 22: [rank4]: FileNotFoundError" in flag["message"]


def test_a_step_slurm_cancelled_at_its_time_limit_is_critical(tmp_path: Path) -> None:
    path = write_log(tmp_path / "run.log", [{} for _ in range(17)])
    path.write_text(
        path.read_text()
        + "slurmstepd: error: *** STEP 255941.18 ON node016 CANCELLED AT 2025-11-14T12:05:16 DUE TO TIME LIMIT ***\n"
        + "srun: error: node016: tasks 0-7: Terminated\n"
    )
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(path)])
    (flag,) = tracelog.api.flags(db).to_dict("records")
    assert (flag["severity"], flag["row_ref"]) == ("critical", "line 18")
    assert "DUE TO TIME LIMIT" in flag["message"]


def test_a_failure_the_job_restarted_from_is_a_warning_not_a_death(tmp_path: Path) -> None:
    # Invented, the shape of an in-job restart (NeMo's fault-tolerance launcher, torchrun --max-restarts):
    # a worker fails, the job restarts it and training goes on from the checkpoint.
    steps = write_log(tmp_path / "steps.log", [{} for _ in range(20)]).read_text().splitlines()
    failed = (
        "[2025-03-07 22:39:36,176] [ERROR] [ft_launcher@4809917ea058] failed (exitcode: 1) local_rank: 2 "
        "(pid: 178688) of binary: /usr/bin/python"
    )
    path = tmp_path / "run.log"
    path.write_text("\n".join([*steps[:10], failed, *steps[10:]]) + "\n")
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(path)])
    (flag,) = tracelog.api.flags(db).to_dict("records")
    assert (flag["severity"], flag["row_ref"]) == ("warning", "line 11")
    assert "died" not in flag["message"]
    assert "training went on after it (an iteration at line 21)" in flag["message"]
    # the same failure as the log's end is where the run died
    ended = tmp_path / "ended.log"
    ended.write_text("\n".join([*steps, failed]) + "\n")
    api.ingest(tmp_path / "e.duckdb", [str(ended)])
    (flag,) = tracelog.api.flags(tmp_path / "e.duckdb").to_dict("records")
    assert (flag["severity"], flag["row_ref"]) == ("critical", "line 21")


def test_error_lines_that_do_not_say_the_run_died_are_a_warning(tmp_path: Path) -> None:
    path = write_log(tmp_path / "run.log", [{} for _ in range(20)])
    path.write_text(path.read_text() + "RuntimeError: a logging hook failed; training goes on\n")
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(path)])
    (flag,) = tracelog.api.flags(db).to_dict("records")
    assert (flag["severity"], flag["row_ref"]) == ("warning", "line 21")
    assert "died" not in flag["message"]


@pytest.mark.parametrize("then_steps", [False, True])
def test_a_log_that_ends_in_an_uncaught_exception_died_of_it(tmp_path: Path, then_steps: bool) -> None:
    """Python prints an uncaught exception as its traceback and then the exception's line, and the
    process ends: a log whose last lines are those died there (invented, the shape of a Megatron-DeepSpeed
    save that failed). The same traceback with iterations after it was caught: a warning."""
    path = write_log(tmp_path / "run.log", [{} for _ in range(20)])
    crash = [
        "Traceback (most recent call last):",
        '  File "pretrain_gpt.py", line 575, in <module>',
        "    model = main()",
        "AttributeError: 'GPTModel' object has no attribute '_get_tp_replicated_param_patterns'",
    ]
    path.write_text(path.read_text() + "\n".join(crash) + "\n")
    if then_steps:  # iterations 21 to 23 after it
        more = write_log(tmp_path / "more.log", [{} for _ in range(23)]).read_text().splitlines()[20:]
        path.write_text(path.read_text() + "\n".join(more) + "\n")
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(path)])
    (flag,) = [f for f in tracelog.api.flags(db).to_dict("records") if "error line" in f["message"]]
    if then_steps:
        assert flag["severity"] == "warning" and "died" not in flag["message"]
    else:
        assert (flag["severity"], flag["row_ref"]) == ("critical", "line 24")
        assert "The log ends in that exception" in flag["message"]


def test_loss_spike_against_running_median(tmp_path: Path) -> None:
    rows = [{"loss": 3.0} for _ in range(20)]
    rows[15] = {"loss": 5.0}
    (flag,) = flags_for(tmp_path, rows)
    assert flag["rule"] == "training_health" and "loss spike" in flag["message"]
    assert flag["ratio"] == pytest.approx(5.0 / 3.0)
    (tmp_path / "higher").mkdir()
    assert flags_for(tmp_path / "higher", rows, loss_spike=2.0) == []


def test_a_loss_that_explodes_on_the_third_logged_step_is_the_worst_spike(tmp_path: Path) -> None:
    """The shape of a published TRL log (SkyPilot's gpt-oss-120b fine-tune on 4 nodes: 3.08, 3.28, 748.06,
    567.2, 2.15, 502.5; these figures are this test's): the third line is held against the two before it."""
    rows = [{"loss": v} for v in (3.0, 3.25, 750.0, 560.0, 2.2, 2.1, 500.0)]
    (flag,) = [f for f in flags_for(tmp_path, rows) if "loss spike" in f["message"]]
    assert flag["message"].startswith("3 loss spike(s); the worst at iteration 3: 750")
    assert flag["ratio"] == pytest.approx(750.0 / 3.125)


def test_sec_per_it_drift(tmp_path: Path) -> None:
    rows = [{"ms": 1000.0 + 15 * i} for i in range(40)]
    flag = next(f for f in flags_for(tmp_path, rows) if "drifted" in f["message"])
    assert flag["severity"] == "warning"
    assert flag["ratio"] > DEFAULT.sec_it_drift


def test_straggler_step_is_info(tmp_path: Path) -> None:
    rows = [{"ms": 1000.0} for _ in range(30)]
    rows[20] = {"ms": 1600.0}
    (flag,) = flags_for(tmp_path, rows)
    assert flag["severity"] == "info" and "iteration 21" in flag["message"]


def test_ties_name_the_first_line_whatever_order_the_rows_were_stored_in(tmp_path: Path) -> None:
    # rows stored last line first (a merge or a parallel insert stores them in any order): the rules that
    # name one line among equals still name the first
    rows = [
        {"run_id": 1, "iteration": n * 10, "line_no": n, "elapsed_s": 1.6 if n in (12, 20, 24) else 1.0,
         "loss_scale": 65536.0 if n <= 12 else 1.0}
        for n in range(30, 0, -1)
    ]  # fmt: skip
    with Store(tmp_path / "o.duckdb") as store:
        store.insert("iterations", pd.DataFrame(rows))
        store.insert("runs", pd.DataFrame({"run_id": [1], "source_id": [0], "run_key": [0]}))
        everything = Scope.of(None, None)
        (straggler,) = health.straggler_steps(store, dataclasses.replace(DEFAULT, straggler=1.5), everything)
        (collapse,) = health.loss_scale_collapse(store, DEFAULT, everything)
    assert straggler["row_ref"] == "line 12" and "iteration 120" in straggler["message"]
    assert collapse["row_ref"] == "line 13"


def test_fp16_loss_scale_collapse(tmp_path: Path) -> None:
    rows = [{"scale": 65536.0} for _ in range(10)] + [{"scale": 2.0**-i, "skipped": 1} for i in range(10)]
    found = flags_for(tmp_path, rows)
    assert any(f["severity"] == "critical" and "collapsed" in f["message"] for f in found)
    assert any("skipped iteration(s) after warm-up" in f["message"] for f in found)


def test_unknown_threshold_is_a_clear_error() -> None:
    with pytest.raises(tracelog.TracelogError, match="unknown threshold nope"):
        Thresholds().with_overrides({"nope": 1})


def spikes_and_progress(db: Path) -> tuple[list[tuple], list[tuple]]:
    with Store(db) as store:
        spikes = store.con.execute(
            "SELECT line_no, iteration, lm_loss, running_median, ratio FROM loss_spikes ORDER BY line_no"
        ).fetchall()
        progress = store.con.execute(
            "SELECT rule, checked_line, context_line, threshold FROM run_progress WHERE rule = 'loss_spike'"
        ).fetchall()
    return spikes, progress


def test_a_grown_log_is_checked_for_spikes_over_its_new_lines_only(tmp_path: Path) -> None:
    rows = [{"loss": 3.0} for _ in range(80)]
    rows[15] = {"loss": 5.0}
    rows[60] = {"loss": 6.0}
    full = write_log(tmp_path / "full.log", rows)
    direct = tmp_path / "direct.duckdb"
    api.ingest(direct, [str(full)])

    log = tmp_path / "run.log"
    lines = full.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:40]))
    grown = tmp_path / "grown.duckdb"
    api.ingest(grown, [str(log)])
    assert spikes_and_progress(grown) == ([(16, 16, 5.0, 3.0, 5.0 / 3.0)], [("loss_spike", 40, 31, 1.5)])
    with Store(grown) as store:  # an old line changed behind the rule's back: the next check must not read it
        store.con.execute("UPDATE iterations SET lm_loss = 9.0 WHERE line_no = 5")
    log.write_bytes(b"".join(lines))
    (result,) = api.ingest(grown, [str(log)])
    assert result.status == "appended"
    assert spikes_and_progress(grown)[0] == [(16, 16, 5.0, 3.0, 5.0 / 3.0), (61, 61, 6.0, 3.0, 2.0)]
    assert spikes_and_progress(grown) == spikes_and_progress(direct)
    (flag,) = [f for f in tracelog.api.flags(grown).to_dict("records") if "loss spike" in f["message"]]
    assert flag["message"].startswith("2 loss spike(s); the worst at iteration 61")

    # a new threshold checks the whole run again, old lines included
    tracelog.api.refresh(grown, thresholds={"loss_spike": "1.6"})
    spikes, progress = spikes_and_progress(grown)
    assert [line for line, *_ in spikes] == [5, 16, 61] and progress == [("loss_spike", 80, 71, 1.6)]


def test_a_row_rewritten_below_the_checked_line_is_checked_again(tmp_path: Path) -> None:
    """A resumed DeepSpeed parse writes again the steps still open at the end of the last one: the checks
    from that line on are forgotten, and the next refresh restores what a check from scratch finds."""
    rows = [{"loss": 3.0} for _ in range(60)]
    rows[20] = {"loss": 5.0}
    rows[45] = {"loss": 6.0}
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(write_log(tmp_path / "run.log", rows))])
    before = spikes_and_progress(db)
    assert [line for line, *_ in before[0]] == [21, 46]
    with Store(db) as store:
        run_id = int(store.scalar("SELECT run_id FROM runs"))
        progress.rewind(store.con, run_id, 30)
        assert store.con.execute("SELECT line_no FROM loss_spikes").fetchall() == [(21,)]
        assert store.con.execute(
            "SELECT checked_line, context_line FROM run_progress WHERE rule = 'loss_spike'"
        ).fetchall() == [(29, 20)]
        store.con.execute("UPDATE iterations SET lm_loss = 7.0 WHERE line_no = 35")
    tracelog.api.refresh(db)
    spikes, after = spikes_and_progress(db)
    assert [line for line, *_ in spikes] == [21, 35, 46] and after == before[1]


def test_each_files_own_refresh_writes_what_a_full_refresh_writes(tmp_path: Path) -> None:
    """An ingest refreshes only its file's runs and benches, and skips the rule families and predictions
    that cannot find anything in them (bench rules after a training log, run rules after a bench): what
    they wrote, file by file, is what one refresh of the whole store writes."""
    db = tmp_path / "all.duckdb"
    logs = sorted(p for p in SAMPLES.iterdir() if p.is_file() and p.suffix in (".log", ".txt", ".json"))
    api.ingest(db, [str(p) for p in logs])

    def outputs() -> dict[str, list[tuple]]:
        with Store(db, read_only=True) as store:
            return {
                "predictions": store.con.execute(
                    "SELECT * EXCLUDE (computed_at) FROM predictions ORDER BY ALL"
                ).fetchall(),
                "comparisons": store.con.execute("SELECT * FROM comparisons ORDER BY ALL").fetchall(),
                "flags": store.con.execute("SELECT * EXCLUDE (flag_id) FROM flags ORDER BY ALL").fetchall(),
            }

    file_by_file = outputs()
    assert all(file_by_file.values()), {k: len(v) for k, v in file_by_file.items()}
    kinds = {row[2] for row in file_by_file["flags"]}  # subject_kind: runs and benches both flagged
    assert {"run", "bench"} <= kinds, kinds
    api.refresh(db)
    assert outputs() == file_by_file


def test_a_log_that_ends_inside_a_checkpoint_save_says_so(tmp_path: Path) -> None:
    """`saving checkpoint at iteration N` with nothing after it: a save that hung (as a flash-checkpoint
    job's log ends, dlrover; invented path). A save followed by its `successfully saved` line says nothing."""
    rows = [{} for _ in range(20)]
    log = write_log(tmp_path / "run.log", rows)
    saving = "saving checkpoint at iteration      20 to /ckpt/llama in torch_dist format\n"
    log.write_text(log.read_text() + saving)
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    (flag,) = [f for f in tracelog.api.flags(db).to_dict("records") if "checkpoint save" in f["message"]]
    assert (flag["severity"], flag["row_ref"]) == ("info", "line 21")
    log.write_text(
        log.read_text() + "  successfully saved checkpoint from iteration      20 to /ckpt/llama\n"
    )
    (tmp_path / "b").mkdir()
    api.ingest(tmp_path / "b" / "t.duckdb", [str(log)])
    assert not [
        f
        for f in tracelog.api.flags(tmp_path / "b" / "t.duckdb").to_dict("records")
        if "save" in f["message"]
    ]


def test_a_save_and_an_exception_read_the_last_iteration_line_of_the_grown_log(tmp_path: Path) -> None:
    """A save and a traceback with no iteration line after them, then the log grows by more iterations:
    the save was not the end (no flag), and the error came before the last step (a warning, not the death
    of the run). The last iteration line comes from the ranges the refresh brought up to date."""
    steps = write_log(tmp_path / "steps.log", [{} for _ in range(30)]).read_text().splitlines(keepends=True)
    log = tmp_path / "run.log"
    log.write_text(
        "".join(steps[:20])
        + "saving checkpoint at iteration      20 to /ckpt/llama in torch_dist format\n"
        + "Traceback (most recent call last):\n"
        + "RuntimeError: a logging hook failed\n"
    )
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    before = {(f["severity"], f["row_ref"]) for f in tracelog.api.flags(db).to_dict("records")}
    assert before == {("info", "line 21"), ("critical", "line 23")}
    with log.open("a") as growing:
        growing.write("".join(steps[20:]))
    (result,) = api.ingest(db, [str(log)])
    assert result.status == "appended"
    grown = tracelog.api.flags(db).to_dict("records")
    assert [(f["severity"], f["row_ref"]) for f in grown] == [("warning", "line 23")]
    api.ingest(tmp_path / "whole.duckdb", [str(log)])
    whole = tracelog.api.flags(tmp_path / "whole.duckdb").to_dict("records")
    assert [(f["severity"], f["row_ref"], f["message"]) for f in grown] == [
        (f["severity"], f["row_ref"], f["message"]) for f in whole
    ]


# NCCL's warning where no verbs library loads, verbatim from pytorch/torchtitan#4628 (September 2026) without
# its `[rank0]:` prefix; the run it came from went on to train.
IBV_WARN = (
    "[2026-09-11 23:05:42] devvm7508:2914395:2914395 [0] misc/ibvwrap.cc:185 (wrap_ibv_alloc_pd) "
    "NCCL WARN lib wrapper not initialized."
)


def test_nccl_warnings_a_run_trained_on_after_are_information_not_error_lines(tmp_path: Path) -> None:
    """A healthy run whose ranks each printed NCCL's warning between its steps (the log invented around the
    published line): one info flag naming the first, not a warning about error lines."""
    steps = write_log(tmp_path / "steps.log", [{} for _ in range(20)]).read_text().splitlines()
    warned = [IBV_WARN.replace("[0]", f"[{rank}]") for rank in range(4)]
    path = tmp_path / "run.log"
    path.write_text("\n".join([*steps[:3], *warned, *steps[3:]]) + "\n")
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(path)])
    (flag,) = tracelog.api.flags(db).to_dict("records")
    assert (flag["rule"], flag["severity"], flag["row_ref"]) == ("training_health", "info", "line 4")
    assert flag["message"].startswith("4 NCCL warning line(s) (4 distinct) before the last step")
    assert "lib wrapper not initialized" in flag["message"] and "error line" not in flag["message"]


def test_an_nccl_warning_after_the_last_step_or_saying_it_died_is_still_an_error_line(tmp_path: Path) -> None:
    """The same warning as the log's last line is what a dying communicator prints (a warning); one that
    says a collective timed out stays an error line with steps after it (invented line), worded as a
    failure training went on from."""
    db = ingest_with_tail(tmp_path, [IBV_WARN])
    (flag,) = tracelog.api.flags(db).to_dict("records")
    assert (flag["severity"], flag["row_ref"]) == ("warning", "line 21")
    assert flag["message"].startswith("1 error line(s) in the log")

    steps = write_log(tmp_path / "steps.log", [{} for _ in range(20)]).read_text().splitlines()
    timed_out = "node7:1:2 [3] NCCL WARN NET/IB : req 0/1 tag 7 peer 10.0.0.2 collective timed out"
    path = tmp_path / "timeout.log"
    path.write_text("\n".join([*steps[:10], timed_out, *steps[10:]]) + "\n")
    api.ingest(tmp_path / "o.duckdb", [str(path)])
    (flag,) = tracelog.api.flags(tmp_path / "o.duckdb").to_dict("records")
    assert flag["message"].startswith("1 error line(s) in the log; the last: node7:1:2 [3] NCCL WARN")
    assert "training went on after it" in flag["message"]
