"""A data path on S3 with no keys set: the AWS credential chain (DuckDB's `aws` extension, from the
`duckdb-extension-aws` package) finds them, against moto's S3 server on loopback (`tests/s3.py`).

What is tested here: a `credential_process` profile of ~/.aws/config, and an ECS task role's container
endpoint (a loopback server answering as ECS's does), reach the store; with nothing anywhere the command
ends with one sentence naming what to set, within a bound, also against an instance metadata service that
never answers; keys in the variables win over the chain and make no lookup. Not tested: SSO (it needs
AWS's SSO portal), web identity (AWS's STS), an EC2 instance profile (a real instance's metadata service).
The commands run as processes of their own: the AWS SDK reads its variables once per process."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests import s3
from tests.conftest import SAMPLES
from tracelog.cli import cli
from tracelog.errors import TracelogError
from tracelog.store import objects

NCCL = str(SAMPLES / "nccl_all_reduce_8xa100.txt")
ON_S3 = pytest.mark.parametrize("lake_db", ["s3"], indirect=True)
TIMEOUT_S = 300
# The longest a command may take to say it found no credentials, where the metadata service never answers
# (measured: 5.5 s for the whole command with AWS_REGION set, 4 s of it the chain's, whose requests time
# out after 1 s each; the tests' S3 environment sets AWS_REGION).
NO_CREDENTIALS_WITHIN_S = 20.0


@pytest.fixture
def no_keys(lake_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment of a node on S3 with no keys anywhere: the store's endpoint and region only, the
    AWS files empty ones of a fresh home, and no DuckDB extension folder there."""
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home), XDG_CACHE_HOME=str(tmp_path / "cache"))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        env.pop(name, None)
    env["AWS_SHARED_CREDENTIALS_FILE"] = str(home / "credentials")
    env["AWS_CONFIG_FILE"] = str(home / "config")
    return env


