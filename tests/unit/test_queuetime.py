"""The agent's queue-time metric (``tritonfleet/agent/queuetime.py``): Triton's metrics text parsed, successive
scrapes made into milliseconds per request (several models, a counter reset, no traffic), the scrape over HTTP,
and ``PutMetricData`` against moto's CloudWatch."""

from __future__ import annotations

import datetime
import json
import socket

import boto3
import pytest
from moto import mock_aws

from tests.stubhttp import QuietHandler, serve
from tritonfleet.agent import queuetime
from tritonfleet.agent.queuetime import Counters, QueueTime, QueueTimeError

REGION = "us-east-1"


def triton_metrics(models: dict[tuple[str, str], tuple[float, float]], *, extra: str = "") -> str:
    """What Triton 2.51 prints on :8002/metrics, for ``{(model, version): (queue_us, successes)}``."""
    def family(name: str, kind: str, help_text: str, rows: list[tuple[str, float]]) -> list[str]:
        return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"] + [f"{name}{{{lb}}} {v:g}" for lb, v in rows]

    labels = {key: f'model="{key[0]}",version="{key[1]}"' for key in models}
    lines = family("nv_inference_request_success", "counter", "Number of successful inference requests, all batch sizes",
                   [(labels[k], n) for k, (_q, n) in models.items()])
    lines += family("nv_inference_request_failure", "counter", "Number of failed inference requests, all batch sizes",
                    [(f'model="{k[0]}",reason="{r}",version="{k[1]}"', 7) for k in models for r in ("OTHER", "REJECTED")])
    lines += family("nv_inference_count", "counter", "Number of inferences performed (does not include cached requests)",
                    [(labels[k], n * 4) for k, (_q, n) in models.items()])
    lines += family("nv_inference_request_duration_us", "counter", "Cumulative inference request duration in microseconds "
                    "(includes cached requests)", [(labels[k], q * 9) for k, (q, _n) in models.items()])
    lines += family("nv_inference_queue_duration_us", "counter", "Cumulative inference queuing duration in microseconds "
                    "(includes cached requests)", [(labels[k], q) for k, (q, _n) in models.items()])
    lines += family("nv_inference_pending_request_count", "gauge", "Instantaneous number of pending requests",
                    [(labels[k], 3) for k in models])
    lines += family("nv_cpu_utilization", "gauge", "CPU utilization rate [0.0 - 1.0]", [("", 0.4)])
    lines = [line.replace("{}", "") for line in lines]
    return "\n".join(lines) + "\n" + extra


TWO_MODELS = {("resnet50", "1"): (120_000.0, 100.0), ("bert", "3"): (30_000.0, 50.0)}


# -- parsing -------------------------------------------------------------------------------------------------------

def test_counters_sum_every_model_and_skip_other_families():
    found = queuetime.counters(triton_metrics(TWO_MODELS))
    assert found.series == {"model=bert,version=3": (30_000.0, 50.0), "model=resnet50,version=1": (120_000.0, 100.0)}
    assert (found.queue_us, found.requests) == (150_000.0, 150.0)


def test_exposition_labels_escapes_timestamps_and_special_values():
    text = ('# HELP x a "help" line\n# TYPE x counter\n\n'
            'x{model="we\\"ird,}name",version="1",} 12 1700000000000\n'
            'x{ model = "a\\\\b" , version="2"} +Inf\n'
            'up 1\n'
            'nan_metric NaN\n')
    parsed = queuetime.parse_exposition(text)
    assert parsed.types == {"x": "counter"}
    assert [(s.name, s.labels) for s in parsed.samples[:2]] == [
        ("x", (("model", 'we"ird,}name'), ("version", "1"))), ("x", (("model", "a\\b"), ("version", "2")))]
    assert parsed.samples[0].value == 12 and parsed.samples[1].value == float("inf")
    assert parsed.samples[2].labels == () and parsed.samples[2].value == 1


