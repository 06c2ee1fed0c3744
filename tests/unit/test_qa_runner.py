"""The QA runner's levels against an in-process server stand-in (the client is the dependency replaced;
drive, checks and judging are the real code): bounds, concurrency, errors and outcomes."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from tests.unit.test_qa_suites import add_sub, load
from tritonfleet.agent.qa.bind import bind_suite
from tritonfleet.agent.qa.runner import run_level

SUITE = """
concurrency: [1, 5]
cases:
  - name: c
    data: d.json
{extra}
"""
DATA = {"data": [{"INPUT0": [i, -i, 3, 4], "INPUT1": [1, 1, -1, 1]} for i in range(4)],
        "validation_data": [{"OUTPUT0": [i + 1, 1 - i, 2, 5], "OUTPUT1": [i - 1, -i - 1, 4, 3]} for i in range(4)]}


MODES = ["threads", "asyncio"]  # the HTTP client's way and the gRPC one


@pytest.fixture(params=MODES)
def mode(request):
    return request.param


class FakeServer:
    """add_sub computed in-process; ``wrong(i, outputs)`` may corrupt the answer to request i."""

    def __init__(self, mode: str = "threads", delay: float = 0.0, fail_at: int | None = None, wrong=None,
                 hang: float = 0.0):
        self.mode, self.delay, self.fail_at, self.wrong, self.hang = mode, delay, fail_at, wrong, hang
        self.calls = 0
        self.connects = 0
        self.in_flight = self.most_in_flight = 0
        self.lock = threading.Lock()
        self.released = threading.Event()  # ends a hung request left behind (threads)

    def connect(self):
        self.connects += 1
        return FakeConn(self)

    def begin(self) -> int:
        with self.lock:
            self.calls += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            return self.calls

    def end(self, n: int, request: dict) -> dict:
        with self.lock:
            self.in_flight -= 1
        if self.fail_at == n:
            raise RuntimeError("boom: the model failed")
        out = {"OUTPUT0": request["INPUT0"] + request["INPUT1"], "OUTPUT1": request["INPUT0"] - request["INPUT1"]}
        if self.wrong:
            self.wrong(n, out)
        return out


class FakeStub:
    def __init__(self, server: FakeServer):
        self.server = server

    async def ModelInfer(self, request, timeout=None, metadata=None):  # noqa: N802 - gRPC's name
        n = self.server.begin()
        await asyncio.sleep(self.server.delay + (self.server.hang if n == 2 else 0))
        return self.server.end(n, request)


class FakeChannel:
    closed = False

    async def close(self, grace=None):
        FakeChannel.closed = True


class FakeConn:
    timeout = 0.2
    metadata = None

    def __init__(self, server: FakeServer):
        self.server = server
        self.grpc = server.mode == "asyncio"

    def prepare(self, model, version, arrays, dtypes, outputs):
        return dict(arrays)

    def aio_stub(self):
        return FakeChannel(), FakeStub(self.server)

    def call(self, request):
        s = self.server
        n = s.begin()
        time.sleep(s.delay)
        if n == 2 and s.hang:
            s.released.wait(s.hang)
        return s.end(n, request)

    def raw(self, result):
        return lambda name: (result[name].tobytes(), tuple(result[name].shape)) if name in result else (None, None)

    def numpy(self, result, name):
        return result.get(name)

    def close(self):
        pass


def plan_of(tmp_path, extra: str = "", data: dict | None = None):
    ls = load(tmp_path, SUITE.format(extra=extra), {"d.json": data or DATA})
    return bind_suite(ls, add_sub())[0]


def test_a_level_sends_exactly_its_request_count_and_measures_it(tmp_path, mode):
    plan = plan_of(tmp_path, "    requests: 37")
    server = FakeServer(mode, delay=0.002)
    lv = run_level(plan, "local", "grpc", 5, server.connect)
    assert server.connects == (1 if mode == "asyncio" else 5)
    assert (lv.status, lv.outcome, lv.requests, server.calls) == ("passed", "pass", 37, 37)
    assert len(lv.latencies) == 37 and lv.p50_ms >= 2 and lv.p99_ms >= lv.p50_ms and lv.throughput > 0
    assert lv.worst.abs == 0.0 and server.most_in_flight == 5


def test_the_default_request_count_covers_every_entry_and_every_slot(tmp_path):
    plan = plan_of(tmp_path)
    assert [plan.requests_at(c) for c in (1, 5)] == [4, 20]
    server = FakeServer()
    assert run_level(plan, "local", "grpc", 1, server.connect).requests == 4


def test_a_mismatch_names_output_element_got_and_expected(tmp_path, mode):
    def wrong(n, out):
        if n % 4 == 2:  # entry 1's answers
            out["OUTPUT1"] = out["OUTPUT1"].copy()
            out["OUTPUT1"][0, 2] += 5

    lv = run_level(plan_of(tmp_path), "local", "grpc", 5, FakeServer(mode, wrong=wrong).connect)
    assert (lv.status, lv.outcome, lv.mismatched, lv.requests) == ("failed", "mismatch", 5, 20)
    assert lv.worst.to_json() == {"output": "OUTPUT1", "index": [0, 2], "abs": 5.0, "rel": 1.25}
    assert lv.message == "add_sub: 5 of 20 responses differ; worst: OUTPUT1[0, 2]: got 9, expected 4 (abs 5, rel 1.25)"


def test_a_negative_case_passes_when_the_mismatch_is_caught_and_fails_when_it_is_not(tmp_path):
    def wrong(n, out):
        out["OUTPUT0"] = out["OUTPUT0"] + 1

    plan = plan_of(tmp_path, "    expect: fail\n    reason: OUTPUT0")
    caught = run_level(plan, "local", "grpc", 1, FakeServer(wrong=wrong).connect)
    assert (caught.status, caught.outcome) == ("passed", "mismatch") and "OUTPUT0[0, 0]" in caught.message
    missed = run_level(plan, "local", "grpc", 1, FakeServer().connect)
    assert (missed.status, missed.outcome) == ("failed", "pass")
    assert missed.message == "add_sub: expected a mismatch, but all 4 responses matched"
    plan.reason = "OUTPUT1"
    other = run_level(plan, "local", "grpc", 1, FakeServer(wrong=wrong).connect)
    assert other.status == "failed" and "mismatch as expected, but without 'OUTPUT1'" in other.message


def test_a_data_error_is_its_own_outcome_and_sends_nothing(tmp_path):
    data = {"data": DATA["data"], "validation_data": DATA["validation_data"][:3]}
    server = FakeServer()
    plan = plan_of(tmp_path, "    expect: error\n    reason: doesn't align", data)
    lv = run_level(plan, "local", "grpc", 9, server.connect)
    assert (lv.status, lv.outcome, lv.requests, server.calls) == ("passed", "data-error", 0, 0)
    plan = plan_of(tmp_path, "", data)
    lv = run_level(plan, "local", "grpc", 9, server.connect)
    assert (lv.status, lv.outcome) == ("error", "data-error") and "doesn't align" in lv.message
    plan = plan_of(tmp_path, "    expect: fail", data)  # a data error is not the mismatch a negative case wants
    assert run_level(plan, "local", "grpc", 1, server.connect).status == "error"


def test_a_failed_request_stops_the_level(tmp_path, mode):
    plan = plan_of(tmp_path, "    requests: 500")
    server = FakeServer(mode, delay=0.001, fail_at=3)
    lv = run_level(plan, "local", "grpc", 2, server.connect)
    assert (lv.status, lv.outcome) == ("error", "request-error")
    assert "request 3 failed: boom: the model failed" in lv.message and server.calls < 10


def test_a_level_stops_sending_at_its_timeout(tmp_path, mode):
    plan = plan_of(tmp_path, "    requests: 100000\n    timeout: 0.3")
    t0 = time.monotonic()
    lv = run_level(plan, "local", "grpc", 3, FakeServer(mode, delay=0.05).connect)
    assert time.monotonic() - t0 < 10  # a loose guard: the count of requests below is the bound
    assert (lv.status, lv.outcome) == ("error", "request-error")
    assert lv.message.startswith(f"add_sub: timed out: {lv.requests} of 100000 requests in 0.3 s")
    assert 0 < lv.requests < 40


def test_a_hung_request_is_left_behind(tmp_path, mode):
    plan = plan_of(tmp_path, "    requests: 8\n    timeout: 0.2")
    t0 = time.monotonic()
    FakeChannel.closed = False
    server = FakeServer(mode, hang=60)
    try:
        lv = run_level(plan, "local", "grpc", 2, server.connect)
        assert time.monotonic() - t0 < 20  # level timeout + request timeout + 1 s (1.4 s), not the 60 s hang
    finally:
        server.released.set()  # the thread left behind ends
    assert lv.status == "error" and "did not return within 1.4 s" in lv.message
    assert FakeChannel.closed == (mode == "asyncio")  # its gRPC call was cancelled, the channel closed


def test_tolerances_apply_per_output(tmp_path):
    def drift(n, out):
        out["OUTPUT0"] = out["OUTPUT0"] + np.int64(1)

    plan = plan_of(tmp_path, "    outputs: {OUTPUT0: {compare: {atol: 1.5}}}")
    assert plan.compares["OUTPUT0"].kind == "close" and plan.compares["OUTPUT1"].kind == "exact"
    lv = run_level(plan, "local", "grpc", 1, FakeServer(wrong=drift).connect)
    assert lv.status == "passed" and lv.worst.abs == 1.0 and lv.worst.output == "OUTPUT0"
    assert run_level(plan_of(tmp_path), "local", "grpc", 1, FakeServer(wrong=drift).connect).status == "failed"


@pytest.mark.parametrize("concurrency", [1, 4])
def test_connect_failures_are_request_errors(tmp_path, concurrency):
    def refuse():
        raise ConnectionRefusedError("connection refused")

    lv = run_level(plan_of(tmp_path), "local", "grpc", concurrency, refuse)
    assert (lv.status, lv.outcome, lv.message) == ("error", "request-error", "add_sub: connection refused")
