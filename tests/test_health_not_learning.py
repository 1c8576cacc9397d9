"""The `not_learning` flag: a grad norm of exactly 0 on every steady step, or a loss that does not move at
all to its printed precision over many steps; and the logs it must leave alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracelog import api


def megads_line(
    i: int, loss: str, grad_norm: str = "0.000", scale: str = "4294967296.0", lr: str = "6.000E-06"
) -> str:
    """A Megatron-DeepSpeed iteration line in the shape of the one DeepLink's Qwen pretraining guide shows
    (`... | lm loss: 1.100078E+01 | loss scale: 4294967296.0 | grad norm: 0.000 | actual seqlen:  2048 |
    ...`); the figures are this test's."""
    return (
        f" iteration {i:8d}/      10 | consumed samples: {i * 1536:12d} | consumed tokens: {i * 3145728:12d} | "
        f"elapsed time per iteration (ms): 344656.1 | learning rate: {lr} | global batch size:  1536 | "
        f"lm loss: {loss} | loss scale: {scale} | grad norm: {grad_norm} | actual seqlen:  2048 | "
        "number of skipped iterations:   0 | number of nan iterations:   0 | samples per second: 4.457 | "
        "TFLOPs: 153.38 |"
    )


def flags_of(tmp_path: Path, lines: list[str]) -> list[dict]:
    log = tmp_path / "run.log"
    log.write_text("\n".join(lines) + "\n")
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    return [f for f in api.flags(db).to_dict("records") if f["rule"] == "not_learning"]


ELEVEN = ["1.100078E+01", "1.100214E+01", "1.100195E+01", "1.100105E+01", "1.100164E+01", "1.099972E+01"]


def test_a_grad_norm_of_zero_on_every_steady_step_is_a_run_not_learning(tmp_path: Path) -> None:
    (flag,) = flags_of(tmp_path, [megads_line(i, loss) for i, loss in enumerate(ELEVEN, start=5)])
    assert (flag["severity"], flag["row_ref"], flag["measured"]) == ("warning", "line 2", 0.0)
    assert flag["message"] == (
        "The grad norm is 0 on all 5 steady lines (lines 2-6, iterations 6-10; on 6 of the run's 6 lines); "
        "the loss stayed between 10.99972 and 11.00214: no gradient reaches the weights, so the run is not "
        "learning."
    )


@pytest.mark.parametrize(
    "lines",
    [
        # a log of two lines says nothing about a steady part
        [megads_line(i, loss) for i, loss in enumerate(ELEVEN[:2], start=1)],
        # the first steps print 0 before any gradient was reduced; then real norms
        [
            megads_line(i, loss, "0.000" if i < 3 else f"{1.5 - i * 0.01:.3f}")
            for i, loss in enumerate(ELEVEN * 2, 1)
        ],
        # a placeholder: Megatron-DeepSpeed's pipeline engine prints 0 and a scale of -1 while the loss falls
        [megads_line(i, f"{12 - i * 0.3:.6E}", scale="-1.0") for i in range(1, 13)],
        # the same placeholder with a real scale: the falling loss shows a gradient moved the weights
        [megads_line(i, f"{12 - i * 0.3:.6E}") for i in range(1, 13)],
    ],
    ids=["two-lines", "first-steps", "placeholder-scale", "placeholder-falling-loss"],
)
def test_logs_that_are_not_a_run_stuck_are_left_alone(tmp_path: Path, lines: list[str]) -> None:
    assert flags_of(tmp_path, lines) == []


def test_a_loss_identical_to_its_printed_digits_over_many_steps_is_a_run_not_learning(tmp_path: Path) -> None:
    losses = [f"{7.5 - i * 0.05:.6E}" for i in range(5)] + ["7.234561E+00"] * 25
    lines = [megads_line(i, loss, grad_norm="1.250") for i, loss in enumerate(losses, start=1)]
    (flag,) = flags_of(tmp_path, lines)
    assert (flag["severity"], flag["row_ref"], flag["measured"]) == ("warning", "line 6", 25.0)
    assert flag["message"].startswith(
        "The loss is 7.234561 on 25 consecutive lines (lines 6-30, iterations 6-30), identical to the 6 "
        "decimals it is printed with"
    )


