"""The agent's S3 side in detail (from the mutation survivors of tritonfleet/agent/remote.py): the phase and
its deadline (check, the alarm, the hard stop), what Remote registers on the client and counts, the listing,
the client's bounds, and each one-line error. A stub client and botocore's own exception classes, no S3;
the hard stop's exit is replaced, never reached."""

from __future__ import annotations

import os
import signal
import threading
import time
from types import SimpleNamespace

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from tritonfleet.agent import remote
from tritonfleet.agent.manifest import Entry, SyncError
from tritonfleet.agent.remote import DeadlineExceeded, Phase, Remote, describe, make_client

EP = "http://10.0.0.1:9000"


class _Events:
    def __init__(self):
        self.registered = []

    def register(self, name, handler):
        self.registered.append((name, handler))

    def handler(self, name):
        return [h for n, h in self.registered if n == name]


class _Paginator:
    def __init__(self, pages):
        self.pages = pages
        self.calls = []

    def paginate(self, **kwargs):
        self.calls.append(kwargs)
        return iter(self.pages)


class _Client:
    def __init__(self, pages=(), endpoint=EP, connect=5.0, read=30.0):
        self.meta = SimpleNamespace(endpoint_url=endpoint, events=_Events(),
                                    config=SimpleNamespace(connect_timeout=connect, read_timeout=read))
        self.paginator = _Paginator(list(pages))
        self.paginators = []

    def get_paginator(self, name):
        self.paginators.append(name)
        return self.paginator


class _Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


# --- Phase --------------------------------------------------------------------------------------------------

def test_a_phase_starts_as_starting_without_deadline_at_the_default_endpoint():
    p = Phase()
    assert p.what == "starting"
    assert p.deadline is None and p.hard_stop is None
    assert p.endpoint == "S3"
    assert p.left() is None
    p.check()  # no deadline, never raises
    p("listing")
    assert p.what == "listing"


def test_left_counts_down_from_the_deadline(monkeypatch):
    clock = _Clock(1000.0)
    monkeypatch.setattr(remote.time, "monotonic", clock)
    p = Phase(30.0, hard_stop=2.0)
    assert p.hard_stop == 2.0
    assert p.left() == 30.0
    clock.now = 1010.5
    assert p.left() == 19.5
    p.check()
    clock.now = 1029.9
    p.check()
    clock.now = 1030.0  # exactly at the deadline: passed
    with pytest.raises(DeadlineExceeded) as info:
        p.check()
    clock.now = 1031.0
    p("downloading resnet50/1/model.pt")
    with pytest.raises(DeadlineExceeded) as later:
        p.check()
    assert str(info.value) == "the S3 part of the sync passed its 30 s deadline while starting"
    assert str(later.value) == ("the S3 part of the sync passed its 30 s deadline while downloading "
                                "resnet50/1/model.pt")
    assert isinstance(info.value, SyncError)


def test_the_deadline_is_said_with_g_format(monkeypatch):
    clock = _Clock(0.0)
    monkeypatch.setattr(remote.time, "monotonic", clock)
    p = Phase(0.25)
    clock.now = 1.0
    with pytest.raises(DeadlineExceeded, match=r"passed its 0\.25 s deadline while starting$"):
        p.check()


def test_armed_without_deadline_or_outside_the_main_thread_changes_no_signal():
    before = signal.getsignal(signal.SIGALRM)
    with Phase().armed():
        assert signal.getsignal(signal.SIGALRM) is before
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    seen = {}

    def other():
        try:
            with Phase(0.05).armed():
                seen["handler"] = signal.getsignal(signal.SIGALRM)
                time.sleep(0.3)
            seen["done"] = True
        except BaseException as exc:  # noqa: BLE001 - what the thread saw
            seen["exc"] = exc

    t = threading.Thread(target=other)
    t.start()
    t.join(5)
    assert seen.get("done") is True and "exc" not in seen
    assert seen["handler"] is before


