"""The host watchdog's runtime (tritonfleet/agent/watchrun.py): whole passes of the service loop driven through
its injectable runner, fetcher and reader by a recorded host (:class:`FakeHost`), each effect checked where it
lands: ``docker restart``'s command line, SetInstanceHealth against moto's Auto Scaling, a real process that gets
SIGTERM; probes that are missing or fail; the state file and the textfile; the config file's one-line errors;
and ``tritonfleet-agent watchdog``'s arguments. Pure: no Docker, no Triton, no root."""

from __future__ import annotations

import datetime
import functools
import http.client
import io
import json
import os
import signal
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tritonfleet.agent import watchdog as wd
from tritonfleet.agent import watchrun
from tritonfleet.agent.cli import main as agent_main
from tritonfleet.agent.watchpolicy import Action, PolicyError

MiB = 1024 * 1024
T0 = 1_764_000_000.0
CGROUPS = "/sys/fs/cgroup"
EXPORTER = "http://127.0.0.1:9010/metrics"
IMDS = "http://169.254.169.254/latest"


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


class FakeHost:
    """A host as the runtime sees it: its containers (``docker ps``/``inspect``/``restart``), files (cgroups,
    /proc), tools (neuron-ls, neuron-monitor, nvidia-smi, journalctl: absent unless given) and HTTP answers
    (Triton, the Neuron exporter, IMDS). Every command and request is recorded."""

    def __init__(self) -> None:
        self.containers: dict[str, dict[str, Any]] = {}
        self.files: dict[str, str] = {}
        self.tools: dict[str, Any] = {}
        self.http: dict[tuple[str, str], Any] = {}
        self.calls: list[list[str]] = []
        self.timeouts: list[float] = []
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.docker_down = False

    def add_server(self, name: str = "triton-0", container: str | None = None, pid: int = 4000, port: int = 8000,
                   restarts: int = 0, anon: int = 1024 * MiB, procs: tuple[int, ...] = (4000, 4001),
                   index: list[dict] | None = None) -> None:
        container = container or name
        self.containers[container] = {
            "Id": f"id-{name}", "Name": f"/{container}", "RestartCount": restarts, "Pid": pid, "Running": True,
            "Restarting": False, "Labels": {"com.tritonfleet.role": "triton", "com.tritonfleet.server": name,
                                            "com.tritonfleet.endpoint": f"0.0.0.0:{port}"}}
        self.files[f"/proc/{pid}/cgroup"] = f"0::/system.slice/docker-{name}.scope\n"
        self.files[f"{self.cgroup(name)}/cgroup.procs"] = "".join(f"{p}\n" for p in procs)
        self.set_memory(name, anon)
        self.http[("GET", f"http://127.0.0.1:{port}/v2/health/ready")] = (200, "")
        self.http[("POST", f"http://127.0.0.1:{port}/v2/repository/index")] = (200, json.dumps(index or []))

    @staticmethod
    def cgroup(name: str) -> str:
        return f"{CGROUPS}/system.slice/docker-{name}.scope"

    def set_memory(self, name: str, anon: int, file: int = 300 * MiB, shmem: int = 0) -> None:
        self.files[f"{self.cgroup(name)}/memory.stat"] = (
            f"anon {anon}\nfile {file}\nkernel 4096\nshmem {shmem}\nfile_mapped 0\ninactive_file {file // 2}\n")

    # -- the runtime's injectable parts

    def run(self, argv, timeout):
        argv = list(argv)
        self.calls.append(argv)
        self.timeouts.append(timeout)
        if argv[0] == "docker":
            return self._docker(argv)
        answer = self.tools.get(argv[0])
        if answer is None:
            return 127, "", f"{argv[0]}: not found"
        return answer(argv) if callable(answer) else answer

    def _docker(self, argv):
        if self.docker_down:
            return 1, "", ("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
                           "Is the docker daemon running?\n")
        if argv[1] == "ps":
            return 0, "".join(f"{c['Id']}\n" for c in self.containers.values()), ""
        if argv[1] == "inspect":
            wanted = argv[4:]
            return 0, "".join(json.dumps(c) + "\n" for c in self.containers.values() if c["Id"] in wanted), ""
        if argv[1] == "restart":
            if argv[-1] not in self.containers:
                return 1, "", f"Error response from daemon: No such container: {argv[-1]}\n"
            return 0, argv[-1] + "\n", ""
        return 1, "", "unknown docker command"

    def fetch(self, method, url, headers, body, timeout):
        self.requests.append((method, url, dict(headers)))
        answer = self.http.get((method, url))
        if answer is None:
            raise ConnectionRefusedError(111, "Connection refused")
        if isinstance(answer, BaseException):
            raise answer
        return answer(headers) if callable(answer) else answer

    def read(self, path):
        if path not in self.files:
            raise FileNotFoundError(2, "No such file or directory", path)
        return self.files[path]

    def restarts(self) -> list[list[str]]:
        return [c for c in self.calls if c[:2] == ["docker", "restart"]]


def make(host: FakeHost, clock: Clock, tmp_path: Path, policy: dict | None = None, **options: Any) -> watchrun.WatchRun:
    (tmp_path / "textfile").mkdir(exist_ok=True)
    kw = {k: options.pop(k) for k in ("killer", "autoscaling") if k in options}
    opts = watchrun.Options(config=watchrun.read_config(policy or {}), interval=30,
                            textfile_dir=str(tmp_path / "textfile"), state=str(tmp_path / "state" / "last.json"),
                            **options)
    return watchrun.WatchRun(opts, runner=host.run, fetcher=host.fetch, reader=host.read, clock=clock,
                             out=io.StringIO(), **kw)


def state_of(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "state" / "last.json").read_text())


def journal(run: watchrun.WatchRun) -> list[str]:
    return run.out.getvalue().splitlines()


def metric(tmp_path: Path) -> str:
    return (tmp_path / "textfile" / watchrun.TEXTFILE).read_text()


# -- crash loop: restarts up to the bound, then the next action -------------------------------------------

