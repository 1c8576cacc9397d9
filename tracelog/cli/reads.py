"""Commands that answer from the store alone: list, show, query, flag, and the small edits of a run.

They call `tracelog.queries` (the part of the library surface `api` re-exports) and never `api`
itself, so that `tracelog runs` or `tracelog flags` starts without the parsers, Polars or the report.
A table is printed from plain rows (`rows=True`), without pandas; csv, json and markdown, which pandas
writes, ask for DataFrames.
"""

from __future__ import annotations

import click

from tracelog import queries
from tracelog.cli.base import Context, cli, columns_option, format_option, parse_tags, pass_ctx, user_errors
from tracelog.render import render
from tracelog.store.benches import is_bench_ref
from tracelog.store.rows import Rows


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
        render(queries.runs(obj.store(), tags=parse_tags(tags), rows=fmt == "table"), fmt, columns=columns)


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
    `--iterations` adds its iteration lines (`--limit N` the first N). `--format json` prints one object,
    each part a list of records under its name.

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
            parts = queries.show_bench(store, ref)
        else:
            parts = queries.show_run(
                store, ref, iterations=iterations or limit is not None, limit=limit, rows=fmt == "table"
            )
    if fmt == "json":  # one document, a list of records per part, for a script to load whole
        parts.pop("run", None)
        documents = [
            f'"{title}": {frame.to_json(orient="records", date_format="iso")}'
            for title, frame in parts.items()
        ]
        click.echo("{" + ", ".join(documents) + "}")
        return
    summary = parts.pop("summary")
    if isinstance(summary, Rows):
        render(summary.fields(), fmt, title="summary")
    else:
        render(summary.T.reset_index().set_axis(["field", "value"], axis=1), fmt, title="summary")
    parts.pop("run", None)
    for title, frame in parts.items():
        if len(frame):
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
        render(queries.sql(obj.store(), query, rows=fmt == "table"), fmt, columns=columns)


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
        render(queries.sources(obj.store()), fmt)


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
        render(queries.benches(obj.store(), tool=tool), fmt, columns=columns)


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
        run_id = queries.tag_run(obj.store(), run, parse_tags(tags, hint="TAGS"))
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
        removed = queries.untag_run(obj.store(), run, list(keys))
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
        run_id = queries.note_run(obj.store(), run, text)
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
        run_id = queries.rename_run(obj.store(), run, name)
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
        run_id, name = queries.run_label(store, run)
        if not yes:
            click.confirm(f"Remove run {run_id} ({name}) and all its rows?", abort=True)
        queries.remove_run(store, run_id)
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
            queries.refresh(store, thresholds=parse_tags(thresholds, hint="--threshold"))
        frame = queries.flags(
            store,
            severity=severity,
            rule=rule,
            runs=list(runs) or None,
            tags=parse_tags(tags),
            rows=fmt == "table",
        )
        for path, error in queries.refresh_errors(store):
            click.echo(f"Warning: {path}: {error}; its flags are missing", err=True)
    if fmt == "table":  # the message, which says what is wrong, among the columns a terminal shows
        frame = frame.select([*FLAG_TABLE_FIRST, *(c for c in frame.columns if c not in FLAG_TABLE_FIRST)])
    render(frame, fmt)


FLAG_TABLE_FIRST = ("flag_id", "severity", "rule", "subject", "message")
"""The columns `tracelog flags` prints first at a terminal; the figures the message quotes, the subject's
name and the hint follow where the width allows (the machine formats keep the query's order)."""
