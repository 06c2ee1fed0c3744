"""Triton's queue time per request, published to CloudWatch for the fleet's target-tracking scaling policy
(``tritonfleet fleet autoscale``, :mod:`tritonfleet.fleet.autoscale`).

Queue time is what grows first when a fleet is too small: requests wait in Triton's scheduler queue before an
instance of the model is free. Triton exposes it as counters on each server's metrics port
(``http://127.0.0.1:8002/metrics``, ``8002 + 10·i`` for the i-th server of a host), per model and version:

- ``nv_inference_queue_duration_us``: microseconds requests spent queued, cumulative;
- ``nv_inference_request_success``: requests that succeeded, cumulative.

Between two scrapes of a server, the queue time per request is Δqueue_us / Δrequests / 1000 (milliseconds),
with both deltas summed over every model and version. The delta is taken per series (model and version) and
then summed, so a model loaded between the scrapes counts from zero and one unloaded drops out, instead of
moving the sum without a request. An interval without requests is 0 ms (an idle fleet should scale in, and a
target-tracking alarm without data does nothing); an interval in which a counter went down (Triton restarted, a
model reloaded) is skipped, and the line says so; so is the first scrape of a server (no interval yet), an
interval longer than ``max_gap`` seconds (the timer stopped: that average says nothing about now) and one in
which requests queued but none succeeded (queue timeouts: an overloaded server, not an idle one).

Each value goes to CloudWatch (``PutMetricData``) as :data:`METRIC_NAME` in namespace :data:`NAMESPACE`, unit
``Milliseconds``, twice: with the dimensions ``fleet`` and ``family`` (the instance family, e.g. ``inf2``: for
dashboards), and with ``fleet`` alone. CloudWatch treats every combination of dimensions as a metric of its own
and never adds them up, so the fleet-only copy is what the scaling policy reads (its statistic ``Average`` over
every server of the fleet).

How it is run: :func:`main_once` scrapes every server of the host once, publishes, and keeps the counters for
the next run in a small JSON state file. Either a systemd timer runs it every minute (CloudWatch's
target-tracking alarms look at one-minute periods), or the watchdog's loop calls it every interval with the same
state file. It returns ``(exit code, lines)`` for the caller to print (journal lines), never raises for a server
that does not answer or a CloudWatch error. Credentials: boto3's default chain (the instance profile, which needs
``cloudwatch:PutMetricData``); none are taken as arguments or printed.

Standard library and boto3 only, Python 3.9 (the agent's rule).
"""

from __future__ import annotations

import datetime
import http.client
import json
import math
import os
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from . import aws
from .remote import ATTEMPTS

NAMESPACE = "tritonfleet"
#: The CloudWatch metric: average time a request waited in Triton's queue over the interval, milliseconds.
METRIC_NAME = "QueueTimePerRequest"
UNIT = "Milliseconds"
DIMENSION_FLEET = "fleet"
DIMENSION_FAMILY = "family"

QUEUE_COUNTER = "nv_inference_queue_duration_us"
REQUEST_COUNTER = "nv_inference_request_success"

DEFAULT_URL = "http://127.0.0.1:8002/metrics"
SCRAPE_TIMEOUT = 5.0  # seconds for one scrape, connection and body together
SCRAPE_LIMIT = 32 * 1024 * 1024  # bytes: Triton's metrics for hundreds of models are a few MB
MAX_GAP = 600.0  # seconds: a longer interval is skipped
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 10.0
BATCH = 500  # data points per PutMetricData (CloudWatch takes 1000)
STATE_VERSION = 1


class QueueTimeError(Exception):
    """A scrape or its text could not be read; ``str(e)`` is one line."""


# -- the Prometheus text exposition (version 0.0.4), as much of it as counters need --------------------------------

_SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)'
                     r'(?:\{(?P<labels>(?:[^"}]|"(?:[^"\\]|\\.)*")*)\})?'
                     r'[ \t]+(?P<value>\S+)(?:[ \t]+-?\d+)?[ \t]*$')
_LABEL = re.compile(r'[ \t]*(?P<name>[a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"(?P<value>(?:[^"\\]|\\.)*)"[ \t]*(?:,|$)')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]  # sorted (name, value) pairs
    value: float


@dataclass(frozen=True)
class Exposition:
    samples: tuple[Sample, ...]
    types: Mapping[str, str] = field(default_factory=dict)  # metric name -> its # TYPE