def test_a_crash_looping_container_is_restarted_up_to_the_bound_then_escalated(tmp_path):
    host, clock = FakeHost(), Clock()
    host.add_server("triton-0", container="tf-triton-0")  # the container's name is what docker restart takes
    run = make(host, clock, tmp_path, {"crash_loop": ["restart", "report"], "crash_restarts": 1,
                                       "max_restarts_per_hour": 2, "settle_seconds": 0})
    for count in range(6):
        host.containers["tf-triton-0"]["RestartCount"] = count  # docker's policy restarts it, again and again
        run.once()
        clock.t += 30
    assert host.restarts() == [["docker", "restart", "--time", "30", "tf-triton-0"]] * 2
    assert all(t <= watchrun.RESTART_TIMEOUT for c, t in zip(host.calls, host.timeouts, strict=True) if c[1:2] == ["restart"])
    state = state_of(tmp_path)
    assert [(a["kind"], a["reason"], a["outcome"]) for a in state["actions"]] == \
        [("restart", "crash_loop", "done")] * 2 + [("report", "crash_loop", "done")] * 3
    assert state["actions"][2]["detail"].endswith("; escalated: restart budget spent (2 in the last hour)")
    assert state["servers"]["triton-0"]["restarts_last_hour"] == 2
    assert state["servers"]["triton-0"]["container"] == "tf-triton-0"
    assert 'tritonfleet_watchdog_actions_total{server="triton-0",reason="crash_loop",action="restart"} 2\n' in \
        metric(tmp_path)
    assert 'action="report"} 3\n' in metric(tmp_path)
    lines = journal(run)
    assert sum(1 for x in lines if x.startswith("watchdog: restart server triton-0: crash_loop: restart count grew")) == 2


def test_a_restart_that_docker_refuses_is_a_journal_line_and_the_loop_goes_on(tmp_path):
    host, clock = FakeHost(), Clock()
    host.add_server()
    run = make(host, clock, tmp_path, {"crash_loop": ["restart"], "crash_restarts": 1})
    run.once()
    host.containers["triton-0"]["RestartCount"] = 1
    del host.containers["triton-0"]["Labels"]["com.tritonfleet.server"]  # the server is its container's name
    host.containers["triton-0"]["Name"] = "/triton-0"
    original = host._docker
    host._docker = lambda argv: (1, "", "Error response from daemon: Cannot restart container triton-0: oops\n") \
        if argv[1] == "restart" else original(argv)
    clock.t += 30
    run.once()
    action = state_of(tmp_path)["actions"][-1]
    assert action["outcome"] == "failed: docker restart triton-0: Error response from daemon: Cannot restart " \
                                "container triton-0: oops"
    assert "watchdog: restart server triton-0 failed: docker restart triton-0: Error response" in run.out.getvalue()


def test_the_drain_hook_runs_before_each_restart_and_a_failed_drain_does_not_stop_it(tmp_path):
    host, clock = FakeHost(), Clock()
    host.add_server(port=8010)
    drained: list[list[str]] = []
    host.tools["/usr/local/bin/lb-drain"] = lambda argv: (drained.append(argv), (3, "", "backend not found\n"))[1]
    run = make(host, clock, tmp_path, {"crash_loop": ["restart"], "crash_restarts": 1,
                                       "drain_command": ["/usr/local/bin/lb-drain", "--server={server}", "{port}",
                                                         "{container}"], "drain_timeout_seconds": 20})
    run.once()
    host.containers["triton-0"]["RestartCount"] = 1
    clock.t += 30
    run.once()
    assert drained == [["/usr/local/bin/lb-drain", "--server=triton-0", "8010", "triton-0"]]
    at = host.calls.index(drained[0])
    assert host.calls[at + 1][:2] == ["docker", "restart"] and host.timeouts[at] == 20
    assert "watchdog: drain of server triton-0 failed (backend not found); restarting it anyway" in journal(run)
    assert state_of(tmp_path)["actions"][-1]["outcome"] == "done"


# -- memory: the leak policy ---------------------------------------------------------------------------------

LEAK = {"leak_window_seconds": 600, "leak_min_samples": 5, "leak_mib_per_hour": 100, "leak_min_growth_pct": 5}


@pytest.mark.parametrize(("grows", "leak"), [("anon", True), ("shmem", True), ("file", False)],
                         ids=["heap", "/dev/shm", "page cache"])
def test_memory_that_grows_is_a_leak_but_page_cache_is_not(tmp_path, grows, leak):
    host, clock = FakeHost(), Clock()
    host.add_server()
    run = make(host, clock, tmp_path, LEAK)
    for i in range(8):  # 20 MiB a minute of what grows
        sizes = {"anon": 1024 * MiB, "file": 300 * MiB, "shmem": 64 * MiB}
        sizes[grows] += 20 * i * MiB
        host.set_memory("triton-0", **sizes)
        run.once()
        clock.t += 60
    actions = state_of(tmp_path)["actions"]
    if not leak:
        assert actions == []
        return
    assert [(a["kind"], a["reason"], a["at"] - T0) for a in actions] == [("restart", "leak", 300)]  # half a window
    assert actions[0]["detail"] == "rss grew 1200 MiB/h over 300 s (1.1 GiB -> 1.2 GiB)"
    assert host.restarts() == [["docker", "restart", "--time", "30", "triton-0"]]


def test_memory_is_read_from_the_containers_cgroup(tmp_path):
    assert watchrun.cgroup_path("0::/system.slice/docker-abc.scope\n") == ("v2", "/system.slice/docker-abc.scope")
    v1 = "12:pids:/docker/abc\n11:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n"
    assert watchrun.cgroup_path(v1) == ("v1", "/docker/abc")
    # hybrid (v1 controllers and systemd's unified line, as on Amazon Linux 2 and the sandbox's hosts): v1's memory
    assert watchrun.cgroup_path("4:memory:/docker/abc\n1:name=systemd:/docker/abc\n0::/docker/abc\n") == \
        ("v1", "/docker/abc")
    assert watchrun.cgroup_path("garbage") is None
    assert watchrun.memory_from_stat("v2", "anon 100\nfile 900\nshmem 20\n") == 120
    assert watchrun.memory_from_stat("v1", "cache 900\nrss 5\ntotal_rss 100\ntotal_shmem 20\ntotal_cache 900\n") == 120
    with pytest.raises(watchrun.ProbeError, match="no anon"):
        watchrun.memory_from_stat("v2", "file 1\n")
    host, clock = FakeHost(), Clock()
    host.add_server(pid=4242, procs=(4242, 4250))
    host.files["/proc/4242/cgroup"] = v1
    host.files[f"{CGROUPS}/memory/docker/abc/memory.stat"] = "total_rss 734003200\ntotal_shmem 0\ntotal_cache 9\n"
    host.files[f"{CGROUPS}/memory/docker/abc/cgroup.procs"] = "4242\n4250\n"
    make(host, clock, tmp_path).once()
    assert state_of(tmp_path)["servers"]["triton-0"]["rss_bytes"] == 734003200


def test_a_stopped_container_repeats_its_last_memory_and_is_not_ready(tmp_path):
    host, clock = FakeHost(), Clock()
    host.add_server(anon=2000 * MiB)
    run = make(host, clock, tmp_path, {"not_ready": ["report"], "not_ready_seconds": 30})
    run.once()
    host.containers["triton-0"].update(Running=False, Pid=0)
    host.http[("GET", "http://127.0.0.1:8000/v2/health/ready")] = ConnectionRefusedError(111, "Connection refused")
    for _ in range(2):
        clock.t += 30
        run.once()
    state = state_of(tmp_path)
    view = state["servers"]["triton-0"]
    assert (view["ready"], view["rss_bytes"]) == (False, 2000 * MiB)
    assert [(a["kind"], a["reason"]) for a in state["actions"]] == [("report", "not_ready")]


