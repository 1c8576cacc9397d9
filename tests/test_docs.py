"""Every `tracelog` command README.md shows runs, in the README's order, on the sample logs.

The README's placeholders stand for sample files (`run.log` is the Llama sample, `nccl.txt` the 8xA100
all_reduce), and the run names it uses (`176b-tp4`, `176b-tp8`) are given to the first two sample runs,
so a command whose options or arguments drift from the code fails here.
"""

from __future__ import annotations

import gzip
import os
import re
import shlex
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tracelog import api
from tracelog.cli import cli

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PLACEHOLDERS = {
    "run.log": "sample_logs/megatron_lm_llama3_8b_h100.log",
    "nccl.txt": "sample_logs/nccl_all_reduce_8xa100.txt",
    "sft.log": "sample_logs/nemo_automodel_llama3_2_1b_sft_h100.log",
    "RUN": "1",
}


def readme_commands() -> list[tuple[str, str | None]]:
    """(command line, standard input) of every `tracelog` command in README.md's code blocks."""
    commands = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", README, flags=re.S | re.M):
        if "export TRACELOG_DB=" in block:
            continue  # a team store on a PostgreSQL server: tests/test_lake.py runs these
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            for part in line.split("&&"):
                stdin = None
                if "|" in part.split("#")[0]:
                    feeder, part = part.split("|", 1)
                    stdin = shlex.split(feeder)[-1]
                words = shlex.split(part, comments=True)
                if words[:1] == ["tracelog"]:
                    commands.append((shlex.join(words), stdin))
    return commands


COMMANDS = readme_commands()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "sample_logs", folder / "sample_logs")
    shutil.copy(folder / PLACEHOLDERS["run.log"], folder / "run.log")
    shutil.copy(folder / PLACEHOLDERS["nccl.txt"], folder / "nccl.txt")
    shutil.copy(folder / PLACEHOLDERS["sft.log"], folder / "sft.log")
    (folder / "logs").mkdir()
    shutil.copy(folder / "sample_logs/deepspeed_zero2_gpt2_1b3.log", folder / "logs/ds.log")
    (folder / "jobs").mkdir()
    shutil.copy(folder / "sample_logs/nccl_old_layout_4xv100.txt", folder / "jobs/nccl.out")
    with gzip.open(folder / "big.log.gz", "wb") as out:
        out.write((folder / "sample_logs/megatron_deepspeed_bloom_ugly.log").read_bytes())
    return folder


def test_the_readme_shows_commands() -> None:
    assert len(COMMANDS) > 20
    assert ("tracelog ingest sample_logs/", None) in COMMANDS


@pytest.mark.parametrize(("line", "stdin"), COMMANDS, ids=[c for c, _ in COMMANDS])
def test_readme_command_runs(
    line: str, stdin: str | None, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workspace)
    monkeypatch.setenv("TRACELOG_DB", str(workspace / "tracelog.duckdb"))
    with api.connect("tracelog.duckdb") as store:  # closed before the command opens it its own way
        if api.runs(store).empty:
            api.ingest(store, ["sample_logs/"])
        if "176b-tp4" not in set(api.runs(store)["name"]):
            api.rename_run(store, 1, "176b-tp4")
            api.rename_run(store, 2, "176b-tp8")
            # the README's first `ingest run.log --tag exp=topology` finds those bytes ingested already
            # (sample_logs/ holds them): the tag it gives, as `tracelog tag` would
            runs = api.runs(store)
            (llama, *_) = runs[runs["name"] == Path(PLACEHOLDERS["run.log"]).name]["run_id"]
            api.tag_run(store, int(llama), {"exp": "topology"})
    args = [PLACEHOLDERS.get(word, word) for word in shlex.split(line)[1:]]
    text = (workspace / stdin).read_text(encoding="utf-8") if stdin else None
    if args[:1] == ["rm"]:
        text = "y\n"  # it asks first
    if "--follow" in args and "--idle" not in args:
        args += ["--idle", "0", "--interval", "0.1"]  # a follow waits for Ctrl-C; here it ends once idle
    result = CliRunner().invoke(cli, args, input=text, env={**os.environ})
    assert result.exit_code == 0, f"{line}\n{result.output}\n{result.exception!r}"


def help_examples(command: click.Command) -> list[str]:
    """The command lines of a command's `Example:` block, continuation lines joined."""
    text = (command.help or "").split("Example:", 1)
    if len(text) < 2:
        return []
    joined = text[1].replace("\\\\\n", " ").replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip().startswith("tracelog ")]


def command_named(name: str) -> click.Command:
    """A command of the group, its module loaded on demand as `tracelog NAME` does."""
    with click.Context(cli) as ctx:
        command = cli.get_command(ctx, name)
    assert command is not None, f"no command {name}"
    return command


@pytest.mark.parametrize("name", cli.list_commands(click.Context(cli)))
def test_every_command_shows_an_example_that_parses(name: str) -> None:
    command = command_named(name)
    examples = help_examples(command)
    assert examples, f"`tracelog {name} --help` has no Example: block"
    for line in examples:
        words = shlex.split(line, comments=True)[1:]
        target = command_named(words[0])
        target.make_context(words[0], words[1:])  # raises on an unknown option or a missing argument