@pytest.mark.parametrize(
    "losses",
    [
        # Megatron's 7 digits, the same on a few lines only
        [f"{7.5 - i * 0.05:.6E}" for i in range(15)] + ["6.734561E+00"] * 10,
        # two decimals near a plateau: 2.35 on 30 lines is the printing, not the model
        [f"{2.45 - i * 0.01:.2f}" for i in range(10)] + ["2.35"] * 30,
    ],
    ids=["few-steps", "two-decimals"],
)
def test_a_loss_the_same_over_few_steps_or_printed_coarsely_is_left_alone(
    tmp_path: Path, losses: list[str]
) -> None:
    lines = [megads_line(i, loss, grad_norm="1.250") for i, loss in enumerate(losses, start=1)]
    assert flags_of(tmp_path, lines) == []


def test_a_stretch_counts_steps_not_lines_and_ends_where_the_value_changes(tmp_path: Path) -> None:
    """Two stretches of one value, split by one other line: neither is long enough alone. Each step is
    printed twice (two ranks' copies), so 24 lines of 12 steps are 12 steps; the longest stretch is the
    one reported, from its first line."""
    losses = [f"{7.5 - i * 0.05:.6E}" for i in range(5)]
    lines = [megads_line(i, loss, grad_norm="1.250") for i, loss in enumerate(losses, start=1)]
    same = "7.234561E+00"
    lines += [megads_line(i, same, grad_norm="1.250") for i in range(6, 18) for _ in range(2)]  # 12 steps
    lines.append(megads_line(18, "7.233001E+00", grad_norm="1.250"))
    lines += [megads_line(i, same, grad_norm="1.250") for i in range(19, 34)]  # 15 steps
    assert flags_of(tmp_path, lines) == []
    lines += [megads_line(i, same, grad_norm="1.250") for i in range(34, 41)]  # the second: 22 steps
    (tmp_path / "longer").mkdir()
    (flag,) = flags_of(tmp_path / "longer", lines)
    assert flag["measured"] == 22.0
    assert "on 22 consecutive lines (lines 31-52, iterations 19-40)" in flag["message"]


def test_a_learning_rate_of_0_on_every_line_is_a_run_not_learning(tmp_path: Path) -> None:
    """The shape of a published LLaMA-Factory log (grad norm and learning rate 0.0 on every step, the loss
    about 12); a warm-up's first line at 0 alone, or a run whose rate leaves 0, is left alone."""
    losses = ["1.210340E+01", "1.205820E+01", "1.200210E+01", "1.206530E+01", "1.203310E+01", "1.204470E+01"]
    lines = [megads_line(i, loss, lr="0.000E+00") for i, loss in enumerate(losses, start=1)]
    (flag,) = flags_of(tmp_path, lines)
    assert (flag["severity"], flag["row_ref"]) == ("warning", "line 1")
    assert flag["message"].startswith(
        "The learning rate is 0 on all 6 lines that print one (lines 1-6, iterations 1-6); the grad norm "
        "is 0 on 6 of them; the loss stayed between 12.0021 and 12.1034"
    )
    # a frozen model run through the loop at a rate of 0 has gradients: said, as information
    frozen = [megads_line(i, "1.100000E+01", grad_norm="1.250", lr="0.000E+00") for i in range(1, 31)]
    (tmp_path / "frozen").mkdir()
    (info,) = flags_of(tmp_path / "frozen", frozen)
    assert info["severity"] == "info" and info["message"].startswith(
        "The learning rate is 0 on all 30 lines that print one (lines 1-30, iterations 1-30); the loss"
    )
    warm = [megads_line(1, losses[0], grad_norm="1.250", lr="0.000E+00")] + [
        megads_line(i, loss, grad_norm="1.250", lr="2.000E-04") for i, loss in enumerate(losses[1:], start=2)
    ]
    (tmp_path / "warm").mkdir()
    assert flags_of(tmp_path / "warm", warm) == []
