"""Rolling rollout on 4 sandbox hosts, asserted from outside (tritonclient, the hosts' `current`, the
rollout's report): a change that fails one host's QA gate rolls that host back while the others end on the
new version, no request to a model that does not change fails, FAIL_PERCENT=0 stops after the failing
batch, and a rollout killed mid-batch leaves every host old or new and serving, and completes when re-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import boto3
import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.e2e.helpers import ROOT, host_ip, pyinfra, ssh, write_inventory
from tritonfleet.sandbox import fleet

HOSTS = ["inf2", "trn1", "gpu", "scratch"]  # inventory (state) order: gpu is the third host
BAD = "gpu"
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
    base = tmp_path_factory.mktemp("rollout")
    common = {"qa_reports_dir": str(base / "reports")}
    def inventory(name: str, **kw) -> Path:
        (base / name).mkdir()
        return write_inventory(base / name, HOSTS, **kw)

    inv = {"v1": inventory("v1", extra={**common, "models_s3_uri": v1}),
           "v2": inventory("v2", extra={**common, "models_s3_uri": v2}),
           "mixed": inventory("mixed", extra={**common, "models_s3_uri": v2}, per_host={BAD: {"models_s3_uri": bad}})}
    return base, inv


def _serve_v1(inv) -> dict[str, str]:
    run = pyinfra(inv["v1"], "deploys/serve.py")
    assert run.returncode == 0, run.output[-5000:]
    return {h: _current(h) for h in HOSTS}


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


def test_a_host_failing_its_qa_gate_is_rolled_back_and_the_others_end_on_v2(repos):
    base, inv = repos
    v1 = _serve_v1(inv)
    with Client() as client:
        proc, report = _rollout(inv["mixed"], base / "reports", "--batch", "2", "--canary", "1",
                                "--fail-percent", "25")
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


def test_fail_percent_zero_stops_after_the_failing_batch(repos):
    base, inv = repos
    v1 = _serve_v1(inv)
    proc, report = _rollout(inv["mixed"], base / "reports", "--batch", "2", "--canary", "1", "--fail-percent", "0")
    assert proc.returncode != 0
    status = {h["host"]: h["status"] for h in report["hosts"]}
    assert status["gpu"] == "rolled back" and status["scratch"] == "not started" and report["stopped"]
    assert _current("scratch") == v1["scratch"] and not _ready("scratch", "extra")


def test_a_killed_rollout_leaves_hosts_old_or_new_and_serving_and_a_rerun_completes(repos):
    base, inv = repos
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
