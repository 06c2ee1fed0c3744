"""The canary's metric gates (tritonfleet/fleet/gates.py) against a real Prometheus (Debian's ``prometheus``,
installed for the sandbox) on loopback, scraping every second five loopback stubs that expose Triton's counters
in its format and grow them at rates the test chooses; skipped without the binary. Plus the verdict's words
against a stub Prometheus API."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.request

import pytest

from tests.stubhttp import QuietHandler, serve
from tritonfleet.fleet import gates

#: per host: (successes, failures, duration in µs per success), added at each scrape
RATES = {"h1": (10, 5, 2000), "h2": (10, 0, 2000), "h3": (10, 0, 2100), "h4": (0, 0, 0), "h5": (10, 0, 6000)}


def label(host: str) -> str:
    """The host label Prometheus has: inventory names as users write them, with - and . (bench/rollout.py's
    bench-1 hosts found a matcher PromQL refused)."""
    return f"inf2-{host}.prod"


def exporter(rates):
    counts = {"success": 0, "failure": 0, "duration_us": 0}
    lock = threading.Lock()

    class Handler(QuietHandler):
        def do_GET(self):
            with lock:
                ok, failed, us = rates
                counts["success"] += ok
                counts["failure"] += failed
                counts["duration_us"] += ok * us
                body = "".join(f"# TYPE nv_inference_request_{k} counter\n"
                               f'nv_inference_request_{k}{{model="add_sub",version="1"}} {v}\n'
                               for k, v in counts.items())
            self._reply(200, body.encode())

    return Handler


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    binary = shutil.which("prometheus")
    if not binary:
        pytest.skip("no prometheus binary (apt-get install prometheus)")
    tmp = tmp_path_factory.mktemp("prom")
    stubs = {host: serve(exporter(rates)) for host, rates in RATES.items()}
    targets = "\n".join(f"      - targets: ['{url.removeprefix('http://')}']\n        labels: {{host: '{label(host)}', server: triton}}"
                        for host, (_srv, url) in stubs.items())
    (tmp / "prometheus.yml").write_text(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: triton
    static_configs:
{targets}
""")
    port = free_port()
    proc = subprocess.Popen([binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 15
        while True:  # ready, with at least 6 samples of every host
            try:
                q = urllib.request.urlopen(f"{url}/api/v1/query?query=min(count_over_time("
                                           "nv_inference_request_success%5B30s%5D))", timeout=2)
                result = json.loads(q.read())["data"]["result"]
                if result and float(result[0]["value"][1]) >= 6:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "prometheus did not scrape the stubs in 15 s"
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for srv, _url in stubs.values():
            srv.shutdown()


def judge(url, canary, rest=("h2",), **limits):
    return gates.evaluate(url, [label(h) for h in canary], [label(h) for h in rest], 5, max_error_ratio=limits.get("errors", 0.01),
                          max_latency_ratio=limits.get("latency", 1.5))


def test_a_canary_failing_a_third_of_its_requests_breaches_the_error_ratio(prometheus):
    v = judge(prometheus, ["h1"])
    assert not v.ok and v.breach.metric == "error ratio"
    assert v.breach.canary == pytest.approx(1 / 3, rel=0.02) and v.breach.rest == 0
    assert v.line().startswith("error ratio: canary 0.33") and "> max 0.01 (others 0) over 5s ending 20" in v.line()


def test_a_canary_like_the_others_passes(prometheus):
    v = judge(prometheus, ["h3"])
    assert v.ok and v.breach is None, v.line()
    lat = [m for m in v.measures if m.metric.startswith("latency")][0]
    assert lat.canary == pytest.approx(2.1, rel=0.01) and lat.rest == pytest.approx(2.0, rel=0.01)  # ms per request
    assert v.line().startswith("passed: requests: canary ")


def test_a_canary_three_times_slower_breaches_the_latency_ratio(prometheus):
    v = judge(prometheus, ["h5"])
    assert not v.ok and v.breach.metric == "latency per request (ms)"
    assert v.breach.limit == pytest.approx(3.0, rel=0.01) and v.breach.canary == pytest.approx(6.0, rel=0.01)
    assert judge(prometheus, ["h5"], latency=3.5).ok  # the threshold is data


def test_a_canary_without_traffic_is_a_breach_not_a_pass(prometheus):
    v = judge(prometheus, ["h4"])
    assert not v.ok and v.breach.metric == "requests"
    assert v.breach.why.startswith("requests: none on the canary (canary 0, others ")
    assert v.breach.why.endswith("): nothing to compare")
    assert not judge(prometheus, ["h3"], rest=["h4", "nobody"]).ok  # nor may the others be idle


def test_several_hosts_are_summed_per_group(prometheus):
    v = judge(prometheus, ["h1", "h3"], rest=["h2", "h5"], errors=0.5, latency=10)
    errors = [m for m in v.measures if m.metric == "error ratio"][0]
    assert errors.canary == pytest.approx(5 / 25, rel=0.02) and v.ok


def test_host_names_are_matched_exactly():
    # the body of a PromQL "..." string: RE2's escapes, each backslash doubled for the string literal
    assert gates.host_matcher(["a.b", "c+d", "bench-1"]) == r"a\\.b|bench-1|c\\+d"
    assert gates.host_matcher(['odd"name']) == r'odd\"name'


def test_a_prometheus_that_cannot_be_asked_is_one_line():
    with pytest.raises(gates.GateError, match=r"^prometheus http://127\.0\.0\.1:9: URLError: "):
        gates.evaluate("http://127.0.0.1:9", ["h1"], ["h2"], 60, max_error_ratio=0.01, max_latency_ratio=1.5)


def test_a_query_error_is_one_line():
    class Handler(QuietHandler):
        def do_GET(self):
            self._reply(400, json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}).encode())

    srv, url = serve(Handler)
    try:
        with pytest.raises(gates.GateError) as info:
            gates.evaluate(url, ["h1"], ["h2"], 60, max_error_ratio=0.01, max_latency_ratio=1.5)
    finally:
        srv.shutdown()
    assert str(info.value) == f"prometheus {url}: bad_data: parse error"
