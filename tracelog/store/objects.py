"""A DuckLake store whose Parquet files live on object storage: `--data-path s3://bucket/prefix/`.

S3 and the S3-compatible stores a cluster runs (MinIO, Ceph's RADOS Gateway) are reached through DuckDB's
`httpfs` extension, whose binary comes from the `duckdb-extension-httpfs` package like the other two
(`lake.Binaries`): loaded by path, nothing downloaded. It is loaded only for a store whose data path is on
object storage: given as one, or found so when the catalog is attached (DuckLake refuses to attach such a
store without the extension, and names its data path; `lake.attach` then loads it and attaches again).

Credentials and endpoint come the way the AWS tools take them, so that a node set up for `aws s3` works
as it is: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (else the profile AWS_PROFILE, or
`default`, of the shared credentials file, AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials), AWS_REGION
or AWS_DEFAULT_REGION, and AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL for a store other than AWS (path-style
addresses there, as MinIO and Ceph expect; http or https as the endpoint's scheme says). They become a
temporary DuckDB secret of the connection: kept in its memory only, never written to disk, and shown
redacted by `duckdb_secrets()`. A statement or an error that carries them is never printed (`_scrubbed`).

A store's access is checked once when it is opened: a listing under a name no file has, one request
whatever the store holds. Wrong keys, a missing bucket or an endpoint that does not answer are then one
sentence naming what to set, not an HTTP error in the middle of a file's ingest.
"""

from __future__ import annotations

import configparser
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import duckdb

from tracelog.errors import TracelogError
from tracelog.store.literals import quoted

SCHEMES = ("s3://", "s3a://", "s3n://")  # the addresses DuckDB's S3 file system serves
# (package, extension name as DuckDB loads it, file name in the wheel), as `lake.EXTENSIONS`
HTTPFS = ("duckdb_extension_httpfs", "httpfs", "httpfs")
SECRET_NAME = "tracelog_s3"
PROBE = "tracelog-access-check"  # a name no file of the store has: listing it is one cheap request
UPLOAD_MAX_FILE = "50GB"  # the largest object one upload may make (`prepare`)
DEFAULT_REGION = "us-east-1"  # DuckDB's own default, and what MinIO and Ceph answer to unless set up
# DuckLake's refusal to attach a store on object storage before httpfs is loaded (DuckLake 1.5.5).
NEEDS_HTTPFS = re.compile(r"Data path (\S+) requires the extension httpfs")
KEY_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
ENDPOINT_VARS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")  # the S3-specific one first, as the AWS SDKs
REGION_VARS = ("AWS_REGION", "AWS_DEFAULT_REGION")
WHAT_TO_SET = (
    "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials), "
    "or AWS_PROFILE for a profile of ~/.aws/credentials; AWS_ENDPOINT_URL for MinIO, Ceph or another "
    "S3-compatible store"
)


def is_remote(path: str | None) -> bool:
    """A data path on a remote file system (`s3://...`, or any other `scheme://`), not a folder."""
    return bool(path) and "://" in str(path) and not str(path).startswith("file://")


def check_scheme(path: str) -> None:
    """Refuse a remote data path that is not S3 (the only object storage tracelog sets up)."""
    if is_remote(path) and not path.lower().startswith(SCHEMES):
        scheme = path.split("://", 1)[0]
        raise TracelogError(
            f"a data path on {scheme}:// is not supported: give a folder, or s3://bucket/prefix/ (S3, or "
            "an S3-compatible store through AWS_ENDPOINT_URL)",
            path,
        )


@dataclass(frozen=True, repr=False)
class Credentials:
    """An access key pair (and session token), and where it came from (said in errors, never the keys)."""

    key_id: str
    secret: str
    token: str | None
    origin: str


def credentials(env: Mapping[str, str]) -> Credentials:
    """The keys from the environment, else from the shared credentials file's profile, as the AWS CLI
    reads them; a TracelogError naming what to set where there are none, or only half a pair."""
    key_id, secret = (env.get(name) or "" for name in KEY_VARS)
    if key_id or secret:
        if not (key_id and secret):
            missing = KEY_VARS[1] if key_id else KEY_VARS[0]
            raise TracelogError(f"{missing} is not set (the other half of the key pair is): set both")
        return Credentials(key_id, secret, env.get("AWS_SESSION_TOKEN") or None, "the environment")
    file = Path(env.get("AWS_SHARED_CREDENTIALS_FILE") or Path.home() / ".aws" / "credentials")
    profile = env.get("AWS_PROFILE") or "default"
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(file, encoding="utf-8")
    except (OSError, configparser.Error) as exc:
        raise TracelogError(f"cannot read the credentials file: {exc}", str(file)) from None
    if parser.has_section(profile):
        section = parser[profile]
        key_id = section.get("aws_access_key_id", "").strip()
        secret = section.get("aws_secret_access_key", "").strip()
        if key_id and secret:
            token = section.get("aws_session_token", "").strip() or None
            return Credentials(key_id, secret, token, f"profile {profile} of {file}")
    elif "AWS_PROFILE" in env:
        raise TracelogError(f"AWS_PROFILE names {profile!r}, which {file} does not have")
    raise TracelogError(f"a data path on object storage needs credentials: {WHAT_TO_SET}")


