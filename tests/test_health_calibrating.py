"""A log of a run's first steps, every one of them an fp16 overflow while the loss scale halves down from
Megatron's default 2**32: the scaler calibrating, an info flag, not a run that skipped most of its steps.

The lines are invented, in the shape of a 2020 Megatron-LM log pasted in NVIDIA/Megatron-LM#60 (no loss yet,
`loss scale` and a per-interval `number of skipped iterations`, `--log-interval 5`); the figures are this
test's. The settling case follows the shape of a 2024 Megatron-LM log in a published Japanese how-to
(`--log-interval 10`: 10 overflows, then 5, then one near step 50)."""

from __future__ import annotations

from pathlib import Path

from tracelog import api


def line(i: int, scale: float, skipped: int) -> str:
    return (
        f" iteration {i:8d}/  120000 | elapsed time per iteration (ms): 2104.7 | learning rate: 0.000E+00 | "
        f"loss scale: {scale:.1f} | number of skipped iterations: {skipped:3d} | number of nan iterations:   0 |"
    )


def skip_flags(tmp_path: Path, lines: list[str]) -> list[dict]:
    log = tmp_path / "run.log"
    log.write_text("\n".join(lines) + "\n")
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    return [f for f in api.flags(db).to_dict("records") if "skipped" in f["message"]]


def test_a_log_of_the_first_overflows_alone_is_the_scale_calibrating(tmp_path: Path) -> None:
    (flag,) = skip_flags(tmp_path, [line(5, 2.0**27, 5), line(10, 2.0**22, 5), line(15, 2.0**17, 5)])
    assert (flag["severity"], flag["measured"]) == ("info", 15.0)
    assert flag["message"] == (
        "15 skipped iteration(s) during warm-up, every logged step so far (the loss scale falling from "
        "134217728 to 131072): the fp16 loss scale calibrating."
    )


def test_overflows_whose_scale_stays_put_are_still_a_run_that_barely_trained(tmp_path: Path) -> None:
    (flag,) = skip_flags(tmp_path, [line(i, 65536.0, 5) for i in range(5, 35, 5)])
    assert flag["severity"] == "critical"
    assert flag["message"].startswith("30 of about 30 iterations were skipped (100.0%)")


def test_skips_that_stop_and_start_again_are_not_calibration(tmp_path: Path) -> None:
    lines = [line(5, 2.0**27, 5), line(10, 2.0**22, 5)]
    lines += [line(i, 2.0**22, 0) for i in range(15, 105, 5)] + [line(105, 2.0**21, 1)]
    (flag,) = skip_flags(tmp_path, lines)
    assert flag["severity"] == "warning"
    assert flag["message"].startswith("1 skipped iteration(s) after warm-up (first near iteration 105)")


def test_an_overflow_in_the_first_hundred_steps_after_the_cut_is_the_scale_settling(tmp_path: Path) -> None:
    # the shape of a 2024 Megatron-LM log from scratch (`--log-interval 10`): 10 overflows in the first
    # interval, 5 in the second, then one more as the scale settles from 2**18 to 2**17 near step 50
    lines = [line(10, 2.0**23, 10), line(20, 2.0**18, 5)]
    lines += [line(i, 2.0**18, 0) for i in (30, 40)] + [line(50, 2.0**17, 1)]
    lines += [line(i, 2.0**17, 0) for i in range(60, 310, 10)]
    (flag,) = skip_flags(tmp_path, lines)
    assert (flag["severity"], flag["measured"]) == ("info", 16.0)
    assert flag["message"].startswith("16 skipped iteration(s) during warm-up and the first 100 steps")


def test_a_skip_without_an_fp16_scaler_stays_a_warning_however_early(tmp_path: Path) -> None:
    lines = [line(i, 1.0, 1 if i == 50 else 0) for i in range(10, 310, 10)]
    (flag,) = skip_flags(tmp_path, lines)
    assert flag["severity"] == "warning"
    assert flag["message"].startswith("1 skipped iteration(s) after warm-up (first near iteration 50)")
