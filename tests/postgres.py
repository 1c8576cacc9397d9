"""A throwaway PostgreSQL server for the tests of the DuckLake store: its catalog lives in PostgreSQL.

The server is Debian's `postgresql` package (what `.ci/run` installs), run from a temporary folder on a
free loopback port with trust authentication, so that no test touches a server of the machine's. PostgreSQL
refuses to run as root (initdb: "cannot be run as root"), so under root every server command runs as the
`postgres` user the package creates, in a folder that user owns.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

USER = "tracelog"  # the server's superuser, made by initdb
HOST = "127.0.0.1"
SYSTEM_USER = "postgres"  # the account Debian's package creates (its postinst)
START_TIMEOUT_S = 60


def find_bin_dir() -> Path | None:
    """The folder of initdb, pg_ctl and psql: on PATH, or the newest of Debian's versioned folders
    (`/usr/lib/postgresql/<major>/bin`, not on PATH by default)."""
    on_path = shutil.which("initdb")
    candidates = [Path(on_path).resolve().parent] if on_path else []
    versions = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += sorted((Path(v) for v in versions), key=lambda p: _major(p.parent.name), reverse=True)
    for folder in candidates:
        if all((folder / tool).is_file() for tool in ("initdb", "pg_ctl", "psql")):
            return folder
    return None


def _major(name: str) -> int:
    return int(name) if name.isdigit() else -1


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


class Server:
    """One PostgreSQL server in its own folder; `start()`, `create_database()` per test, `stop()`."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.as_root = os.geteuid() == 0
        # Not under pytest's base folder: that one is private to the test user (mode 700), and the
        # postgres account must reach its data folder and socket.
        self.folder = Path(tempfile.mkdtemp(prefix="tracelog-pg-"))
        self.data = self.folder / "data"
        self.port = free_port()
        self.count = 0

    def _server_command(self, *args: str) -> None:
        command = [*(["runuser", "-u", SYSTEM_USER, "--"] if self.as_root else []), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=START_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed:\n{done.stdout}\n{done.stderr}")

    def start(self) -> None:
        if self.as_root:
            shutil.chown(self.folder, SYSTEM_USER, SYSTEM_USER)
        self._server_command(
            str(self.bin_dir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", USER, "--no-sync"
        )
        options = f"-p {self.port} -k {self.folder} -c listen_addresses={HOST} -c fsync=off"
        self._server_command(
            str(self.bin_dir / "pg_ctl"),
            *("-D", str(self.data), "-o", options, "-l", str(self.folder / "log"), "-w", "start"),
        )

    def stop(self) -> None:
        try:
            self._server_command(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "stop")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def psql(self, sql: str, database: str = "postgres") -> str:
        done = subprocess.run(
            [str(self.bin_dir / "psql"), "-h", HOST, "-p", str(self.port), "-U", USER, "-d", database]
            + ["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-c", sql],
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
        )
        if done.returncode != 0:
            raise RuntimeError(f"psql failed: {done.stderr}")
        return done.stdout

    def create_database(self) -> str:
        """A new empty database; its name."""
        self.count += 1
        name = f"lake_{self.count}_{uuid.uuid4().hex[:8]}"
        self.psql(f"CREATE DATABASE {name}")
        return name

    def address(self, database: str) -> str:
        """The `--db` of a DuckLake store whose catalog is `database`."""
        return f"ducklake:postgres:dbname={database} host={HOST} port={self.port} user={USER}"