# -- models ----------------------------------------------------------------------------------------------

def test_a_model_that_was_ready_and_fails_is_restarted_and_the_index_is_asked_with_the_header(tmp_path):
    header = tmp_path / "repository-header"
    header.write_text("x-tritonfleet-repository-key: s3cret-value-0123\n")
    header.chmod(0o600)
    host, clock = FakeHost(), Clock()
    host.add_server(index=[{"name": "bert", "version": "1", "state": "READY"},
                           {"name": "resnet", "version": "1", "state": "READY"}])
    run = make(host, clock, tmp_path, header_file=str(header))
    run.once()
    index = ("POST", "http://127.0.0.1:8000/v2/repository/index")
    host.http[index] = (200, json.dumps([
        {"name": "bert", "version": "1", "state": "UNAVAILABLE", "reason": "CUDA error: an illegal memory access"},
        {"name": "resnet", "version": "1", "state": "LOADING", "reason": ""}]))  # a live reload in flight
    clock.t += 30
    run.once()
    asked = [h for m, u, h in host.requests if (m, u) == index]
    assert asked and all(h == {"x-tritonfleet-repository-key": "s3cret-value-0123"} for h in asked)
    state = state_of(tmp_path)
    assert state["servers"]["triton-0"]["models"] == {"bert": False}
    assert [(a["kind"], a["reason"], a["detail"]) for a in state["actions"]] == [
        ("restart", "model_unready", "not ready any more: bert")]
    assert "s3cret" not in json.dumps(state) and "s3cret" not in run.out.getvalue()