@pytest.mark.parametrize("line, message", [
    ('x{model="a" version="1"} 3', "metrics line 1: cannot read the labels"),
    ('x{model="a"} three', "metrics line 1: 'three' is not a number"),
    ('x{model="a"', "metrics line 1: not a Prometheus sample"),
])
def test_a_line_that_is_not_a_sample_is_one_line(line, message):
    with pytest.raises(QueueTimeError, match=message) as exc:
        queuetime.parse_exposition(line + "\n")
    assert "\n" not in str(exc.value)
    lenient = queuetime.parse_exposition(f"{line}\n# TYPE y gauge\ny 4\n", strict=False)  # the line skipped
    assert [(s.name, s.value) for s in lenient.samples] == [("y", 4.0)] and lenient.types == {"y": "gauge"}


def test_a_server_without_models_has_no_series_and_another_exporter_is_refused():
    empty = ("# HELP nv_inference_request_success Number of successful inference requests, all batch sizes\n"
             "# TYPE nv_inference_request_success counter\n"
             "# HELP nv_inference_queue_duration_us Cumulative inference queuing duration in microseconds\n"
             "# TYPE nv_inference_queue_duration_us counter\n")
    assert queuetime.counters(empty).series == {}
    with pytest.raises(QueueTimeError, match="no nv_inference_queue_duration_us and no nv_inference_request_success"):
        queuetime.counters("# TYPE node_load1 gauge\nnode_load1 0.5\n")
    with pytest.raises(QueueTimeError, match="not a count"):
        queuetime.counters('nv_inference_queue_duration_us{model="a",version="1"} -5\n'
                           'nv_inference_request_success{model="a",version="1"} 1\n')


# -- intervals -----------------------------------------------------------------------------------------------------

def _scrape(models) -> Counters:
    return queuetime.counters(triton_metrics(models))


def test_queue_time_is_the_delta_of_both_counters_over_every_model():
    state = QueueTime("s0")
    first = state.update(_scrape(TWO_MODELS), 1000.0)
    assert first.value_ms is None and "first scrape" in first.line
    # resnet50: 200 more requests, 3 000 000 us more queued; bert: 50 more, 500 000 us more
    later = {("resnet50", "1"): (3_120_000.0, 300.0), ("bert", "3"): (530_000.0, 100.0)}
    interval = state.update(_scrape(later), 1060.0)
    assert interval.requests == 250
    assert interval.value_ms == pytest.approx(3_500_000 / 250 / 1000)  # 14 ms, not an average of the averages
    assert "14.000 ms queued per request, 250 requests in 60 s" in interval.line


def test_no_requests_is_zero_and_a_new_model_counts_from_zero():
    state = QueueTime("s0")
    state.update(_scrape(TWO_MODELS), 0.0)
    idle = state.update(_scrape(TWO_MODELS), 60.0)
    assert (idle.value_ms, idle.requests) == (0.0, 0.0) and "no requests" in idle.line
    loaded = {**TWO_MODELS, ("yolo", "1"): (40_000.0, 10.0)}  # loaded during the interval
    interval = state.update(_scrape(loaded), 120.0)
    assert (interval.value_ms, interval.requests) == (4.0, 10.0)


@pytest.mark.parametrize("after", [
    {("resnet50", "1"): (20_000.0, 10.0), ("bert", "3"): (5_000.0, 5.0)},   # Triton restarted: every series
    {("resnet50", "1"): (900_000.0, 400.0), ("bert", "3"): (1_000.0, 2.0)},  # bert reloaded, the sum still grew
    {("resnet50", "1"): (110_000.0, 100.0), ("bert", "3"): (30_000.0, 50.0)},  # the queue counter alone went down
])
def test_a_counter_that_went_down_skips_the_interval_and_says_so(after):
    state = QueueTime("s0")
    state.update(_scrape(TWO_MODELS), 0.0)
    reset = state.update(_scrape(after), 60.0)
    assert reset.value_ms is None and "went down" in reset.line and "interval skipped" in reset.line
    # the next interval starts from the counters after the reset
    more = {k: (q + 1000.0 * 10, n + 10) for k, (q, n) in after.items()}
    assert state.update(_scrape(more), 120.0).value_ms == pytest.approx(1.0)


def test_a_long_gap_and_queued_requests_without_successes_are_skipped():
    state = QueueTime("s0", max_gap=300)
    state.update(_scrape(TWO_MODELS), 0.0)
    later = {k: (q + 5000, n + 5) for k, (q, n) in TWO_MODELS.items()}
    gap = state.update(_scrape(later), 3600.0)
    assert gap.value_ms is None and "3600 s since the last scrape" in gap.line
    stuck = {k: (q + 9_000_000, n) for k, (q, n) in later.items()}  # waited, then failed: not an idle server
    interval = state.update(_scrape(stuck), 3660.0)
    assert interval.value_ms is None and "no request succeeded" in interval.line