def test_armed_interrupts_a_block_that_waits_past_the_deadline_and_restores_the_signal():
    calls = []

    def mine(signum, frame):
        calls.append(signum)

    previous = signal.signal(signal.SIGALRM, mine)
    try:
        p = Phase(0.2)
        p("listing s3://m/p/")
        start = time.monotonic()
        with pytest.raises(DeadlineExceeded) as info:
            with p.armed():
                time.sleep(60)
        took = time.monotonic() - start
        assert 0.15 <= took < 10  # the alarm at 0.2 s, not the 60 s sleep
        assert str(info.value) == "the S3 part of the sync passed its 0.2 s deadline while listing s3://m/p/"
        assert signal.getsignal(signal.SIGALRM) is mine
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        assert calls == []
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_armed_after_the_deadline_interrupts_at_once(monkeypatch):
    p = Phase(20)
    p.started -= 30  # 10 s past
    start = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        with p.armed():
            time.sleep(60)
    assert time.monotonic() - start < 10  # at once: not after the deadline's 20 s, nor the 60 s sleep


def test_armed_block_that_ends_in_time_leaves_no_alarm_and_the_old_handler():
    before = signal.getsignal(signal.SIGALRM)
    p = Phase(60)
    with p.armed():
        handler = signal.getsignal(signal.SIGALRM)
        assert handler is not before
        remaining = signal.getitimer(signal.ITIMER_REAL)[0]
        assert 55 < remaining <= 60
    assert signal.getsignal(signal.SIGALRM) is before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_the_alarm_handler_raises_even_when_the_deadline_has_not_quite_passed():
    p = Phase(60)
    p("downloading a")
    with p.armed():
        handler = signal.getsignal(signal.SIGALRM)
        with pytest.raises(DeadlineExceeded) as info:
            handler(signal.SIGALRM, None)
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # the alarm is off once it has fired
    assert str(info.value) == "the S3 part of the sync passed its 60 s deadline while downloading a"


def test_the_hard_stop_exits_only_past_deadline_plus_hard_stop_when_the_block_goes_on():
    exits = []
    p = Phase(0.3, hard_stop=0.4)
    p._exit = lambda: exits.append(time.monotonic())
    start = time.monotonic()
    with p.armed():
        try:
            time.sleep(60)
        except DeadlineExceeded:
            pass
        deadline = time.monotonic() + 20
        while not exits and time.monotonic() < deadline:
            time.sleep(0.02)
    assert len(exits) == 1
    # not at the deadline (0.3 s), nor the hard stop alone (0.4 s): both (0.7 s). When it happened, not when this
    # thread looked (which a busy machine delays); the upper bound is a loose guard
    assert 0.65 <= exits[0] - start < 10


def test_the_hard_stop_is_cancelled_when_the_block_ends():
    exits = []
    p = Phase(0.1, hard_stop=0.1)
    p._exit = lambda: exits.append(1)
    with p.armed():
        pass
    time.sleep(0.5)
    assert exits == []


def test_no_hard_stop_without_one():
    exits = []
    p = Phase(0.1)
    p._exit = lambda: exits.append(1)
    with p.armed():
        try:
            time.sleep(2)
        except DeadlineExceeded:
            pass
        time.sleep(0.4)
    assert exits == []


def test_exit_says_endpoint_deadline_and_phase_then_exits_1(monkeypatch, capfd):
    codes = []

    class Stop(Exception):
        pass

    def fake_exit(code):
        codes.append(code)
        raise Stop

    monkeypatch.setattr(os, "_exit", fake_exit)
    p = Phase(1.5, hard_stop=5)
    p.endpoint = EP
    p("listing s3://m/p/")
    with pytest.raises(Stop):
        p._exit()
    assert codes == [1]
    assert capfd.readouterr().err == (f"tritonfleet-agent: error: S3 at {EP}: the S3 part of the sync passed its "
                                      "1.5 s deadline while listing s3://m/p/\n")


# --- Remote -------------------------------------------------------------------------------------------------

