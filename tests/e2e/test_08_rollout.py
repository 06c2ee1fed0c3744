"""Rolling rollout on 4 sandbox hosts behind the sandbox's HAProxy (the lb host), asserted from outside
(tritonclient through the front door and to each host, the hosts' `current`, HAProxy's Runtime API, the sandbox
Prometheus, the rollout's report):

- a rollout in which one host fails its QA gate: that host is rolled back, the others end on the new version, and
  a bounded client through the balancer (HTTP and gRPC) sees no failed request and no wrong answer;
- traffic canaries with metric gates (weight 10 %, bake 20 s): a canary serving a wrong model is caught by the QA
  gate before it gets traffic, one answering many times slower is rolled back by the latency gate; both leave the
  other hosts untouched, exit non-zero, and neither canary gets more than its weight;
- a host that stops answering its health check after the deploy is a failure of its own ("out of the load
  balancer") and FAIL_PERCENT=0 stops the rollout there;
- a rollout killed mid-batch (no balancer) leaves every host old or new and serving, and completes when re-run."""

from __future__ import annotations

import calendar
import json
import os
import pprint
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import boto3
import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.e2e.helpers import ROOT, host_ip, pyinfra, ssh, write_inventory
from tritonfleet.sandbox import fleet, layout
from tritonfleet.sandbox.inventory import sandbox_hosts
from tritonfleet.sandbox.traffic import Traffic

HOSTS = ["inf2", "trn1", "gpu", "scratch"]  # inventory (state) order: gpu is the third host
BAD = "gpu"
CANARY_FIRST = [BAD, "inf2", "trn1", "scratch"]  # the canary is the first host of the inventory
LB = "lb"
WEIGHT, BAKE = 10, 15
GATES = ["--lb", "haproxy", "--lb-timeout", "60"]
TF = str(Path(sys.executable).parent / "tritonfleet")
ADD_SUB = (fleet.SAMPLES / "add_sub/1/model.py").read_text()
CONFIG = (fleet.SAMPLES / "add_sub/config.pbtxt").read_text()


def _model(name: str, code: str = ADD_SUB) -> dict[str, str]:
    return {f"{name}/config.pbtxt": CONFIG.replace('name: "add_sub"', f'name: "{name}"'), f"{name}/1/model.py": code}


def _seed(s3, prefix: str, tree: dict[str, str]) -> str:
    for path, text in tree.items():
        s3.put_object(Bucket=fleet.S3_BUCKET, Key=prefix + path, Body=text.encode())
    return f"s3://{fleet.S3_BUCKET}/{prefix.rstrip('/')}"


