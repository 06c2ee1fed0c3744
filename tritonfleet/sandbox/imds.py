"""EC2 instance metadata service (IMDS) stand-in for the sandbox fleet.

Answers by **client IP** from a JSON hosts file that is re-read whenever it changes::

    {"192.168.250.11": {"instance_type": "inf2.xlarge", "instance_id": "i-0...", "availability_zone":
                        "us-east-1a", "hostname": "sbx-01", "local_ipv4": "192.168.250.11"}}

IMDSv2: ``PUT /latest/api/token`` with ``X-aws-ec2-metadata-token-ttl-seconds`` (1-21600) returns a
token. GET requests work with a valid token or without one (IMDSv1 "optional" mode); a token that is
unknown, expired or was issued to another client is rejected with 401, as on EC2.

Run: ``python -m tritonfleet.sandbox.imds --bind 192.168.250.1 --port 8081 --hosts-file hosts.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TOKEN_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
MAX_TTL = 21600
ACCOUNT_ID = "123456789012"
AMI_ID = "ami-0sandbox0000000000"
#: The instance profile's role: its temporary credentials are what the sandbox's S3 (moto) accepts, as an
#: instance profile's are on EC2. Fake values, fresh per request, valid for six hours.
INSTANCE_ROLE = "tritonfleet-sandbox-host"


class HostsFile:
    """The hosts JSON, re-read when its mtime/size changes (thread-safe)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._sig: tuple[int, int, int] | None = None
        self._data: dict[str, dict] = {}

    def get(self, ip: str) -> dict | None:
        try:
            st = os.stat(self.path)
            sig = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            return None
        with self._lock:
            if sig != self._sig:
                try:
                    data = json.loads(self.path.read_text(encoding="utf-8"))
                    self._data = data if isinstance(data, dict) else {}
                    self._sig = sig
                except (OSError, ValueError):
                    pass  # keep the last good copy (e.g. a half-written file); retry next request
            host = self._data.get(ip)
        return dict(host) if isinstance(host, dict) else None


def _region(az: str) -> str:
    return az[:-1] if az and az[-1].isalpha() else az


