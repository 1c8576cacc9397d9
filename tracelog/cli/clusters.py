"""`tracelog cluster`: the hardware of a machine said once, in the tracelog.toml next to the database."""

from __future__ import annotations

import click

from tracelog import api
from tracelog.cli.base import Context, cli, format_option, pass_ctx, user_errors
from tracelog.render import render


@cli.group()
def cluster() -> None:
    """Cluster facts (GPU, GPUs per node, fabric, NICs per node) for the logs of a machine.

    Ingest gives a run or bench these facts where neither the command line nor the log says them,
    when one of its hosts matches a --host pattern or its path a --path glob. Sections live in
    tracelog.toml: next to each ingested file or in a folder above it, next to the database, or in the
    user's config folder (~/.config/tracelog/), first found first; `add` and `rm` edit the one next to
    the database.

    \b
    Example:
        tracelog cluster add jean-zay --gpu a100-sxm4-80gb --gpus-per-node 8 --host 'jean-zay-iam*'
        tracelog cluster list
        tracelog cluster rm jean-zay
    """


@cluster.command("add")
@click.argument("name")
@click.option("--gpu", help="A catalog id such as a100-sxm4-80gb, or the name tools print.")
@click.option("--gpus-per-node", type=click.IntRange(min=1), help="GPUs per node.")
@click.option("--fabric", help="Inter-node link, a catalog id such as ib-hdr-x8.")
@click.option("--nics-per-node", type=click.IntRange(min=1), help="Network cards per node.")
@click.option("--host", "hosts", multiple=True, metavar="PATTERN", help="Host name pattern (repeatable).")
@click.option("--path", "paths", multiple=True, metavar="GLOB", help="Log path glob (repeatable).")
@pass_ctx
def cluster_add(
    obj: Context,
    name: str,
    gpu: str | None,
    gpus_per_node: int | None,
    fabric: str | None,
    nics_per_node: int | None,
    hosts: tuple[str, ...],
    paths: tuple[str, ...],
) -> None:
    """Add or replace a cluster in the tracelog.toml next to the database.

    \b
    Example:
        tracelog cluster add h100-lab --gpu h100-sxm5-80gb --gpus-per-node 8 --fabric ib-ndr-x8 --nics-per-node 8 --host 'h100-node-*' --path 'jobs/h100/*'
    """
    with user_errors():
        config = api.add_cluster(
            obj.config_db(),
            name,
            gpu=gpu,
            gpus_per_node=gpus_per_node,
            fabric=fabric,
            nics_per_node=nics_per_node,
            hosts=hosts,
            paths=paths,
        )
    click.echo(
        f"cluster {name} written to {config}; files ingested from now on that match take its facts "
        "(files already ingested: ingest them again with --force)"
    )


@cluster.command("list")
@click.argument("paths", nargs=-1)
@format_option
@pass_ctx
def cluster_list(obj: Context, paths: tuple[str, ...], fmt: str) -> None:
    """List the clusters that apply to this database (and to files under PATHS), first found first.

    \b
    Example:
        tracelog cluster list sample_logs/
    """
    with user_errors():
        render(api.clusters(obj.config_db(), paths), fmt)


@cluster.command("rm")
@click.argument("name")
@pass_ctx
def cluster_rm(obj: Context, name: str) -> None:
    """Remove a cluster from the tracelog.toml next to the database (runs already ingested keep their facts).

    \b
    Example:
        tracelog cluster rm h100-lab
    """
    with user_errors():
        config = api.remove_cluster(obj.config_db(), name)
    click.echo(f"cluster {name} removed from {config}")
