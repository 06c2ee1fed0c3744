"""Running one case at one concurrency level against one server (sending: :mod:`.drive`), and judging.

Outcomes: ``pass`` (every response matched), ``mismatch``, ``data-error`` (nothing sent), ``request-error``
(a request failed or the level timed out). A case expecting ``pass``, ``fail`` or ``error`` passes when the
outcome is ``pass``, ``mismatch`` or ``data-error`` respectively (and its ``reason`` is in the message);
otherwise it is ``failed``, or ``error`` when the outcome was an error nobody expected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .bind import Plan
from .client import one_line
from .compare import Worst
from .drive import drive

WANTED = {"pass": "pass", "fail": "mismatch", "error": "data-error"}


@dataclass
class Level:
    """One case x concurrency x server: a row of the report."""

    suite: str
    model: str
    case: str
    server: str
    protocol: str
    concurrency: int
    expected: str  # pass | fail | error
    status: str = "skipped"  # passed | failed | error | skipped
    outcome: str = "skipped"  # pass | mismatch | data-error | request-error | skipped
    message: str = ""
    worst: Worst | None = None
    requests: int = 0
    mismatched: int = 0
    latencies: list[float] = field(default_factory=list, repr=False)  # seconds
    seconds: float = 0.0
    batch: int = 1

    @property
    def p50_ms(self) -> float | None:
        return round(float(np.percentile(self.latencies, 50)) * 1000, 3) if self.latencies else None

    @property
    def p99_ms(self) -> float | None:
        return round(float(np.percentile(self.latencies, 99)) * 1000, 3) if self.latencies else None

    @property
    def throughput(self) -> float | None:
        """Inferences per second (requests x batch size / wall time), as perf_analyzer counts them."""
        return round(self.requests * self.batch / self.seconds, 2) if self.seconds > 0 and self.requests else None


def judge(level: Level, plan: Plan, outcome: str, message: str) -> Level:
    """Set ``status`` from the outcome and the case's expectation."""
    level.outcome = outcome
    wanted = WANTED[plan.expect]
    prefix = f"{plan.model}: "
    if outcome == wanted:
        if plan.reason and plan.reason not in message:
            level.status = "failed"
            level.message = f"{prefix}{outcome} as expected, but without {plan.reason!r}: {message}"
        else:
            level.status = "passed"
            level.message = f"{prefix}{message}" if message else ""
        return level
    if outcome in ("data-error", "request-error"):
        level.status = "error"
        level.message = f"{prefix}{message}"
        return level
    level.status = "failed"
    if outcome == "pass":
        want = "a mismatch" if plan.expect == "fail" else "a data error"
        level.message = f"{prefix}expected {want}, but all {level.requests} responses matched"
    else:
        level.message = f"{prefix}{message}"
    return level


def run_level(plan: Plan, server: str, protocol: str, concurrency: int,
              connect: Callable[[], Any]) -> Level:
    """Run the plan at one concurrency level; ``connect()`` makes one client (ClientError if it cannot)."""
    level = Level(plan.suite, plan.model, plan.case, server, protocol, concurrency, plan.expect,
                  batch=plan.samples[0].batch if plan.samples else plan.batch_size)
    if plan.data_error is not None:
        return judge(level, plan, "data-error", f"data error: {plan.data_error}")
    conns: list[Any] = []
    total = plan.requests_at(concurrency)
    try:
        try:
            conns.append(connect())
            while not conns[0].grpc and len(conns) < concurrency:  # gRPC: one channel; HTTP: a client per slot
                conns.append(connect())
        except Exception as exc:  # noqa: BLE001 - ClientError and whatever the client raised
            return judge(level, plan, "request-error", one_line(exc))
        tally = drive(plan, conns, total, plan.timeout, concurrency)
    finally:
        for c in conns:
            c.close()
    level.latencies, level.mismatched, level.worst = tally.latencies, tally.mismatched, tally.worst
    level.seconds, level.requests = tally.seconds, len(tally.latencies)
    if tally.error is not None:
        return judge(level, plan, "request-error", f"{tally.error} ({level.requests} of {total} requests answered)")
    if tally.timed_out:
        return judge(level, plan, "request-error",
                     f"timed out: {level.requests} of {total} requests in {plan.timeout:g} s")
    if level.mismatched:
        return judge(level, plan, "mismatch", f"{level.mismatched} of {level.requests} responses differ; worst: "
                     f"{tally.failure}")
    return judge(level, plan, "pass", "")