@pytest.fixture(scope="module")
def repos(sandbox, tmp_path_factory):
    """v1 (add_sub, steady), v2 (+ extra), v2bad (add_sub wrong, + extra) and inventories for them."""
    s3 = boto3.client("s3", endpoint_url=fleet.s3_endpoint(), region_name=fleet.S3_REGION,
                      aws_access_key_id="sandbox", aws_secret_access_key="sandbox")
    run = uuid.uuid4().hex[:8]
    v1 = _seed(s3, f"e2e-roll-{run}/v1/", {**_model("add_sub"), **_model("steady")})
    v2 = _seed(s3, f"e2e-roll-{run}/v2/", {**_model("add_sub"), **_model("steady"), **_model("extra")})
    wrong = ADD_SUB.replace("(in0 + in1)", "(in0 + in1 + 100)")
    bad = _seed(s3, f"e2e-roll-{run}/v2bad/", {**_model("add_sub", wrong), **_model("steady"), **_model("extra")})
    # right answers, 40 ms late: many times the others' latency per request (a few ms)
    slow_code = ADD_SUB.replace("    def execute(self, requests):\n", "    def execute(self, requests):\n"
                                "        __import__('time').sleep(0.04)\n")
    assert slow_code != ADD_SUB
    slow = _seed(s3, f"e2e-roll-{run}/v2slow/", {**_model("add_sub", slow_code), **_model("steady"),
                                                  **_model("extra")})
    base = tmp_path_factory.mktemp("rollout")
    common = {"qa_reports_dir": str(base / "reports"), "monitoring_fleet": "sandbox"}

    def inventory(name: str, hosts: list[str] = HOSTS, **kw) -> Path:
        (base / name).mkdir()
        inv = write_inventory(base / name, hosts, **kw)
        # the front door: the lb group (deploys/serve.py and the rollout leave its host out)
        # checks every 500 ms, one pass to rise: a put back proves the changed server in about a second
        lb = [(n, {**d, "lb_check_interval_ms": 500, "lb_rise": 1}) for n, d in sandbox_hosts([LB])]
        inv.write_text(inv.read_text() + f"lb = {pprint.pformat(lb)}\n")
        return inv

    inv = {"v1": inventory("v1", extra={**common, "models_s3_uri": v1}),
           # no QA where the test is not about it: each host's turn is shorter
           "v2": inventory("v2", extra={**common, "models_s3_uri": v2, "qa_suites": None}),
           "mixed": inventory("mixed", extra={**common, "models_s3_uri": v2}, per_host={BAD: {"models_s3_uri": bad}}),
           "wrong canary": inventory("wrong", CANARY_FIRST, extra={**common, "models_s3_uri": v2},
                                     per_host={BAD: {"models_s3_uri": bad}}),
           "slow canary": inventory("slow", CANARY_FIRST, extra={**common, "models_s3_uri": v2, "qa_suites": None},
                                    per_host={BAD: {"models_s3_uri": slow}}),
           # the new version publishes the server's HTTP port elsewhere: the balancer's check (port 8000) fails
           "unhealthy": inventory("unhealthy", CANARY_FIRST, extra={**common, "models_s3_uri": v2, "qa_suites": None},
                                  per_host={BAD: {"triton_servers": [{"http_port": 8010}]}})}
    return base, inv


