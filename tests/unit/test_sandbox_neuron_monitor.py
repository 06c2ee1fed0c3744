"""The stand-in ``neuron-monitor`` (runtime entries from real processes) and ``neuron-monitor-prometheus.py``.

The rendered scripts run as subprocesses against a fake root (``TRITONFLEET_SANDBOX_ROOT``: plain files as
``/dev/neuronN`` and a ``hardware.json``); "Neuron runtimes" are child processes started with
``NEURON_RT_VISIBLE_CORES`` in their environment. The exporter listens on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import re
import runpy
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.test_sandbox_standins import INF2
from tritonfleet.sandbox import standins

HW = {k: v for k, v in INF2.items() if k != "driver_creates_devices"}  # the stand-in tools' hardware file
VALUES = {"PACKAGE": "aws-neuronx-tools", "VERSION": "2.32.28.0"}
BUSY = "import time\nend = time.time() + 60\nwhile time.time() < end:\n    pass\n"
# a "server" whose worker child inherits the variable (must not count as a second runtime)
BUSY_WITH_CHILD = "import subprocess\nsubprocess.Popen(['sleep', '60'])\n" + BUSY


def have_prometheus_client() -> bool:
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return True


needs_prometheus_client = pytest.mark.skipif(
    not have_prometheus_client(), reason="prometheus_client is not installed in this Python"
)


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("standins")
    paths = {}
    for name in ("neuron_monitor.py.in", "neuron_monitor_prometheus.py.in"):
        path = out / name.removesuffix(".py.in")
        path.write_text(standins._template(name, **VALUES))
        path.chmod(0o755)
        paths[name.split(".")[0]] = path
    return paths


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "dev").mkdir()
    (tmp_path / "etc/tritonfleet-sandbox").mkdir(parents=True)
    (tmp_path / "etc/tritonfleet-sandbox/hardware.json").write_text(json.dumps(HW))
    for i in range(HW["device_count"]):
        (tmp_path / f"dev/neuron{i}").touch()
    (tmp_path / "monitor.json").write_text(json.dumps(config(".*", RUNTIME_GROUPS, SYSTEM_GROUPS)))
    return tmp_path


RUNTIME_GROUPS = ("execution_stats", "memory_used", "neuron_runtime_vcpu_usage", "neuroncore_counters")
SYSTEM_GROUPS = ("neuron_hw_counters", "vcpu_usage", "memory_info")


def config(tag_filter: str | None, runtime_groups=(), system_groups=()) -> dict:
    """A neuron-monitor config in the documented format (as roles/monitoring.py writes it)."""
    cfg: dict = {"period": "250ms"}
    if tag_filter is not None:
        cfg["neuron_runtimes"] = [
            {"tag_filter": tag_filter, "metrics": [{"type": g} for g in runtime_groups]}
        ]
    if system_groups:
        cfg["system_metrics"] = [{"type": g} for g in system_groups]
    return cfg


@pytest.fixture
def spawn() -> Iterator:
    """Start child processes (killed, with their process group, at the end of the test)."""
    procs: list[subprocess.Popen] = []

    def start(code: str, **env: str) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            env={**os.environ, **env},
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


def parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def monitor(scripts: dict[str, Path], root: Path, reports: int) -> list[dict]:
    proc = subprocess.run(
        [
            sys.executable,
            str(scripts["neuron_monitor"]),
            "-c",
            str(root / "monitor.json"),
            "--sandbox-reports",
            str(reports),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "TRITONFLEET_SANDBOX_ROOT": str(root)},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == reports
    return [json.loads(line) for line in lines]


# ------------------------------------------------------------------------------------------- package


@pytest.mark.parametrize(
    ("package", "version", "has_monitor"),
    [
        *[("aws-neuronx-tools", v, True) for v in standins.NEURON_TOOLS_VERSIONS],
        ("aws-neuron-tools", standins.LEGACY_TOOLS_VERSION, False),
    ],
)
def test_tools_package_ships_monitor_and_exporter(package: str, version: str, has_monitor: bool) -> None:
    pkg = next(
        p for p in standins.standin_packages(os.uname().release) if (p.name, p.version) == (package, version)
    )
    files = {f.path: f for f in pkg.files}
    for path in ("/opt/aws/neuron/bin/neuron-monitor", "/opt/aws/neuron/bin/neuron-monitor-prometheus.py"):
        assert (path in files) is has_monitor
        if has_monitor:
            text = files[path].content.decode()
            assert files[path].mode == 0o755
            assert f"SANDBOX STAND-IN for {path.rsplit('/', 1)[1]} from {package} {version}" in text
            assert "@@" not in text


# ---------------------------------------------------------------------------------------- neuron-monitor


@pytest.mark.parametrize(
    ("value", "cores"),
    [
        ("0", [0]),
        ("0-1", [0, 1]),
        ("16-23", list(range(16, 24))),
        ("51,52", [51, 52]),
        ("0-1,4", [0, 1, 4]),
        (" 2 - 3 ", [2, 3]),
        ("3-1", []),
        ("", []),
        ("all", []),
    ],
)
def test_visible_cores_parsing(scripts: dict[str, Path], value: str, cores: list[int]) -> None:
    parse_cores = runpy.run_path(str(scripts["neuron_monitor"]), run_name="standin")["parse_cores"]
    assert parse_cores(value) == cores


RUNTIME_REPORT_KEYS = set(RUNTIME_GROUPS)
NC_MEMORY_KEYS = {"constants", "model_code", "model_shared_scratchpad", "runtime_memory", "tensors"}


def test_monitor_reports_one_entry_per_runtime_process(scripts, root, spawn) -> None:
    busy = spawn(BUSY_WITH_CHILD, NEURON_RT_VISIBLE_CORES="0-1")
    idle = spawn("import time; time.sleep(60)", NEURON_RT_VISIBLE_CORES="2", NEURON_PROCESS_TAG="tagged-b")
    time.sleep(0.3)
    # like a `docker exec` into busy's container: same cgroup and cores, younger -> not a runtime
    exec_like = spawn("import time; time.sleep(60)", NEURON_RT_VISIBLE_CORES="0-1")
    time.sleep(0.5)

    reports = monitor(scripts, root, 3)
    ours = {busy.pid, idle.pid, exec_like.pid}
    for report in reports:
        entries = {e["pid"]: e for e in report["neuron_runtime_data"]}
        assert set(entries) & ours == {busy.pid, idle.pid}, entries.keys()
        assert not {pid for pid in entries if parent(pid) in ours}  # busy's worker child is part of busy

    last = {e["pid"]: e for e in reports[-1]["neuron_runtime_data"]}
    b, i = last[busy.pid], last[idle.pid]
    assert b["neuron_runtime_tag"] == str(busy.pid) and i["neuron_runtime_tag"] == "tagged-b"
    for entry, cores in ((b, {"0", "1"}), (i, {"2"})):
        assert entry["error"] == "" and set(entry["report"]) == RUNTIME_REPORT_KEYS
        rep = entry["report"]
        counters = rep["neuroncore_counters"]
        assert set(counters) == {"period", "neuroncores_in_use", "error"} and counters["error"] == ""
        assert 0.1 < counters["period"] < 5
        assert set(counters["neuroncores_in_use"]) == cores
        for core in counters["neuroncores_in_use"].values():
            assert set(core) == {"neuroncore_utilization", "flops"} and core["flops"] == 0
            assert 0.0 <= core["neuroncore_utilization"] <= 100.0
        used = rep["memory_used"]["neuron_runtime_used_bytes"]
        assert used["host"] > 0 and used["neuron_device"] == 0
        assert used["usage_breakdown"]["host"] == {
            "application_memory": used["host"],
            "constants": 0,
            "dma_buffers": 0,
            "tensors": 0,
        }
        assert set(used["usage_breakdown"]["neuroncore_memory_usage"]) == cores
        assert all(
            set(v) == NC_MEMORY_KEYS for v in used["usage_breakdown"]["neuroncore_memory_usage"].values()
        )
        assert rep["memory_used"]["loaded_models"] == [] and rep["memory_used"]["error"] == ""
        assert set(rep["neuron_runtime_vcpu_usage"]["vcpu_usage"]) == {"user", "system"}
        stats = rep["execution_stats"]
        assert set(stats) == {"period", "error_summary", "execution_summary", "latency_stats", "error"}
        assert stats["latency_stats"] == {"total_latency": None, "device_latency": None}
        assert set(stats["error_summary"].values()) == {0} and set(stats["execution_summary"].values()) == {0}
    # one busy CPU spread over two cores (with the worker child's time counted in); the sleeper idles
    busy_util = [
        c["neuroncore_utilization"] for c in b["report"]["neuroncore_counters"]["neuroncores_in_use"].values()
    ]
    assert busy_util[0] == busy_util[1] and busy_util[0] > 10, busy_util
    assert i["report"]["neuroncore_counters"]["neuroncores_in_use"]["2"]["neuroncore_utilization"] < 5
    assert b["report"]["neuron_runtime_vcpu_usage"]["vcpu_usage"]["user"] > 0

    # system vCPU usage now comes from /proc/stat
    vcpu = reports[-1]["system_data"]["vcpu_usage"]
    assert len(vcpu["usage_data"]) == os.cpu_count()
    assert abs(sum(vcpu["average_usage"].values()) - 100) < 1

    # without a driver (no device nodes) there are no runtimes, like the real tool
    for node in (root / "dev").iterdir():
        node.unlink()
    (report,) = monitor(scripts, root, 1)
    assert report["neuron_runtime_data"] == [] and report["neuron_hardware_info"]["error"]


# ------------------------------------------------------------------------------------------- exporter


def runtime(tag: str, util: dict[str, float], *, latency: bool, completed: int, error: str = "") -> dict:
    zero = dict.fromkeys(NC_MEMORY_KEYS, 0)
    return {
        "pid": 4242,
        "neuron_runtime_tag": tag,
        "error": error,
        "report": {
            "execution_stats": {
                "period": 5.0,
                "error_summary": {
                    "generic": 1,
                    "numerical": 0,
                    "transient": 0,
                    "model": 0,
                    "runtime": 0,
                    "hardware": 0,
                },
                "execution_summary": {
                    "completed": completed,
                    "completed_with_err": 0,
                    "completed_with_num_err": 0,
                    "timed_out": 0,
                    "incorrect_input": 0,
                    "failed_to_queue": 0,
                },
                "latency_stats": {
                    "total_latency": {"p50": 0.0035, "p99": 0.005} if latency else None,
                    "device_latency": None,
                },
                "error": "",
            },
            "memory_used": {
                "period": 5.0,
                "neuron_runtime_used_bytes": {
                    "host": 2605992,
                    "neuron_device": 63105088,
                    "usage_breakdown": {
                        "host": {
                            "application_memory": 2605992,
                            "constants": 0,
                            "dma_buffers": 0,
                            "tensors": 0,
                        },
                        "neuroncore_memory_usage": {c: {**zero, "model_code": 1295008} for c in util},
                    },
                },
                "loaded_models": [],
                "error": "",
            },
            "neuron_runtime_vcpu_usage": {"period": 5.0, "vcpu_usage": {"user": 4, "system": 1}, "error": ""},
            "neuroncore_counters": {
                "period": 5.0,
                "neuroncores_in_use": {c: {"neuroncore_utilization": u, "flops": 0} for c, u in util.items()},
                "error": "",
            },
        },
    }


def sample_report(runtimes: list[dict], ecc: int = 0) -> dict:
    return {
        "neuron_runtime_data": runtimes,
        "system_data": {
            "neuron_hw_counters": {
                "period": 5.0,
                "error": "",
                "neuron_devices": [
                    {
                        "neuron_device_index": 0,
                        "mem_ecc_corrected": ecc,
                        "mem_ecc_uncorrected": 0,
                        "sram_ecc_corrected": 0,
                        "sram_ecc_uncorrected": 0,
                    },
                ],
            },
            "vcpu_usage": {
                "period": 5.0,
                "average_usage": {
                    "user": 20.0,
                    "nice": 5.0,
                    "system": 3.0,
                    "idle": 70.0,
                    "io_wait": 1.0,
                    "irq": 0.5,
                    "soft_irq": 0.5,
                },
                "usage_data": {str(c): {} for c in range(4)},
                "context_switch_count": 0,
                "error": "",
            },
            "memory_info": {
                "period": 5.0,
                "memory_total_bytes": 8033951744,
                "memory_used_bytes": 7020883968,
                "swap_total_bytes": 0,
                "swap_used_bytes": 0,
                "error": "",
            },
        },
        "instance_info": {
            "instance_name": "",
            "instance_id": "i-0sandbox00000001",
            "instance_type": "inf2.24xlarge",
            "instance_availability_zone": "us-east-1a",
            "instance_availability_zone_id": "",
            "instance_region": "us-east-1",
            "ami_id": "ami-0sandbox0000000000",
            "subnet_id": "subnet-0sandbox0000000000",
            "error": "",
        },
        "neuron_hardware_info": {
            "neuron_device_type": "inferentia2",
            "neuron_device_count": 6,
            "neuroncore_per_device_count": 2,
            "error": "",
        },
    }


INSTANCE = {
    "instance_name": "",
    "instance_id": "i-0sandbox00000001",
    "instance_type": "inf2.24xlarge",
    "availability_zone": "us-east-1a",
    "region": "us-east-1",
    "subnet_id": "subnet-0sandbox0000000000",
}


class Exporter:
    """The exporter as a subprocess reading a pipe, on an ephemeral 127.0.0.1 port."""

    def __init__(self, script: Path, stdin=subprocess.PIPE) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(script), "--port", "0"],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "TRITONFLEET_SANDBOX_EXPORTER_ADDRESS": "127.0.0.1"},
        )
        first: list[str] = []
        reader = threading.Thread(target=lambda: first.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout=15)
        m = re.fullmatch(r"Running HTTP prometheus server at port (\d+)\n", first[0] if first else "")
        assert m, (first, self.proc.poll())
        self.url = f"http://127.0.0.1:{m.group(1)}/metrics"

    def send(self, report: dict) -> None:
        self.proc.stdin.write(json.dumps(report) + "\n")
        self.proc.stdin.flush()

    def scrape(self) -> str:
        with urllib.request.urlopen(self.url, timeout=5) as resp:
            return resp.read().decode()

    def wait_for(self, predicate, timeout: float = 15) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.scrape()
            if predicate(text):
                return text
            assert time.monotonic() < deadline, text
            time.sleep(0.1)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, frozenset(labels.items())))


@pytest.fixture
def exporter(scripts) -> Iterator[Exporter]:
    exp = Exporter(scripts["neuron_monitor_prometheus"])
    yield exp
    exp.close()


RT = {**INSTANCE, "runtime_tag": "srv-a"}
EXPECTED = [  # (metric, type, help, labels, value after the first report)
    ("neuroncore_utilization_ratio", "gauge", "NeuronCore utilization ratio", {**RT, "neuroncore": "0"}, 0.5),
    (
        "neuroncore_utilization_ratio",
        "gauge",
        "NeuronCore utilization ratio",
        {**RT, "neuroncore": "1"},
        0.25,
    ),
    (
        "neuron_runtime_vcpu_usage_ratio",
        "gauge",
        "Runtime vCPU utilization ratio",
        {**RT, "usage_type": "user"},
        0.04,
    ),
    (
        "neuron_runtime_memory_used_bytes",
        "gauge",
        "Runtime memory used bytes",
        {**RT, "memory_location": "host"},
        2605992,
    ),
    (
        "neuron_runtime_memory_used_bytes",
        "gauge",
        "Runtime memory used bytes",
        {**RT, "memory_location": "neuron_device"},
        63105088,
    ),
    (
        "neuroncore_memory_usage_model_code",
        "gauge",
        "NeuronCore memory utilization for model_code",
        {**RT, "memory_location": "None", "neuroncore": "1"},
        1295008,
    ),
    (
        "neuroncore_memory_usage_tensors",
        "gauge",
        "NeuronCore memory utilization for tensors",
        {**RT, "memory_location": "None", "neuroncore": "0"},
        0,
    ),
    ("execution_errors_total", "counter", "Execution errors total", {**RT, "error_type": "generic"}, 1),
    ("execution_status_total", "counter", "Execution status total", {**RT, "status_type": "completed"}, 50),
    (
        "execution_latency_seconds",
        "gauge",
        "Execution latency in seconds",
        {**RT, "percentile": "p99"},
        0.005,
    ),
    (
        "hardware_ecc_events_total",
        "counter",
        "Hardware ecc events total",
        {**INSTANCE, "event_type": "mem_ecc_corrected", "neuron_device_index": "0"},
        2,
    ),
    ("system_vcpu_count", "gauge", "System vCPU count", INSTANCE, 4),
    (
        "system_vcpu_usage_ratio",
        "gauge",
        "System CPU utilization ratio",
        {**INSTANCE, "usage_type": "user"},
        0.25,
    ),
    (
        "system_vcpu_usage_ratio",
        "gauge",
        "System CPU utilization ratio",
        {**INSTANCE, "usage_type": "system"},
        0.05,
    ),
    ("system_memory_total_bytes", "gauge", "System memory total_bytes bytes", INSTANCE, 8033951744),
    ("system_memory_used_bytes", "gauge", "System memory used_bytes bytes", INSTANCE, 7020883968),
    ("system_swap_total_bytes", "gauge", "System swap total_bytes bytes", INSTANCE, 0),
    ("system_swap_used_bytes", "gauge", "System swap used_bytes bytes", INSTANCE, 0),
    ("instance_info", "gauge", "EC2 instance information", INSTANCE, 1),
    (
        "neuron_hardware_info",
        "gauge",
        "Neuron Hardware Information",
        {**INSTANCE, "neuron_device_count": "6", "neuroncore_per_device_count": "2"},
        1,
    ),
]


@needs_prometheus_client
def test_exporter_serves_the_aws_metrics(exporter: Exporter) -> None:
    first = sample_report(
        [
            runtime("srv-a", {"0": 50.0, "1": 25.0}, latency=True, completed=50),
            runtime("srv-b", {"2": 10.0}, latency=False, completed=7),
            runtime("broken", {"3": 99.0}, latency=False, completed=1, error="runtime went away"),
        ],
        ecc=2,
    )
    exporter.send(first)
    text = exporter.wait_for(lambda t: "neuron_hardware_info{" in t)
    for name, kind, doc, labels, expected in EXPECTED:
        family = name.removesuffix("_total") + ("_total" if kind == "counter" else "")
        assert f"# HELP {family} {doc}\n" in text and f"# TYPE {family} {kind}\n" in text, name
        assert value(text, name, **labels) == pytest.approx(expected), (name, labels)
    assert (
        value(text, "neuroncore_utilization_ratio", **{**RT, "runtime_tag": "srv-b", "neuroncore": "2"})
        == 0.1
    )
    assert 'runtime_tag="broken"' not in text  # a runtime with an error is skipped, as by AWS's script
    assert (
        value(text, "execution_latency_seconds", **{**RT, "runtime_tag": "srv-b", "percentile": "p99"})
        is None
    )

    # a second report: counters add up the per-period numbers, a runtime that is gone loses its series
    exporter.send(
        sample_report([runtime("srv-a", {"0": 100.0, "1": 0.0}, latency=True, completed=20)], ecc=1)
    )
    ecc = {**INSTANCE, "event_type": "mem_ecc_corrected", "neuron_device_index": "0"}
    # the system groups come after the runtimes in a report's processing: wait for them
    text = exporter.wait_for(lambda t: value(t, "hardware_ecc_events_total", **ecc) == 3)
    assert value(text, "neuroncore_utilization_ratio", **RT, neuroncore="0") == 1.0
    assert value(text, "execution_status_total", **RT, status_type="completed") == 70
    assert 'runtime_tag="srv-b"' not in text

    # no runtimes at all: the runtime series go, the system ones stay
    exporter.send(sample_report([]))
    text = exporter.wait_for(lambda t: "runtime_tag=" not in t)
    assert value(text, "system_vcpu_count", **INSTANCE) == 4

    # junk is reported and skipped; end of input ends the exporter (status 1) so its service restarts
    exporter.proc.stdin.write("not json\n")
    exporter.proc.stdin.close()
    assert exporter.proc.wait(timeout=15) == 1
    assert "Unable to decode JSON" in exporter.proc.stdout.read()
    assert "end of input" in exporter.proc.stderr.read()


@needs_prometheus_client
@pytest.mark.parametrize(
    ("group", "where"),
    [("memory_info", "system_memory_total_bytes{"), ("neuron_hw_counters", "hardware_ecc_events_total{")],
)
def test_exporter_skips_groups_with_errors(exporter: Exporter, group: str, where: str) -> None:
    report = sample_report([runtime("srv-a", {"0": 50.0}, latency=False, completed=1)])
    report["system_data"][group]["error"] = "driver not loaded"
    exporter.send(report)
    text = exporter.wait_for(lambda t: "instance_info{" in t)
    assert where not in text and "neuroncore_utilization_ratio{" in text
    exporter.proc.stdin.close()
    assert exporter.proc.wait(timeout=15) == 1
    assert f"Error getting {group}: driver not loaded" in exporter.proc.stderr.read()


@needs_prometheus_client
def test_monitor_piped_into_exporter(scripts, root, spawn) -> None:
    """The service's pipeline: a runtime shows up as neuroncore_utilization_ratio; when neuron-monitor dies,
    the exporter exits too."""
    tag = f"pytest-{uuid.uuid4().hex[:8]}"
    spawn(BUSY, NEURON_RT_VISIBLE_CORES="4-5", NEURON_PROCESS_TAG=tag)
    mon = subprocess.Popen(
        [sys.executable, str(scripts["neuron_monitor"]), "-c", str(root / "monitor.json")],
        stdout=subprocess.PIPE,
        env={**os.environ, "TRITONFLEET_SANDBOX_ROOT": str(root)},
    )
    exp = Exporter(scripts["neuron_monitor_prometheus"], stdin=mon.stdout)
    mon.stdout.close()  # the exporter holds the read end now
    try:
        labels = {**INSTANCE, "runtime_tag": tag, "neuroncore": "5"}
        # (the info metrics come last in a report's processing: a scrape may fall in between)
        text = exp.wait_for(
            lambda t: (
                (value(t, "neuroncore_utilization_ratio", **labels) or 0) > 0.05
                and "neuron_hardware_info{" in t
            )
        )
        assert 0 < value(text, "neuroncore_utilization_ratio", **labels) <= 1.0
        assert (
            value(
                text,
                "neuron_hardware_info",
                **{**INSTANCE, "neuron_device_count": "6", "neuroncore_per_device_count": "2"},
            )
            == 1
        )
        mon.terminate()
        mon.wait(timeout=10)
        assert exp.proc.wait(timeout=15) == 1
    finally:
        if mon.poll() is None:
            mon.kill()
            mon.wait(timeout=10)
        exp.close()


@pytest.mark.parametrize(
    ("cfg", "reported", "runtime_groups", "system_groups"),
    [
        pytest.param(None, {"busy", "tagged"}, set(RUNTIME_GROUPS), set(SYSTEM_GROUPS), id="no-config"),
        pytest.param(config(None), set(), set(), set(), id="config-without-runtimes"),
        pytest.param(
            config(".*", ["neuroncore_counters", "memory_used"], ["vcpu_usage"]),
            {"busy", "tagged"},
            {"neuroncore_counters", "memory_used"},
            {"vcpu_usage"},
            id="some-groups",
        ),
        pytest.param(
            config("^tagged-", ["neuroncore_counters"], SYSTEM_GROUPS),
            {"tagged"},
            {"neuroncore_counters"},
            set(SYSTEM_GROUPS),
            id="tag-filter",
        ),
    ],
)
def test_monitor_config_selects_runtimes_and_groups(
    scripts, root, spawn, cfg, reported, runtime_groups, system_groups
) -> None:
    procs = {
        "busy": spawn(BUSY, NEURON_RT_VISIBLE_CORES="0"),
        "tagged": spawn(
            "import time; time.sleep(60)", NEURON_RT_VISIBLE_CORES="1", NEURON_PROCESS_TAG="tagged-x"
        ),
    }
    time.sleep(0.3)
    args = ["--sandbox-reports", "1"]
    if cfg is not None:
        (root / "selected.json").write_text(json.dumps(cfg))
        args += ["-c", str(root / "selected.json")]
    proc = subprocess.run(
        [sys.executable, str(scripts["neuron_monitor"]), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "TRITONFLEET_SANDBOX_ROOT": str(root)},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    entries = {e["pid"]: e for e in report["neuron_runtime_data"]}
    assert {name for name, p in procs.items() if p.pid in entries} == reported
    for name in reported:
        assert set(entries[procs[name].pid]["report"]) == runtime_groups
    assert set(report["system_data"]) == system_groups
    assert report["neuron_hardware_info"]["error"] == "" and report["instance_info"]["instance_type"]


@pytest.mark.parametrize(
    "text",
    ["{not json", json.dumps({"neuron_runtimes": [{"tag_filter": "(", "metrics": []}]})],
    ids=["bad-json", "bad-regex"],
)
def test_monitor_rejects_a_bad_config(scripts, root, text: str) -> None:
    (root / "bad.json").write_text(text)
    proc = subprocess.run(
        [
            sys.executable,
            str(scripts["neuron_monitor"]),
            "-c",
            str(root / "bad.json"),
            "--sandbox-reports",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert "Failed to load config file" in proc.stderr


def test_injected_hardware_errors_are_reported_once_in_the_next_period(scripts, root) -> None:
    """The fault tests' uncorrectable error: counts written to run/tritonfleet-sandbox/neuron-hw-errors.json are
    the next report's neuron_hw_counters for that device, per period as the real tool counts, then gone."""
    faults = root / "run/tritonfleet-sandbox/neuron-hw-errors.json"
    faults.parent.mkdir(parents=True)
    faults.write_text(json.dumps({"0": {"mem_ecc_uncorrected": 2, "neuron_device_index": 7, "bogus": 5}}))
    first, second = monitor(scripts, root, 2)

    def devices(report: dict) -> dict[int, dict]:
        return {d["neuron_device_index"]: d for d in report["system_data"]["neuron_hw_counters"]["neuron_devices"]}

    assert devices(first)[0] == {"neuron_device_index": 0, "mem_ecc_corrected": 0, "mem_ecc_uncorrected": 2,
                                 "sram_ecc_corrected": 0, "sram_ecc_uncorrected": 0}
    assert all(d["mem_ecc_uncorrected"] == 0 for i, d in devices(first).items() if i != 0)
    assert all(v == 0 for d in devices(second).values() for k, v in d.items() if k != "neuron_device_index")
    assert not faults.exists() and list(faults.parent.iterdir()) == []


