"""A DuckLake store whose data path is on S3: the credentials and endpoint taken from the AWS variables,
the httpfs extension from its package, and the errors a user meets, on a real S3-compatible server
(moto's, on loopback: `tests/s3.py`). The store's own behaviour on S3 (ingest, many writers, export) runs
in the lake tests, parametrised over a folder and S3 (`LAKE_DATA`, `BACKENDS_AND_S3`)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests import s3
from tests.conftest import SAMPLES
from tracelog.cli import cli
from tracelog.errors import TracelogError
from tracelog.store import Store, lake, objects

LLAMA = str(SAMPLES / "megatron_lm_llama3_8b_h100.log")
NCCL = str(SAMPLES / "nccl_all_reduce_8xa100.txt")
TIMEOUT_S = 300
ON_S3 = pytest.mark.parametrize("lake_db", ["s3"], indirect=True)


def run(db: str | Path, *args: str):
    return CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False)


def option(sql: str, name: str) -> str | None:
    """The value an option of a CREATE SECRET statement is given, as written."""
    for part in sql[sql.index("(") + 1 : -1].split(", "):
        key, _, value = part.partition(" ")
        if key == name:
            return value
    return None


KEYS = {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLEKEY", "AWS_SECRET_ACCESS_KEY": "s3cr3t/with'quote"}


@pytest.mark.parametrize(
    ("env", "want"),
    [
        # AWS itself: no endpoint, virtual-host addresses, TLS, DuckDB's default region
        ({}, {"ENDPOINT": None, "URL_STYLE": None, "USE_SSL": "true", "REGION": "'us-east-1'"}),
        # MinIO on a cluster over plain http
        (
            {"AWS_ENDPOINT_URL": "http://minio.cluster:9000", "AWS_REGION": "eu-west-3"},
            {
                "ENDPOINT": "'minio.cluster:9000'",
                "URL_STYLE": "'path'",
                "USE_SSL": "false",
                "REGION": "'eu-west-3'",
            },
        ),
        # Ceph's gateway over https; the S3-specific variable wins, as in the AWS SDKs, and so does
        # AWS_REGION over AWS_DEFAULT_REGION
        (
            {
                "AWS_ENDPOINT_URL": "http://other:1",
                "AWS_ENDPOINT_URL_S3": "https://rgw.ceph.cluster",
                "AWS_DEFAULT_REGION": "default",
                "AWS_REGION": "ceph",
            },
            {"ENDPOINT": "'rgw.ceph.cluster'", "URL_STYLE": "'path'", "USE_SSL": "true", "REGION": "'ceph'"},
        ),
        ({"AWS_DEFAULT_REGION": "ap-south-1"}, {"REGION": "'ap-south-1'"}),
        ({"AWS_SESSION_TOKEN": "tok'en"}, {"SESSION_TOKEN": "'tok''en'"}),
    ],
)
def test_the_secret_is_made_from_the_aws_variables(env: dict[str, str], want: dict[str, str | None]) -> None:
    secret = objects.secret_sql({**KEYS, **env})
    sql, hidden = secret.sql, secret.hidden
    assert not secret.chain and "PROVIDER config," in sql
    assert sql.startswith(f"CREATE OR REPLACE TEMPORARY SECRET {objects.SECRET_NAME} (TYPE s3,")
    assert option(sql, "KEY_ID") == "'AKIAEXAMPLEKEY'"
    assert option(sql, "SECRET") == "'s3cr3t/with''quote'"
    for name, value in want.items():
        assert option(sql, name) == value, name
    assert hidden == [
        KEYS["AWS_SECRET_ACCESS_KEY"],
        *([env["AWS_SESSION_TOKEN"]] if "AWS_SESSION_TOKEN" in env else []),
    ]


def test_the_keys_come_from_a_profile_of_the_credentials_file_when_the_environment_has_none(
    tmp_path: Path,
) -> None:
    file = tmp_path / "credentials"
    file.write_text(
        "[default]\naws_access_key_id = AKIADEFAULT\naws_secret_access_key = default-secret\n\n"
        "[cluster]\naws_access_key_id = AKIACLUSTER\naws_secret_access_key = cluster-secret\n"
        "aws_session_token = cluster-token\n",
        encoding="utf-8",
    )
    base = {"AWS_SHARED_CREDENTIALS_FILE": str(file), "AWS_CONFIG_FILE": str(tmp_path / "no-config")}
    default = objects.credentials(base)
    assert default is not None and (default.key_id, default.secret, default.token) == (
        "AKIADEFAULT",
        "default-secret",
        None,
    )
    chosen = objects.credentials({**base, "AWS_PROFILE": "cluster"})
    assert chosen is not None and (chosen.key_id, chosen.token) == ("AKIACLUSTER", "cluster-token")
    assert "cluster-secret" not in repr(chosen)  # never shown by accident
    first = objects.credentials({**base, **KEYS})  # the environment first
    assert first is not None and first.key_id == "AKIAEXAMPLEKEY"
    with pytest.raises(TracelogError, match="AWS_PROFILE names 'nope', which neither"):
        objects.credentials({**base, "AWS_PROFILE": "nope"})
    with pytest.raises(TracelogError, match="AWS_PROFILE names 'nope', which .* does not have"):
        objects.credentials({**base, "AWS_PROFILE": "nope", objects.CREDENTIALS_MODE: "keys"})


@pytest.mark.parametrize(
    ("env", "names"),
    [
        (
            {"AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", objects.CREDENTIALS_MODE: "keys"},
            ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "TRACELOG_S3_CREDENTIALS=keys"],
        ),
        ({**KEYS, objects.CREDENTIALS_MODE: "always"}, ["TRACELOG_S3_CREDENTIALS must be auto or keys"]),
        ({"AWS_ACCESS_KEY_ID": "AKIA"}, ["AWS_SECRET_ACCESS_KEY is not set"]),
        ({**KEYS, "AWS_ENDPOINT_URL": "minio:9000"}, ["AWS_ENDPOINT_URL", "http://host:port"]),
        (
            {**KEYS, "AWS_ENDPOINT_URL_S3": "https://minio:9000/bucket"},
            ["AWS_ENDPOINT_URL_S3", "without a path"],
        ),
    ],
)
def test_missing_or_malformed_settings_name_what_to_set(env: dict[str, str], names: list[str]) -> None:
    with pytest.raises(TracelogError) as caught:
        objects.secret_sql(env)
    for name in names:
        assert name in str(caught.value)


def test_a_data_path_on_another_object_store_is_refused() -> None:
    with pytest.raises(TracelogError, match="not supported"):
        objects.check_scheme("gs://bucket/prefix/")
    objects.check_scheme("s3://bucket/prefix/")
    objects.check_scheme("/lustre/tracelog/")


def csv_of(db: str | Path, *args: str) -> str:
    result = run(db, *args, "--format", "csv")
    assert result.exit_code == 0, result.output
    return result.output


@ON_S3
def test_a_store_on_s3_answers_as_the_file_does_and_keeps_its_data_in_the_bucket(
    lake_db: str, s3_server: s3.Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ingest onto S3, then `runs`, `flags` and `sql` with no data path given (the store recorded its
    own) give what the embedded file gives; the Parquet files are objects in the bucket, and no local
    folder named like the data path appears."""
    data = os.environ["TRACELOG_DATA_PATH"]
    file_db = tmp_path / "same.duckdb"
    for db in (file_db, lake_db):
        assert run(db, "ingest", LLAMA, NCCL).exit_code == 0
    monkeypatch.delenv("TRACELOG_DATA_PATH")
    monkeypatch.chdir(tmp_path)
    for command in (["runs"], ["flags"], ["benches"], ["sql", "SELECT count(*) AS n FROM iterations"]):
        assert csv_of(lake_db, *command) == csv_of(file_db, *command), command
    keys = s3_server.keys(data)
    assert sum(k.endswith(".parquet") for k in keys) >= 5, keys
    assert not list(tmp_path.glob("s3*")), "a local folder made for the s3:// path"
    with Store(lake_db, read_only=True) as store:
        assert store.data_path == data


