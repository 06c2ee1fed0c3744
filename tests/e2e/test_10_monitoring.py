"""Monitoring on sandbox hosts, asserted with queries to the sandbox's real Prometheus: exporters installed by
`deploys/monitoring.py` on a Neuron, a Trainium and a GPU host, targets written by `tritonfleet monitoring
targets`, every target up, Triton's request counters rising with traffic, NeuronCore metrics on the Neuron
hosts, node metrics with a textfile metric, every dashboard expression answered (with scheduled QA's metrics
and light traffic), and a second run changing nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.e2e.helpers import ROOT, assert_noop, host_ip, poll, pyinfra, ssh, write_inventory
from tritonfleet.face import dashboards
from tritonfleet.sandbox import layout

HOSTS = ["inf2", "trn1", "gpu"]
NEURON = ["inf2", "trn1"]
WATCHDOG_PANELS = {"Watchdog actions per hour", "Watchdog last look"}
DEADLINE = 120  # seconds any one wait for Prometheus may take (scrape interval 5 s)


def query(expr: str) -> list[dict]:
    url = f"{layout.prometheus_url()}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]["result"]


def by_host(expr: str) -> dict[str, float]:
    return {r["metric"].get("host", ""): float(r["value"][1]) for r in query(expr)}


def wait_for(what: str, check, deadline: float = DEADLINE):
    """Poll ``check()`` every 2 s (bounded in time) until it returns something truthy; fail naming ``what``."""
    return poll(f"{what} in Prometheus", check, deadline, interval=2)


def infer(host: str, n: int) -> int:
    """``n`` add_sub requests to the host's first server (bounded count, 10 s timeout each); returns successes."""
    client = httpclient.InferenceServerClient(f"{host_ip(host)}:8000", network_timeout=10)
    a = np.full((1, 4), 2, np.float32)
    ok = 0
    for _ in range(n):
        inputs = [httpclient.InferInput("INPUT0", a.shape, "FP32"), httpclient.InferInput("INPUT1", a.shape, "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a)
        if client.infer("add_sub", inputs).as_numpy("OUTPUT0")[0][0] == 4.0:
            ok += 1
    return ok


@pytest.fixture(scope="module")
def monitored(sandbox, tmp_path_factory):
    base = tmp_path_factory.mktemp("monitoring")
    # the sandbox's own targets carry fleet="sandbox": the same labels here, so rewriting the target files does not
    # start new series beside the old ones
    inv = write_inventory(base, HOSTS, extra={"monitoring_fleet": "sandbox"})
    run = pyinfra(inv, "deploys/serve.py")
    assert run.returncode == 0, run.output[-5000:]
    first = pyinfra(inv, "deploys/monitoring.py")
    assert first.returncode == 0, first.output[-5000:]
    # the user's command: targets for this inventory, into the directory the sandbox Prometheus reads
    out = subprocess.run([sys.executable, "-m", "tritonfleet.face.cli", "monitoring", "targets", "--inventory",
                          str(inv), "--out", str(layout.monitoring_dir())], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    # scheduled QA, run once now: its textfile metrics are what the overview's QA panels show
    qa = pyinfra(inv, "deploys/qa_schedule.py")
    assert qa.returncode == 0, qa.output[-5000:]
    for h in HOSTS:
        ssh(h, "systemctl start tritonfleet-qa.service", timeout=600)
    yield inv, first
    pyinfra(inv, "deploys/qa_unschedule.py")


def test_targets_are_written_per_exporter_kind_with_their_labels(monitored):
    targets = {job: json.loads((layout.monitoring_dir() / f"{job}.json").read_text())
               for job in ("triton", "node", "neuron", "dcgm")}
    assert {g["labels"]["host"] for g in targets["node"]} == set(HOSTS)
    assert {g["labels"]["host"] for g in targets["neuron"]} == set(NEURON)
    assert [g["labels"]["host"] for g in targets["dcgm"]] == ["gpu"]
    triton = {g["labels"]["host"]: g for g in targets["triton"]}
    assert set(triton) == set(HOSTS) and triton["inf2"]["targets"] == [f"{host_ip('inf2')}:8002"]
    labels = triton["trn1"]["labels"]
    assert labels["instance_type"] == "trn1.32xlarge" and labels["family"] == "trn1" and labels["server"]
    assert labels["fleet"] == "sandbox"  # monitoring_fleet (without it: the inventory's name, tests/unit)


def test_every_target_is_up(monitored):
    def all_up():
        results = query("up")
        mine = [r for r in results if r["metric"].get("host") in HOSTS]
        jobs = {(r["metric"]["host"], r["metric"]["job"]) for r in mine if r["value"][1] == "1"}
        want = {(h, "node") for h in HOSTS} | {(h, "triton") for h in HOSTS} | {(h, "neuron") for h in NEURON} \
            | {("gpu", "dcgm")}
        return want <= jobs and jobs

    wait_for("up == 1 for node, triton, neuron and dcgm targets of every host", all_up)


def triton_counter(host: str) -> float:
    """add_sub's nv_inference_request_success read from the server's own metrics endpoint."""
    with urllib.request.urlopen(f"http://{host_ip(host)}:8002/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith('nv_inference_request_success{model="add_sub"'))


def test_inference_requests_are_counted_on_every_serving_host(monitored):
    expr = 'sum by (host) (nv_inference_request_success{model="add_sub"})'
    before = {h: triton_counter(h) for h in HOSTS}
    for h in HOSTS:
        assert infer(h, 20) == 20
    after = {h: triton_counter(h) for h in HOSTS}
    assert all(after[h] >= before[h] + 20 for h in HOSTS), (before, after)
    # Prometheus' series reaches the server's new count on every host (it was below it before the traffic)
    wait_for(f"nv_inference_request_success at the servers' counts {after}",
             lambda: (lambda seen: seen if all(seen.get(h, 0) >= after[h] for h in HOSTS) else None)(by_host(expr)))


def test_neuron_hosts_have_neuroncore_metrics_and_every_host_node_metrics(monitored):
    wait_for("neuroncore_utilization_ratio on both Neuron hosts",
             lambda: set(NEURON) <= set(by_host("neuroncore_utilization_ratio")))
    cores = query('count by (host) (neuroncore_utilization_ratio{host="trn1"})')
    assert cores and float(cores[0]["value"][1]) >= 1
    wait_for("node_memory_MemTotal_bytes on every host",
             lambda: set(HOSTS) <= set(by_host("node_memory_MemTotal_bytes")))
    token = uuid.uuid4().hex[:8]
    for h in HOSTS:  # the textfile collector: a metric written by hand, as QA's scheduled runs write theirs
        ssh(h, f"printf 'tritonfleet_e2e_probe{{token=\"{token}\"}} 1\\n' > /var/lib/prometheus/node-exporter/"
               f"e2e.prom.tmp && mv /var/lib/prometheus/node-exporter/e2e.prom.tmp /var/lib/prometheus/node-exporter/e2e.prom")
    try:
        wait_for("the textfile metric on every host",
                 lambda: set(HOSTS) <= set(by_host(f'tritonfleet_e2e_probe{{token="{token}"}}')))
    finally:
        for h in HOSTS:
            ssh(h, "rm -f /var/lib/prometheus/node-exporter/e2e.prom")
    wait_for("DCGM GPU metrics on the GPU host", lambda: "gpu" in by_host("DCGM_FI_DEV_GPU_UTIL"))


def test_every_dashboard_expression_returns_data(monitored):
    paths = sorted((ROOT / "dashboards").glob("*.json"))
    assert len(paths) >= 3
    stop = threading.Event()

    def traffic():  # steady light traffic while the panels are checked: latency panels divide rate()s
        for _ in range(240):  # bounded: at most 240 rounds of one request per host, ~0.5 s apart
            if stop.is_set():
                return
            for h in HOSTS:
                infer(h, 1)
            stop.wait(0.5)

    sender = threading.Thread(target=traffic, daemon=True)
    sender.start()
    problems: list = []
    try:
        end = time.monotonic() + 100  # a rate() over [1m] needs two scrapes (5 s apart) that saw traffic
        while time.monotonic() < end:
            # the host watchdog's panels: no watchdog runs on these hosts (test_14_watchdog.py queries them)
            problems = dashboards.check(layout.prometheus_url(), paths, allow_empty=WATCHDOG_PANELS)
            if not problems:
                break
            time.sleep(5)
    finally:
        stop.set()
        sender.join(timeout=60)
    assert not problems, "\n".join(map(str, problems))


def test_status_shows_the_exporters_from_prometheus(monitored):
    inv = monitored[0]
    out = subprocess.run([sys.executable, "-m", "tritonfleet.face.cli", "status", "--inventory", str(inv),
                          "--prometheus", layout.prometheus_url()], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "exporters" in out.stdout and "node up" in out.stdout and "DOWN" not in out.stdout


def test_a_second_run_changes_nothing(monitored):
    assert_noop(pyinfra(monitored[0], "deploys/monitoring.py"))