def test_remote_takes_endpoint_and_timeouts_from_the_client_and_registers_its_hooks():
    client = _Client(connect=2.5, read=7.0)
    phase = Phase(100)
    r = Remote(client, phase)
    assert r.phase is phase
    assert phase.endpoint == EP
    assert r.endpoint == EP
    assert r.timeouts == (2.5, 7.0)
    assert r.requests == {} and r.etags == {}
    assert [n for n, _ in client.meta.events.registered] == ["before-send.s3", "before-parameter-build.s3.GetObject"]
    client.meta.endpoint_url = "http://other"
    assert r.endpoint == "http://other"


def test_remote_without_a_phase_makes_its_own():
    r = Remote(_Client())
    assert isinstance(r.phase, Phase)
    assert r.phase.deadline is None
    assert r.phase.endpoint == EP


def test_each_request_is_counted_by_its_operation():
    client = _Client()
    r = Remote(client)
    (count,) = client.meta.events.handler("before-send.s3")
    count(event_name="before-send.s3.ListObjectsV2", request=None)
    count(event_name="before-send.s3.GetObject", request=None)
    count(event_name="before-send.s3.GetObject", request=None)
    assert r.requests == {"ListObjectsV2": 1, "GetObject": 2}


def test_a_request_after_the_deadline_is_not_sent(monkeypatch):
    clock = _Clock(0.0)
    monkeypatch.setattr(remote.time, "monotonic", clock)
    client = _Client()
    r = Remote(client, Phase(10))
    (count,) = client.meta.events.handler("before-send.s3")
    clock.now = 10.0
    with pytest.raises(DeadlineExceeded):
        count(event_name="before-send.s3.GetObject")
    assert r.requests == {}


def test_a_get_of_a_listed_key_is_made_conditional_on_its_etag():
    client = _Client()
    r = Remote(client)
    (if_match,) = client.meta.events.handler("before-parameter-build.s3.GetObject")
    r.etags["p/a"] = "abc"
    params = {"Bucket": "b", "Key": "p/a"}
    if_match(params=params, model=None)
    assert params == {"Bucket": "b", "Key": "p/a", "IfMatch": '"abc"'}
    kept = {"Key": "p/a", "IfMatch": '"mine"'}
    if_match(params=kept)
    assert kept["IfMatch"] == '"mine"'
    unknown = {"Key": "p/other"}
    if_match(params=unknown)
    assert unknown == {"Key": "p/other"}
    r.etags[""] = "empty"
    no_key = {"Bucket": "b"}
    if_match(params=no_key)
    assert no_key == {"Bucket": "b", "IfMatch": '"empty"'}  # a params without Key is looked up as ""


def test_list_names_the_phase_pages_the_prefix_and_keeps_etags():
    pages = [{"Contents": [{"Key": "p/a/1", "Size": 3, "ETag": '"e1"'}, {"Key": "p/dir/", "Size": 0, "ETag": '"d"'}]},
             {},
             {"Contents": [{"Key": "p/b", "Size": 5, "ETag": "e2"}]}]
    client = _Client(pages)
    r = Remote(client)
    out = r.list("models", "p/")
    assert r.phase.what == "listing s3://models/p/"
    assert client.paginators == ["list_objects_v2"]
    assert client.paginator.calls == [{"Bucket": "models", "Prefix": "p/"}]
    assert out == {"a/1": Entry(path="a/1", key="p/a/1", size=3, etag="e1"),
                   "b": Entry(path="b", key="p/b", size=5, etag="e2")}
    assert r.etags == {"p/a/1": "e1", "p/b": "e2"}


def test_list_strips_only_the_quotes_around_an_etag():
    client = _Client([{"Contents": [{"Key": "p/a", "Size": 1, "ETag": '"X-opaque-X"'}]}])
    r = Remote(client)
    assert r.list("m", "p/")["a"].etag == "X-opaque-X"
    assert r.etags == {"p/a": "X-opaque-X"}


def test_list_refuses_a_path_that_is_both_file_and_directory():
    client = _Client([{"Contents": [{"Key": "p/a", "Size": 1, "ETag": "x"}, {"Key": "p/a/b", "Size": 1, "ETag": "y"}]}])
    with pytest.raises(SyncError, match="'a' is both a file and a directory"):
        Remote(client).list("m", "p/")