@ON_S3
def test_wrong_or_absent_credentials_exit_1_naming_what_to_set_and_never_the_secret(
    lake_db: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert run(lake_db, "ingest", NCCL).exit_code == 0
    wrong = "wr0ng-" + os.environ["AWS_SECRET_ACCESS_KEY"][:20]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    refused = run(lake_db, "runs")
    assert refused.exit_code == 1
    assert "refused the credentials" in refused.output and "AWS_ACCESS_KEY_ID" in refused.output
    assert wrong not in refused.output
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv(objects.CREDENTIALS_MODE, "keys")  # the chain's own test: test_lake_s3_chain.py
    absent = run(lake_db, "ingest", LLAMA)
    assert absent.exit_code == 1
    assert "needs credentials" in absent.output and "AWS_SECRET_ACCESS_KEY" in absent.output


@ON_S3
def test_an_unreachable_endpoint_or_a_missing_bucket_is_one_sentence(
    lake_db: str, s3_server: s3.Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACELOG_DATA_PATH", "s3://no-such-bucket/x/")
    missing = run(lake_db, "ingest", NCCL)
    assert missing.exit_code == 1 and "the bucket does not exist" in missing.output
    monkeypatch.setenv("TRACELOG_DATA_PATH", s3_server.data_path())
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    silent = run(lake_db, "ingest", NCCL)
    assert (
        silent.exit_code == 1 and "does not answer" in silent.output and "AWS_ENDPOINT_URL" in silent.output
    )


def free_port() -> int:
    from tests.postgres import free_port as port

    return port()


@ON_S3
def test_without_the_httpfs_package_the_error_names_it(lake_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        return None if name == objects.HTTPFS[0] else real(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    result = run(lake_db, "ingest", NCCL)
    assert result.exit_code == 1
    assert "duckdb-extension-httpfs" in result.output and "pip install 'tracelog[lake]'" in result.output


@ON_S3
def test_nothing_is_downloaded_and_the_secret_stays_redacted(lake_db: str, tmp_path: Path) -> None:
    """In a home with no DuckDB extension folder, an ingest and a query on S3 install nothing (the
    binaries are the packages'), `duckdb_secrets()` shows the secret redacted, and unredacting is refused."""
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home), XDG_CACHE_HOME=str(tmp_path / "cache"))

    def tracelog(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tracelog", "--db", lake_db, *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)

    assert tracelog("ingest", NCCL).returncode == 0
    loaded = tracelog(
        "sql", "SELECT extension_name FROM duckdb_extensions() WHERE loaded ORDER BY 1", "--format", "csv"
    )
    assert loaded.returncode == 0, loaded.stderr
    assert {"httpfs", "ducklake", "postgres_scanner"} <= set(loaded.stdout.split())
    secrets = tracelog("sql", "SELECT secret_string FROM duckdb_secrets()", "--format", "csv")
    assert "secret=redacted" in secrets.stdout and os.environ["AWS_SECRET_ACCESS_KEY"] not in secrets.stdout
    unredacted = tracelog("sql", "SELECT * FROM duckdb_secrets(redact=false)")
    assert unredacted.returncode == 1 and os.environ["AWS_SECRET_ACCESS_KEY"] not in unredacted.stdout
    assert not (home / ".duckdb").exists(), "DuckDB installed an extension"


@ON_S3
def test_httpfs_is_signature_checked_before_a_connection_that_skips_the_check_loads_it(
    lake_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's cache that knows the two lake binaries (a store on a folder opened before) and not
    httpfs: the connection skips the check for all, so httpfs is checked on a connection of its own
    first, then recorded."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    binaries = lake.Binaries()
    binaries.remember()
    assert lake.Binaries().verified
    checked: list[str] = []
    real = lake._load

    def load(con, path):  # type: ignore[no-untyped-def]
        checked.append(path.stem)
        real(con, path)

    monkeypatch.setattr(lake, "_load", load)
    with Store(lake_db) as store:
        assert store.scalar(
            "SELECT count(*) FROM duckdb_extensions() WHERE loaded AND extension_name = 'httpfs'"
        )
    assert checked.count("httpfs") == 2  # the checking connection, then the store's
    record = binaries.record.read_text(encoding="utf-8")
    assert "httpfs.duckdb_extension" in record and len(record.splitlines()) == 3
    checked.clear()
    with Store(lake_db):
        pass
    assert checked.count("httpfs") == 1  # known now: loaded once


@ON_S3
def test_cluster_add_on_a_store_on_s3_says_where_cluster_facts_go(lake_db: str) -> None:
    assert run(lake_db, "ingest", NCCL).exit_code == 0
    result = run(lake_db, "cluster", "add", "lab", "--gpu", "a100-sxm4-80gb", "--gpus-per-node", "8")
    assert result.exit_code == 1 and "object storage" in result.output and "tracelog.toml" in result.output


@ON_S3
def test_a_large_log_lands_on_s3_within_the_ingest_memory_cap(lake_db: str, tmp_path: Path) -> None:
    """DuckDB's S3 upload buffers parts of 80 MB by default, past the 96 MB an ingest gives DuckDB once
    the staged rows hold some of it: a 25 MB Megatron log failed as a bug ("could not allocate block of
    size 76.5 MiB"). With 5 MB parts (`objects.UPLOAD_MAX_FILE`) it lands whole."""
    log = tmp_path / "megatron-12mb.log"
    generator = Path(__file__).resolve().parents[1] / "benchmarks" / "generate_megatron_log.py"
    subprocess.run([sys.executable, str(generator), "12", str(log)], check=True, capture_output=True)
    result = run(lake_db, "ingest", str(log))
    assert result.exit_code == 0, result.output
    with Store(lake_db, read_only=True) as store:
        lines = store.scalar("SELECT count(*) FROM iterations") + store.scalar(
            "SELECT count(*) FROM unparsed"
        )
        assert lines > 20_000
