"""`tracelog ingest --follow`: a live run's log ingested round by round as it grows, each round its own
commit, the store free for other commands between rounds, and a word for each flag a round raises."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import SAMPLES
from tracelog import api
from tracelog.cli import cli
from tracelog.errors import TracelogError
from tracelog.ingest import IngestResult
from tracelog.store import Store
from tracelog.watch import Watch

LLAMA = SAMPLES / "megatron_lm_llama3_8b_h100.log"
NAN_LINE = (
    " [2024-05-14 10:41:22] iteration      260/     500 | consumed samples:        66560 | elapsed time per "
    "iteration (ms): 4711.2 | throughput per GPU (TF/s/GPU): 403.0 | learning rate: 3.000000E-04 | global "
    "batch size:   256 | lm loss: nan | loss scale: 1.0 | grad norm: 1.000 | number of skipped iterations:"
    "   0 | number of nan iterations:   1 |\n"
)


def halves(path: Path) -> tuple[bytes, bytes]:
    """The log cut after its 90th line: what a run has written, and what it writes next."""
    lines = path.read_bytes().splitlines(keepends=True)
    return b"".join(lines[:90]), b"".join(lines[90:])


class Run:
    """A run writing its log between a follow's rounds: the follow's `sleep` calls `step` in turn."""

    def __init__(self, steps: list[Callable[[], None]]) -> None:
        self.steps = steps
        self.sleeps = 0

    def __call__(self, _seconds: float) -> None:
        if self.sleeps < len(self.steps):
            self.steps[self.sleeps]()
        self.sleeps += 1


def counts(db: Path | str) -> tuple[int, int, int]:
    with Store(db, read_only=True) as store:
        return (
            store.scalar("SELECT count(*) FROM sources"),
            store.scalar("SELECT count(*) FROM iterations"),
            store.scalar("SELECT count(*) FROM timers"),
        )


def test_a_growing_log_lands_round_by_round_as_one_ingest_of_the_whole(
    tmp_path: Path, any_db: Path | str
) -> None:
    head, rest = halves(LLAMA)
    log = tmp_path / "run.log"
    log.write_bytes(head)
    rounds: list[api.FollowRound] = []
    run = Run([lambda: log.write_bytes(head + rest + NAN_LINE.encode())])

    done = api.follow(any_db, [str(log)], interval_s=0, idle_s=0, on_round=rounds.append, sleep=run)

    assert done == 2
    assert [[r.status for r in round_.results] for round_ in rounds] == [["ingested"], ["appended"]]
    # where the run stands after each round: its last iteration moves on, its steady figures are there
    with Store(any_db, read_only=True) as store:
        last = store.scalar("SELECT max(iteration) FROM iterations")
    assert rounds[1].runs[-1].last_iteration == last > rounds[0].runs[-1].last_iteration
    assert rounds[1].runs[-1].sec_per_it is not None and rounds[1].runs[-1].final_loss is not None
    api.ingest(tmp_path / "once.duckdb", [str(log)])
    assert counts(any_db) == counts(tmp_path / "once.duckdb")
    assert counts(any_db)[0] == 1  # one source that grew, not two
    # the NaN iteration is news of the second round only, and told once
    nan_flags = [f for round_ in rounds for f in round_.new_flags if "NaN" in f[4]]
    assert len(nan_flags) == 1 and nan_flags[0][:3] == ("training_health", "critical", "run")
    assert not any("NaN" in f[4] for f in rounds[0].new_flags)


def test_between_rounds_another_process_opens_the_store(tmp_path: Path) -> None:
    head, rest = halves(LLAMA)
    log = tmp_path / "run.log"
    log.write_bytes(head)
    db = tmp_path / "live.duckdb"
    seen: list[str] = []

    def other_command() -> None:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tracelog",
                "--db",
                str(db),
                "sql",
                "SELECT count(*) AS n FROM iterations",
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert done.returncode == 0, done.stderr
        seen.append(done.stdout)
        log.write_bytes(head + rest)

    api.follow(db, [str(log)], interval_s=0, idle_s=0, sleep=Run([other_command]))

    (tmp_path / "head.log").write_bytes(head)
    api.ingest(tmp_path / "head.duckdb", [str(tmp_path / "head.log")])
    first_round = counts(tmp_path / "head.duckdb")[1]
    assert len(seen) == 1 and f"│ {first_round} │" in seen[0]  # what the first round had committed
    assert counts(db)[1] > first_round


def test_a_folder_followed_picks_up_a_new_job_log(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "job1.log").write_bytes(LLAMA.read_bytes())
    (jobs / "README.md").write_text("# job logs of the llama sweep\n")
    rounds: list[api.FollowRound] = []
    run = Run(
        [
            lambda: (jobs / "job2.log").write_bytes(
                (SAMPLES / "megatron_deepspeed_bloom_ugly.log").read_bytes()
            )
        ]
    )

    api.follow(tmp_path / "t.duckdb", [str(jobs)], interval_s=0, idle_s=0, on_round=rounds.append, sleep=run)

    first = {Path(r.path).name: r.status for r in rounds[0].results}
    assert first == {"job1.log": "ingested", "README.md": "skipped"}
    assert [(Path(r.path).name, r.status) for r in rounds[1].results] == [("job2.log", "ingested")]
    assert counts(tmp_path / "t.duckdb")[0] == 2


def test_ctrl_c_keeps_every_round_before_it(tmp_path: Path) -> None:
    head, rest = halves(LLAMA)
    log = tmp_path / "run.log"
    log.write_bytes(head)

    def interrupt() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        api.follow(tmp_path / "t.duckdb", [str(log)], interval_s=0, sleep=Run([interrupt]))

    api.ingest(tmp_path / "head.duckdb", [str(log)])
    assert counts(tmp_path / "t.duckdb") == counts(tmp_path / "head.duckdb")


def test_a_file_that_grows_while_it_is_read_is_read_again() -> None:
    """The stamp recorded is the one seen before the read: bytes written during it are the next round's."""
    watch = Watch([str(LLAMA)])
    (before,) = watch.changed()
    assert before.path == str(LLAMA)
    watch.mark([before])
    assert watch.changed() == []
    watch.seen[str(LLAMA)] = (before.stamp[0] - 1, *before.stamp[1:])  # as if it grew after the look
    assert [c.path for c in watch.changed()] == [str(LLAMA)]