def tracelog(db: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tracelog", "--db", db, *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def secret_and_extensions(db: str, env: dict[str, str]) -> tuple[str, set[str]]:
    """The store's S3 secret as `duckdb_secrets()` shows it (redacted), and the extensions loaded."""
    secrets = tracelog(db, env, "sql", "SELECT secret_string FROM duckdb_secrets()", "--format", "csv")
    assert secrets.returncode == 0, secrets.stderr
    loaded = tracelog(
        db, env, "sql", "SELECT extension_name FROM duckdb_extensions() WHERE loaded", "--format", "csv"
    )
    assert loaded.returncode == 0, loaded.stderr
    return secrets.stdout, set(loaded.stdout.split())


@pytest.fixture
def silent_metadata_service() -> Iterator[tuple[str, list[socket.socket]]]:
    """An instance metadata service that takes connections and never answers (a node whose firewall
    swallows requests): its URL, and the connections it took."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    taken: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            taken.append(connection)

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", taken
    finally:
        listener.close()
        for connection in taken:
            connection.close()


def test_with_no_keys_the_secret_is_the_credential_chains_with_the_profiles_region(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(
        "[default]\ncredential_process = /bin/false\n\n"
        "[profile team]\nregion = eu-west-3\ncredential_process = /bin/false\n",
        encoding="utf-8",
    )
    env = {
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_CONFIG_FILE": str(config),
        "AWS_PROFILE": "team",
        "AWS_ENDPOINT_URL": "http://minio.cluster:9000",
    }
    secret = objects.secret_sql(env)
    assert secret.chain and secret.hidden == []
    assert "PROVIDER credential_chain," in secret.sql and "REFRESH auto" in secret.sql
    # the SDK's default chain, which reads AWS_PROFILE itself (PROFILE would narrow it to one provider)
    assert "CHAIN" not in secret.sql and "KEY_ID" not in secret.sql and "PROFILE" not in secret.sql
    assert "REGION 'eu-west-3'" in secret.sql and "ENDPOINT 'minio.cluster:9000'" in secret.sql
    assert "REGION 'ap-south-1'" in objects.secret_sql({**env, "AWS_REGION": "ap-south-1"}).sql
    default = {k: v for k, v in env.items() if k != "AWS_PROFILE"}
    assert "REGION 'us-east-1'" in objects.secret_sql(default).sql  # [default] names no region
    with pytest.raises(TracelogError, match="AWS_PROFILE names 'other', which neither"):
        objects.secret_sql({**env, "AWS_PROFILE": "other"})
    keys = objects.secret_sql({**env, "AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s"})
    assert not keys.chain and "PROVIDER config," in keys.sql  # keys set: no chain


def credential_process(folder: Path, key_id: str, secret: str, ran: Path) -> str:
    """A `credential_process` command: a script printing the JSON the AWS CLI expects of one (version 1,
    the key pair), and leaving `ran` behind to say it was asked."""
    script = folder / "credentials.py"
    answer = json.dumps({"Version": 1, "AccessKeyId": key_id, "SecretAccessKey": secret})
    script.write_text(
        f"import pathlib\npathlib.Path({str(ran)!r}).touch()\nprint({answer!r})\n", encoding="utf-8"
    )
    return f"{sys.executable} {script}"


@ON_S3
def test_a_credential_process_profile_of_the_config_file_reaches_the_store(
    lake_db: str, s3_server: s3.Server, no_keys: dict[str, str], tmp_path: Path
) -> None:
    """Keys only from a profile's `credential_process` in ~/.aws/config (AWS_PROFILE names it; the
    credentials file has no such profile): the store is created, written and read through the chain."""
    ran = tmp_path / "process-ran"
    command = credential_process(tmp_path, s3_server.key_id, s3_server.secret, ran)
    Path(no_keys["AWS_CONFIG_FILE"]).write_text(
        f"[profile team]\nregion = us-east-1\ncredential_process = {command}\n", encoding="utf-8"
    )
    env = {**no_keys, "AWS_PROFILE": "team", "AWS_EC2_METADATA_DISABLED": "true"}
    ingest = tracelog(lake_db, env, "ingest", NCCL)
    assert ingest.returncode == 0, ingest.stderr
    assert ran.exists()
    benches = tracelog(lake_db, env, "benches", "--format", "csv")
    assert benches.returncode == 0 and "nccl-tests" in benches.stdout, benches.stderr
    assert any(key.endswith(".parquet") for key in s3_server.keys(os.environ["TRACELOG_DATA_PATH"]))
    secret, loaded = secret_and_extensions(lake_db, env)
    assert "provider=credential_chain" in secret and "aws" in loaded
    assert s3_server.secret not in secret and "secret=redacted" in secret
    assert not (Path(env["HOME"]) / ".duckdb").exists(), "DuckDB installed an extension"


class _ContainerCredentials(BaseHTTPRequestHandler):
    """ECS's container credentials endpoint, as the SDK asks it (GET, the key pair as JSON)."""

    answer = b""

    def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.answer)))
        self.end_headers()
        self.wfile.write(self.answer)

    def log_message(self, *args: object) -> None:
        pass


@ON_S3
def test_an_ecs_task_roles_credentials_reach_the_store(
    lake_db: str, s3_server: s3.Server, no_keys: dict[str, str]
) -> None:
    """The container endpoint an ECS task's role is served from (AWS_CONTAINER_CREDENTIALS_FULL_URI, a
    loopback address as the SDK allows over http), answering as ECS does."""
    expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    body = {
        "AccessKeyId": s3_server.key_id,
        "SecretAccessKey": s3_server.secret,
        "Token": "",
        "Expiration": expires,
    }
    handler = type("Handler", (_ContainerCredentials,), {"answer": json.dumps(body).encode()})
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        uri = f"http://127.0.0.1:{server.server_address[1]}/v2/credentials/task"
        env = {**no_keys, "AWS_CONTAINER_CREDENTIALS_FULL_URI": uri}
        ingest = tracelog(lake_db, env, "ingest", NCCL)
        assert ingest.returncode == 0, ingest.stderr
        secret, _ = secret_and_extensions(lake_db, env)
        assert "provider=credential_chain" in secret
    finally:
        server.shutdown()
        server.server_close()


