"""The `tracelog` command: parse options, call one library function, render the result.

`base` holds the group and what commands share; `reads` the commands answered from the store alone;
`logs` ingest, export, compare and report; `model` the commands of the analytic model; `clusters` the
cluster facts of tracelog.toml. The group imports a command's module when the command is asked for
(`base.COMMAND_MODULES`), so each command starts with only what it uses.
"""

from tracelog.cli.base import cli

__all__ = ["cli", "main"]


def main() -> None:
    cli(prog_name="tracelog")