@pytest.fixture(scope="module")
def front_door(repos):
    """v1 served on the 4 hosts, HAProxy in front of them, and the sandbox Prometheus scraping their Triton
    servers and HAProxy (`tritonfleet monitoring targets` for this inventory, into the sandbox's target files)."""
    base, inv = repos
    _serve_v1(inv)
    run = pyinfra(inv["v1"], "deploys/lb.py")
    assert run.returncode == 0, run.output[-5000:]
    out = subprocess.run([TF, "monitoring", "targets", "--inventory", str(inv["v1"]), "--out",
                          str(layout.monitoring_dir())], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    _ready_in_balancer(HOSTS)
    return base, inv


#: each host's model version after the last v1 deploy (``_serve_v1``)
_V1: dict[str, str] = {}


def _serve_v1(inv, *, force: bool = False) -> dict[str, str]:
    """v1 on every host: a deploy, unless every host still serves the version the last v1 deploy left (a rollback
    puts it back; the deploy would change nothing, at some 10 s of the suite's time per test)."""
    if not force and _V1 and all(_current(h) == _V1[h] and not _ready(h, "extra") for h in HOSTS):
        return dict(_V1)
    run = pyinfra(inv["v1"], "deploys/serve.py")
    assert run.returncode == 0, run.output[-5000:]
    _V1.clear()
    _V1.update({h: _current(h) for h in HOSTS})
    return dict(_V1)


def _current(host: str) -> str:
    return ssh(host, "readlink /opt/tritonfleet/models/current").stdout.strip()


def _ready(host: str, model: str) -> bool:
    try:
        return httpclient.InferenceServerClient(f"{host_ip(host)}:8000").is_model_ready(model)
    except Exception:  # noqa: BLE001 - not answering counts as not ready
        return False


def _add_sub(host: str) -> float:
    a = np.full((1, 4), 2, np.float32)
    inputs = [httpclient.InferInput("INPUT0", a.shape, "FP32"), httpclient.InferInput("INPUT1", a.shape, "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a / 2)
    return float(httpclient.InferenceServerClient(f"{host_ip(host)}:8000").infer("add_sub", inputs)
                 .as_numpy("OUTPUT0")[0][0])


def _servers_state() -> dict[str, dict[str, str]]:
    """``{"<host>-triton": {"state": UP/DOWN/..., "admin": ready/drain/maint, "weight": "…"}}`` of the HTTP backend,
    from HAProxy's Runtime API on the lb host (root only)."""
    out = ssh(LB, "echo 'show stat' | socat stdio unix-connect:/run/haproxy/admin.sock").stdout
    lines = [line for line in out.splitlines() if line.strip()]
    head = lines[0].lstrip("# ").split(",")
    rows = [dict(zip(head, line.split(","), strict=False)) for line in lines[1:]]
    return {r["svname"]: {"state": r["status"], "weight": r["weight"]} for r in rows
            if r["pxname"] == "triton_http" and r["svname"] not in ("FRONTEND", "BACKEND")}


def _ready_in_balancer(hosts: list[str], deadline: float = 60) -> dict:
    """Every host's server UP with the same weight in HAProxy (bounded in time)."""
    end = time.monotonic() + deadline
    while True:
        state = _servers_state()
        mine = {h: state.get(f"{h}-triton", {}) for h in hosts}
        if all(s.get("state") == "UP" for s in mine.values()) and len({s["weight"] for s in mine.values()}) == 1:
            return state
        if time.monotonic() > end:
            pytest.fail(f"not every server UP with equal weights in HAProxy after {deadline}s: {mine}")
        time.sleep(1)


def _prometheus(expr: str, at: float) -> float:
    url = f"{layout.prometheus_url()}/api/v1/query?" + urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.load(resp)
    result = body["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


def _canary_share(report: dict, canary: list[str]) -> float:
    """The canary hosts' share (%) of the requests every host's Triton counted over the bake window, read from the
    sandbox Prometheus with a query of this test's own (not the gate's)."""
    traffic = report["traffic_canary"]
    stamp = re.search(r"ending (\S+Z)", traffic["verdict"]["window"]).group(1)
    end = calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))
    window = int(traffic["bake"])

    def requests(hosts: str) -> float:
        return _prometheus(f'sum(increase(nv_inference_request_success{{job="triton",model="add_sub",'
                           f'host=~"{hosts}"}}[{window}s]))', end)

    mine, everyone = requests("|".join(canary)), requests("|".join(HOSTS))
    assert everyone > 0, f"no add_sub requests in Prometheus over the bake window ending {stamp}"
    return 100 * mine / everyone


def _front_door_traffic(**kw) -> Traffic:
    return Traffic(host_ip(LB), rate=40, max_seconds=900, **kw)


def _assert_clean(traffic: Traffic, at_least: int) -> None:
    summary = traffic.summary()
    assert summary["failed"] == 0 and summary["wrong"] == 0, (summary["errors"], summary)
    assert summary["ok"] >= at_least and all(p["ok"] for p in summary["per_protocol"].values()), summary


class Client:
    """Queries `steady` (a model no version changes) on every host in turn, bounded in count and time."""

    def __init__(self, max_requests: int = 20000, max_seconds: float = 900) -> None:
        self.ok, self.failures = 0, []
        self.max_requests, self.max_seconds = max_requests, max_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        clients = {h: httpclient.InferenceServerClient(f"{host_ip(h)}:8000", connection_timeout=5, network_timeout=5)
                   for h in HOSTS}
        a = np.ones((1, 4), np.float32)
        started, n = time.monotonic(), 0
        while not self._stop.is_set() and n < self.max_requests and time.monotonic() - started < self.max_seconds:
            host = HOSTS[n % len(HOSTS)]
            n += 1
            inputs = [httpclient.InferInput("INPUT0", a.shape, "FP32"), httpclient.InferInput("INPUT1", a.shape, "FP32")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(a)
            try:
                clients[host].infer("steady", inputs)
                self.ok += 1
            except Exception as exc:  # noqa: BLE001 - counted and shown
                self.failures.append(f"{host}: {type(exc).__name__}: {exc}"[:200])
            time.sleep(0.02)

    def __enter__(self) -> Client:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)


def _rollout(inv, reports: Path, *args: str, timeout: float = 1500) -> tuple[subprocess.CompletedProcess, dict]:
    before = set(reports.glob("rollout-*.json"))
    proc = subprocess.run([TF, "rollout", "--inventory", str(inv), "--reports", str(reports), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    (report,) = set(reports.glob("rollout-*.json")) - before
    return proc, json.loads(report.read_text())


def _untouched(v1: dict[str, str], hosts: list[str]) -> None:
    for host in hosts:
        assert _current(host) == v1[host] and not _ready(host, "extra"), host


def test_a_wrong_model_canary_is_caught_by_the_qa_gate_before_it_gets_traffic(front_door):
    base, inv = front_door
    v1 = _serve_v1(inv)
    _ready_in_balancer(HOSTS)
    with _front_door_traffic() as traffic:
        proc, report = _rollout(inv["wrong canary"], base / "reports", "--canary", "1", "--fail-percent", "0",
                                "--canary-weight", str(WEIGHT), "--bake", str(BAKE), "--prometheus",
                                layout.prometheus_url(), *GATES)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    status = {h["host"]: h["status"] for h in report["hosts"]}
    assert status == {BAD: "rolled back", "inf2": "not started", "trn1": "not started", "scratch": "not started"}
    assert report["traffic_canary"]["set"] is None  # no weight was ever given: its share stayed 0
    assert "canary hosts failed" in report["stopped"]
    assert _current(BAD) == v1[BAD] and _add_sub(BAD) == 3.0
    _untouched(v1, ["inf2", "trn1", "scratch"])
    _assert_clean(traffic, at_least=50)
    _ready_in_balancer(HOSTS)


def test_a_slow_canary_is_rolled_back_by_the_latency_gate_within_its_weight(front_door):
    base, inv = front_door
    v1 = _serve_v1(inv)
    _ready_in_balancer(HOSTS)
    with _front_door_traffic() as traffic:
        proc, report = _rollout(inv["slow canary"], base / "reports", "--canary", "1", "--fail-percent", "0",
                                "--canary-weight", str(WEIGHT), "--bake", str(BAKE), "--prometheus",
                                layout.prometheus_url(), *GATES)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    hosts = {h["host"]: h for h in report["hosts"]}
    assert hosts[BAD]["status"] == "rolled back" and hosts[BAD]["failed_step"] == "canary gate", hosts[BAD]
    assert {h: r["status"] for h, r in hosts.items() if h != BAD} == dict.fromkeys(["inf2", "trn1", "scratch"],
                                                                                      "not started")
    verdict = report["traffic_canary"]["verdict"]
    assert not verdict["ok"] and verdict["line"].startswith("latency per request: canary"), verdict
    breach = next(m for m in verdict["measures"] if m["breach"])
    assert breach["metric"] == "latency per request (ms)" and breach["canary"] > 5 * breach["rest"], breach
    assert f"over {BAKE}s ending" in verdict["line"]  # the report names metric, values and window
    share = _canary_share(report, [BAD])
    assert 0 < share <= WEIGHT + 3, f"the canary got {share:.1f}% of the requests (weight {WEIGHT}%)"
    assert _current(BAD) == v1[BAD] and _add_sub(BAD) == 3.0
    _untouched(v1, ["inf2", "trn1", "scratch"])
    _assert_clean(traffic, at_least=200)  # slow is not failed: every answer came, and right
    _ready_in_balancer(HOSTS)  # the weights restored, the canary back in


def test_a_host_failing_its_health_check_after_the_deploy_counts_as_failed_and_stops_the_rollout(front_door):
    base, inv = front_door
    v1 = _serve_v1(inv)
    _ready_in_balancer(HOSTS)
    with _front_door_traffic() as traffic:
        proc, report = _rollout(inv["unhealthy"], base / "reports", "--canary", "1", "--fail-percent", "0",
                                "--lb", "haproxy", "--lb-timeout", "10")
    assert proc.returncode != 0, proc.stdout + proc.stderr
    hosts = {h["host"]: h for h in report["hosts"]}
    assert hosts[BAD]["status"] == "out of the load balancer", hosts[BAD]
    assert "put back" in hosts[BAD]["message"] and report["failures"] == 1
    assert "over fail_percent" in report["stopped"]
    assert {h: r["status"] for h, r in hosts.items() if h != BAD} == dict.fromkeys(["inf2", "trn1", "scratch"],
                                                                                      "not started")
    _untouched(v1, ["inf2", "trn1", "scratch"])
    assert _servers_state()[f"{BAD}-triton"]["state"].startswith("DOWN")
    _assert_clean(traffic, at_least=50)  # the balancer kept every request on the healthy hosts
    v1 = _serve_v1(inv, force=True)  # back on its port: the balancer takes it back by itself
    _ready_in_balancer(HOSTS)


def test_a_host_failing_its_qa_gate_is_rolled_back_and_the_others_end_on_v2(front_door):
    base, inv = front_door
    v1 = _serve_v1(inv)
    _ready_in_balancer(HOSTS)
    with Client() as client, _front_door_traffic() as traffic:
        proc, report = _rollout(inv["mixed"], base / "reports", "--batch", "3", "--canary", "1",
                                "--fail-percent", "25", *GATES)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    status = {h["host"]: h["status"] for h in report["hosts"]}
    assert status == {"inf2": "updated", "trn1": "updated", "gpu": "rolled back", "scratch": "updated"}, \
        [(h["host"], h["status"], h["failed_step"], h["message"]) for h in report["hosts"]]
    (gpu,) = [h for h in report["hosts"] if h["host"] == BAD]
    assert gpu["failed_step"] == "qa" and "QA failed" in gpu["message"]
    for host in ("inf2", "trn1", "scratch"):
        assert _ready(host, "extra") and _add_sub(host) == 3.0
    assert _current(BAD) == v1[BAD] and _add_sub(BAD) == 3.0 and not _ready(BAD, "extra")
    assert client.failures == [] and client.ok > 50, client.failures[:5]
    # through the front door: drained before each change, back only once healthy, the wrong model never seen
    _assert_clean(traffic, at_least=200)
    _ready_in_balancer(HOSTS)


def test_a_killed_rollout_leaves_hosts_old_or_new_and_serving_and_a_rerun_completes(front_door):
    base, inv = front_door
    _serve_v1(inv)
    reports = base / "reports-kill"
    log = open(base / "kill.log", "w")
    proc = subprocess.Popen([TF, "rollout", "--inventory", str(inv["v2"]), "--reports", str(reports), "--batch", "2"],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and "batch 2/" not in (base / "kill.log").read_text():
        time.sleep(0.5)
    time.sleep(3)  # mid-batch: its pyinfra runs are under way
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    running = json.loads((reports / ".rollout-running.json").read_text())
    assert running, "the kill came too late to be mid-batch"
    deadline = time.monotonic() + 600  # the runs in flight finish on their own
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in map(int, running)):
        time.sleep(1)
    for host in HOSTS:
        assert _add_sub(host) == 3.0  # serving, old or new
    proc2, report = _rollout(inv["v2"], reports, "--batch", "2")
    assert proc2.returncode == 0, proc2.stdout + proc2.stderr
    assert all(h["status"] == "updated" for h in report["hosts"]) and all(_ready(h, "extra") for h in HOSTS)


def test_prometheus_scrapes_haproxy(front_door):
    """`tritonfleet monitoring targets` gives the lb group's host a haproxy target: the sandbox Prometheus has
    HAProxy's own metrics of the front door (bounded wait: a few scrape intervals)."""
    deadline = time.monotonic() + 60
    while True:
        servers = _prometheus('haproxy_backend_active_servers{job="haproxy",host="lb",proxy="triton_http"}',
                              time.time())
        if servers == len(HOSTS):
            return
        if time.monotonic() > deadline:
            pytest.fail(f"Prometheus: haproxy_backend_active_servers of the front door is {servers}, not {len(HOSTS)}")
        time.sleep(2)
