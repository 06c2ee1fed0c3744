"""Sending one case's requests at one concurrency level: a closed loop per slot, like perf_analyzer's
concurrency mode (each slot sends its next request as soon as its last one is answered).

gRPC: one asyncio coroutine per slot on one grpc.aio channel. HTTP: one thread per slot, each with its own
tritonclient.http client. Requests are prepared once (the data entries in turn); each slot checks its own
answers, and a response whose every output has exactly the expected bytes and shape is accepted without
decoding it (the numpy comparison runs only for the others). Each slot keeps its own tally; they are
merged at the end.

Bounded: at most ``total`` requests; none is sent after ``timeout`` seconds; each has the client's own
timeout; the slots are waited for at most until the deadline plus one request timeout (then the level is
an error: gRPC calls still out are cancelled, HTTP threads are left behind). The first failed request
stops the level.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .bind import Plan, Sample
from .client import one_line
from .compare import Check, Worst, check_response, failure_key


@dataclass
class Tally:
    """What one level's responses showed."""

    latencies: list[float] = field(default_factory=list)  # seconds, one per answered request
    mismatched: int = 0
    worst: Worst | None = None
    failure: str | None = None  # the message of the worst mismatch
    failure_rank: tuple[bool, float] | None = None
    error: str | None = None  # the first failed request
    timed_out: bool = False
    seconds: float = 0.0  # from the first request sent to the last answer

    def add(self, check: Check) -> None:
        if not check.ok:
            self.mismatched += 1
            rank = failure_key(check)
            if self.failure_rank is None or rank > self.failure_rank:
                self.failure, self.failure_rank = check.message, rank
        if check.worst is not None and (self.worst is None or check.worst.key() > self.worst.key()):
            self.worst = check.worst


class _Expect:
    """One request's expected outputs, with their bytes for the exact fast path."""

    def __init__(self, sample: Sample) -> None:
        self.arrays = sample.expected
        self.fast = all(a.dtype != np.object_ for a in self.arrays.values())
        self.raw = {n: (np.ascontiguousarray(a).tobytes(), tuple(a.shape)) for n, a in self.arrays.items()} \
            if self.fast else {}
        first = next(iter(self.arrays), None)
        self.zero = Check(True, Worst(first, [0] * self.arrays[first].ndim, 0.0, 0.0)) if first else Check(True)


def _check(conn: Any, result: Any, expect: _Expect, plan: Plan) -> Check:
    if not expect.arrays:
        return Check(True)
    if expect.fast:
        raw = conn.raw(result)
        if all(raw(name) == want for name, want in expect.raw.items()):
            return expect.zero
    got = {name: conn.numpy(result, name) for name in expect.arrays}
    return check_response(got, expect.arrays, plan.compares)


def drive(plan: Plan, conns: list[Any], total: int, timeout: float, concurrency: int | None = None) -> Tally:
    """Send ``total`` requests of ``plan`` with ``concurrency`` slots (default: one per conn; gRPC needs one
    conn, HTTP one per slot); the merged tally."""
    first = conns[0]
    slots = concurrency or len(conns)
    requests = [first.prepare(plan.model, plan.version, s.inputs, plan.input_dtypes, plan.outputs)
                for s in plan.samples]
    loop = _Loop(plan, requests, [_Expect(s) for s in plan.samples], total, timeout,
                 getattr(first, "timeout", 30.0) + 1.0)  # the client gives up on a request after its timeout
    tallies = [Tally() for _ in range(slots)]
    if first.grpc:
        asyncio.run(loop.run_async(first, tallies))
    else:
        loop.run_threads(conns, tallies)
    return loop.merge(tallies)


class _Loop:
    def __init__(self, plan: Plan, requests: list, expects: list[_Expect], total: int, timeout: float,
                 grace: float) -> None:
        self.plan, self.requests, self.expects, self.total = plan, requests, expects, total
        self.timeout, self.grace = timeout, grace
        self.counter = itertools.count()
        self.stopped = False
        self.start = time.monotonic()
        self.deadline = self.start + timeout
        self.ends = [self.start]
        self.hung: str | None = None

    def next_index(self, tally: Tally) -> int | None:
        """The next request to send, or None: all sent, stopped, or past the deadline."""
        if self.stopped:
            return None
        i = next(self.counter)
        if i >= self.total:
            return None
        if time.monotonic() > self.deadline:
            tally.timed_out = True
            return None
        return i

    def failed(self, tally: Tally, i: int, exc: BaseException) -> None:
        tally.error = f"request {i + 1} failed: {one_line(exc)}"
        self.stopped = True

    async def run_async(self, conn: Any, tallies: list[Tally]) -> None:
        channel, stub = conn.aio_stub()

        async def slot(tally: Tally) -> None:
            while True:
                i = self.next_index(tally)
                if i is None:
                    break
                t0 = time.perf_counter()
                try:
                    result = await stub.ModelInfer(self.requests[i % len(self.requests)], timeout=conn.timeout,
                                                   metadata=conn.metadata)
                except Exception as exc:  # noqa: BLE001 - grpc.aio.AioRpcError: deadline, unavailable, model errors
                    self.failed(tally, i, exc)
                    break
                tally.latencies.append(time.perf_counter() - t0)
                tally.add(_check(conn, result, self.expects[i % len(self.expects)], self.plan))
            self.ends.append(time.monotonic())

        try:
            wait = max(0.0, self.deadline + self.grace - time.monotonic())
            await asyncio.wait_for(asyncio.gather(*(slot(t) for t in tallies)), wait)
        except asyncio.TimeoutError:
            self.stopped = True
            self.hung = f"requests did not return within {self.timeout + self.grace:g} s"
        finally:
            await channel.close(None)

    def run_threads(self, conns: list[Any], tallies: list[Tally]) -> None:
        def worker(conn: Any, tally: Tally) -> None:
            while True:
                i = self.next_index(tally)
                if i is None:
                    break
                t0 = time.perf_counter()
                try:
                    result = conn.call(self.requests[i % len(self.requests)])
                except Exception as exc:  # noqa: BLE001 - tritonclient's exceptions, socket errors, timeouts
                    self.failed(tally, i, exc)
                    break
                tally.latencies.append(time.perf_counter() - t0)
                tally.add(_check(conn, result, self.expects[i % len(self.expects)], self.plan))
            self.ends.append(time.monotonic())

        threads = [threading.Thread(target=worker, args=(c, t), daemon=True, name=f"qa-{k}")
                   for k, (c, t) in enumerate(zip(conns, tallies))]  # noqa: B905 - 3.9
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.0, self.deadline + self.grace - time.monotonic()))
        if any(t.is_alive() for t in threads):  # a request hung past its own timeout: leave it behind
            self.stopped = True
            self.hung = f"requests did not return within {self.timeout + self.grace:g} s"

    def merge(self, tallies: list[Tally]) -> Tally:
        merged = Tally(seconds=max(self.ends) - self.start, error=self.hung, timed_out=self.hung is not None)
        for t in tallies:
            merged.latencies += t.latencies
            merged.mismatched += t.mismatched
            merged.timed_out = merged.timed_out or t.timed_out
            merged.error = merged.error or t.error
            if t.worst is not None and (merged.worst is None or t.worst.key() > merged.worst.key()):
                merged.worst = t.worst
            if t.failure_rank is not None and (merged.failure_rank is None or t.failure_rank > merged.failure_rank):
                merged.failure, merged.failure_rank = t.failure, t.failure_rank
        return merged