# -- the scrape ----------------------------------------------------------------------------------------------------

@pytest.fixture
def metrics_server():
    pages: dict[str, tuple[int, bytes]] = {}

    class Handler(QuietHandler):
        def do_GET(self):
            self._reply(*pages.get(self.path, (404, b"not found")))

    server, url = serve(Handler)
    yield pages, url
    server.shutdown()
    server.server_close()


def test_scrape_reads_the_page_and_failures_are_one_line(metrics_server):
    pages, url = metrics_server
    pages["/metrics"] = (200, triton_metrics(TWO_MODELS).encode())
    assert queuetime.counters(queuetime.scrape(url + "/metrics", 2)).requests == 150
    with pytest.raises(QueueTimeError, match=r"answered HTTP 404") as exc:
        queuetime.scrape(url + "/nothing", 2)
    assert str(exc.value).startswith(url)
    server, closed = serve(QuietHandler)
    server.shutdown()
    server.server_close()
    with pytest.raises(QueueTimeError, match=r"^cannot read http://127\.0\.0\.1:\d+/metrics: .*refused"):
        queuetime.scrape(closed + "/metrics", 2)
    with pytest.raises(QueueTimeError, match="expected http://host:port/metrics"):
        queuetime.scrape("file:///etc/passwd", 2)


def test_a_server_that_does_not_answer_in_time_is_one_line():
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # accepts the connection, never answers
    try:
        with pytest.raises(QueueTimeError, match=r"no answer within 0\.3 s$"):
            queuetime.scrape(f"http://127.0.0.1:{silent.getsockname()[1]}/metrics", 0.3)
    finally:
        silent.close()


# -- CloudWatch ----------------------------------------------------------------------------------------------------

