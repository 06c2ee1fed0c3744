"""The agent's S3 side: a client with bounded timeouts, a count of its requests, the S3 part of a sync
bounded by one deadline, and one-line errors that name the endpoint and what the sync was doing.

Bounds (``tritonfleet-agent sync`` options, the models role's ``models_s3_*`` settings):

- ``--connect-timeout`` (5 s) and ``--read-timeout`` (30 s) bound every S3 request; botocore tries a
  request 3 times in all (its "standard" retry mode), s3transfer a download up to 5 times.
- ``--deadline`` (1800 s) bounds the S3 part of a sync as a whole: listing, downloads, checks. When it
  passes, the sync stops where it is (``current`` untouched, what was downloaded and checked is kept for
  the next run) and fails with one line, e.g.
  ``S3 at http://10.0.0.1:9000 did not answer within 30 s (read timeout) while listing s3://models/prod/``.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
from collections.abc import Iterator

from .manifest import Entry, SyncError, check_paths, key_to_path

CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 30.0
DEADLINE = 1800.0
ATTEMPTS = 3  # botocore's "standard" retry mode: a request is tried 3 times in all
HARD_STOP = 5.0  # seconds past the deadline after which the agent's process exits if the S3 part has not


class DeadlineExceeded(SyncError):
    """The S3 part of a sync ran past its deadline."""


class Phase:
    """What the sync is doing now (names a hang), and its deadline."""

    def __init__(self, deadline: float | None = None, hard_stop: float | None = None) -> None:
        self.what = "starting"
        self.deadline = deadline
        self.hard_stop = hard_stop  # seconds past the deadline after which the process exits (the CLI's)
        self.endpoint = "S3"
        self.started = time.monotonic()
        self._lock = threading.Lock()

    def __call__(self, what: str) -> None:
        with self._lock:
            self.what = what

    def left(self) -> float | None:
        return None if self.deadline is None else self.deadline - (time.monotonic() - self.started)

    def check(self) -> None:
        """Raise DeadlineExceeded when the deadline has passed (between requests, in any thread)."""
        left = self.left()
        if left is not None and left <= 0:
            raise DeadlineExceeded(f"the S3 part of the sync passed its {self.deadline:g} s deadline "
                                   f"while {self.what}")

    @contextlib.contextmanager
    def armed(self) -> Iterator[None]:
        """Bound the block by the deadline: in the main thread an alarm interrupts whatever waits (a GET
        that hangs included); elsewhere only ``check`` between requests holds it."""
        left = self.left()
        if left is None or threading.current_thread() is not threading.main_thread():
            yield
            return

        def expire(signum, frame):
            signal.setitimer(signal.ITIMER_REAL, 0)
            self.check()
            raise DeadlineExceeded(f"the S3 part of the sync passed its {self.deadline:g} s deadline "
                                   f"while {self.what}")

        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, max(left, 0.001))
        stop = None
        if self.hard_stop is not None:  # the alarm's exception could not end what a thread waits for
            stop = threading.Timer(max(left, 0) + self.hard_stop, self._exit)
            stop.daemon = True
            stop.start()
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            if stop:
                stop.cancel()

    def _exit(self) -> None:
        """A request in flight does not end when the alarm's exception leaves the block: s3transfer waits for
        it (up to its read timeout). The process exits instead, as a kill would: ``current`` untouched, what
        was downloaded and checked kept for the next run."""
        os.write(2, f"tritonfleet-agent: error: S3 at {self.endpoint}: the S3 part of the sync passed its "
                    f"{self.deadline:g} s deadline while {self.what}\n".encode())
        os._exit(1)


class Remote:
    """The S3 client, with a count of the requests it sends and every GET made conditional on the
    ETag the listing gave (If-Match)."""

    def __init__(self, client, phase: Phase | None = None) -> None:
        self.client = client
        self.phase = phase or Phase()
        self.phase.endpoint = client.meta.endpoint_url
        config = client.meta.config
        self.timeouts = (config.connect_timeout, config.read_timeout)
        self.requests: dict[str, int] = {}
        self.etags: dict[str, str] = {}  # key -> listed ETag
        self._lock = threading.Lock()
        client.meta.events.register("before-send.s3", self._count)
        client.meta.events.register("before-parameter-build.s3.GetObject", self._if_match)

    @property
    def endpoint(self) -> str:
        return self.client.meta.endpoint_url

    def _count(self, event_name: str, **kwargs) -> None:
        self.phase.check()  # a request (or a retry) after the deadline is not sent
        op = event_name.rsplit(".", 1)[-1]
        with self._lock:
            self.requests[op] = self.requests.get(op, 0) + 1

    def _if_match(self, params: dict, **kwargs) -> None:
        etag = self.etags.get(params.get("Key", ""))
        if etag:
            params.setdefault("IfMatch", f'"{etag}"')

    def list(self, bucket: str, prefix: str) -> dict[str, Entry]:
        self.phase(f"listing s3://{bucket}/{prefix}")
        out = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", ()):
                path = key_to_path(obj["Key"], prefix)
                if path is not None:
                    out[path] = Entry(path=path, key=obj["Key"], size=obj["Size"], etag=obj["ETag"].strip('"'))
                    self.etags[obj["Key"]] = out[path].etag
        check_paths(set(out))
        return out


def make_client(opts):
    """An S3 client (:func:`.aws.client`) from boto3's default credential chain, every request bounded by the
    options' connect and read timeouts and tried :data:`ATTEMPTS` times in all."""
    from .aws import client  # here, as boto3 is: importing the agent's command line loads no HTTP client

    return client("s3", region=opts.region, endpoint_url=opts.endpoint_url, connect_timeout=opts.connect_timeout,
                  read_timeout=opts.read_timeout, attempts=ATTEMPTS, max_pool_connections=opts.concurrency + 4,
                  s3={"addressing_style": "path"} if opts.path_style else None)


