"""A throwaway S3-compatible server for the DuckLake store's tests on object storage.

moto's server (`moto[server]`, a test dependency) answers the S3 API on a free loopback port, in a
thread of the test process. It is a mock of S3, not S3: it keeps objects in memory and answers on the
same machine, so what it measures is tracelog's and DuckDB's side of the requests, not a network's.
Its access checks are turned on after the test user, its key and the bucket are made, so that a wrong
key is refused as S3, MinIO or Ceph would refuse it.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import urllib.request
import uuid
from dataclasses import dataclass

HOST = "127.0.0.1"
REGION = "us-east-1"
BUCKET = "tracelog-lake"
USER = "tracelog-tests"
# Every variable that says where S3 is and who asks (the AWS credential chain's too): a test on S3 sets its
# own, and no other test is reached by the machine's.
AWS_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_EC2_METADATA_DISABLED",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT",
    "TRACELOG_S3_CREDENTIALS",
)
ALLOW_S3 = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}


def missing() -> str | None:
    """Why the tests on object storage cannot run here, or None."""
    for module, package in (("moto.server", "moto[server]"), ("boto3", "boto3")):
        if importlib.util.find_spec(module.split(".")[0]) is None:
            return f"the S3 tests need {package} (pip install '.[test]')"
    for package in ("duckdb_extension_httpfs", "duckdb_extension_aws"):
        if importlib.util.find_spec(package) is None:
            name = package.replace("_", "-")
            return f"a data path on object storage needs {name} (pip install '.[test]')"
    return None


@dataclass(frozen=True)
class Server:
    endpoint: str  # http://127.0.0.1:PORT
    key_id: str
    secret: str
    bucket: str

    def environment(self) -> dict[str, str]:
        """The variables a user of an S3-compatible store on a cluster sets."""
        return {
            "AWS_ACCESS_KEY_ID": self.key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_REGION": REGION,
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def data_path(self) -> str:
        """A fresh prefix of the bucket: one store's data folder."""
        return f"s3://{self.bucket}/{uuid.uuid4().hex[:12]}/"

    def client(self):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.key_id,
            aws_secret_access_key=self.secret,
            region_name=REGION,
        )

    def keys(self, data_path: str) -> list[str]:
        """Every object under a data path."""
        prefix = data_path.split("/", 3)[3]
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]


class Running:
    """moto's threaded server, started with `start()` and stopped with `stop()`."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        self.moto = ThreadedMotoServer(ip_address=HOST, port=0, verbose=False)

    def start(self) -> Server:
        import boto3

        self.moto.start()
        host, port = self.moto.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        anyone = {"aws_access_key_id": "setup", "aws_secret_access_key": "setup", "region_name": REGION}
        iam = boto3.client("iam", endpoint_url=endpoint, **anyone)
        iam.create_user(UserName=USER)
        iam.put_user_policy(UserName=USER, PolicyName="s3", PolicyDocument=json.dumps(ALLOW_S3))
        key = iam.create_access_key(UserName=USER)["AccessKey"]
        server = Server(endpoint, key["AccessKeyId"], key["SecretAccessKey"], BUCKET)
        server.client().create_bucket(Bucket=BUCKET)
        # From here on every request is checked against the users moto knows (moto's reset-auth).
        request = urllib.request.Request(
            f"{endpoint}/moto-api/reset-auth",
            data=b"0",
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert json.load(answer)["status"] == "ok"
        return server

    def stop(self) -> None:
        self.moto.stop()