@pytest.fixture
def cloudwatch(monkeypatch):
    for var in ("AWS_PROFILE", "AWS_CA_BUNDLE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield boto3.client("cloudwatch", region_name=REGION)


def _statistics(client, dims, at: float) -> list[dict]:
    stamp = datetime.datetime.fromtimestamp(at, tz=datetime.timezone.utc)
    return client.get_metric_statistics(
        Namespace="tritonfleet", MetricName=queuetime.METRIC_NAME, Dimensions=dims, Unit="Milliseconds",
        StartTime=stamp - datetime.timedelta(minutes=5), EndTime=stamp + datetime.timedelta(minutes=5), Period=600,
        Statistics=["Average", "SampleCount", "Maximum"])["Datapoints"]


def _metrics(client) -> list[tuple[tuple[str, str], ...]]:
    """The metric's dimension sets (moto lists one per data point, CloudWatch one per set)."""
    listed = client.list_metrics(Namespace="tritonfleet")["Metrics"]
    assert {m["MetricName"] for m in listed} == {queuetime.METRIC_NAME}
    return sorted({tuple(sorted((d["Name"], d["Value"]) for d in m["Dimensions"])) for m in listed})


def test_publish_puts_each_value_with_fleet_and_family_and_with_fleet_alone(cloudwatch):
    at = datetime.datetime.now(datetime.timezone.utc).timestamp() - 60
    client = queuetime.make_client(REGION)
    config = client.meta.config
    assert config.retries == {"mode": "standard", "total_max_attempts": 3}
    assert (config.connect_timeout, config.read_timeout) == (queuetime.CONNECT_TIMEOUT, queuetime.READ_TIMEOUT)
    assert queuetime.publish(client, "prod", "inf2", [14.0, 6.0], at) == 2
    assert _metrics(cloudwatch) == [(("family", "inf2"), ("fleet", "prod")), (("fleet", "prod"),)]
    [point] = _statistics(cloudwatch, [{"Name": "fleet", "Value": "prod"}, {"Name": "family", "Value": "inf2"}], at)
    assert point["Unit"] == "Milliseconds"
    # moto matches dimensions as a subset (CloudWatch exactly): fleet alone sees both copies here
    assert (point["Average"], point["Maximum"]) == (10.0, 14.0)
    [both] = _statistics(cloudwatch, [{"Name": "fleet", "Value": "prod"}], at)
    assert (both["Average"], both["SampleCount"]) == (10.0, 4.0)  # each value twice
    assert _statistics(cloudwatch, [{"Name": "fleet", "Value": "staging"}], at) == []
    with pytest.raises(QueueTimeError, match="family '': expected 1-255 characters"):
        queuetime.publish(client, "prod", "", [1.0], at)


def test_main_once_scrapes_every_server_publishes_and_keeps_its_state(cloudwatch, tmp_path):
    state = tmp_path / "state" / "queuetime.json"
    pages = {"http://s0/metrics": TWO_MODELS, "http://s1/metrics": {("bert", "3"): (0.0, 0.0)}}
    clock = iter([1000.0, 1000.5, 1060.0, 1060.5, 1120.0])
    now = datetime.datetime.now(datetime.timezone.utc).timestamp()

    def fetch(url: str, timeout: float) -> str:
        assert timeout == queuetime.SCRAPE_TIMEOUT
        if url not in pages:
            raise QueueTimeError(f"cannot read {url}: Connection refused")
        return triton_metrics(pages[url])

    def once(urls=tuple(pages)):
        return queuetime.main_once(list(urls), "prod", "inf2", str(state), region=REGION,
                                   clock=lambda: now - 3000 + next(clock), fetch=fetch)

    rc, lines = once()
    assert rc == 0 and len(lines) == 2 and all("first scrape" in line for line in lines), lines
    assert cloudwatch.list_metrics(Namespace="tritonfleet")["Metrics"] == []
    assert set(json.loads(state.read_text())["servers"]) == set(pages)

    pages["http://s0/metrics"] = {("resnet50", "1"): (1_120_000.0, 200.0), ("bert", "3"): (30_000.0, 50.0)}
    rc, lines = once()  # a later run of the timer: the counters come from the state file
    assert rc == 0, lines
    assert lines[0].startswith("http://s0/metrics: 10.000 ms queued per request, 100 requests in 60 s")
    assert lines[1] == "http://s1/metrics: no requests in 60 s: 0 ms"
    assert lines[2] == "published 2 value(s) of tritonfleet/QueueTimePerRequest for fleet prod (inf2)"
    [point] = _statistics(cloudwatch, [{"Name": "fleet", "Value": "prod"}, {"Name": "family", "Value": "inf2"}],
                          now - 3000 + 1060)
    assert (point["Average"], point["SampleCount"]) == (5.0, 2.0)

    rc, lines = once(["http://s0/metrics", "http://gone/metrics"])  # one server down: the other still counts
    assert rc == 1, lines
    assert lines == ["http://s0/metrics: no requests in 60 s: 0 ms", "cannot read http://gone/metrics: Connection refused",
                     "published 1 value(s) of tritonfleet/QueueTimePerRequest for fleet prod (inf2)"]


def test_main_once_failures_are_lines_not_tracebacks(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    state = tmp_path / "queuetime.json"
    state.write_text("{not json")
    clock = iter([0.0, 60.0])
    pages = iter([TWO_MODELS, {k: (q + 1000, n + 1) for k, (q, n) in TWO_MODELS.items()}])

    class Refusing:
        def put_metric_data(self, **kwargs):
            from botocore.exceptions import ClientError
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "not allowed\nto PutMetricData"}},
                              "PutMetricData")

    def run():
        return queuetime.main_once(["http://s0/metrics"], "prod", "inf2", str(state), client=Refusing(),
                                   clock=lambda: next(clock), fetch=lambda _url, _t: triton_metrics(next(pages)))

    rc, lines = run()
    assert rc == 0 and lines[0] == f"state {state} unreadable (JSONDecodeError): starting over", lines
    rc, lines = run()
    assert rc == 1 and lines[-1] == "PutMetricData to CloudWatch failed: AccessDenied: not allowed to PutMetricData"
    assert json.loads(state.read_text())["servers"]["http://s0/metrics"]["at"] == 60.0  # the interval is not retried
    assert queuetime.main_once([], "", "inf2", str(state)) == (
        1, ["fleet '': expected 1-255 characters (a CloudWatch dimension value)"])