def metadata(host: dict, ip: str) -> dict[str, str | Callable[[], str]]:
    """Path (below ``/latest/``) -> value for one host."""
    az = host.get("availability_zone", "us-east-1a")
    local_ip = host.get("local_ipv4") or ip
    hostname = host.get("hostname") or f"ip-{local_ip.replace('.', '-')}.ec2.internal"
    iid = host.get("instance_id", "")
    itype = host.get("instance_type", "")
    mac = (
        "02:00:" + ":".join(f"{int(p):02x}" for p in local_ip.split(".")) if local_ip.count(".") == 3 else ""
    )

    def document() -> str:
        return json.dumps(
            {
                "accountId": ACCOUNT_ID,
                "architecture": "x86_64",
                "availabilityZone": az,
                "billingProducts": None,
                "devpayProductCodes": None,
                "marketplaceProductCodes": None,
                "imageId": AMI_ID,
                "instanceId": iid,
                "instanceType": itype,
                "kernelId": None,
                "pendingTime": host.get("pending_time", "2026-01-01T00:00:00Z"),
                "privateIp": local_ip,
                "ramdiskId": None,
                "region": _region(az),
                "version": "2017-09-30",
            },
            indent=2,
        )

    def credentials() -> str:
        now = datetime.now(timezone.utc)
        return json.dumps({
            "Code": "Success", "LastUpdated": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "Type": "AWS-HMAC",
            "AccessKeyId": "ASIA" + secrets.token_hex(8).upper(), "SecretAccessKey": secrets.token_urlsafe(30),
            "Token": secrets.token_urlsafe(64),
            "Expiration": datetime.fromtimestamp(now.timestamp() + 6 * 3600, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }, indent=2)

    return {
        "meta-data/ami-id": AMI_ID,
        "meta-data/iam/info": json.dumps({"Code": "Success", "InstanceProfileArn":
                                          f"arn:aws:iam::{ACCOUNT_ID}:instance-profile/{INSTANCE_ROLE}"}),
        f"meta-data/iam/security-credentials/{INSTANCE_ROLE}": credentials,
        "meta-data/hostname": hostname,
        "meta-data/instance-id": iid,
        "meta-data/instance-type": itype,
        "meta-data/local-hostname": hostname,
        "meta-data/local-ipv4": local_ip,
        "meta-data/mac": mac,
        "meta-data/placement/availability-zone": az,
        "meta-data/placement/region": _region(az),
        "dynamic/instance-identity/document": document,
    }


def _listing(paths: list[str], prefix: str) -> str | None:
    """Directory listing for ``prefix`` (e.g. ``meta-data/``) like IMDS: children, dirs with a slash."""
    children: list[str] = []
    for p in sorted(paths):
        if p.startswith(prefix):
            rest = p[len(prefix) :]
            child = rest.split("/", 1)[0] + ("/" if "/" in rest else "")
            if child not in children:
                children.append(child)
    return "\n".join(children) if children else None


class TokenStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens: dict[str, tuple[str, float]] = {}

    def issue(self, ip: str, ttl: int) -> str:
        token = secrets.token_urlsafe(42)
        now = time.monotonic()
        with self._lock:
            self._tokens = {t: v for t, v in self._tokens.items() if v[1] > now}
            self._tokens[token] = (ip, now + ttl)
        return token

    def valid(self, token: str, ip: str) -> bool:
        with self._lock:
            entry = self._tokens.get(token)
        return entry is not None and entry[0] == ip and entry[1] > time.monotonic()


class IMDSHandler(BaseHTTPRequestHandler):
    server_version = "EC2ws"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    hosts: HostsFile
    tokens: TokenStore
    quiet = False

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (stdlib signature)
        if not self.quiet:
            super().log_message(format, *args)

    def _send(self, code: int, body: str = "", headers: dict[str, str] | None = None) -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, code: int) -> None:
        reason = {
            400: "Bad Request",
            401: "Unauthorized",
            403: "Forbidden",
            404: "Not Found",
            405: "Method Not Allowed",
        }[code]
        body = (
            '<?xml version="1.0" encoding="iso-8859-1"?>\n<!DOCTYPE html>\n<html>\n <head>\n'
            f"  <title>{code} - {reason}</title>\n </head>\n <body>\n  <h1>{code} - {reason}</h1>\n </body>\n</html>\n"
        )
        self._send(code, body)

    def _path(self) -> str:
        return self.path.split("?", 1)[0]

    def do_PUT(self) -> None:  # noqa: N802 (http.server naming)
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if self._path() != "/latest/api/token":
            self._error(404 if self.hosts.get(self.client_address[0]) is None else 405)
            return
        if self.headers.get("X-Forwarded-For"):
            self._error(403)
            return
        try:
            ttl = int(self.headers.get(TOKEN_TTL_HEADER, ""))
        except ValueError:
            self._error(400)
            return
        if not 1 <= ttl <= MAX_TTL:
            self._error(400)
            return
        if self.hosts.get(self.client_address[0]) is None:
            self._error(404)
            return
        token = self.tokens.issue(self.client_address[0], ttl)
        self._send(200, token, {TOKEN_TTL_HEADER: str(ttl)})

    def do_GET(self) -> None:  # noqa: N802
        ip = self.client_address[0]
        token = self.headers.get(TOKEN_HEADER)
        if token is not None and not self.tokens.valid(token, ip):
            self._error(401)
            return
        host = self.hosts.get(ip)
        if host is None:
            self._error(404)
            return
        path = self._path()
        if path in ("/", ""):
            self._send(200, "latest")
            return
        if not path.startswith("/latest/"):
            self._error(404)
            return
        rel = path[len("/latest/") :]
        items = metadata(host, ip)
        if rel in items:
            value = items[rel]
            self._send(200, value() if callable(value) else value)
            return
        if rel == "" or rel.endswith("/") or any(p.startswith(rel + "/") for p in items):
            listing = _listing(list(items), rel.rstrip("/") + "/" if rel else "")
            if listing is not None:
                self._send(200, listing)
                return
        self._error(404)

    do_HEAD = do_GET

    def do_POST(self) -> None:  # noqa: N802
        self._error(405)


def make_server(bind: str, port: int, hosts_file: Path, *, quiet: bool = False) -> ThreadingHTTPServer:
    """A ready (bound, not yet serving) IMDS server; ``server.server_address[1]`` is the real port."""
    handler = type(
        "BoundIMDSHandler",
        (IMDSHandler,),
        {"hosts": HostsFile(hosts_file), "tokens": TokenStore(), "quiet": quiet},
    )
    server = ThreadingHTTPServer((bind, port), handler)
    server.daemon_threads = True
    return server


def serve(bind: str, port: int, hosts_file: Path) -> None:
    """Serve forever (until SIGINT/SIGTERM)."""
    server = make_server(bind, port, hosts_file)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(f"{stamp} tritonfleet sandbox IMDS on {bind}:{server.server_address[1]} ({hosts_file})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tritonfleet.sandbox.imds", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=80)
    parser.add_argument("--hosts-file", type=Path, required=True)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    serve(args.bind, args.port, args.hosts_file)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