def test_make_client_bounds_every_request_by_the_options():
    opts = SimpleNamespace(region="eu-west-1", concurrency=8, connect_timeout=2.5, read_timeout=12.0,
                           endpoint_url=EP, path_style=True)
    client = make_client(opts)
    cfg = client.meta.config
    assert client.meta.endpoint_url == EP
    assert client.meta.region_name == "eu-west-1"
    assert cfg.region_name == "eu-west-1"
    assert cfg.max_pool_connections == 12
    assert cfg.retries == {"mode": "standard", "total_max_attempts": 3}
    assert (cfg.connect_timeout, cfg.read_timeout) == (2.5, 12.0)
    assert cfg.user_agent_extra == "tritonfleet-agent"
    assert cfg.s3 == {"addressing_style": "path"}
    virtual = make_client(SimpleNamespace(**{**vars(opts), "path_style": False, "endpoint_url": None}))
    assert virtual.meta.config.s3 is None
    assert virtual.meta.endpoint_url.startswith("https://")


# --- describe -----------------------------------------------------------------------------------------------

def _remote(what="listing s3://m/p/", connect=5.0, read=30.0):
    r = Remote(_Client(connect=connect, read=read))
    r.phase(what)
    return r


def test_timeouts_name_endpoint_seconds_attempts_and_phase():
    r = _remote(connect=2.5, read=30.0)
    assert describe(ReadTimeoutError(endpoint_url="http://x"), r) == (
        f"S3 at {EP} did not answer within 30 s (read timeout, 3 attempts) while listing s3://m/p/")
    assert describe(ConnectTimeoutError(endpoint_url="http://x"), r) == (
        f"S3 at {EP} did not accept a connection within 2.5 s (3 attempts) while listing s3://m/p/")


def test_a_refused_connection_names_the_errno():
    r = _remote()
    exc = EndpointConnectionError(endpoint_url="http://x",
                                  error="<urllib3.connection.HTTPConnection object>: Failed to establish a new "
                                        "connection: [Errno 111] Connection refused ')")
    assert describe(exc, r) == f"cannot connect to S3 at {EP} ([Errno 111] Connection refused) while listing s3://m/p/"
    dns = EndpointConnectionError(endpoint_url="http://x", error="[Errno -2] Name or service not known")
    assert describe(dns, r) == f"cannot connect to S3 at {EP} ([Errno -2] Name or service not known) while listing s3://m/p/"
    plain = EndpointConnectionError(endpoint_url="http://x", error="no errno here")
    assert describe(plain, r) == f"cannot connect to S3 at {EP} while listing s3://m/p/"


def test_without_remote_the_exception_names_the_endpoint():
    exc = EndpointConnectionError(endpoint_url="http://y:1", error="[Errno 111] Connection refused")
    assert describe(exc) == "cannot connect to S3 at http://y:1 ([Errno 111] Connection refused)"
    assert describe(ConnectionClosedError(endpoint_url="http://y:1")) == "S3 at http://y:1 closed the connection"


def test_a_closed_connection_names_endpoint_and_phase():
    assert describe(ConnectionClosedError(endpoint_url="http://x"), _remote("downloading a")) == (
        f"S3 at {EP} closed the connection while downloading a")


def test_the_deadline_names_the_endpoint_with_a_remote():
    exc = DeadlineExceeded("the S3 part of the sync passed its 5 s deadline while starting")
    assert describe(exc, _remote()) == f"S3 at {EP}: the S3 part of the sync passed its 5 s deadline while starting"
    assert describe(exc) == "the S3 part of the sync passed its 5 s deadline while starting"


def _client_error(code=None, message=None, op="GetObject"):
    err = {}
    if code is not None:
        err["Code"] = code
    if message is not None:
        err["Message"] = message
    return ClientError({"Error": err}, op)