def test_model_states_from_the_repository_index():
    index = [{"name": "a", "version": "1", "state": "READY"}, {"name": "a", "version": "2", "state": "LOADING"},
             {"name": "b", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"},
             {"name": "c", "version": "1", "state": "UNAVAILABLE", "reason": "failed to load"},
             {"name": "d"}, {"name": "e", "state": "UNLOADING"}, "junk", {"state": "READY"}]
    assert watchrun.model_states(json.dumps(index)) == {"a": True, "c": False}
    for body in ("<html>", '{"error": "This API is restricted"}'):
        with pytest.raises(watchrun.ProbeError):
            watchrun.model_states(body)


# -- Neuron hardware errors: replace through the Auto Scaling group ---------------------------------------

def exposition(**counters: int) -> str:
    """neuron-monitor-prometheus.py's answer with ``device<N>_<event>=count`` ECC counters."""
    lines = ["# HELP hardware_ecc_events_total Hardware ecc events total",
             "# TYPE hardware_ecc_events_total counter"]
    for key, value in counters.items():
        device, event = key.split("_", 1)
        lines.append(f'hardware_ecc_events_total{{instance_id="i-0",event_type="{event}",'
                     f'neuron_device_index="{device.removeprefix("device")}"}} {float(value)}')
    return "\n".join(lines + ["system_vcpu_count{instance_id=\"i-0\"} 8.0"]) + "\n"


@pytest.fixture
def asg(monkeypatch):
    """moto's Auto Scaling with a group of one instance: (client, instance id)."""
    moto = pytest.importorskip("moto")
    import boto3

    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", raising=False)
    with moto.mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        image = ec2.describe_images()["Images"][0]["ImageId"]
        client = boto3.client("autoscaling", region_name="us-east-1")
        client.create_launch_configuration(LaunchConfigurationName="lc", ImageId=image, InstanceType="inf2.xlarge")
        client.create_auto_scaling_group(AutoScalingGroupName="fleet", LaunchConfigurationName="lc", MinSize=1,
                                         MaxSize=1, DesiredCapacity=1, AvailabilityZones=["us-east-1a"])
        (instance,) = client.describe_auto_scaling_instances()["AutoScalingInstances"]
        assert instance["HealthStatus"].upper() == "HEALTHY"
        yield client, instance["InstanceId"]


def imds(host: FakeHost, instance_id: str) -> None:
    host.http[("PUT", f"{IMDS}/api/token")] = (200, "imds-token")
    answers = {"instance-id": instance_id, "placement/region": "us-east-1"}
    for path, value in answers.items():
        host.http[("GET", f"{IMDS}/meta-data/{path}")] = \
            lambda headers, v=value: (200, v) if headers.get("X-aws-ec2-metadata-token") == "imds-token" else (401, "")


def test_an_uncorrectable_neuron_error_asks_the_auto_scaling_group_to_replace_the_host(tmp_path, asg):
    client, instance_id = asg
    host, clock = FakeHost(), Clock()
    host.tools["neuron-ls"] = (0, "[]", "")
    imds(host, instance_id)
    host.http[("GET", EXPORTER)] = (200, exposition(device0_mem_ecc_uncorrected=0, device0_mem_ecc_corrected=7))
    run = make(host, clock, tmp_path, neuron_exporter=EXPORTER)
    run.once()  # the baseline
    host.http[("GET", EXPORTER)] = (200, exposition(device0_mem_ecc_uncorrected=1, device0_mem_ecc_corrected=7))
    clock.t += 30
    run.once()
    (health,) = client.describe_auto_scaling_instances(InstanceIds=[instance_id])["AutoScalingInstances"]
    assert health["HealthStatus"].upper() == "UNHEALTHY"
    action = state_of(tmp_path)["actions"][-1]
    assert (action["kind"], action["reason"], action["detail"], action["outcome"]) == \
        ("replace", "neuron_hw_error", "device0.mem_ecc_uncorrected 0 -> 1", "done")
    assert f"watchdog: instance {instance_id} marked Unhealthy in its Auto Scaling group" in journal(run)
    assert not [c for c in host.calls if c[0] == "neuron-monitor"]  # the exporter's counters: no monitor of ours


def test_a_replace_without_imds_fails_in_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", raising=False)
    host, clock = FakeHost(), Clock()
    run = make(host, clock, tmp_path)
    outcome = run.act(Action("replace", None, "gpu_ecc", "uncorrected ECC errors 0 -> 1"))
    refused = "instance metadata at http://169.254.169.254: [Errno 111] Connection refused"
    assert outcome == f"failed: {refused}"
    assert journal(run)[-1] == f"watchdog: replace host failed: {refused}"
    # the metadata's address moved (as boto3 reads it); a token but no instance id there
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://10.0.0.1:1338/")
    host.http[("PUT", "http://10.0.0.1:1338/latest/api/token")] = (200, "imds-token")
    host.http[("GET", "http://10.0.0.1:1338/latest/meta-data/instance-id")] = (404, "")
    host.http[("GET", "http://10.0.0.1:1338/latest/meta-data/placement/region")] = (200, "us-east-1")
    outcome = run.act(Action("replace", None, "gpu_ecc", "uncorrected ECC errors 0 -> 1"))
    assert outcome == "failed: instance metadata at http://10.0.0.1:1338: no instance-id or placement/region"
    token = [r for r in host.requests if r[0] == "PUT"][-1]
    assert token == ("PUT", "http://10.0.0.1:1338/latest/api/token",
                     {"X-aws-ec2-metadata-token-ttl-seconds": str(watchrun.IMDS_TOKEN_TTL)})
    assert run.instance is None  # nothing cached from a failed look


def monitor_report(**device0: int) -> str:
    return json.dumps({"system_data": {"neuron_hw_counters": {"period": 1.0, "error": "", "neuron_devices": [
        {"neuron_device_index": 0, "mem_ecc_corrected": 0, "mem_ecc_uncorrected": 0, "sram_ecc_corrected": 0,
         "sram_ecc_uncorrected": 0, **device0}]}}}) + "\n"


def test_without_the_exporter_neuron_monitor_runs_once_bounded_in_time(tmp_path):
    host, clock = FakeHost(), Clock()
    host.tools["neuron-ls"] = (0, "[]", "")
    reports = [monitor_report(), monitor_report(sram_ecc_uncorrected=1)]
    seen: list[dict] = []

    def monitor(argv):
        seen.append(json.loads(Path(argv[argv.index("-c") + 1]).read_text()))
        text = reports.pop(0)
        return 124, text + text[:40], "neuron-monitor: no answer within 3 s"  # killed mid-line at its bound

    host.tools["neuron-monitor"] = monitor
    run = make(host, clock, tmp_path, {"neuron_hw_error": ["report"]}, neuron_exporter=EXPORTER)  # not answering
    run.once()
    clock.t += 30
    run.once()
    assert seen == [watchrun.ONESHOT_CONFIG] * 2
    assert [t for c, t in zip(host.calls, host.timeouts, strict=True) if c[0] == "neuron-monitor"] == [watchrun.ONESHOT_SECONDS] * 2
    state = state_of(tmp_path)
    assert [(a["reason"], a["detail"]) for a in state["actions"]] == [
        ("neuron_hw_error", "device0.sram_ecc_uncorrected 0 -> 1")]
    assert state["host"]["probes"]["neuron-monitor"] == "ok (one run)"
    assert state["host"]["probes"]["neuron exporter"].startswith("error: ")


def test_switching_between_the_exporter_and_neuron_monitor_is_neither_growth_nor_loss(tmp_path):
    host, clock = FakeHost(), Clock()
    host.tools["neuron-ls"] = (0, "[]", "")
    host.tools["neuron-monitor"] = (124, monitor_report(mem_ecc_uncorrected=1), "")  # sees one error
    run = make(host, clock, tmp_path, {"neuron_hw_error": ["report"], "settle_seconds": 0},
               neuron_exporter=EXPORTER)
    steps = [exposition(device0_mem_ecc_uncorrected=5),  # errors from before the watchdog: the baseline
             None,  # the exporter restarts: neuron-monitor once, which sees a new error
             exposition(device0_mem_ecc_uncorrected=6),  # back, that error counted too: a new baseline
             exposition(device0_mem_ecc_uncorrected=7),
             exposition(device0_mem_ecc_uncorrected=1)]  # the exporter restarted and counted one since
    for answer in steps:
        host.http.pop(("GET", EXPORTER), None)
        if answer is not None:
            host.http[("GET", EXPORTER)] = (200, answer)
        run.once()
        clock.t += 30
    actions = state_of(tmp_path)["actions"]
    assert [(a["at"] - T0, a["detail"]) for a in actions] == [
        (30, "device0.mem_ecc_uncorrected 0 -> 1"), (90, "device0.mem_ecc_uncorrected 1 -> 2"),
        (120, "device0.mem_ecc_uncorrected 2 -> 3")]


def standin_exposition(reports: list[dict]) -> str:
    """The sandbox's stand-in neuron-monitor-prometheus.py (AWS's metric names and labels) fed ``reports``."""
    prom = pytest.importorskip("prometheus_client")
    from tritonfleet.sandbox import standins

    registry = prom.CollectorRegistry()
    ns: dict[str, Any] = {"__name__": "standin"}
    exec(compile(standins._template("neuron_monitor_prometheus.py.in", PACKAGE="aws-neuronx-tools",
                                    VERSION="2.32.28.0"), "exporter", "exec"), ns)
    for kind in ("Counter", "Gauge", "Info"):
        ns[kind] = functools.partial(getattr(prom, kind), registry=registry)
    exporter = ns["Exporter"]()
    for report in reports:
        exporter.process(report)
    return prom.generate_latest(registry).decode()


def test_the_exporters_counters_read_as_neuron_monitors_names():
    report = {"instance_info": {"instance_id": "i-0"},
              "neuron_runtime_data": [{"pid": 7, "neuron_runtime_tag": "triton-0", "error": "", "report": {
                  "execution_stats": {"error": "", "error_summary": {"hardware": 2, "numerical": 1}}}}],
              "system_data": {"neuron_hw_counters": {"error": "", "neuron_devices": [
                  {"neuron_device_index": 1, "mem_ecc_corrected": 4, "mem_ecc_uncorrected": 1,
                   "sram_ecc_corrected": 0, "sram_ecc_uncorrected": 0}]}}}
    counts = watchrun.parse_exporter(standin_exposition([report, report]))  # two periods: the sums
    assert counts == {"device1.mem_ecc_corrected": 8, "device1.mem_ecc_uncorrected": 2,
                      "device1.sram_ecc_corrected": 0, "device1.sram_ecc_uncorrected": 0,
                      "runtime.triton-0.hardware": 4, "runtime.triton-0.numerical": 2}
    assert {k for k in counts if wd.is_hw_error_counter(k)} == {
        "device1.mem_ecc_uncorrected", "device1.sram_ecc_uncorrected", "runtime.triton-0.hardware"}
    for text in ("", "<html>not found</html>"):
        with pytest.raises(watchrun.ProbeError, match="^neuron exporter: no metrics"):
            watchrun.parse_exporter(text)


def test_the_exporters_text_is_read_by_the_agents_parser_a_line_that_is_no_sample_skipped():
    text = ("# TYPE hardware_ecc_events_total counter\n"
            'hardware_ecc_events_total{neuron_device_index="0",event_type="mem_ecc_uncorrected"} 2 1764000000000\n'
            "not a sample at all\n"
            'hardware_ecc_events_total{neuron_device_index="0",event_type="sram_ecc_uncorrected"} NaN\n'
            'hardware_ecc_events_total{neuron_device_index="1",event_type="mem_ecc_corrected"} -1\n'
            'hardware_ecc_events_total{event_type="mem_ecc_corrected"} 5\n'
            'execution_errors_total{runtime_tag="a \\"b\\"",error_type="hardware"} 3\n'
            'execution_errors_total{runtime_tag="a \\"b\\"",error_type="hardware"} three\n')
    assert watchrun.parse_exporter(text) == {"device0.mem_ecc_uncorrected": 2, 'runtime.a "b".hardware': 3}
    with pytest.raises(watchrun.ProbeError, match="^neuron exporter: no metrics in its answer"):
        watchrun.parse_exporter("# TYPE hardware_ecc_events_total counter\nnot a sample at all\n")


# -- foreign processes on our NeuronCores ---------------------------------------------------------------------

def neuron_ls(held: dict[int, list[int]]) -> str:
    return json.dumps([{"neuron_device": d, "nc_count": 2, "neuroncore_ids": [2 * d, 2 * d + 1],
                        "neuron_processes": [{"pid": pid, "command": "x"} for pid, dev in held.items() if dev == d]}
                       for d in range(2)])


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "60"])
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


