"""The IMDS stand-in, served in-process on 127.0.0.1 (the hosts file is keyed by 127.0.0.1)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tritonfleet.sandbox import imds

HOST = {
    "instance_type": "inf2.xlarge",
    "instance_id": "i-0sandbox00000001",
    "availability_zone": "us-east-1a",
    "hostname": "sbx-01",
}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps({"127.0.0.1": HOST}))
    srv = imds.make_server("127.0.0.1", 0, hosts, quiet=True)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv.server_address[1], hosts
    finally:
        srv.shutdown()
        srv.server_close()


def request(
    port: int, method: str, path: str, headers: dict[str, str] | None = None
) -> tuple[int, str, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read().decode(), dict(resp.getheaders())
    finally:
        conn.close()


def token(port: int, ttl: str = "21600") -> str:
    status, body, headers = request(port, "PUT", "/latest/api/token", {imds.TOKEN_TTL_HEADER: ttl})
    assert status == 200 and headers[imds.TOKEN_TTL_HEADER] == ttl
    return body


def test_imdsv2_token_and_metadata(server: tuple[int, Path]) -> None:
    port, _ = server
    tok = token(port)
    h = {imds.TOKEN_HEADER: tok}
    assert request(port, "GET", "/latest/meta-data/instance-type", h)[:2] == (200, "inf2.xlarge")
    assert request(port, "GET", "/latest/meta-data/instance-id", h)[1] == "i-0sandbox00000001"
    assert request(port, "GET", "/latest/meta-data/placement/availability-zone", h)[1] == "us-east-1a"
    assert request(port, "GET", "/latest/meta-data/placement/region", h)[1] == "us-east-1"
    assert request(port, "GET", "/latest/meta-data/local-ipv4", h)[1] == "127.0.0.1"
    assert request(port, "GET", "/latest/meta-data/hostname", h)[1] == "sbx-01"
    status, body, _ = request(port, "GET", "/latest/dynamic/instance-identity/document", h)
    doc = json.loads(body)
    assert status == 200
    assert doc["instanceType"] == "inf2.xlarge" and doc["instanceId"] == "i-0sandbox00000001"
    assert doc["region"] == "us-east-1" and doc["availabilityZone"] == "us-east-1a"
    assert doc["privateIp"] == "127.0.0.1"
    listing = request(port, "GET", "/latest/meta-data/", h)[1].splitlines()
    assert "instance-type" in listing and "placement/" in listing


def test_imdsv1_without_token_and_invalid_token(server: tuple[int, Path]) -> None:
    port, _ = server
    assert request(port, "GET", "/latest/meta-data/instance-type")[:2] == (200, "inf2.xlarge")
    assert request(port, "GET", "/latest/meta-data/instance-type", {imds.TOKEN_HEADER: "bogus"})[0] == 401
    assert request(port, "GET", "/latest/meta-data/nonexistent")[0] == 404
    assert request(port, "GET", "/other")[0] == 404


def test_token_request_validation(server: tuple[int, Path]) -> None:
    port, _ = server
    assert request(port, "PUT", "/latest/api/token")[0] == 400
    assert request(port, "PUT", "/latest/api/token", {imds.TOKEN_TTL_HEADER: "0"})[0] == 400
    assert request(port, "PUT", "/latest/api/token", {imds.TOKEN_TTL_HEADER: "21601"})[0] == 400
    fwd = {imds.TOKEN_TTL_HEADER: "60", "X-Forwarded-For": "10.0.0.1"}
    assert request(port, "PUT", "/latest/api/token", fwd)[0] == 403


def test_token_expires(server: tuple[int, Path]) -> None:
    port, _ = server
    tok = token(port, "1")
    assert request(port, "GET", "/latest/meta-data/instance-id", {imds.TOKEN_HEADER: tok})[0] == 200
    time.sleep(1.1)
    assert request(port, "GET", "/latest/meta-data/instance-id", {imds.TOKEN_HEADER: tok})[0] == 401


def test_unknown_client_and_hosts_file_reload(server: tuple[int, Path]) -> None:
    port, hosts = server
    hosts.write_text(json.dumps({"192.168.250.11": HOST}))
    os.utime(hosts, ns=(time.time_ns(), time.time_ns() + 10**9))  # make sure the change is visible
    assert request(port, "GET", "/latest/meta-data/instance-type")[0] == 404
    assert request(port, "PUT", "/latest/api/token", {imds.TOKEN_TTL_HEADER: "60"})[0] == 404
    hosts.write_text(json.dumps({"127.0.0.1": {**HOST, "instance_type": "trn1.2xlarge"}}))
    os.utime(hosts, ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
    assert request(port, "GET", "/latest/meta-data/instance-type")[1] == "trn1.2xlarge"


def test_module_entry_point(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps({"127.0.0.1": HOST}))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tritonfleet.sandbox.imds",
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--hosts-file",
            str(hosts),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                assert request(port, "GET", "/latest/meta-data/instance-id")[1] == "i-0sandbox00000001"
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
