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
Keys found so are used as they are, with no request to anything but the store.

Where neither has keys, the AWS SDK's default credential chain finds them, through DuckDB's `aws`
extension (the `duckdb-extension-aws` package, loaded by path like httpfs, only then): a profile of
~/.aws/config (AWS_CONFIG_FILE) with keys, `credential_process`, SSO or a role to assume; web identity
(AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE, as EKS sets them); an ECS task role; an EC2 instance
profile. That is `PROVIDER credential_chain` with no CHAIN list, on purpose: a CHAIN list has no ECS step,
and its `instance` step asks the instance metadata service even with AWS_EC2_METADATA_DISABLED=true
(4 s against one that never answers), where the default chain skips it. Off AWS the metadata service
does not exist: where its address has no route the chain gives up in 0.1 s, and where it swallows
requests in about 4 s with AWS_REGION set (11 s without: the SDK asks it for the region too). A node that must
never ask sets AWS_EC2_METADATA_DISABLED=true, or TRACELOG_S3_CREDENTIALS=keys to skip the chain whole
(`CREDENTIALS_MODE`). The chain's credentials are refreshed when they expire (`REFRESH auto`); the region
is AWS_REGION's, else the profile's in ~/.aws/config, else us-east-1.

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
AWS = ("duckdb_extension_aws", "aws", "aws")  # the AWS SDK's credential chain, where no keys are set
NEEDED_BY = {  # what needs each, for the error that names a missing package
    "httpfs": "a DuckLake store on object storage",
    "aws": "a data path on object storage with no keys set (the AWS credential chain)",
}
# `auto`: the keys of the variables or the credentials file, else the AWS credential chain; `keys`: those
# keys only, no lookup anywhere (an air-gapped node, or one that must not ask instance metadata).
CREDENTIALS_MODE = "TRACELOG_S3_CREDENTIALS"
MODES = ("auto", "keys")
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
# What the credential chain could have used, said when it found nothing.
WHAT_TO_SET_CHAIN = (
    "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE for a profile of ~/.aws/credentials "
    "or ~/.aws/config (keys, credential_process, or SSO after `aws sso login`), or AWS_ROLE_ARN and "
    "AWS_WEB_IDENTITY_TOKEN_FILE, or run where an EC2 instance profile or ECS task role provides them"
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


def credentials(env: Mapping[str, str]) -> Credentials | None:
    """The keys from the environment, else from the shared credentials file's profile, as the AWS CLI
    reads them; None where there are none and the AWS credential chain may look (`chain_allowed`). A
    TracelogError naming what to set for half a pair, or none where the chain may not look."""
    chain = chain_allowed(env)
    key_id, secret = (env.get(name) or "" for name in KEY_VARS)
    if key_id or secret:
        if not (key_id and secret):
            missing = KEY_VARS[1] if key_id else KEY_VARS[0]
            raise TracelogError(f"{missing} is not set (the other half of the key pair is): set both")
        return Credentials(key_id, secret, env.get("AWS_SESSION_TOKEN") or None, "the environment")
    file = Path(env.get("AWS_SHARED_CREDENTIALS_FILE") or Path.home() / ".aws" / "credentials")
    profile = env.get("AWS_PROFILE") or "default"
    parser = _read(file, "credentials file")
    if parser.has_section(profile):
        section = parser[profile]
        key_id = section.get("aws_access_key_id", "").strip()
        secret = section.get("aws_secret_access_key", "").strip()
        if key_id and secret:
            token = section.get("aws_session_token", "").strip() or None
            return Credentials(key_id, secret, token, f"profile {profile} of {file}")
    if "AWS_PROFILE" in env and not parser.has_section(profile):
        config = config_file(env)
        if not chain:
            raise TracelogError(f"AWS_PROFILE names {profile!r}, which {file} does not have")
        if config_profile(env) is None:
            raise TracelogError(f"AWS_PROFILE names {profile!r}, which neither {file} nor {config} has")
    if not chain:
        raise TracelogError(
            f"a data path on object storage needs credentials ({CREDENTIALS_MODE}=keys: the AWS credential "
            f"chain is not tried): {WHAT_TO_SET}"
        )
    return None


def chain_allowed(env: Mapping[str, str]) -> bool:
    """Whether the AWS credential chain may look where no keys are set (`CREDENTIALS_MODE`)."""
    mode = (env.get(CREDENTIALS_MODE) or MODES[0]).strip().lower()
    if mode not in MODES:
        raise TracelogError(f"{CREDENTIALS_MODE} must be {' or '.join(MODES)}, not {mode!r}")
    return mode == "auto"


def config_file(env: Mapping[str, str]) -> Path:
    """The AWS tools' config file (profiles of SSO, `credential_process`, roles, and regions)."""
    return Path(env.get("AWS_CONFIG_FILE") or Path.home() / ".aws" / "config")


def config_profile(env: Mapping[str, str]) -> configparser.SectionProxy | None:
    """The profile AWS_PROFILE (or `default`) of the config file, where it has one: `[default]` or
    `[profile NAME]`, as the AWS CLI writes them."""
    parser = _read(config_file(env), "AWS config file", strict=False)  # repeats merge, as the CLI does
    profile = env.get("AWS_PROFILE") or "default"
    for name in (f"profile {profile}", profile):
        if parser.has_section(name):
            return parser[name]
    return None


def _read(file: Path, what: str, strict: bool = True) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=strict)
    try:
        parser.read(file, encoding="utf-8")
    except (OSError, configparser.Error) as exc:
        raise TracelogError(f"cannot read the {what}: {exc}", str(file)) from None
    return parser


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


