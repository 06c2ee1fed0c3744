"""The agent against an S3 that hangs (accepts connections, never answers) and against another sync holding
the repository's lock: bounded timeouts and deadline, one line naming the endpoint and the phase,
``current`` untouched, and a stuck holder ended while a live one is named (issue 20, part 1).

Real parts: a moto S3 server on loopback, a TCP server that never answers, a proxy that passes listings to
moto and hangs every object GET, and agents run as their own processes (the console entry point)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

from tests.faults import Hang
from tests.unit import test_agent_sync as base
from tritonfleet.agent import layout, sync

AWS_ENV, set_remote = base.AWS_ENV, base.set_remote
endpoint, s3, bucket = base.endpoint, base.s3, base.bucket  # the moto S3 server and a bucket (fixtures)

AGENT = [sys.executable, "-m", "tritonfleet.agent"]


class HangGets:
    """An HTTP proxy to the moto server that passes everything but object GETs, which it holds unanswered
    (until closed, 120 s at most): S3 lists, then hangs mid-sync."""

    def __init__(self, upstream: str) -> None:
        self.stop = threading.Event()
        self.held = 0
        target = urlsplit(upstream)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _forward(self):
                path = urlsplit(self.path)
                if self.command == "GET" and path.path.count("/") >= 2 and "list-type" not in path.query:
                    outer.held += 1
                    outer.stop.wait(120)
                    self.close_connection = True
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                headers["Host"] = target.netloc
                conn.request(self.command, self.path, body=body or None, headers=headers)
                reply = conn.getresponse()
                data = reply.read()
                self.send_response(reply.status)
                for k, v in reply.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hang():
    h = Hang()
    yield h
    h.close()


@pytest.fixture
def env():
    return {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **AWS_ENV}


def agent_sync(env, dest, source, url, *extra, timeout=120):
    started = time.monotonic()
    proc = subprocess.run([*AGENT, "sync", "--source", source, "--dest", str(dest), "--endpoint-url", url, *extra],
                          capture_output=True, text=True, env=env, timeout=timeout)
    return proc, time.monotonic() - started


def current(dest) -> str:
    return os.readlink(os.path.join(dest, "current"))


@pytest.fixture
def served(s3, bucket, endpoint, env, tmp_path):
    """A repository synced once from moto: (source, dest, the version current points at)."""
    set_remote(s3, bucket, "p", {"m/config.pbtxt": b"name: 'm'", "m/1/model.bin": b"v1" * 1000})
    source, dest = f"s3://{bucket}/p", tmp_path / "repo"
    proc, _ = agent_sync(env, dest, source, endpoint)
    assert proc.returncode == 0, proc.stderr
    return source, dest, current(dest)


def test_an_s3_that_hangs_while_listing_fails_within_its_timeouts_naming_endpoint_and_phase(served, hang, env,
                                                                                           endpoint):
    source, dest, before = served
    proc, seconds = agent_sync(env, dest, source, hang.url, "--connect-timeout", "1", "--read-timeout", "1")
    assert proc.returncode == 1 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert f"S3 at {hang.url} did not answer within 1 s (read timeout, 3 attempts)" in proc.stderr, proc.stderr
    assert f"while listing {source}/" in proc.stderr
    assert len(hang.conns) == 3  # a connection per attempt, each given up after its read timeout
    assert seconds < 45, seconds  # 3 attempts x 1 s, back-off and the agent's start; the default would be 90 s
    assert current(dest) == before
    # the lock went with the process: the next run is not held up
    again, _ = agent_sync(env, dest, source, endpoint, "--lock-wait", "0", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["status"] == "unchanged", again.stderr


def test_an_s3_that_hangs_during_downloads_stops_at_the_deadline_with_current_untouched(served, s3, bucket, env,
                                                                                       endpoint):
    source, dest, before = served
    set_remote(s3, bucket, "p", {"m/config.pbtxt": b"name: 'm'", "m/1/model.bin": b"v2" * 1000,
                                 "n/config.pbtxt": b"name: 'n'"})
    proxy = HangGets(endpoint)
    try:
        # a read timeout longer than the deadline: the GET in flight never ends by itself in time
        proc, seconds = agent_sync(env, dest, source, proxy.url, "--deadline", "3", "--read-timeout", "60")
    finally:
        proxy.close()
    assert proxy.held >= 1  # the listing went through, the GETs hung
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"S3 at {proxy.url}: the S3 part of the sync passed its 3 s deadline while downloading" in proc.stderr, \
        proc.stderr
    # the deadline, the agent's exit 5 s after it (from the phase's start: later than the agent's) and the agent's
    # start; the GET in flight would hold it for its 60 s read timeout
    assert 3 + 5 <= seconds < 40, seconds
    assert current(dest) == before
    again, _ = agent_sync(env, dest, source, endpoint, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["status"] == "synced", again.stderr
    assert (dest / "current" / "n" / "config.pbtxt").read_bytes() == b"name: 'n'"


def test_the_deadline_interrupts_a_listing_that_hangs_in_process(served, hang, monkeypatch):
    """In-process (no hard stop): the alarm interrupts the main thread's read, so the error is the one line
    right at the deadline, not after the 60 s read timeout."""
    source, dest, before = served
    for k, v in AWS_ENV.items():
        monkeypatch.setenv(k, v)
    started = time.monotonic()
    result = sync.run(_options(source, dest, hang.url, deadline=2, read_timeout=60))
    assert time.monotonic() - started < 20  # the 2 s deadline, not the 60 s read timeout
    assert result.status == "failed" and result.error == (
        f"S3 at {hang.url}: the S3 part of the sync passed its 2 s deadline while listing {source}/"), result.error
    assert current(dest) == before


def _holder(env, dest, source, url, *extra, switch_bound=None):
    """An agent syncing from ``url`` (one that hangs) as its own process, once it holds the lock."""
    if switch_bound is None:
        cmd = [*AGENT]
    else:  # the agent itself, with a smaller bound for its local work (so its bound passes within a test)
        cmd = [sys.executable, "-c", "import sys, tritonfleet.agent.sync as s; from tritonfleet.agent.cli import "
               f"main; s.SWITCH_BOUND = {switch_bound}; sys.exit(main(sys.argv[1:]))"]
    proc = subprocess.Popen([*cmd, "sync", "--source", source, "--dest", str(dest), "--endpoint-url", url, *extra],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lock = dest / ".lock"
    deadline = time.monotonic() + 60  # the agent's start: a second or two, more on a busy machine
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if json.loads(lock.read_text() or "{}").get("pid") == proc.pid:
                return proc
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"the holder never took the lock: {proc.communicate()[1]}")


def _options(source, dest, url, **kw):
    bucket_name, prefix = sync.parse_source(source)
    return sync.Options(bucket=bucket_name, prefix=prefix, dest=str(dest), endpoint_url=url, durable=False, **kw)


def test_a_live_sync_holding_the_lock_is_named_with_its_pid_and_age_and_left_alone(served, hang, env, endpoint,
                                                                                  monkeypatch):
    source, dest, before = served
    for k, v in AWS_ENV.items():
        monkeypatch.setenv(k, v)
    holder = _holder(env, dest, source, hang.url, "--deadline", "600", "--read-timeout", "60")
    try:
        started = time.monotonic()
        result = sync.run(_options(source, dest, endpoint, lock_wait=1))
        assert time.monotonic() - started < 30  # the 1 s lock wait, not the default 60 s
        assert result.status == "failed", result
        assert f"another sync holds {dest}/.lock: pid {holder.pid} (" in result.error, result.error
        assert "tritonfleet.agent sync" in result.error and "running for" in result.error
        assert "due to end within" in result.error and f"kill {holder.pid}" in result.error
        assert "waited 1 s" in result.error
        assert holder.poll() is None  # within its bound: not ours to end
    finally:
        holder.kill()
        holder.wait(10)
    assert current(dest) == before


def test_a_stuck_agent_past_its_bound_is_ended_and_the_sync_goes_on(served, hang, env, endpoint, s3, bucket,
                                                                    monkeypatch):
    source, dest, _ = served
    for k, v in AWS_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(layout, "GRACE", 0.5)
    holder = _holder(env, dest, source, hang.url, "--deadline", "2", "--read-timeout", "60", switch_bound=0)
    os.kill(holder.pid, signal.SIGSTOP)  # stuck: its own deadline cannot fire
    try:
        set_remote(s3, bucket, "p", {"m/config.pbtxt": b"name: 'm'", "m/1/model.bin": b"v3" * 1000})
        result = sync.run(_options(source, dest, endpoint, lock_wait=4))
        assert result.status == "synced", result.error
        assert holder.wait(10) < 0  # ended by a signal
        (warning,) = [w for w in result.warnings if "stuck" in w]
        assert f"ended a stuck sync that held {dest}/.lock: pid {holder.pid}" in warning
        assert "past its bound" in warning
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)
    assert (dest / "current" / "m" / "1" / "model.bin").read_bytes() == b"v3" * 1000


def test_a_lock_left_by_a_dead_agent_is_taken_over_at_once(served, hang, env, endpoint, monkeypatch):
    source, dest, before = served
    for k, v in AWS_ENV.items():
        monkeypatch.setenv(k, v)
    holder = _holder(env, dest, source, hang.url, "--deadline", "600")
    holder.kill()
    holder.wait(10)
    result = sync.run(_options(source, dest, endpoint, lock_wait=0))
    assert result.status == "unchanged" and result.warnings == [], result
    assert current(dest) == before


def test_a_lock_held_by_something_else_is_never_ended(served, endpoint, monkeypatch):
    source, dest, _ = served
    for k, v in AWS_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(layout, "GRACE", 0)
    other = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR); "
                              "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
                              str(dest / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        (dest / ".lock").write_text(json.dumps({"pid": other.pid, "started": time.time() - 999, "until": 1.0}))
        result = sync.run(_options(source, dest, endpoint, lock_wait=0.5))
        assert result.status == "failed" and f"pid {other.pid}" in result.error, result
        assert other.poll() is None  # not a tritonfleet agent: named, never killed
    finally:
        other.kill()
        other.wait(10)