def test_follow_refuses_what_it_cannot_follow(tmp_path: Path) -> None:
    runner = CliRunner()
    db = str(tmp_path / "t.duckdb")
    stdin = runner.invoke(cli, ["--db", db, "ingest", "--follow", "-"])
    assert stdin.exit_code == 1 and "standard input is read to its end" in stdin.output
    forced = runner.invoke(cli, ["--db", db, "ingest", "--follow", "--force", str(LLAMA)])
    assert forced.exit_code == 2 and "--force, --jobs and --complete do not apply" in forced.output
    complete = runner.invoke(cli, ["--db", db, "ingest", "--follow", "--complete", str(LLAMA)])
    assert complete.exit_code == 2 and "--complete do not apply" in complete.output
    idle = runner.invoke(cli, ["--db", db, "ingest", "--idle", "3", str(LLAMA)])
    assert idle.exit_code == 2 and "go with --follow" in idle.output


def test_cli_follow_prints_each_round_and_stops_when_idle(tmp_path: Path) -> None:
    db = str(tmp_path / "t.duckdb")
    result = CliRunner().invoke(
        cli, ["--db", db, "ingest", "--follow", "--interval", "0.1", "--idle", "0", str(LLAMA)]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(
        line.endswith(f"{LLAMA}: ingested as megatron, 2 runs, 128 rows, 22 of 149 lines unparsed")
        for line in lines
    )
    assert lines[0][:2].isdigit() and lines[0][2] == ":"  # the time of the round
    states = [line[9:] for line in lines if line[9:].startswith("run ")]
    assert len(states) == 2 and all(" s/it steady" in state and ", loss " in state for state in states)
    assert "stopped following after 1 round(s)" in result.output
    assert isinstance(api.ingest(db, [str(LLAMA)])[0], IngestResult)


def test_a_log_rotated_away_between_looks_is_waited_for(tmp_path: Path) -> None:
    """A name that matches nothing is an error at the first look, and waited for at later ones (the log
    moved aside and a new one not yet started), as `tail -F` does."""
    with pytest.raises(TracelogError, match="no such file"):
        Watch([str(tmp_path / "typo.log")]).changed()
    log = tmp_path / "run.log"
    log.write_bytes(LLAMA.read_bytes())
    watch = Watch([str(log)])
    watch.mark(watch.changed())
    log.rename(tmp_path / "run.log.1")
    assert watch.changed() == [] and watch.seen == {}
    log.write_bytes(halves(LLAMA)[0])
    assert [c.path for c in watch.changed()] == [str(log)]