def _labels(text: str, lineno: int) -> tuple[tuple[str, str], ...]:
    pairs, pos = [], 0
    while pos < len(text.rstrip(" \t,")):
        match = _LABEL.match(text, pos)
        if not match:
            raise QueueTimeError(f"metrics line {lineno}: cannot read the labels {{{text[:80]}}}")
        value = re.sub(r'\\[\\"n]', lambda m: _ESCAPES[m.group(0)], match.group("value"))
        pairs.append((match.group("name"), value))
        pos = match.end()
    return tuple(sorted(pairs))


def _sample(line: str, lineno: int) -> Sample:
    match = _SAMPLE.match(line)
    if not match:
        raise QueueTimeError(f"metrics line {lineno}: not a Prometheus sample: {line[:80]!r}")
    try:
        value = float(match.group("value"))
    except ValueError:
        raise QueueTimeError(f"metrics line {lineno}: {match.group('value')[:40]!r} is not a number") from None
    return Sample(match.group("name"), _labels(match.group("labels") or "", lineno), value)


def parse_exposition(text: str, strict: bool = True) -> Exposition:
    """Every sample of a Prometheus text exposition (comments and blank lines skipped, ``# TYPE`` kept);
    QueueTimeError naming the line for one that is not a sample (``strict=False``: that line is skipped).
    The agent's one reader of the format: the queue time, the lifecycle's drain and the watchdog use it."""
    samples, types = [], {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            words = line.split(None, 3)
            if len(words) >= 4 and words[1] == "TYPE":
                types[words[2]] = words[3].strip()
            continue
        try:
            samples.append(_sample(line, lineno))
        except QueueTimeError:
            if strict:
                raise
    return Exposition(tuple(samples), types)


# -- Triton's two counters, per series -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Counters:
    """Triton's queue and request counters of one scrape, per series (``"model=...,version=..."``):
    ``{series: (queue microseconds, successful requests)}``."""

    series: Mapping[str, tuple[float, float]]

    @property
    def queue_us(self) -> float:
        return sum(q for q, _ in self.series.values())

    @property
    def requests(self) -> float:
        return sum(n for _, n in self.series.values())


def _series(labels: tuple[tuple[str, str], ...]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels)


def counters(text: str) -> Counters:
    """The counters of Triton's metrics text. QueueTimeError when the text has neither counter (not Triton's
    metrics port), or a value that is not a count; a server without models has both families and no sample."""
    parsed = parse_exposition(text)
    names = {s.name for s in parsed.samples} | set(parsed.types)
    missing = [name for name in (QUEUE_COUNTER, REQUEST_COUNTER) if name not in names]
    if missing:
        raise QueueTimeError(f"no {' and no '.join(missing)} in the metrics: not a Triton metrics port?")
    found: dict[str, list[float]] = {}
    for sample in parsed.samples:
        if sample.name not in (QUEUE_COUNTER, REQUEST_COUNTER):
            continue
        if not math.isfinite(sample.value) or sample.value < 0:
            raise QueueTimeError(f"{sample.name}{{{_series(sample.labels)}}} is {sample.value!r}: not a count")
        slot = found.setdefault(_series(sample.labels), [0.0, 0.0])
        slot[0 if sample.name == QUEUE_COUNTER else 1] += sample.value
    return Counters({key: (q, n) for key, (q, n) in found.items()})


# -- successive scrapes into values ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Interval:
    """What one scrape gave: ``value_ms`` to publish (None: nothing, ``line`` says why) over ``requests``."""

    server: str
    at: float
    value_ms: float | None
    requests: float
    line: str


class QueueTime:
    """One server's last counters; :meth:`update` turns the next scrape into the interval's queue time."""

    def __init__(self, server: str, last: Counters | None = None, last_at: float | None = None,
                 max_gap: float = MAX_GAP) -> None:
        self.server = server
        self.last = last
        self.last_at = last_at
        self.max_gap = max_gap

    def update(self, now: Counters, at: float) -> Interval:
        """The interval since the last scrape; ``now`` becomes the last scrape whatever the outcome."""
        previous, previous_at = self.last, self.last_at
        self.last, self.last_at = now, at

        def skip(why: str) -> Interval:
            return Interval(self.server, at, None, 0.0, f"{self.server}: {why}")

        if previous is None or previous_at is None:
            return skip("first scrape, queue time from the next one on")
        gap = at - previous_at
        if gap <= 0 or gap > self.max_gap:
            return skip(f"{gap:.0f} s since the last scrape (expected 0 to {self.max_gap:g} s): interval skipped")
        queue_us = requests = 0.0
        for key, (q, n) in now.series.items():
            q0, n0 = previous.series.get(key, (0.0, 0.0))  # a new series (model loaded) counts from zero
            if q < q0 or n < n0:
                return skip(f"counters of {key or 'a series'} went down (Triton restarted or the model reloaded): "
                            "interval skipped")
            queue_us, requests = queue_us + q - q0, requests + n - n0
        if requests <= 0 and queue_us > 0:  # requests queued, none succeeded: not an idle server
            return skip(f"{queue_us / 1000:.0f} ms queued in {gap:.0f} s but no request succeeded: interval skipped")
        if requests <= 0:
            return Interval(self.server, at, 0.0, 0.0, f"{self.server}: no requests in {gap:.0f} s: 0 ms")
        value = queue_us / requests / 1000.0
        return Interval(self.server, at, value, requests,
                        f"{self.server}: {value:.3f} ms queued per request, {requests:.0f} requests in {gap:.0f} s")


def load_state(path: str, max_gap: float = MAX_GAP) -> tuple[dict[str, QueueTime], str | None]:
    """The servers' last counters from the state file; a missing file is no state, an unreadable one is no
    state plus a line saying so (the next run starts over)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        servers = data["servers"] if data.get("version") == STATE_VERSION else {}
        states = {}
        for server, item in servers.items():
            series = {str(k): (float(v[0]), float(v[1])) for k, v in item["series"].items()}
            states[server] = QueueTime(server, Counters(series), float(item["at"]), max_gap)
        return states, None
    except FileNotFoundError:
        return {}, None
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        return {}, f"state {path} unreadable ({type(exc).__name__}): starting over"


def save_state(path: str, states: Mapping[str, QueueTime]) -> None:
    """Written under a temporary name and renamed: a run killed midway leaves the previous state."""
    servers = {server: {"at": state.last_at, "series": {k: list(v) for k, v in state.last.series.items()}}
               for server, state in states.items() if state.last is not None}
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"version": STATE_VERSION, "servers": servers}, f, sort_keys=True)
    os.replace(tmp, path)


# -- I/O: the scrape and CloudWatch ---------------------------------------------------------------------------------

def scrape(url: str = DEFAULT_URL, timeout: float = SCRAPE_TIMEOUT) -> str:
    """The metrics text at ``url``, read within ``timeout`` seconds in all; QueueTimeError (one line) else."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise QueueTimeError(f"metrics URL {url!r}: expected http://host:port/metrics")
    deadline = time.monotonic() + timeout
    chunks, size = [], 0
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # http(s) only, checked above
            while True:
                chunk = response.read(65536)
                if not chunk:
                    break
                size += len(chunk)
                if size > SCRAPE_LIMIT:
                    raise QueueTimeError(f"{url}: more than {SCRAPE_LIMIT // 2**20} MiB of metrics")
                if time.monotonic() > deadline:
                    raise QueueTimeError(f"{url}: no complete answer within {timeout:g} s")
                chunks.append(chunk)
    except urllib.error.HTTPError as exc:
        raise QueueTimeError(f"{url} answered HTTP {exc.code}") from None
    except (OSError, http.client.HTTPException) as exc:  # URLError is an OSError
        cause = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        if isinstance(cause, (socket.timeout, TimeoutError)):  # the same class from Python 3.10 on
            why = f"no answer within {timeout:g} s"
        else:
            why = " ".join(str(cause).split()) or type(cause).__name__
        raise QueueTimeError(f"cannot read {url}: {why}") from None
    return b"".join(chunks).decode("utf-8", "replace")


def make_client(region: str | None, endpoint_url: str | None = None) -> Any:
    """A CloudWatch client (:func:`.aws.client`) from boto3's default credential chain, each request bounded in
    time and tried :data:`.remote.ATTEMPTS` times in all (botocore's standard retry mode)."""
    return aws.client("cloudwatch", region=region, endpoint_url=endpoint_url, connect_timeout=CONNECT_TIMEOUT,
                      read_timeout=READ_TIMEOUT, attempts=ATTEMPTS)


def dimensions(fleet: str, family: str | None = None) -> list[dict[str, str]]:
    """The metric's dimensions: ``fleet`` (what the scaling policy reads), with ``family`` for dashboards."""
    return [{"Name": DIMENSION_FLEET, "Value": fleet}] + (
        [{"Name": DIMENSION_FAMILY, "Value": family}] if family else [])


def _check_dimension(name: str, value: str) -> None:
    if not isinstance(value, str) or not value.strip() or len(value) > 255:
        raise QueueTimeError(f"{name} {value!r}: expected 1-255 characters (a CloudWatch dimension value)")


def publish(client: Any, fleet: str, family: str, values: Sequence[float], at: float | None = None) -> int:
    """``PutMetricData`` of each value (one per server) as :data:`METRIC_NAME`, with dimensions fleet and family
    and again with fleet alone (what the scaling policy reads); the number of values sent."""
    _check_dimension(DIMENSION_FLEET, fleet)
    _check_dimension(DIMENSION_FAMILY, family)
    stamp = datetime.datetime.fromtimestamp(time.time() if at is None else at, tz=datetime.timezone.utc)
    data = [{"MetricName": METRIC_NAME, "Dimensions": dims, "Value": float(value), "Unit": UNIT,
             "Timestamp": stamp, "StorageResolution": 60}
            for value in values for dims in (dimensions(fleet, family), dimensions(fleet))]
    for start in range(0, len(data), BATCH):
        client.put_metric_data(Namespace=NAMESPACE, MetricData=data[start:start + BATCH])
    return len(values)


def describe(exc: BaseException) -> str:
    """A boto3 error as one line (no request ids, no credentials)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and "Error" in response:
        err = response["Error"]
        return f"{err.get('Code', '?')}: {' '.join(str(err.get('Message') or 'no message').split())}"
    name = type(exc).__name__
    if name == "NoCredentialsError":
        return "no AWS credentials found (boto3's default chain: environment, config files, instance profile)"
    if name == "NoRegionError":
        return "no AWS region: pass the region (or set AWS_DEFAULT_REGION)"
    return f"{name}: {' '.join(str(exc).split())}"


def main_once(urls: Sequence[str], fleet: str, family: str, state_path: str, *, region: str | None = None,
              endpoint_url: str | None = None, timeout: float = SCRAPE_TIMEOUT, max_gap: float = MAX_GAP,
              client: Any = None, clock: Callable[[], float] = time.time,
              fetch: Callable[[str, float], str] = scrape) -> tuple[int, list[str]]:
    """Scrape each server once, publish the values the intervals gave, keep the counters in ``state_path``.

    ``(exit code, lines)``: 0 when every server was read and what there was to publish was published, 1 when a
    server could not be read (the others are still published; its interval goes on to the next run) or
    ``PutMetricData`` failed (the counters are kept all the same: that interval is lost, not counted twice)."""
    try:
        _check_dimension(DIMENSION_FLEET, fleet)
        _check_dimension(DIMENSION_FAMILY, family)
    except QueueTimeError as exc:
        return 1, [str(exc)]
    states, note = load_state(state_path, max_gap)
    lines = [note] if note else []
    failed = False
    intervals = []
    for url in urls:
        try:
            now = counters(fetch(url, timeout))
        except QueueTimeError as exc:
            message = str(exc)
            lines.append(message if url in message else f"{url}: {message}")
            failed = True
            continue
        state = states.setdefault(url, QueueTime(url, max_gap=max_gap))
        interval = state.update(now, clock())
        lines.append(interval.line)
        intervals.append(interval)
    values = [i.value_ms for i in intervals if i.value_ms is not None]
    if values:
        try:
            published = publish(client or make_client(region, endpoint_url), fleet, family, values,
                                max(i.at for i in intervals))
            lines.append(f"published {published} value(s) of {NAMESPACE}/{METRIC_NAME} for fleet {fleet} ({family})")
        except Exception as exc:  # one line, whatever boto3 raised
            lines.append(f"PutMetricData to CloudWatch failed: {describe(exc)}")
            failed = True
    try:
        save_state(state_path, states)
    except OSError as exc:
        lines.append(f"cannot write the state {state_path}: {exc}")
        failed = True
    return (1 if failed else 0), lines