def test_s3_errors_name_operation_code_and_message():
    assert describe(_client_error("AccessDenied", "Access Denied", "ListObjectsV2")) == (
        "ListObjectsV2: AccessDenied: Access Denied")
    assert describe(_client_error("NoSuchBucket", "")) == "GetObject: NoSuchBucket: no message"
    assert describe(_client_error(message="odd")) == "GetObject: ?: odd"


@pytest.mark.parametrize("code", ["PreconditionFailed", "412"])
def test_a_changed_object_says_run_again(code):
    assert describe(_client_error(code, "At least one of the pre-conditions you specified did not hold")) == (
        f"GetObject: an object changed in S3 while syncing ({code}); run the sync again")


def test_an_error_response_without_operation_is_a_request():
    exc = Exception("x")
    exc.response = {"Error": {"Code": "SlowDown", "Message": "Reduce your rate"}}
    assert describe(exc) == "request: SlowDown: Reduce your rate"


def test_a_response_without_error_is_not_an_s3_error():
    exc = SyncError("plain  failure\n again")
    exc.response = {"ResponseMetadata": {}}
    assert describe(exc) == "plain failure again"
    other = RuntimeError("x")
    other.response = ["Error"]
    assert describe(other) == "RuntimeError: x"


class _Wrapped(Exception):
    """Like s3transfer's RetriesExceededError: the real error in last_exception."""

    def __init__(self, msg, last=None):
        super().__init__(msg)
        self.last_exception = last


def _chain(depth: int, inner: BaseException) -> BaseException:
    exc = inner
    for i in range(depth):
        exc = _Wrapped(f"wrapper {i}", exc)
    return exc


def test_the_cause_is_found_through_up_to_five_wrappers():
    inner = ConnectionClosedError(endpoint_url="http://x")
    assert describe(_chain(5, inner), _remote("a")) == f"S3 at {EP} closed the connection while a"
    assert describe(_chain(6, inner), _remote("a")) == "_Wrapped: wrapper 5"


def test_the_cause_is_followed_through_cause_and_context():
    try:
        try:
            raise _client_error("AccessDenied", "denied")
        except ClientError as exc:
            raise RuntimeError("download failed") from exc
    except RuntimeError as outer:
        assert describe(outer) == "GetObject: AccessDenied: denied"
    try:
        try:
            raise _client_error("AccessDenied", "denied")
        except ClientError:
            raise RuntimeError("while handling")  # noqa: B904 - the implicit context is what is tested
    except RuntimeError as outer:
        assert describe(outer) == "GetObject: AccessDenied: denied"


def test_last_exception_comes_before_cause():
    exc = _Wrapped("retries exceeded", _client_error("First", "from last"))
    exc.__cause__ = _client_error("Second", "from cause")
    assert describe(exc) == "GetObject: First: from last"
    empty = _Wrapped("retries exceeded", None)
    empty.__cause__ = _client_error("Second", "from cause")
    assert describe(empty) == "GetObject: Second: from cause"


def test_a_short_chain_ends_with_the_outer_error():
    assert describe(ValueError("bad  value\nhere")) == "ValueError: bad value here"
    assert describe(_chain(2, KeyError("k"))) == "_Wrapped: wrapper 1"


def test_no_credentials_and_sync_errors_are_said_plainly():
    assert describe(NoCredentialsError()) == (
        "no AWS credentials found (boto3's default chain: environment, config files, instance profile)")
    assert describe(SyncError("key 'p/..' cannot be a file path")) == "key 'p/..' cannot be a file path"


def test_a_timeout_without_the_syncs_client_is_still_one_line():
    """`qa publish` describes its upload errors without a Remote: the seconds are unknown there, and the line
    says so rather than failing to format them (a ValueError escaped as a traceback before; found by the
    mutation review)."""
    from botocore.exceptions import ConnectTimeoutError, ReadTimeoutError

    assert remote.describe(ReadTimeoutError(endpoint_url="http://s3.local:9000")) == \
        "S3 at http://s3.local:9000 did not answer (read timeout, 3 attempts)"
    assert remote.describe(ConnectTimeoutError(endpoint_url="http://s3.local:9000")) == \
        "S3 at http://s3.local:9000 did not accept a connection (3 attempts)"