def _network(exc: BaseException, remote: Remote | None) -> str | None:
    """The one line for a timeout or a connection that failed, naming the endpoint and the phase."""
    from botocore.exceptions import (
        ConnectionClosedError,
        ConnectTimeoutError,
        EndpointConnectionError,
        ReadTimeoutError,
    )

    where = remote.endpoint if remote else getattr(exc, "kwargs", {}).get("endpoint_url", "")
    doing = f" while {remote.phase.what}" if remote else ""
    connect, read = remote.timeouts if remote else (None, None)  # unknown without the sync's client
    if isinstance(exc, ReadTimeoutError):
        within = f" within {read:g} s" if read is not None else ""
        return f"S3 at {where} did not answer{within} (read timeout, {ATTEMPTS} attempts){doing}"
    if isinstance(exc, ConnectTimeoutError):
        within = f" within {connect:g} s" if connect is not None else ""
        return f"S3 at {where} did not accept a connection{within} ({ATTEMPTS} attempts){doing}"
    if isinstance(exc, EndpointConnectionError):
        why = re.search(r"\[Errno -?\d+\][^'\"]*", str(getattr(exc, "kwargs", {}).get("error", "")))
        return f"cannot connect to S3 at {where}{f' ({why.group(0).strip()})' if why else ''}{doing}"
    if isinstance(exc, ConnectionClosedError):
        return f"S3 at {where} closed the connection{doing}"
    return None


def describe(exc: BaseException, remote: Remote | None = None) -> str:
    """One line for an error, without a traceback (and no credentials: botocore's messages hold none);
    with the sync's ``remote``, a hang or a lost connection names the endpoint and the phase."""
    cause: BaseException | None = exc
    for _ in range(6):  # s3transfer raises its own errors while handling botocore's
        if cause is None:
            break
        if isinstance(cause, DeadlineExceeded):
            return f"S3 at {remote.endpoint}: {cause}" if remote else str(cause)
        line = _network(cause, remote)
        if line:
            return line
        response = getattr(cause, "response", None)
        if isinstance(response, dict) and "Error" in response:
            err = response["Error"]
            op = getattr(cause, "operation_name", "request")
            code = err.get("Code", "?")
            if code in ("PreconditionFailed", "412"):
                return f"{op}: an object changed in S3 while syncing ({code}); run the sync again"
            return f"{op}: {code}: {err.get('Message') or 'no message'}"
        cause = getattr(cause, "last_exception", None) or cause.__cause__ or cause.__context__
    name = type(exc).__name__
    if name == "NoCredentialsError":
        return "no AWS credentials found (boto3's default chain: environment, config files, instance profile)"
    text = " ".join(str(exc).split())
    return text if isinstance(exc, SyncError) else f"{name}: {text}"