@dataclass(frozen=True, repr=False)
class Secret:
    """A CREATE SECRET statement, the values in it never shown (`_scrubbed`), and whether the AWS
    credential chain makes it (the `aws` extension, loaded only then)."""

    sql: str
    hidden: list[str]
    chain: bool


def secret_sql(env: Mapping[str, str]) -> Secret:
    """The CREATE SECRET statement for the environment's credentials and endpoint: the keys found, else
    the AWS credential chain's (`credentials`)."""
    keys = credentials(env)
    host, tls, _ = endpoint(env)
    region = next((env[name] for name in REGION_VARS if env.get(name)), None)
    if keys is None:
        # The chain's region: the variables', else the profile's in the config file (DuckDB's aws
        # extension 1.5.5 does not take it from there), else the default.
        profile = config_profile(env)
        region = region or (profile.get("region", "").strip() if profile is not None else "") or None
        options = {"REGION": region or DEFAULT_REGION}
    else:
        options = {"KEY_ID": keys.key_id, "SECRET": keys.secret, "REGION": region or DEFAULT_REGION}
        if keys.token:
            options["SESSION_TOKEN"] = keys.token
    if host:
        options["ENDPOINT"] = host
        options["URL_STYLE"] = "path"  # MinIO and Ceph serve bucket/key; virtual hosts need their DNS
    fields = [f"{name} '{quoted(value)}'" for name, value in options.items()]
    fields.append(f"USE_SSL {'true' if tls else 'false'}")
    if keys is None:
        # No CHAIN list: the SDK's default chain (module docstring). Temporary credentials (SSO, a role,
        # the instance's) are fetched again when they expire.
        fields.append("REFRESH auto")
        provider = "credential_chain"
    else:
        provider = "config"
    sql = f"CREATE OR REPLACE TEMPORARY SECRET {SECRET_NAME} (TYPE s3, PROVIDER {provider}, {', '.join(fields)})"
    hidden = [v for v in (keys.secret, keys.token) if v] if keys else []
    return Secret(sql, hidden, keys is None)


def prepare(
    con: duckdb.DuckDBPyConnection,
    data_path: str,
    load: Callable[[tuple[str, str, str]], None],
    env: Mapping[str, str] | None = None,
) -> None:
    """Make `data_path` reachable from `con`: the httpfs extension loaded (and aws, for the credential
    chain) by `load`, the secret made, the access checked. Each failure is a TracelogError that says what
    to set."""
    check_scheme(data_path)
    env = os.environ if env is None else env
    secret = secret_sql(env)
    load(HTTPFS)
    if secret.chain:
        load(AWS)
    # DuckDB buffers an upload in parts of the largest file it allows (800 GB) over 10,000 parts: 80 MB
    # each, which an ingest's 96 MB memory cap cannot hold ("could not allocate block of size 76.5
    # MiB"). 50 GB, the lowest it takes, makes them 5 MB, S3's smallest; DuckLake's files are far
    # smaller (512 MB at most by default).
    con.execute(f"SET s3_uploader_max_filesize = '{UPLOAD_MAX_FILE}'")
    try:
        con.execute(secret.sql)
    except duckdb.Error as exc:
        first = _scrubbed(str(exc).splitlines()[0], secret.hidden)
        if secret.chain and "Secret Validation Failure" in first:
            profile = f" (profile {env['AWS_PROFILE']})" if env.get("AWS_PROFILE") else ""
            raise TracelogError(
                "a data path on object storage needs credentials, and neither the variables, the "
                f"credentials file nor the AWS credential chain{profile} gave any: {WHAT_TO_SET_CHAIN}"
            ) from None
        raise TracelogError(f"cannot set up the S3 credentials: {first}") from None
    probe = data_path.rstrip("/") + f"/{PROBE}*"
    try:
        con.execute(f"SELECT count(*) FROM glob('{quoted(probe)}')").fetchall()
    except duckdb.Error as exc:
        raise explain(exc, data_path, env, secret.hidden) from None


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