def endpoint(env: Mapping[str, str]) -> tuple[str | None, bool, str | None]:
    """(host[:port] or None for AWS itself, TLS or not, the variable it came from)."""
    for name in ENDPOINT_VARS:
        given = env.get(name)
        if not given:
            continue
        parts = urlsplit(given)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise TracelogError(
                f"{name} must be a URL with its scheme, http://host:port or https://host, not {given!r}"
            )
        if parts.path.strip("/") or parts.query:
            raise TracelogError(f"{name} must name a host and port only, without a path: {given!r}")
        return parts.netloc, parts.scheme == "https", name
    return None, True, None


def secret_sql(env: Mapping[str, str]) -> tuple[str, list[str]]:
    """The CREATE SECRET statement for the environment's credentials and endpoint, and the values in it
    that must never be shown (`_scrubbed`)."""
    keys = credentials(env)
    host, tls, _ = endpoint(env)
    region = next((env[name] for name in REGION_VARS if env.get(name)), DEFAULT_REGION)
    options = {"KEY_ID": keys.key_id, "SECRET": keys.secret, "REGION": region}
    if keys.token:
        options["SESSION_TOKEN"] = keys.token
    if host:
        options["ENDPOINT"] = host
        options["URL_STYLE"] = "path"  # MinIO and Ceph serve bucket/key; virtual hosts need their DNS
    fields = [f"{name} '{quoted(value)}'" for name, value in options.items()]
    fields.append(f"USE_SSL {'true' if tls else 'false'}")
    sql = f"CREATE OR REPLACE TEMPORARY SECRET {SECRET_NAME} (TYPE s3, PROVIDER config, {', '.join(fields)})"
    return sql, [v for v in (keys.secret, keys.token) if v]


def prepare(
    con: duckdb.DuckDBPyConnection,
    data_path: str,
    load_httpfs: Callable[[], None],
    env: Mapping[str, str] | None = None,
) -> None:
    """Make `data_path` reachable from `con`: the httpfs extension loaded, the secret made, the access
    checked. Each failure is a TracelogError that says what to set."""
    check_scheme(data_path)
    env = os.environ if env is None else env
    sql, hidden = secret_sql(env)
    load_httpfs()
    # DuckDB buffers an upload in parts of the largest file it allows (800 GB) over 10,000 parts: 80 MB
    # each, which an ingest's 96 MB memory cap cannot hold ("could not allocate block of size 76.5
    # MiB"). 50 GB, the lowest it takes, makes them 5 MB, S3's smallest; DuckLake's files are far
    # smaller (512 MB at most by default).
    con.execute(f"SET s3_uploader_max_filesize = '{UPLOAD_MAX_FILE}'")
    try:
        con.execute(sql)
    except duckdb.Error as exc:
        first = _scrubbed(str(exc).splitlines()[0], hidden)
        raise TracelogError(f"cannot set up the S3 credentials: {first}") from None
    probe = data_path.rstrip("/") + f"/{PROBE}*"
    try:
        con.execute(f"SELECT count(*) FROM glob('{quoted(probe)}')").fetchall()
    except duckdb.Error as exc:
        raise explain(exc, data_path, env, hidden) from None


def explain(
    exc: BaseException, data_path: str, env: Mapping[str, str], hidden: Sequence[str] = ()
) -> TracelogError:
    """A failed request to the object store, as what the user should check or set."""
    text = _scrubbed(str(exc), hidden)
    first = text.splitlines()[0] if text else type(exc).__name__
    host, _, endpoint_var = endpoint(env)
    where = f"{host} ({endpoint_var})" if host else "AWS S3 (no AWS_ENDPOINT_URL set)"
    status = re.search(r"\(HTTP (\d{3})", text)
    code = int(status.group(1)) if status else None
    if code in (401, 403):
        detail = next((line for line in text.splitlines() if re.match(r"\w+: ", line)), "")
        reason = f" ({detail.split(':')[0]})" if detail else ""
        what = f"the object store refused the credentials{reason}: {WHAT_TO_SET}; they must allow listing, reading and writing under the data path"
    elif code == 404:
        what = "the bucket does not exist on the object store: create it, or check the data path and AWS_ENDPOINT_URL"
    elif code in (301, 307, 400) and not host:
        what = "the bucket is in another region: set AWS_REGION to the bucket's region"
    elif "Could not connect" in text or "Could not resolve" in text or "Timeout" in text:
        what = f"the object store at {where} does not answer: check AWS_ENDPOINT_URL (http:// or https://, host and port)"
    else:
        what = f"the object store at {where} failed: {first}"
    return TracelogError(what, data_path)


def _scrubbed(text: str, hidden: Sequence[str]) -> str:
    for value in hidden:
        if value:
            text = text.replace(value, "***").replace(quoted(value), "***")
    return text
