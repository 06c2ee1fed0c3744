"""Every AWS client of the fleet code retries with bounds (issue "Security", "what the anchors do better":
SkyPilot's AWS provisioner): botocore's adaptive retries, 10 attempts at most, timeouts on each; a throttle
that outlasts them ends in one line. A loopback server that always throttles shows the attempts."""

from __future__ import annotations

import ast
from pathlib import Path

import botocore.endpoint
import botocore.retries.bucket
import pytest
from botocore.exceptions import ClientError

from tests.stubhttp import QuietHandler, serve
from tritonfleet.fleet import aws

ROOT = Path(__file__).resolve().parents[2]
THROTTLED = (b'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>RequestLimitExceeded</Code>'
             b'<Message>Request limit exceeded.</Message></Error></Errors><RequestID>r-1</RequestID></Response>')


@pytest.fixture
def throttling():
    """An EC2 endpoint on loopback that throttles every request; ``calls`` counts them."""
    calls = []

    class Handler(QuietHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            calls.append(self.path)
            self._reply(503, THROTTLED)

    server, url = serve(Handler)
    yield url, calls
    server.shutdown()


def test_every_fleet_client_has_the_retry_configuration(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    clients = aws.Clients("eu-west-1")
    for service in ("ec2", "iam", "ssm", "s3", "asg", "elbv2"):
        config = getattr(clients, service).meta.config
        assert config.retries["total_max_attempts"] == aws.MAX_ATTEMPTS, service
        assert config.retries["mode"] == "adaptive", service
        assert (config.connect_timeout, config.read_timeout) == (10, 60)


def test_no_fleet_or_face_code_makes_a_client_of_its_own():
    """The class: a boto3 client is made by aws.client (or the Clients holder) only; the agent has its own
    (tritonfleet/agent/remote.py, with its own retries and deadlines), and the sandbox talks to its own moto."""
    offenders = []
    for path in (ROOT / "tritonfleet").rglob("*.py"):
        if path.name == "aws.py" or "/agent/" in str(path) or "/sandbox/" in str(path):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "client" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in ("boto3", "session"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


def test_a_throttle_is_retried_then_reported_in_one_line(throttling, monkeypatch):
    url, calls = throttling
    monkeypatch.setattr(botocore.endpoint.time, "sleep", lambda s: None)  # botocore's backoff between attempts
    monkeypatch.setattr(botocore.retries.bucket.TokenBucket, "acquire", lambda self, *a, **k: True)  # its rate limit
    import boto3

    session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                    region_name="us-east-1")
    ec2 = session.client("ec2", endpoint_url=url, config=aws.client_config())
    with pytest.raises(ClientError) as exc:
        ec2.describe_instances()
    assert len(calls) == aws.MAX_ATTEMPTS
    line = aws.one_line(exc.value)
    assert line == ("AWS throttled the requests after 10 attempts (RequestLimitExceeded: Request limit exceeded.); "
                    "run it again in a minute, or with fewer concurrent tritonfleet runs against this account and "
                    "region")


def test_each_failed_attempt_is_a_debug_line_of_the_fleet_log(throttling, monkeypatch, caplog):
    """`tritonfleet -v`: a throttled call says each attempt (the client made by aws.client, as fleet code makes
    them), and nothing at INFO: without -v the user sees only the one line of the end."""
    import logging

    url, calls = throttling
    monkeypatch.setattr(botocore.endpoint.time, "sleep", lambda s: None)
    monkeypatch.setattr(botocore.retries.bucket.TokenBucket, "acquire", lambda self, *a, **k: True)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", url)
    caplog.set_level(logging.DEBUG, logger=aws.logger.name)
    with pytest.raises(ClientError):
        aws.client("ec2", "us-east-1").describe_instances()
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == aws.logger.name]
    assert said == [(logging.DEBUG, f"ec2 DescribeInstances: attempt {n} of at most 10 failed: RequestLimitExceeded "
                                    "HTTP 503") for n in range(1, len(calls) + 1)]
    assert len(calls) == aws.MAX_ATTEMPTS
    assert "testing" not in caplog.text  # no credentials in the log
