"""Commands over what logs and benches left in the store: ingest, list, show, query, annotate, flag,
report."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from tracelog import api
from tracelog.cli.base import Context, cli, columns_option, format_option, parse_tags, pass_ctx, user_errors
from tracelog.parsers import formats
from tracelog.render import render
from tracelog.store.benches import is_bench_ref

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
@click.option("--force", is_flag=True, help="Ingest again files already ingested.")
@click.option(
    "--verify",
    is_flag=True,
    help="Re-hash every MiB of a grown log's old bytes (by default a sample of them) before resuming it.",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="Parse this many files at once in worker processes (0: one per core); this process writes them.",
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
    force: bool,
    verify: bool,
    jobs: int,
) -> None:
    """Ingest log files, folders (recursively), globs, .gz files or '-' for standard input.

    \b
    Example:
        tracelog ingest run.log 'jobs/*.out' logs/
        tracelog ingest nccl.txt --gpu a100-sxm4-80gb --nodes 2 --gpus-per-node 8 --fabric ib-hdr-x8
        tail -f run.log | tracelog ingest -
        tracelog ingest --jobs 4 logs/

    A folder's files that no parser recognises or that cannot be read (a README, a job script, a FIFO,
    a dangling link) are listed as skipped and do not fail the command; a file named on its own does.
    """
    if old_format_id is not None:
        click.echo("Warning: ingest --format is now --parser (--format is the output format)", err=True)
    parsed_tags = parse_tags(tags)
    err = Console(stderr=True, markup=False, highlight=False)
    bar = IngestProgress(err)
    with user_errors():
        try:
            results = api.ingest(
                obj.store(create=True),
                paths,
                parser=parser_id or old_format_id,
                name=name,
                tags=parsed_tags,
                gpu=gpu,
                fabric=fabric,
                nodes=nodes,
                gpus_per_node=gpus_per_node,
                force=force,
                verify=verify,
                progress=bar,
                jobs=jobs,
            )
        finally:
            bar.close()
    failures = 0
    for result in results:
        if isinstance(result, api.IngestFailure):
            failures += 1
            click.echo(f"Error: {result.error}", err=True)
        else:
            click.echo(result.summary())
            if result.warning and result.status != "skipped":
                click.echo(f"Warning: {result.path}: {result.warning}; the next command retries it", err=True)
    if failures:
        sys.exit(1)


class IngestProgress:
    """One progress bar for the whole ingest, shown once it has run `PROGRESS_AFTER_S` (so a quick ingest
    prints nothing extra, and any longer one, a big file, a .gz, stdin or a folder of small files, shows
    where it is): a line for the file being read (bytes of its size, or bytes read where the size is not
    known) and the count of files done. File names are printed literally, never as rich markup."""

    def __init__(self, console: Console) -> None:
        self.enabled = console.is_terminal
        self.started_at = time.monotonic()
        self.shown = False
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
        self.done = 0

    def _maybe_show(self) -> None:
        if not self.shown and time.monotonic() - self.started_at >= PROGRESS_AFTER_S:
            self.bar.start()
            self.shown = True

    @contextmanager
    def __call__(self, path: str) -> Iterator[Any]:
        if not self.enabled:
            yield None
            return
        size = os.path.getsize(path) if path != "-" and os.path.isfile(path) else None
        if path.endswith(".gz"):
            size = None  # the bytes counted are the decompressed ones
        name = "stdin" if path == "-" else os.path.basename(path)
        task = self.bar.add_task(name, total=size, done=f"{self.done} files done" if self.done else "")
        self._maybe_show()

        def advance(n: int) -> None:
            self.bar.advance(task, n)
            self._maybe_show()

        try:
            yield advance
        finally:
            self.bar.remove_task(task)
            self.done += 1

    def close(self) -> None:
        if self.shown:
            self.bar.stop()


@cli.command()
@click.option("--tag", "tags", multiple=True, metavar="KEY=VALUE", help="Only runs with this tag.")
@format_option
@columns_option
@pass_ctx
def runs(obj: Context, tags: tuple[str, ...], fmt: str, columns: str | None) -> None:
    """List runs: steady-state medians (warm-up excluded) beside the model's predictions, then the
    configuration. A table keeps the columns that fit the terminal, most useful first.

    \b
    Example:
        tracelog runs
        tracelog runs --tag exp=topology --format csv
        tracelog runs --columns name,gpu_model,sec_per_it,sec_per_it_predicted
    """
    with user_errors():
        render(api.runs(obj.store(), tags=parse_tags(tags)), fmt, columns=columns)


@cli.command()
@click.argument("ref", metavar="RUN|bench:ID")
@click.option("--iterations", is_flag=True, help="Also the run's iteration lines.")
@click.option("--limit", type=click.IntRange(min=0), help="With --iterations: the first N lines only.")
@format_option
@pass_ctx
def show(obj: Context, ref: str, fmt: str, iterations: bool, limit: int | None) -> None:
    """Show one run (by id, name or unique name prefix), or one bench as bench:ID.

    A run shows its summary, configuration, the trend of sec/it, loss and TFLOP/s over the run, timers,
    peak memory per rank and flags, in the same time for a thousand iterations or millions;
    `--iterations` adds its iteration lines (`--limit N` the first N).

    Runs and benches are numbered apart, so a bench is always written with its prefix: `tracelog show
    bench:3` shows bench 3 of `tracelog benches` (its summary, params, devices, rows, events and flags),
    while `tracelog show 3` is run 3.

    \b
    Example:
        tracelog show 176b-tp4          # a run by id, name or unique name prefix
        tracelog show 176b-tp4 --iterations --limit 20
        tracelog show bench:3 --format markdown
    """
    with user_errors():
        store = obj.store()
        if is_bench_ref(ref):
            parts = api.show_bench(store, ref)
        else:
            parts = api.show_run(store, ref, iterations=iterations or limit is not None, limit=limit)
    summary = parts.pop("summary")
    render(summary.T.reset_index().set_axis(["field", "value"], axis=1), fmt, title="summary")
    parts.pop("run", None)
    for title, frame in parts.items():
        if not frame.empty:
            render(frame, fmt, title=title)


@cli.command()
@click.argument("query")
@format_option
@columns_option
@pass_ctx
def sql(obj: Context, query: str, fmt: str, columns: str | None) -> None:
    """Run any SQL over the database and print the result.

    \b
    Example:
        tracelog sql "SELECT name, sec_per_it, tflops_reported FROM run_summary ORDER BY sec_per_it"
        tracelog sql "FROM flags WHERE severity = 'critical'" --format json
    """
    with user_errors():
        render(api.sql(obj.store(), query), fmt, columns=columns)


@cli.command()
@format_option
@pass_ctx
def sources(obj: Context, fmt: str) -> None:
    """List ingested files with their line counts.

    \b
    Example:
        tracelog sources --format csv
    """
    with user_errors():
        render(api.sources(obj.store()), fmt)


@cli.command()
@click.option(
    "--parquet",
    "directory",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder to write: one sub-folder of Parquet files per table.",
)
@click.option("--force", is_flag=True, help="Replace an export already in this folder.")
@format_option
@pass_ctx
def export(obj: Context, directory: str, force: bool, fmt: str) -> None:
    """Write every table as Parquet, hive-partitioned by run, bench or source where rows hang off one,
    for pandas, pyarrow, Spark or Trino users who do not install tracelog.

    \b
    Example:
        tracelog export --parquet lake/
        python -c "import pandas; print(pandas.read_parquet('lake/iterations').head())"
    """
    with user_errors():
        render(api.export_parquet(obj.store(read_only=True), directory, overwrite=force), fmt)


@cli.command()
@click.option(
    "--tool", help="Only benches of this tool: nccl-tests, p2pBandwidthLatencyTest, nvidia-smi-topo, ..."
)
@format_option
@columns_option
@pass_ctx
def benches(obj: Context, tool: str | None, fmt: str, columns: str | None) -> None:
    """List benches: tool, op, ranks, GPU, peak busbw and the size reaching it, status (see show bench:ID).

    \b
    Example:
        tracelog benches --tool nccl-tests
        tracelog show bench:3
    """
    with user_errors():
        render(api.benches(obj.store(), tool=tool), fmt, columns=columns)


@cli.command()
@click.argument("runs", nargs=-1, required=True)
@click.option("--all", "all_params", is_flag=True, help="Show every parameter, not only those that differ.")
@format_option
@pass_ctx
def compare(obj: Context, runs: tuple[str, ...], all_params: bool, fmt: str) -> None:
    """Runs side by side: differing configuration, steady-state metrics against the first run.

    \b
    Example:
        tracelog compare 176b-tp4 176b-tp8
        tracelog compare 3 7 --all --format markdown
    """
    with user_errors():
        parts = api.compare_runs(obj.store(), list(runs), all_params=all_params)
    for title, frame in parts.items():
        render(frame, fmt, title=title)


@cli.command()
@click.argument("run")
@click.argument("tags", nargs=-1, required=True, metavar="KEY=VALUE...")
@pass_ctx
def tag(obj: Context, run: str, tags: tuple[str, ...]) -> None:
    """Tag a run.

    \b
    Example:
        tracelog tag 7 exp=topology owner=ana
        tracelog runs --tag exp=topology
    """
    with user_errors():
        run_id = api.tag_run(obj.store(), run, parse_tags(tags))
    click.echo(f"run {run_id}: tagged {', '.join(tags)}")


@cli.command()
@click.argument("run")
@click.argument("keys", nargs=-1, required=True)
@pass_ctx
def untag(obj: Context, run: str, keys: tuple[str, ...]) -> None:
    """Remove tags from a run by key.

    \b
    Example:
        tracelog untag 7 owner
    """
    with user_errors():
        removed = api.untag_run(obj.store(), run, list(keys))
    click.echo(f"removed {removed} tag{'s' * (removed != 1)}")


@cli.command()
@click.argument("run")
@click.argument("text")
@pass_ctx
def note(obj: Context, run: str, text: str) -> None:
    """Append a note to a run.

    \b
    Example:
        tracelog note 7 "NCCL timeout after 40 steps; rerun with NCCL_IB_TIMEOUT=22"
    """
    with user_errors():
        run_id = api.note_run(obj.store(), run, text)
    click.echo(f"run {run_id}: noted")


@cli.command()
@click.argument("run")
@click.argument("name")
@pass_ctx
def rename(obj: Context, run: str, name: str) -> None:
    """Rename a run.

    \b
    Example:
        tracelog rename 7 176b-tp8-pp12
    """
    with user_errors():
        run_id = api.rename_run(obj.store(), run, name)
    click.echo(f"run {run_id}: renamed to {name}")


@cli.command()
@click.argument("run")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_ctx
def rm(obj: Context, run: str, yes: bool) -> None:
    """Remove a run and all its rows.

    \b
    Example:
        tracelog rm 7
        tracelog rm 176b-tp8 --yes
    """
    with user_errors():
        store = obj.store()
        run_id, name = api.run_label(store, run)
        if not yes:
            click.confirm(f"Remove run {run_id} ({name}) and all its rows?", abort=True)
        api.remove_run(store, run_id)
    click.echo(f"removed run {run_id} ({name})")


@cli.command()
@click.option("--severity", type=click.Choice(["critical", "warning", "info"]), help="Only this severity.")
@click.option("--rule", help="Only this rule id.")
@click.option("--run", "runs", multiple=True, help="Only flags about this run (repeatable).")
@click.option("--tag", "tags", multiple=True, metavar="KEY=VALUE", help="Only runs with this tag.")
@click.option("--refresh", is_flag=True, help="Recompute predictions and flags first.")
@click.option(
    "--threshold",
    "thresholds",
    multiple=True,
    metavar="NAME=VALUE",
    help="Override a threshold (implies --refresh).",
)
@format_option
@pass_ctx
def flags(
    obj: Context,
    severity: str | None,
    rule: str | None,
    runs: tuple[str, ...],
    tags: tuple[str, ...],
    refresh: bool,
    thresholds: tuple[str, ...],
    fmt: str,
) -> None:
    """List flags, most severe first, each with a message and a hint.

    \b
    Example:
        tracelog flags --severity critical
        tracelog flags --run 176b-tp4 --threshold loss_spike=2.0
    """
    with user_errors():
        store = obj.store()
        if refresh or thresholds:
            api.refresh(store, thresholds=parse_tags(thresholds))
        frame = api.flags(store, severity=severity, rule=rule, runs=list(runs) or None, tags=parse_tags(tags))
        for path, error in api.refresh_errors(store):
            click.echo(f"Warning: {path}: {error}; its flags are missing", err=True)
    render(frame, fmt)


@cli.command()
@click.argument("runs", nargs=-1)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    help="HTML file to write.  [default: reports/tracelog-report.html]",
)
@click.option(
    "--tag", "tags", multiple=True, metavar="KEY=VALUE", help="Only runs with this tag (repeatable)."
)
@click.option("--bench", "benches", multiple=True, metavar="ID", help="Only this bench (repeatable).")
@click.option(
    "--png", "png_dir", type=click.Path(file_okay=False), help="Also write each chart as a PNG here."
)
@pass_ctx
def report(
    obj: Context,
    runs: tuple[str, ...],
    output: str | None,
    tags: tuple[str, ...],
    benches: tuple[str, ...],
    png_dir: str | None,
) -> None:
    """Write one self-contained HTML report (opens with no network), for RUNS or everything.

    \b
    Example:
        tracelog report
        tracelog report 176b-tp4 176b-tp8 -o tp.html --png slides/
        tracelog report --tag exp=topology --bench 3
    """
    with user_errors():
        result = api.report(
            obj.db,
            output=output,
            runs=list(runs) or None,
            tags=parse_tags(tags),
            benches=list(benches) or None,
            png_dir=png_dir,
        )
    click.echo(
        f"{result.path}: {result.charts} charts in {len(result.sections)} sections, {result.bytes / 1e6:.1f} MB"
    )
    if result.pngs:
        click.echo(f"{png_dir}: {len(result.pngs)} PNG files")
