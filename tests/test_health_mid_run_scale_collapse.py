"""An excerpt of a Hugging Face Trainer run on DeepSpeed fp16 that starts mid-run and ends with the loss
scaler falling to a scale of 2 in its overflow lines, after the last logged dict (the shape of
ymcui/Chinese-LLaMA-Alpaca#534, where the run then died at the scaler's minimum): the skips of its first
dict are not warm-up, and the fall is a collapse. The samples below are invented in that shape (tqdm's
bar with DeepSpeed's `OVERFLOW!` lines glued behind its redraws, a Trainer dict); their figures are this
test's own."""

from __future__ import annotations

from pathlib import Path

from tracelog import api


def bar(step: int, total: int = 3000) -> str:
    return f" 17%|█▋        | {step}/{total} [15:01:10<80:12:03, 118.40s/it]"


def overflow(attempted: int, reduced: int) -> str:
    return (
        "[2024-02-11 03:12:45,101] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 "
        f"Skipping step. Attempted loss scale: {attempted}, reducing to {reduced}"
    )


def excerpt(first: int) -> str:
    """Bar lines from step `first`, two overflows before a dict and four after it, the scale from 128 to 2."""
    scales = [128, 64, 32, 16, 8, 4, 2]
    lines = [bar(first), bar(first + 1) + overflow(scales[0], scales[1]), ""]
    lines += [bar(first + 2) + overflow(scales[1], scales[2]), "", bar(first + 3)]
    lines += ["{'loss': 1.8734, 'learning_rate': 0.00018812, 'epoch': 0.31}", ""]
    for i, attempted in enumerate(scales[2:-1]):
        lines += [bar(first + 4 + i) + overflow(attempted, attempted // 2), ""]
    return "\n".join(lines) + "\n"


def training_health(tmp_path: Path, text: str) -> list[dict]:
    log = tmp_path / "run.log"
    log.write_text(text)
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    flags = api.flags(db).to_dict("records")
    return sorted((f for f in flags if f["rule"] == "training_health"), key=lambda f: f["severity"])


def test_an_excerpt_from_mid_run_is_not_in_warm_up_and_its_overflow_lines_show_the_collapse(
    tmp_path: Path,
) -> None:
    collapse, skipped = training_health(tmp_path, excerpt(first=510))
    assert (collapse["severity"], collapse["measured"], collapse["expected"]) == ("critical", 2.0, 128.0)
    assert (
        collapse["message"]
        == "fp16 loss scale collapsed to 2 (it reached 128) by the loss scaler's overflow lines."
    )
    assert collapse["row_ref"] == "line 15"  # the overflow line that reduced the scale to 2
    assert (skipped["severity"], skipped["measured"]) == ("warning", 2.0)
    assert skipped["message"] == (
        "2 skipped iteration(s) after warm-up (first near iteration 513), in a log that starts mid-run (its "
        "first step line at iteration 513): the fp16 loss scaler hit overflows."
    )


def test_the_same_skips_at_the_start_of_a_run_are_its_warm_up(tmp_path: Path) -> None:
    text = excerpt(first=1).replace("Attempted loss scale: 4, reducing to 2", "Attempted loss scale: 4, but")
    (skipped,) = [f for f in training_health(tmp_path, text) if "skipped" in f["message"]]
    assert skipped["severity"] == "info"
    assert skipped["message"] == "2 skipped iteration(s) during warm-up: the fp16 loss scale calibrating."


def test_the_fused_optimizers_wording_of_the_fall_counts_too(tmp_path: Path) -> None:
    # DeepSpeed's FP16_Optimizer (runtime/fp16/fused_optimizer.py) prints the fall on a line of its own
    text = excerpt(first=1).replace(
        overflow(4, 2),
        "[2024-02-11 03:20:01,512] [INFO] [fused_optimizer.py:407:step] Reducing dynamic loss "
        "scale from 4.0 to 2.0",
    )
    (collapse,) = [f for f in training_health(tmp_path, text) if f["severity"] == "critical"]
    assert (collapse["measured"], collapse["expected"], collapse["row_ref"]) == (2.0, 128.0, "line 15")