def test_neuron_ls_lists_each_runtime_on_the_devices_of_its_cores(root, spawn) -> None:
    """The stand-in driver's nodes cannot be opened: neuron-ls finds a runtime by NEURON_RT_VISIBLE_CORES (its
    first process, not the children that inherit it), on the devices those cores belong to (2 per inf2 device),
    as the watchdog's foreign-process probe reads it."""
    script = root / "neuron-ls"
    script.write_text(standins._template("neuron_ls.py.in", LEGACY="False", **VALUES))
    two = spawn(BUSY_WITH_CHILD, NEURON_RT_VISIBLE_CORES="1-2")  # cores 1 and 2: devices 0 and 1
    one = spawn(BUSY, NEURON_RT_VISIBLE_CORES="5")  # device 2
    end = time.monotonic() + 10
    children: list[int] = []
    while time.monotonic() < end and not children:
        children = [p for p in map(int, filter(str.isdigit, os.listdir("/proc"))) if parent(p) == two.pid]
        time.sleep(0.1)
    assert children, "the runtime's child did not start"
    out = subprocess.run([sys.executable, str(script), "--json-output"], capture_output=True, text=True,
                         env={**os.environ, "TRITONFLEET_SANDBOX_ROOT": str(root)}, timeout=30)
    assert out.returncode == 0, out.stderr
    mine = {two.pid, one.pid, *children}  # (this machine may run other runtimes: the sandbox's)
    held = {r["neuron_device"]: sorted(p["pid"] for p in r["neuron_processes"] if p["pid"] in mine)
            for r in json.loads(out.stdout)}
    assert held[0] == [two.pid] and held[1] == [two.pid] and held[2] == [one.pid]
    assert all(not pids for device, pids in held.items() if device > 2)
