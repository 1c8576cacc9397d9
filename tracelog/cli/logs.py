"""Commands over what logs and benches left in the store: export, compare, report (`ingest` has a module of
its own: `cli.intake`)."""

from __future__ import annotations

import click

from tracelog import api
from tracelog.cli.base import Context, cli, format_option, parse_tags, pass_ctx, user_errors
from tracelog.render import render


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