class Killer:
    """os.kill for the test's own child only; every signal recorded."""

    def __init__(self, allowed: int) -> None:
        self.allowed, self.sent = allowed, []

    def __call__(self, pid: int, sig: int) -> None:
        self.sent.append((pid, sig))
        if pid != self.allowed:
            raise AssertionError(f"signal {sig} to pid {pid}")
        os.kill(pid, sig)


def foreign_host(sleeper) -> FakeHost:
    host = FakeHost()
    host.add_server(pid=4000, procs=(4000, 4001))  # the runtime in the container is pid 4001: ours
    host.tools["neuron-ls"] = (0, neuron_ls({4001: 0, sleeper.pid: 1}), "")
    host.tools["neuron-monitor"] = (124, "", "")
    return host


def test_a_foreign_process_on_our_cores_is_reported_and_left_alone_by_default(tmp_path, sleeper):
    host, clock = foreign_host(sleeper), Clock()
    killer = Killer(sleeper.pid)
    run = make(host, clock, tmp_path, killer=killer)
    run.once()
    assert [(a["kind"], a["detail"]) for a in state_of(tmp_path)["actions"]] == [
        ("report", f"pid {sleeper.pid} holds cores 2-3")]
    assert state_of(tmp_path)["host"]["foreign_core_pids"] == {str(sleeper.pid): [2, 3]}
    assert killer.sent == [] and sleeper.poll() is None
    # the runtime refuses free-cores itself when the policy does not allow it
    outcome = run.act(Action("free-cores", None, "foreign_cores", "x", (sleeper.pid,)))
    assert outcome == "failed: free-cores not allowed (allow_free_cores is false)"
    assert killer.sent == [] and sleeper.poll() is None


def test_free_cores_ends_the_foreign_process_with_sigterm_when_allowed(tmp_path, sleeper):
    host, clock = foreign_host(sleeper), Clock()
    killer = Killer(sleeper.pid)
    run = make(host, clock, tmp_path, {"foreign_cores": ["free-cores", "report"], "allow_free_cores": True},
               killer=killer, kill_grace=60)
    started = time.monotonic()
    run.once()
    assert sleeper.wait(timeout=5) == -signal.SIGTERM
    assert time.monotonic() - started < 20  # ended (a zombie until reaped): no wait for the grace time (60 s)
    assert [s for p, s in killer.sent if s != 0] == [signal.SIGTERM]  # no SIGKILL, nothing to pid 4000 or 4001
    action = state_of(tmp_path)["actions"][-1]
    assert (action["kind"], action["outcome"]) == ("free-cores", "done")
    # ours, init and itself are never ended, whatever asks
    for pid in (4001, 4000, 1, os.getpid()):
        assert run.act(Action("free-cores", None, "foreign_cores", "x", (pid,))).startswith("failed: refused")
    assert all(p == sleeper.pid for p, _ in killer.sent)


