"""The host watchdog (``tritonfleet-watchdog``, roles/watchdog.py) on a sandbox Neuron host, asserted from outside:
the service's state file and textfile metric over SSH, Docker's view of the container, tritonclient, and the
sandbox's moto for the Auto Scaling side.

One deploy with ``watchdog_enabled`` (a 5 s interval and a policy with short windows), then:
- a crash-looping server (its main process killed, Docker's restart policy bringing it back) is restarted by the
  watchdog once (``max_restarts_per_hour: 1``), and the next crash loop is escalated to a report that says the
  budget is spent; the server serves at the end;
- a Neuron runtime that is not one of our containers, holding a NeuronCore (neuron-ls lists its process), is
  reported with its pid, and left alone (``allow_free_cores`` is off);
- an uncorrectable memory ECC error, injected into the stand-in neuron-monitor, makes the ``replace`` policy
  call SetInstanceHealth: the host is an instance of an Auto Scaling group in the sandbox's moto (its IMDS
  instance id is the group's instance's for the test), and moto's group shows it Unhealthy;
- the hosts dashboard's watchdog panels answer from the sandbox Prometheus, and `tritonfleet status` shows the
  watchdog's column;
- a second run changes nothing.

What the sandbox cannot show: a real Auto Scaling group replacing the instance (moto records the health only).
The leak policy runs in tests/e2e/test_17_watchdog_leak.py (a model that leaks on every request, on the second fleet
worker's host), and in the unit tests with recorded memory (tests/unit/test_watchrun.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest
import tritonclient.http as httpclient

from tests.e2e.helpers import (
    ROOT,
    assert_noop,
    host_ip,
    poll,
    pyinfra,
    ssh,
    watchdog_actions,
    watchdog_metric,
    watchdog_state,
    write_inventory,
)
from tritonfleet.face import dashboards
from tritonfleet.face.status import fleet_status
from tritonfleet.sandbox import fleet, layout

TF = str(Path(sys.executable).parent / "tritonfleet")
HOSTS_DASHBOARD = ROOT / "dashboards" / "tritonfleet-hosts.json"

HOST = "inf2"
FAULTS = "/run/tritonfleet-sandbox/neuron-hw-errors.json"
POLICY = {"crash_loop": ["restart", "report"], "crash_restarts": 2, "crash_window_seconds": 120,
          "max_restarts_per_hour": 1, "settle_seconds": 0, "not_ready": [], "model_unready": [],
          "neuron_hw_error": ["replace"], "foreign_cores": ["report"]}
DEADLINE = 60  # seconds any one wait for the watchdog may take (it looks every 5 s)


def _aws(service: str):
    return boto3.client(service, endpoint_url=fleet.s3_endpoint(), region_name=layout.S3_REGION,
                        aws_access_key_id="sandbox", aws_secret_access_key="sandbox")


def _state() -> dict:
    return watchdog_state(HOST)


def _actions(reason: str, since: float) -> list[dict]:
    return watchdog_actions(HOST, reason, since)


def _wait(what: str, check, deadline: float = DEADLINE):
    return poll(what, check, deadline, context=lambda: f"; state: {json.dumps(_state())[:3000]}")


def _metric(action: str, reason: str) -> float:
    return watchdog_metric(HOST, action, reason)


def _ready() -> bool:
    try:
        return httpclient.InferenceServerClient(f"{host_ip(HOST)}:8000", network_timeout=5).is_server_ready()
    except Exception:  # noqa: BLE001 - not answering is not ready
        return False


def _crash_twice() -> None:
    """Kill the server's main process twice (Docker's restart policy brings it back each time: RestartCount + 2)."""
    for _ in range(2):
        before = json.loads(ssh(HOST, "docker inspect -f '{{json .State}}' triton").stdout)
        ssh(HOST, f"kill -9 {before['Pid']}")
        _wait("the container running again with a new process", lambda b=before: (
            (s := json.loads(ssh(HOST, "docker inspect -f '{{json .State}}' triton").stdout))["Running"]
            and s["Pid"] != b["Pid"]), deadline=30)


@pytest.fixture(scope="module")
def watched(sandbox, tmp_path_factory):
    """The host in a moto Auto Scaling group (its IMDS instance id the group's instance's), the watchdog on it."""
    ec2, asg = _aws("ec2"), _aws("autoscaling")
    image = ec2.describe_images()["Images"][0]["ImageId"]
    template = ec2.create_launch_template(LaunchTemplateName=f"e2e-watchdog-{int(time.time())}",
                                          LaunchTemplateData={"ImageId": image, "InstanceType": "inf2.xlarge"})
    name = template["LaunchTemplate"]["LaunchTemplateName"]
    group = f"{name}-group"
    asg.create_auto_scaling_group(AutoScalingGroupName=group, MinSize=1, MaxSize=1, DesiredCapacity=1,
                                  LaunchTemplate={"LaunchTemplateName": name}, AvailabilityZones=["us-east-1a"])
    (instance,) = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"][0]["Instances"]
    imds = layout.imds_hosts_file()
    saved = imds.read_text()
    hosts = json.loads(saved)
    hosts[host_ip(HOST)]["instance_id"] = instance["InstanceId"]
    imds.write_text(json.dumps(hosts, indent=2))
    base = tmp_path_factory.mktemp("watchdog")
    inv = write_inventory(base, [HOST], extra={
        "watchdog_enabled": True, "watchdog_interval_seconds": 5, "watchdog_policy": POLICY,
        "watchdog_asg_endpoint": fleet.s3_endpoint(), "watchdog_asg_region": layout.S3_REGION,
        # node_exporter reads the watchdog's textfile; the sandbox Prometheus scrapes it (the hosts dashboard)
        "monitoring_with_serve": True, "monitoring_fleet": "sandbox"})
    try:
        run = pyinfra(inv, "deploys/serve.py")
        assert run.returncode == 0, run.output[-5000:]
        out = subprocess.run([TF, "monitoring", "targets", "--inventory", str(inv), "--out",
                              str(layout.monitoring_dir())], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        # a fresh service: its restart budget and action counts start at 0 (the deploy restarts it only when
        # its policy or unit changed: not when this module ran before on this sandbox)
        started = time.time()
        ssh(HOST, "systemctl restart tritonfleet-watchdog")
        _wait("the watchdog's first pass", lambda: (s := _state()).get("started", 0) >= started - 1
              and s.get("servers", {}).get("triton", {}).get("ready"))
        yield inv, asg, group, instance["InstanceId"]
    finally:
        imds.write_text(saved)
        ssh(HOST, f"rm -f {FAULTS}; pkill -f tf-e2e-foreign || true", check=False)
        asg.delete_auto_scaling_group(AutoScalingGroupName=group, ForceDelete=True)


def test_a_crash_loop_is_restarted_once_then_reported_and_the_server_serves(watched):
    t0 = time.time()
    _crash_twice()
    restart = _wait("a restart for the crash loop", lambda: [a for a in _actions("crash_loop", t0)
                                                            if a["kind"] == "restart"])
    assert restart[0]["server"] == "triton" and restart[0]["outcome"] == "done", restart
    _wait("the server ready after the watchdog's restart", _ready, deadline=90)
    _crash_twice()
    report = _wait("the crash loop reported once the restart budget is spent", lambda: [
        a for a in _actions("crash_loop", t0) if a["kind"] == "report"])
    assert "restart" in report[0]["detail"], report  # the report says what it could not do
    assert len([a for a in _actions("crash_loop", t0) if a["kind"] == "restart"]) == 1  # the bound held
    assert _metric("restart", "crash_loop") == 1 and _metric("report", "crash_loop") >= 1
    _wait("the server ready at the end", _ready, deadline=90)


def test_a_foreign_process_on_a_neuroncore_is_reported_and_left_alone(watched):
    t0 = time.time()
    # a Neuron runtime of no container of ours, on core 1 (it ends by itself in 300 s)
    ssh(HOST, "NEURON_RT_VISIBLE_CORES=1 setsid python3 -c 'import time; time.sleep(300)' tf-e2e-foreign "
              ">/dev/null 2>&1 < /dev/null &")
    pid = int(_wait("the foreign process", lambda: ssh(HOST, "pgrep -f tf-e2e-foreign || true").stdout.split()[:1])[0])
    found = _wait("the foreign process reported", lambda: [a for a in _actions("foreign_cores", t0)
                                                          if str(pid) in a["detail"]])
    assert found[0]["kind"] == "report", found
    assert str(pid) in _state()["host"]["foreign_core_pids"]
    assert ssh(HOST, f"kill -0 {pid}", check=False).returncode == 0  # allow_free_cores is off: still running
    ssh(HOST, f"kill {pid}")


def test_an_uncorrectable_neuron_error_marks_the_instance_unhealthy_in_its_group(watched):
    _, asg, group, instance_id = watched

    def health() -> str:
        return asg.describe_auto_scaling_instances(InstanceIds=[instance_id])["AutoScalingInstances"][0]["HealthStatus"]

    assert health().upper() == "HEALTHY"
    t0 = time.time()
    ssh(HOST, f"mkdir -p /run/tritonfleet-sandbox && echo '{{\"0\": {{\"mem_ecc_uncorrected\": 1}}}}' > {FAULTS}")
    replaced = _wait("the replace action", lambda: [a for a in _actions("neuron_hw_error", t0) if a["kind"] == "replace"])
    assert replaced[0]["outcome"] == "done", replaced
    assert health().upper() == "UNHEALTHY"
    assert _metric("replace", "neuron_hw_error") == 1


def test_the_hosts_dashboard_and_status_show_the_watchdog(watched):
    """The hosts dashboard's watchdog panels answer from the sandbox Prometheus (node_exporter's textfile), and
    `tritonfleet status` has the watchdog's column for the server."""
    panels = {title: expr for title, _, expr in dashboards.expressions(dashboards.load(HOSTS_DASHBOARD))
              if title.startswith("Watchdog")}
    assert set(panels) == {"Watchdog actions per hour", "Watchdog last look"}
    query = {title: dashboards.instantiate(expr, {"fleet": "sandbox", "host": HOST}) for title, expr in panels.items()}
    _wait("the watchdog's last look in Prometheus",
          lambda: dashboards.query(layout.prometheus_url(), query["Watchdog last look"])["result"])
    wanted = {("crash_loop", "restart"), ("neuron_hw_error", "replace"), ("foreign_cores", "report")}

    def actions() -> set | None:  # every action of the tests above, once a scrape has seen them (every 5 s)
        result = dashboards.query(layout.prometheus_url(), query["Watchdog actions per hour"])["result"]
        seen = {(r["metric"]["reason"], r["metric"]["action"]) for r in result}
        return seen if wanted <= seen else None

    _wait("the watchdog's actions in Prometheus", actions)
    (row,) = fleet_status(watched[0])
    assert row["serving"] and " in 1h, last: " in row["watchdog"], row


def test_a_second_run_changes_nothing(watched):
    inv = watched[0]
    assert_noop(pyinfra(inv, "deploys/serve.py"))
