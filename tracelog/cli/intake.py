"""The `ingest` command: files, folders, globs or standard input into the store, with a progress bar once
an ingest runs long, and `--follow` for a live run's logs.

A module of its own, over `tracelog.intake` rather than the library surface: `api` loads everything a
notebook may call (the planner, the report's queries, the export), and an ingest needs none of it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING, Any

import click

from tracelog import intake
from tracelog.cli.base import Context, cli, parse_tags, pass_ctx, user_errors
from tracelog.cli.probes import refused_to_native_code
from tracelog.parsers import formats

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

PROGRESS_AFTER_S = 2.0
"""An ingest shows its progress bar once it has taken this long: under it, the bar would only flicker."""


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--parser", "parser_id", type=click.Choice(formats()), help="Skip detection: parse as this format."
)
@click.option(
    "--format",
    "old_format_id",
    type=click.Choice(formats()),
    hidden=True,
    help="Old spelling of --parser (every other command's --format is the output format).",
)
@click.option("--name", help="Name for the run(s) of these files.")
@click.option("--tag", "tags", multiple=True, metavar="KEY=VALUE", help="Tag the runs (repeatable).")
@click.option("--gpu", help="GPU model: a catalog id such as a100-sxm4-80gb, or the name tools print.")
@click.option("--fabric", help="Inter-node link of the runs and benches, a catalog id such as ib-hdr-x8.")
@click.option("--nodes", type=click.IntRange(min=1), help="Number of nodes of the run.")
@click.option("--gpus-per-node", type=click.IntRange(min=1), help="GPUs per node of the run.")
@click.option(
    "--nics-per-node",
    type=click.IntRange(min=1),
    help="NICs per node: a --fabric given per port (opa-100, roce-200g) counts this many per node.",
)
@click.option(
    "--model",
    metavar="CHECKPOINT",
    help="The published checkpoint the runs trained (meta-llama/Llama-3.1-8B): its shape stands for theirs.",
)
@click.option("--force", is_flag=True, help="Ingest again files already ingested.")
@click.option(
    "--verify",
    is_flag=True,
    help="Re-hash every MiB of a grown log's old bytes (by default a sample of them) before resuming it.",
)
@click.option(
    "--complete",
    is_flag=True,
    help="The files are finished: read a last line that has no newline as it is (by default it waits for its "
    "newline: a live log's last line, or one cut by a crash).",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="Parse this many files at once in worker processes (0: one per core); this process writes them.",
)
@click.option(
    "--follow",
    "-f",
    is_flag=True,
    help="Keep going: ingest what the files (and new files in the folders) gain until Ctrl-C; each round "
    "prints what landed and the flags it raised, and the store is left free for other commands between rounds.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=5.0,
    show_default=True,
    help="With --follow: seconds between looks at the files.",
)
@click.option(
    "--idle",
    type=click.FloatRange(min=0),
    help="With --follow: stop once no file has changed for this many seconds.",
)
@pass_ctx
def ingest(
    obj: Context,
    paths: tuple[str, ...],
    parser_id: str | None,
    old_format_id: str | None,
    name: str | None,
    tags: tuple[str, ...],
    gpu: str | None,
    fabric: str | None,
    nodes: int | None,
    gpus_per_node: int | None,
    nics_per_node: int | None,
    model: str | None,
    force: bool,
    verify: bool,
    complete: bool,
    jobs: int,
    follow: bool,
    interval: float,
    idle: float | None,
) -> None:
    """Ingest log files, folders (recursively), globs, .gz files or '-' for standard input.

    \b
    Example:
        tracelog ingest run.log 'jobs/*.out' logs/
        tracelog ingest nccl.txt --gpu a100-sxm4-80gb --nodes 2 --gpus-per-node 8 --fabric ib-hdr-x8
        tracelog ingest --follow run.log          # a live run: what it appends, every 5 s
        tracelog ingest --jobs 4 logs/

    A folder's files that no parser recognises or that cannot be read (a README, a job script, a FIFO,
    a dangling link) are listed as skipped and do not fail the command; a file named on its own does.
    """
    if old_format_id is not None:
        click.echo("Warning: ingest --format is now --parser (--format is the output format)", err=True)
    parsed_tags = parse_tags(tags)
    if follow:
        if force or jobs != 1 or complete:
            raise click.UsageError(
                "--follow ingests what the files gain: --force, --jobs and --complete do not apply"
            )
        options = dict(name=name, tags=parsed_tags, gpu=gpu, fabric=fabric, nodes=nodes)
        options.update(gpus_per_node=gpus_per_node, nics_per_node=nics_per_node, verify=verify, model=model)
        with refused_to_native_code():
            _follow(obj, paths, parser_id or old_format_id, options, interval, idle)
        return
    if interval != 5.0 or idle is not None:
        raise click.UsageError("--interval and --idle go with --follow")
    bar = IngestProgress()
    with user_errors(), stdin_ends_at_ctrl_c("-" in paths), refused_to_native_code():
        try:
            results = intake.ingest(
                obj.store(create=True),
                paths,
                parser=parser_id or old_format_id,
                name=name,
                tags=parsed_tags,
                gpu=gpu,
                fabric=fabric,
                nodes=nodes,
                gpus_per_node=gpus_per_node,
                nics_per_node=nics_per_node,
                model=model,
                force=force,
                verify=verify,
                progress=bar,
                jobs=jobs,
                complete=complete,
            )
        finally:
            bar.close()
    failures = sum(_tell(result) for result in results)
    if failures:
        sys.exit(1)


def _tell(result: intake.IngestResult | intake.IngestFailure, at: str = "") -> bool:
    """One file's outcome as an ingest prints it (after `at`, a follow's time of the round); whether it
    failed."""
    if isinstance(result, intake.IngestFailure):
        click.echo(f"{at}Error: {result.error}", err=True)
        return True
    click.echo(f"{at}{result.summary()}")
    if result.nothing_read:
        click.echo(
            f"{at}Warning: {result.path}: none of its {result.lines_total} lines was read as {result.format}; "
            "if it is another tool's output, name its format with --parser",
            err=True,
        )
    if result.warning and result.status != "skipped":
        click.echo(f"{at}Warning: {result.path}: {result.warning}; the next command retries it", err=True)
    return False


@contextmanager
def stdin_ends_at_ctrl_c(reading_stdin: bool) -> Iterator[None]:
    """While standard input is read, the first Ctrl-C ends the input instead of the ingest: in
    `python train.py | tracelog ingest -` it stops the writer too, whose end closes the pipe, and what was
    read lands as one file. A second Ctrl-C aborts (nothing of the input lands), as one always did
    before. Only the main thread may set a handler; elsewhere (a notebook's worker) nothing changes."""
    if not reading_stdin or threading.current_thread() is not threading.main_thread():
        yield
        return
    pressed: list[int] = []
    err = stderr_console()  # made here, not in the handler

    def first_press(signum: int, frame: Any) -> None:
        if pressed:
            raise KeyboardInterrupt
        pressed.append(signum)
        err.print(
            "Ctrl-C: standard input ends when its writer stops, and what was read lands; Ctrl-C again to abort",
            soft_wrap=True,
        )

    previous = signal.signal(signal.SIGINT, first_press)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _follow(
    obj: Context,
    paths: tuple[str, ...],
    parser: str | None,
    options: dict[str, Any],
    interval: float,
    idle: float | None,
) -> None:
    """`ingest --follow`: each round's files and new flags, a line each with the time. Ctrl-C is how a
    follow ends: every round before it is committed (the one it stops, if any, is rolled back)."""
    obj.close()  # the store is opened per round, and closed between them for other commands

    def told(done: intake.FollowRound) -> None:
        at = time.strftime("%H:%M:%S")
        for result in done.results:
            _tell(result, f"{at} ")
        for run in done.runs:
            click.echo(f"{at} {_run_state(run)}")
        for rule, severity, kind, subject, message in done.new_flags:
            click.echo(f"{at} {severity} {rule} ({kind} {subject}): {message}")

    rounds = 0
    with user_errors():
        try:
            rounds = intake.follow(
                obj.db,
                paths,
                data_path=obj.data_path,
                interval_s=interval,
                idle_s=idle,
                on_round=told,
                parser=parser,
                progress=FileProgress(),
                **options,
            )
        except KeyboardInterrupt:
            click.echo("stopped following; what landed before Ctrl-C is kept", err=True)
            return
    click.echo(f"no change for {idle:g} s: stopped following after {rounds} round(s) that ingested", err=True)


def _run_state(run: intake.RunState) -> str:
    """`run 3 (llama-70b): iteration 5267, 5.24 s/it steady (model 4.91), loss 2.095`"""
    parts = [f"iteration {run.last_iteration}"] if run.last_iteration is not None else []
    if run.sec_per_it is not None:
        model = f" (model {run.sec_per_it_predicted:.4g})" if run.sec_per_it_predicted is not None else ""
        parts.append(f"{run.sec_per_it:.4g} s/it steady{model}")
    if run.final_loss is not None:
        parts.append(f"loss {run.final_loss:.4g}")
    name = f" ({run.name})" if run.name else ""
    return f"run {run.run_id}{name}: {', '.join(parts) or 'no iterations yet'}"


class FileProgress:
    """A follow's progress: a bar per file, shown once that file has taken `PROGRESS_AFTER_S` (a round
    that reads a few new lines prints nothing extra)."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console

    @contextmanager
    def __call__(self, path: str) -> Iterator[Any]:
        bar = IngestProgress(self.console)
        try:
            with bar(path) as advance:
                yield advance
        finally:
            bar.close()


@cache
def stderr_console() -> Console:
    """Standard error as rich writes to it (progress bars, notes), made when first needed: rich (18 ms of
    start-up) is then loaded by an ingest that runs long enough for its bar, not by every one."""
    from rich.console import Console

    return Console(stderr=True, markup=False, highlight=False)


class IngestProgress:
    """One progress bar for the whole ingest, shown once it has run `PROGRESS_AFTER_S` (so a quick ingest
    prints nothing extra, and any longer one, a big file, a .gz, stdin or a folder of small files, shows
    where it is): a line for the file being read (bytes of its size, or bytes read where the size is not
    known) and the count of files done. File names are printed literally, never as rich markup. Until the
    bar is due the bytes are only counted: the console (standard error's when none is given) is asked
    whether it is a terminal then, and the bar made."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console
        self.started_at = time.monotonic()
        self.bar: Progress | None = None
        self.off = False  # not a terminal: nothing is drawn
        self.done = 0
        self.current: list[Any] | None = None  # the file being read: name, size, bytes read, its task

    def _maybe_show(self) -> None:
        if self.off or time.monotonic() - self.started_at < PROGRESS_AFTER_S:
            return
        if self.bar is None:
            console = self.console if self.console is not None else stderr_console()
            if not console.is_terminal:
                self.off = True
                return
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

            self.bar = Progress(
                TextColumn("{task.description}", style="progress.description", markup=False),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TextColumn("{task.fields[done]}", markup=False),
                console=console,
                transient=True,
                auto_refresh=True,
            )
            self.bar.start()
        current = self.current
        if current is not None and current[3] is None:
            name, size, read, _ = current
            done = f"{self.done} files done" if self.done else ""
            current[3] = self.bar.add_task(name, total=size, completed=read, done=done)

    @contextmanager
    def __call__(self, path: str) -> Iterator[Any]:
        self._maybe_show()
        if self.off:
            yield None
            return
        size = os.path.getsize(path) if path != "-" and os.path.isfile(path) else None
        if path.endswith(".gz"):
            size = None  # the bytes counted are the decompressed ones
        current = self.current = ["stdin" if path == "-" else os.path.basename(path), size, 0, None]
        self._maybe_show()

        def advance(n: int) -> None:
            current[2] += n
            if current[3] is not None and self.bar is not None:
                self.bar.advance(current[3], n)
            self._maybe_show()

        try:
            yield advance
        finally:
            if current[3] is not None and self.bar is not None:
                self.bar.remove_task(current[3])
            self.current = None
            self.done += 1

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