def test_a_process_that_ignores_sigterm_gets_sigkill_after_the_grace_time(tmp_path):
    proc = subprocess.Popen(["sh", "-c", "trap '' TERM; echo up; sleep 60"], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"up\n"
        host, clock = FakeHost(), Clock()
        killer = Killer(proc.pid)
        run = make(host, clock, tmp_path, {"foreign_cores": ["free-cores"], "allow_free_cores": True},
                   killer=killer, kill_grace=0.5)
        run.act(Action("free-cores", None, "foreign_cores", "x", (proc.pid,)))
        assert proc.wait(timeout=5) == -signal.SIGKILL
        assert [s for _, s in killer.sent if s != 0] == [signal.SIGTERM, signal.SIGKILL]
        assert f"watchdog: pid {proc.pid} still there 0.5 s after SIGTERM: SIGKILL" in journal(run)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_when_our_processes_cannot_be_read_no_process_is_called_foreign(tmp_path, sleeper):
    host, clock = foreign_host(sleeper), Clock()
    host.tools["neuron-ls"] = (0, neuron_ls({4001: 0}), "")  # only our runtime holds cores
    del host.files[f"{FakeHost.cgroup('triton-0')}/cgroup.procs"]
    run = make(host, clock, tmp_path)
    run.once()
    state = state_of(tmp_path)
    assert state["actions"] == [] and state["host"]["foreign_core_pids"] == {}
    assert state["host"]["probes"]["neuron-ls"].startswith("error: neuron-ls: the processes of server triton-0")


# -- GPU errors ------------------------------------------------------------------------------------------

def test_gpu_xid_lines_are_read_from_the_cursor_of_the_last_look_and_ecc_from_nvidia_smi(tmp_path):
    host, clock = FakeHost(), Clock()
    smi = ["0, 0, 0\n", "0, 1, 1\n"]
    host.tools["nvidia-smi"] = lambda argv: (0, smi[0] if len(smi) == 1 else smi.pop(0), "")
    logs = ["eth0: link up\n-- cursor: s=aa;i=1\n",
            "NVRM: Xid (PCI:0000:00:1e): 79, pid=1122, GPU has fallen off the bus.\n"
            "NVRM: Xid (PCI:0000:00:1e): 13, pid=1, Graphics Exception\n-- cursor: s=aa;i=3\n"]
    host.tools["journalctl"] = lambda argv: (0, logs.pop(0) if logs else "", "")
    run = make(host, clock, tmp_path, {"gpu_xid": ["report"], "gpu_ecc": ["report"]})
    for _ in range(3):
        run.once()
        clock.t += 30
    looks = [c for c in host.calls if c[0] == "journalctl"]
    assert [look[-1] for look in looks] == [f"--since=@{int(T0)}", "--after-cursor=s=aa;i=1",
                                            "--after-cursor=s=aa;i=3"]
    fields = ",".join(wd.GPU_QUERY_FIELDS)
    assert ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"] in host.calls
    state = state_of(tmp_path)
    assert [(a["reason"], a["detail"]) for a in state["actions"]] == [
        ("gpu_xid", "Xid events 0 -> 1"), ("gpu_ecc", "uncorrected ECC errors 0 -> 1")]
    assert (state["host"]["gpu_xid"], state["host"]["gpu_ecc_dbe"]) == (1, 1)


# -- probes that are missing or fail --------------------------------------------------------------------------

def test_probes_whose_tools_are_missing_are_skipped(tmp_path):
    host, clock = FakeHost(), Clock()
    host.add_server()
    run = make(host, clock, tmp_path)
    run.once()
    state = state_of(tmp_path)
    assert state["host"]["probes"] == {"docker": "ok", "neuron-ls": "skipped: not on this host",
                                       "nvidia-smi": "skipped: not on this host"}
    assert {c[0] for c in host.calls} == {"docker", "neuron-ls", "nvidia-smi"}  # no monitor, no kernel log
    assert state["servers"]["triton-0"] == {
        "container": "triton-0", "url": "http://127.0.0.1:8000", "ready": True, "restarts": 0,
        "rss_bytes": 1024 * MiB, "models": {}, "restarts_last_hour": 0, "problems": []}
    assert journal(run) == []  # nothing to say


def test_a_probe_that_fails_is_its_status_and_the_loop_goes_on(tmp_path):
    host, clock = FakeHost(), Clock()
    host.add_server()
    host.docker_down = True
    host.tools["nvidia-smi"] = (0, "NVIDIA-SMI has failed because it couldn't communicate with the driver\n", "")
    host.tools["journalctl"] = (1, "", "Failed to open journal\n")

    def broken(argv):
        raise RuntimeError("neuron-ls exploded")

    host.tools["neuron-ls"] = broken
    host.http[("GET", "http://127.0.0.1:8000/v2/health/ready")] = http.client.BadStatusLine("garbage")
    run = make(host, clock, tmp_path)
    run.once()
    probes = state_of(tmp_path)["host"]["probes"]
    assert probes["docker"] == "error: docker: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. " \
                               "Is the docker daemon running?"
    assert probes["neuron-ls"] == "error: RuntimeError: neuron-ls exploded"
    assert probes["nvidia-smi"].startswith('error: nvidia-smi: "NVIDIA-SMI has failed')
    assert probes["kernel log"] == "error: journalctl: Failed to open journal"
    assert state_of(tmp_path)["servers"] == {}  # docker never answered: no server known yet
    errors = [x for x in journal(run) if x.startswith("watchdog: probe ")]
    assert len(errors) == 4 and all("\n" not in x for x in errors)
    # docker answers again; the server's readiness probe itself breaks: not ready, a problem, no crash
    host.docker_down = False
    clock.t += 30
    run.once()
    view = state_of(tmp_path)["servers"]["triton-0"]
    assert view["ready"] is False and view["problems"] == ["readiness: BadStatusLine: garbage"]
    assert state_of(tmp_path)["host"]["probes"]["docker"] == "ok"
    assert "watchdog: probe docker: ok" in journal(run)
    clock.t += 30
    run.once()
    assert len([x for x in journal(run) if x.startswith("watchdog: probe ")]) == 5  # no repeats of a status


def test_a_container_removed_meanwhile_is_no_longer_watched_and_the_others_are(tmp_path):
    host, clock = FakeHost(), Clock()
    host.add_server("a", pid=4000, port=8000)
    host.add_server("b", pid=5000, port=8010, procs=(5000,))
    run = make(host, clock, tmp_path)
    run.once()
    assert set(state_of(tmp_path)["servers"]) == {"a", "b"}
    original = host._docker

    def gone(argv):  # a removed between docker ps and docker inspect
        rc, out, err = original(argv)
        if argv[1] == "inspect":
            return 1, out.split("\n", 1)[1], "Error: No such object: id-a\n"
        return rc, out, err

    host._docker = gone
    clock.t += 30
    run.once()
    state = state_of(tmp_path)
    assert set(state["servers"]) == {"b"} and state["servers"]["b"]["ready"] is True
    assert state["actions"] == [] and state["host"]["probes"]["docker"] == "ok"


def test_the_loop_sleeps_between_passes_and_outlives_a_pass_that_fails(tmp_path, monkeypatch):
    host, clock = FakeHost(), Clock()
    run = make(host, clock, tmp_path)
    passes: list[int] = []
    real_once = run.once

    def once():
        passes.append(1)
        if len(passes) == 1:
            raise RuntimeError("a bug")
        return real_once()

    waits: list[float] = []

    class Stop:
        def is_set(self) -> bool:
            return len(passes) >= 3

        def wait(self, seconds: float) -> None:
            waits.append(seconds)

    monkeypatch.setattr(run, "once", once)
    run.stop = Stop()
    run.loop()
    assert len(passes) == 3 and len(waits) == 3
    assert all(3 <= w <= 30 for w in waits)  # the interval less the pass, at least a tenth of it
    assert "watchdog: pass failed: RuntimeError: a bug" in journal(run)
    waits.clear()
    passes.clear()
    run.loop(once=True)
    assert len(passes) == 1 and waits == []


# -- the state file ----------------------------------------------------------------------------------------

def test_the_state_file_is_written_whole_0644_and_carried_over_a_restart(tmp_path, monkeypatch):
    host, clock = FakeHost(), Clock()
    host.add_server()
    policy = {"crash_loop": ["restart"], "crash_restarts": 1}
    run = make(host, clock, tmp_path, policy)
    old_umask = os.umask(0o077)
    try:
        run.once()
        host.containers["triton-0"]["RestartCount"] = 1
        clock.t += 30
        run.once()
    finally:
        os.umask(old_umask)
    path = tmp_path / "state" / "last.json"
    state = json.loads(path.read_text())
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.json"]  # no temporary file left
    assert (state["schema"], state["at"], state["interval"], state["started"]) == (1, T0 + 30, 30, T0)
    assert set(state) == {"schema", "at", "interval", "started", "servers", "host", "actions"}
    assert state["actions"] == [{"at": T0 + 30, "kind": "restart", "server": "triton-0", "reason": "crash_loop",
                                 "detail": "restart count grew by 1 in 600 s (now 1)", "outcome": "done"}]
    # a new service (after a restart) keeps the recent actions
    again = make(host, clock, tmp_path, policy)
    clock.t += 30
    again.once()
    assert state_of(tmp_path)["actions"] == state["actions"]

    def full(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(wd.os, "replace", full)
    clock.t += 30
    again.once()  # the pass ends; the old file stands, whole
    assert json.loads(path.read_text())["at"] == T0 + 60
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.json"]
    assert "watchdog: probe state file: error: [Errno 28] No space left on device" in journal(again)


# -- the real runner and fetcher -----------------------------------------------------------------------

def test_the_runner_says_missing_timed_out_and_failed():
    assert watchrun.run_command(["no-such-tool-tritonfleet"], 5) == (127, "", "no-such-tool-tritonfleet: not found")
    rc, out, err = watchrun.run_command(["sh", "-c", "echo partial; exec sleep 30"], 0.5)
    assert (rc, out, err) == (124, "partial\n", "sh: no answer within 0.5 s")
    assert watchrun.run_command(["sh", "-c", "echo oops >&2; exit 3"], 5) == (3, "", "oops\n")


def test_the_fetcher_answers_status_and_text_and_takes_no_proxy(monkeypatch):
    from tests.stubhttp import QuietHandler, serve

    class Handler(QuietHandler):
        def do_GET(self):
            self._reply(200 if self.path == "/v2/health/ready" else 404, b"not here" if self.path != "/v2/health/ready" else b"")

        def do_POST(self):
            length = int(self.headers.get("Content-Length", 0))
            self.rfile.read(length)
            self._reply(200, json.dumps({"key": self.headers.get("x-key")}).encode())

    server, url = serve(Handler)
    try:
        monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # a proxy would refuse: loopback goes direct
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
        assert watchrun.fetch("GET", f"{url}/v2/health/ready", {}, None, 3) == (200, "")
        assert watchrun.fetch("GET", f"{url}/v2/models/x/ready", {}, None, 3) == (404, "not here")
        assert watchrun.fetch("POST", f"{url}/v2/repository/index", {"x-key": "v"}, b"{}", 3) == (200, '{"key": "v"}')
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(OSError):
        watchrun.fetch("GET", f"{url}/v2/health/ready", {}, None, 3)


# -- the contract with the rest of tritonfleet -----------------------------------------------------------

def test_the_host_contract_names_are_the_ones_tritonfleet_writes():
    from roles import monitoring
    from tritonfleet import hostcontract as hc

    assert (watchrun.LABEL_SERVER, watchrun.LABEL_ENDPOINT) == (hc.LABEL_SERVER, hc.LABEL_ENDPOINT)
    assert watchrun.TRITON_FILTER == hc.TRITON_FILTER
    assert watchrun.REPOSITORY_HEADER_FILE == hc.REPOSITORY_HEADER_FILE
    assert watchrun.NEURON_BIN == monitoring.NEURON_BIN
    assert watchrun.STATE_FILE.startswith(hc.STATE_DIR + "/")
    for word in ("Args", "Cmd", "Path", "Entrypoint", "Env"):  # never the command line: it holds the secret
        assert word not in watchrun.INSPECT_FORMAT
    assert {m["type"] for m in watchrun.ONESHOT_CONFIG["system_metrics"]} <= set(monitoring.NEURON_SYSTEM_GROUPS)
    assert {m["type"] for r in watchrun.ONESHOT_CONFIG["neuron_runtimes"] for m in r["metrics"]} <= \
        set(monitoring.NEURON_RUNTIME_GROUPS)


@pytest.mark.parametrize(("label", "url"), [
    ("0.0.0.0:8000", "http://127.0.0.1:8000"), ("10.0.0.5:8010", "http://10.0.0.5:8010"),
    (":::8000", "http://127.0.0.1:8000"), ("fd00::11:8000", "http://[fd00::11]:8000"), ("", None), ("h:x", None)])
def test_endpoint_labels(label, url):
    assert watchrun.endpoint_url(label) == url


# -- the config file ------------------------------------------------------------------------------------

def test_the_config_file_holds_the_policy_and_the_drain_hook(tmp_path):
    config = watchrun.read_config({"leak": ["report"], "drain_command": ["/bin/drain", "{server}"],
                                   "drain_timeout_seconds": 5})
    assert config.policy.chains["leak"] == ("report",)
    assert (config.drain_command, config.drain_timeout_seconds) == (("/bin/drain", "{server}"), 5.0)
    assert watchrun.read_config(None) == watchrun.read_config({}) == watchrun.Config()
    path = tmp_path / "watchdog.json"
    path.write_text('{"max_restarts_per_hour": 1}')
    assert watchrun.load_config(str(path)).policy.max_restarts_per_hour == 1


@pytest.mark.parametrize(("data", "start"), [
    ({"drain_command": "lb-drain {server}"}, "watchdog policy: drain_command: must be a list"),
    ({"drain_command": ["lb-drain"]}, "watchdog policy: drain_command: the command must be an absolute path"),
    ({"drain_command": ["/bin/drain", "{host}"]}, "watchdog policy: drain_command: '{host}': only {server}"),
    ({"drain_command": ["/bin/drain", ""]}, "watchdog policy: drain_command: must be a list"),
    ({"drain_timeout_seconds": 0}, "watchdog policy: drain_timeout_seconds: must be 1 to 3600"),
    ({"drain_timeout_seconds": True}, "watchdog policy: drain_timeout_seconds: "),
    ({"drain_comand": []}, "watchdog policy: drain_comand: unknown field"),
    ({"leak": ["reboot"]}, "watchdog policy: leak: unknown action 'reboot'"),
    ([1], "watchdog policy: must be an object"),
])
def test_a_bad_config_is_one_line_naming_the_field(data, start):
    with pytest.raises(PolicyError) as exc:
        watchrun.read_config(data)
    assert str(exc.value).startswith(start) and "\n" not in str(exc.value)
    if "unknown field" in start:
        assert str(exc.value).endswith("runtime: drain_command, drain_timeout_seconds")


# -- tritonfleet-agent watchdog ----------------------------------------------------------------------------

def agent(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = agent_main(["watchdog", *argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def files(tmp_path):
    (tmp_path / "prom").mkdir()
    (tmp_path / "policy.json").write_text('{"leak": ["report"], "drain_command": ["/bin/drain", "{server}"]}')
    return tmp_path


def base_args(d: Path) -> list[str]:
    return ["--policy", str(d / "policy.json"), "--textfile-dir", str(d / "prom"), "--state", str(d / "s" / "l.json")]


@pytest.mark.parametrize(("change", "words"), [
    (["--interval", "0"], "argument --interval: 0 is not within 5 to 3600 seconds"),
    (["--interval", "4.9"], "argument --interval: 4.9 is not within 5 to 3600 seconds"),
    (["--interval", "3601"], "argument --interval: 3601 is not within 5 to 3600 seconds"),
    (["--interval", "nan"], "argument --interval: nan is not within 5 to 3600 seconds"),
    (["--interval", "soon"], "argument --interval: not a number of seconds: 'soon'"),
    (["--endpoint-url", "ftp://x"], "argument --endpoint-url: not an http(s) URL"),
    (["--neuron-exporter", "http://u:p@h/"], "argument --neuron-exporter: not an http(s) URL without credentials"),
    (["--region", "US East"], "argument --region: not a region name: 'US East'"),
    (["--policy", "{missing}"], "--policy {d}/missing: watchdog policy: No such file or directory"),
    (["--policy", "{bad}"], "--policy {d}/bad.json: watchdog policy: leak_window_seconds: must be more than 0, got -5"),
    (["--policy", "{notjson}"], "--policy {d}/notjson.json: watchdog policy: not valid JSON: "),
    (["--textfile-dir", "{d}/policy.json"], "--textfile-dir {d}/policy.json: not a directory"),
    (["--state", "{d}/prom"], "--state {d}/prom: a directory, not a file"),
    (["--queue-time-fleet", "prod"], "--queue-time-fleet, --queue-time-family and --queue-time-url go together"),
    (["--queue-time-url", "file:///x"], "argument --queue-time-url: not an http(s) URL"),
])
def test_bad_watchdog_arguments_exit_2_in_one_line(capsys, files, monkeypatch, change, words):
    (files / "bad.json").write_text('{"leak_window_seconds": -5}')
    (files / "notjson.json").write_text("{leak")
    ran = []
    monkeypatch.setattr(watchrun, "main", lambda *a, **k: ran.append(a) or 0)
    subst = {"{missing}": f"{files}/missing", "{bad}": f"{files}/bad.json", "{notjson}": f"{files}/notjson.json"}
    change = [subst.get(c, c).replace("{d}", str(files)) for c in change]
    code, out, err = agent(capsys, *base_args(files), *change)
    assert code == 2 and out == "" and ran == []
    assert err.startswith("tritonfleet-agent watchdog: error: ") and err.count("\n") == 1
    assert words.replace("{d}", str(files)) in err


def test_watchdog_arguments_reach_the_service(capsys, files, monkeypatch):
    got = []
    monkeypatch.setattr(watchrun, "main", lambda options, once: got.append((options, once)) or 0)
    code, _, err = agent(capsys, *base_args(files), "--interval", "15", "--once", "--region", "eu-west-1",
                         "--endpoint-url", "http://127.0.0.1:5000", "--neuron-exporter", EXPORTER,
                         "--header-file", "/etc/tritonfleet/repository-header")
    assert (code, err) == (0, "")
    (options, once), = got
    assert once is True and options.interval == 15.0
    assert (options.textfile_dir, options.state) == (str(files / "prom"), str(files / "s" / "l.json"))
    assert (options.region, options.endpoint_url, options.neuron_exporter, options.header_file) == \
        ("eu-west-1", "http://127.0.0.1:5000", EXPORTER, "/etc/tritonfleet/repository-header")
    assert options.config.policy.chains["leak"] == ("report",) and options.config.drain_command == ("/bin/drain", "{server}")


def test_watchdog_once_runs_one_pass_and_writes_its_files(capsys, files, monkeypatch):
    """The real runner on this machine: whatever tools it lacks are skipped, whatever fails is a status."""
    code, out, err = agent(capsys, *base_args(files), "--once")
    assert code == 0 and err == ""
    assert out.splitlines()[0] == ("watchdog: started, every 30 s; restarts at most 3 an hour per server; "
                                   "free-cores not allowed; drain hook set")
    state = json.loads((files / "s" / "l.json").read_text())
    assert state["schema"] == 1 and set(state["host"]["probes"]) >= {"neuron-ls", "nvidia-smi"}
    assert (files / "prom" / watchrun.TEXTFILE).read_text().startswith("# HELP tritonfleet_watchdog_actions_total")


def test_the_queue_time_is_published_once_a_minute_from_the_servers_metrics(tmp_path, monkeypatch, capsys, files):
    """--queue-time-*: each server's queue time per request goes to CloudWatch (moto) from the loop, once per
    QUEUE_TIME_PERIOD whatever the interval; a failure is one journal line and the loop goes on."""
    import http.server
    import threading

    import boto3
    from moto import mock_aws

    body = {"text": ""}

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            data = body["text"].encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/metrics"

    def counters(queue_us: int, requests: int) -> str:
        return (f'nv_inference_queue_duration_us{{model="bert",version="1"}} {queue_us}\n'
                f'nv_inference_request_success{{model="bert",version="1"}} {requests}\n')

    got = []
    monkeypatch.setattr(watchrun, "main", lambda options, once: got.append(options) or 0)
    assert agent(capsys, *base_args(files), "--queue-time-fleet", "prod", "--queue-time-family", "inf2",
                 "--queue-time-url", url)[0] == 0
    (options,) = got
    assert options.queue_time == watchrun.QueueTimeOptions((url,), "prod", "inf2")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        host, clock = FakeHost(), Clock()
        run = make(host, clock, tmp_path, region="us-east-1", queue_time=watchrun.QueueTimeOptions(
            (url,), "prod", "inf2", state=str(tmp_path / "queue-time.json")))
        passes, now = [], [0.0]
        monkeypatch.setattr(watchrun.time, "monotonic", lambda: now[0])

        class Stop:
            def is_set(self) -> bool:
                return len(passes) >= 5

            def wait(self, seconds: float) -> None:
                now[0] += 30  # the interval: a publication every other pass
                passes.append(1)
                body["text"] = counters(4000 * len(passes), 2 * len(passes))  # 2 requests, 4 ms queued, a pass

        run.stop = Stop()
        body["text"] = counters(0, 0)
        run.loop()
        cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
        stats = cloudwatch.get_metric_statistics(
            Namespace="tritonfleet", MetricName="QueueTimePerRequest",
            # (both dimensions: moto matches a subset, so fleet alone would count each value's two copies)
            Dimensions=[{"Name": "fleet", "Value": "prod"}, {"Name": "family", "Value": "inf2"}],
            StartTime=datetime.datetime(2000, 1, 1), EndTime=datetime.datetime(2100, 1, 1), Period=60,
            Statistics=["Average", "SampleCount"])["Datapoints"]
        # passes at 0, 30, 60, 90, 120 s: published at 0 (the baseline: nothing yet), 60 and 120
        assert sum(d["SampleCount"] for d in stats) == 2 and {d["Average"] for d in stats} == {2.0}
        assert not [line for line in journal(run) if "queue time" in line]  # nothing to say when it works
        server.shutdown()
        run.stop = type("Once", (), {"is_set": lambda self: False, "wait": lambda self, s: None})()
        run.loop(once=True)  # the server gone: one line, the loop goes on
        assert any(line.startswith("watchdog: queue time: ") and url in line for line in journal(run))
