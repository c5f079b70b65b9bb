"""A local S3-compatible server (moto in server mode on 127.0.0.1) and a bucket in it; the
tests that need it are skipped, with the reason, when it cannot start."""

from __future__ import annotations

import logging
import os

import pytest

BUCKET = "gemkd"


@pytest.fixture(scope="session")
def s3_server():
    """``http://127.0.0.1:PORT`` of a moto S3 server for this session."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as e:
        pytest.skip(f"no S3 test server: moto[server] is not installed ({e})")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    try:
        server.start()
        port = server._server.server_port
    except Exception as e:  # noqa: BLE001 - any reason the server cannot run is a skip
        pytest.skip(f"the moto S3 server could not start: {e}")
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def s3(s3_server, monkeypatch) -> str:
    """An empty bucket, reached through the standard AWS variables; returns ``s3://BUCKET``."""
    import boto3

    env = {"AWS_ENDPOINT_URL": s3_server, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
    if BUCKET in existing:  # a fresh bucket per test
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
            for obj in page.get("Contents", []):
                client.delete_object(Bucket=BUCKET, Key=obj["Key"])
    else:
        client.create_bucket(Bucket=BUCKET)
    assert os.environ["AWS_ENDPOINT_URL"] == s3_server
    return f"s3://{BUCKET}"
