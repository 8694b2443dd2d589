"""A real S3 HTTP endpoint for tests: moto's server mode in a subprocess on 127.0.0.1, with
authentication on (INITIAL_NO_AUTH_ACTION_COUNT), so wrong credentials are refused as on AWS.
The first three requests (unauthenticated) create an IAM user with an s3:* policy and its
access key; everything after that must be signed with that key."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import boto3

from tests.integration.broker_process import free_port

STARTUP_TIMEOUT_S = 20.0


@dataclasses.dataclass(frozen=True)
class MotoS3:
    endpoint_url: str
    access_key_id: str
    secret_access_key: str = dataclasses.field(repr=False)

    def client(self) -> object:
        return boto3.client("s3", endpoint_url=self.endpoint_url, region_name="us-east-1",
                            aws_access_key_id=self.access_key_id,
                            aws_secret_access_key=self.secret_access_key)

    def broker_settings(self, url: str) -> dict[str, str]:
        return {"tieredStoreUrl": url, "tieredS3EndpointUrl": self.endpoint_url,
                "tieredS3Region": "us-east-1", "tieredS3AccessKeyId": self.access_key_id,
                "tieredS3SecretAccessKey": self.secret_access_key,
                "tieredRequestTimeoutMs": "5000"}


@contextmanager
def moto_s3_server() -> Iterator[MotoS3]:
    port = free_port()
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"}
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_PROFILE"):
        env.pop(name, None)
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                                str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.05)
        endpoint = f"http://127.0.0.1:{port}"
        iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1",
                           aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
        iam.create_user(UserName="tier")
        key = iam.create_access_key(UserName="tier")["AccessKey"]
        iam.put_user_policy(UserName="tier", PolicyName="s3", PolicyDocument=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        yield MotoS3(endpoint, key["AccessKeyId"], key["SecretAccessKey"])
    finally:
        process.kill()
        process.wait(10)