@ON_S3
def test_with_no_credentials_anywhere_the_error_names_what_to_set_within_a_bound(
    lake_db: str,
    no_keys: dict[str, str],
    silent_metadata_service: tuple[str, list[socket.socket]],
) -> None:
    """Nothing set, on a node whose instance metadata service takes connections and never answers: one
    sentence naming the variables, within `NO_CREDENTIALS_WITHIN_S`. With AWS_EC2_METADATA_DISABLED=true
    the service is not asked and the answer is immediate; with TRACELOG_S3_CREDENTIALS=keys the chain is
    not tried at all."""
    url, taken = silent_metadata_service
    env = {**no_keys, "AWS_EC2_METADATA_SERVICE_ENDPOINT": url}
    started = time.monotonic()
    chain = tracelog(lake_db, env, "ingest", NCCL)
    took = time.monotonic() - started
    assert chain.returncode == 1
    message = chain.stderr.strip()
    assert "needs credentials" in message and "AWS credential chain" in message
    for name in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "instance profile"):
        assert name in message, name
    assert "Traceback" not in chain.stderr and len(message.splitlines()) == 1, chain.stderr
    assert taken, "the instance metadata service was not asked"
    assert took < NO_CREDENTIALS_WITHIN_S, took
    asked = len(taken)
    started = time.monotonic()
    disabled = tracelog(lake_db, {**env, "AWS_EC2_METADATA_DISABLED": "true"}, "ingest", NCCL)
    assert disabled.returncode == 1 and "needs credentials" in disabled.stderr
    assert time.monotonic() - started < took and len(taken) == asked
    keys_only = tracelog(lake_db, {**env, objects.CREDENTIALS_MODE: "keys"}, "ingest", NCCL)
    assert keys_only.returncode == 1 and "TRACELOG_S3_CREDENTIALS=keys" in keys_only.stderr
    assert len(taken) == asked


@ON_S3
def test_keys_in_the_variables_win_over_the_chain_and_ask_nothing_else(
    lake_db: str,
    s3_server: s3.Server,
    no_keys: dict[str, str],
    tmp_path: Path,
    silent_metadata_service: tuple[str, list[socket.socket]],
) -> None:
    """The store's keys in the variables, beside a default profile whose `credential_process` gives
    wrong ones and a metadata service that would hang: the variables' keys are used as they were before
    the chain existed (PROVIDER config, the aws extension not loaded), and neither is asked."""
    ran = tmp_path / "process-ran"
    command = credential_process(tmp_path, "AKIAWRONG", "wrong-secret", ran)
    Path(no_keys["AWS_CONFIG_FILE"]).write_text(
        f"[default]\ncredential_process = {command}\n", encoding="utf-8"
    )
    url, taken = silent_metadata_service
    env = {
        **no_keys,
        "AWS_ACCESS_KEY_ID": s3_server.key_id,
        "AWS_SECRET_ACCESS_KEY": s3_server.secret,
        "AWS_EC2_METADATA_SERVICE_ENDPOINT": url,
    }
    ingest = tracelog(lake_db, env, "ingest", NCCL)
    assert ingest.returncode == 0, ingest.stderr
    secret, loaded = secret_and_extensions(lake_db, env)
    assert "provider=config" in secret and "aws" not in loaded
    assert not ran.exists() and not taken


@ON_S3
def test_without_the_aws_package_no_keys_name_it(
    lake_db: str, no_keys: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No keys and no duckdb-extension-aws: the error names the package (keys set would not need it)."""
    real = importlib.util.find_spec

    def find_spec(name: str, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        return None if name == objects.AWS[0] else real(name, *args, **kwargs)  # type: ignore[arg-type]

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    for name in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
        monkeypatch.setenv(name, no_keys[name])
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    result = CliRunner().invoke(cli, ["--db", lake_db, "ingest", NCCL], catch_exceptions=False)
    assert result.exit_code == 1
    assert "duckdb-extension-aws" in result.output and "no keys set" in result.output
