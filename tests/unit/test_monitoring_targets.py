"""`tritonfleet monitoring targets` and the exporters column of `tritonfleet status`, from the outside: target
files from an inventory file, a scrape config Prometheus' own promtool accepts, bad data as one line, and the
exporters probed on loopback (a port that serves /metrics, one nothing listens on)."""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import threading

import pytest
from click.testing import CliRunner

from tritonfleet.face import monitoring
from tritonfleet.face.cli import main

FPR = "A" * 40
COMMON = {"neuron_key_fingerprint": FPR, "nvidia_key_fingerprint": FPR, "triton_repository_secret": "s" * 24}


def _inventory(tmp_path, hosts: list[tuple[str, dict]], name: str = "prod") -> str:
    inv = tmp_path / f"{name}.py"
    inv.write_text(f"hosts = ({hosts!r}, {COMMON!r})\n")
    return str(inv)


HOSTS = [
    ("inf2-a", {"instance_type": "inf2.24xlarge", "ssh_hostname": "10.0.0.1",
                "triton_servers": [{"name": "left", "devices": [0, 1, 2]}, {"name": "right", "devices": [3, 4, 5]}]}),
    ("gpu-a", {"instance_type": "g5.xlarge", "ssh_hostname": "10.0.0.2", "ec2_private_ip": "172.31.0.2",
               "ec2_fleet": "blue"}),
    ("trn-a", {"instance_type": "trn1.2xlarge", "ssh_hostname": "10.0.0.3", "monitoring_scrape_address": "trn-a.internal",
               "monitoring_neuron_exporter_port": 9555, "monitoring_node_exporter": False}),
]


def test_targets_per_exporter_kind_with_labels_and_addresses(tmp_path):
    out = tmp_path / "sd"
    result = CliRunner().invoke(main, ["monitoring", "targets", "--inventory", _inventory(tmp_path, HOSTS),
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "4 triton, 2 node, 2 neuron, 1 dcgm" in result.output
    sd = {job: json.loads((out / f"{job}.json").read_text()) for job in monitoring.JOBS}
    triton = {(g["labels"]["host"], g["labels"]["server"]): g for g in sd["triton"]}
    assert triton[("inf2-a", "left")]["targets"] == ["10.0.0.1:8002"]
    assert triton[("inf2-a", "right")]["targets"] == ["10.0.0.1:8012"]  # placement: +10 per server
    assert triton[("inf2-a", "left")]["labels"] == {"host": "inf2-a", "instance_type": "inf2.24xlarge",
                                                    "family": "inf2", "fleet": "prod", "server": "left"}
    node = {g["labels"]["host"]: g for g in sd["node"]}
    assert set(node) == {"inf2-a", "gpu-a"}  # trn-a switched its node exporter off
    assert node["gpu-a"]["targets"] == ["172.31.0.2:9100"] and node["gpu-a"]["labels"]["fleet"] == "blue"
    neuron = {g["labels"]["host"]: g["targets"] for g in sd["neuron"]}
    assert neuron == {"inf2-a": ["10.0.0.1:9010"], "trn-a": ["trn-a.internal:9555"]}
    assert [g["targets"] for g in sd["dcgm"]] == [["172.31.0.2:9400"]]
    assert not (out / "prometheus.yml").exists()


@pytest.mark.parametrize("triton, expected", [
    ({"triton_servers": [{"name": "left", "devices": [0, 1, 2], "bind_address": "10.0.0.7"},
                         {"name": "right", "devices": [3, 4, 5]}]},
     {"left": "10.0.0.7:8002", "right": "172.31.0.9:8012"}),
    ({"triton_bind_address": "10.0.0.8", "triton_servers": [
        {"name": "left", "devices": [0, 1, 2]}, {"name": "right", "devices": [3, 4, 5], "bind_address": "0.0.0.0"}]},
     {"left": "10.0.0.8:8002", "right": "172.31.0.9:8012"}),
    ({"triton_servers": [{"name": "left", "devices": [0, 1, 2], "bind_address": "fd00::7"},
                         {"name": "right", "devices": [3, 4, 5], "bind_address": "::"}]},
     {"left": "[fd00::7]:8002", "right": "172.31.0.9:8012"}),
], ids=["one server bound", "host-wide bind address", "ipv6"])
def test_a_triton_server_bound_to_an_address_is_scraped_there(triton, expected):
    data = {**COMMON, "instance_type": "inf2.24xlarge", "ssh_hostname": "10.0.0.1", "ec2_private_ip": "172.31.0.9",
            **triton}
    targets = monitoring.host_targets("inf2-a", data, default_fleet="prod")
    assert {t.labels["server"]: t.address for t in targets if t.job == "triton"} == expected
    # the exporters are not Triton's: they stay at the host's address
    assert {t.job: t.address for t in targets if t.job != "triton"} == {"node": "172.31.0.9:9100",
                                                                       "neuron": "172.31.0.9:9010"}


@pytest.mark.parametrize("bind, node", [("10.0.0.5", "10.0.0.5:9100"), ("fd00::5", "[fd00::5]:9100"),
                                        ("0.0.0.0", "172.31.0.9:9100"), ("::", "172.31.0.9:9100")])
def test_exporters_bound_to_one_address_are_scraped_there_but_the_neuron_one(bind, node):
    data = {**COMMON, "instance_type": "inf2.xlarge", "ssh_hostname": "10.0.0.1", "ec2_private_ip": "172.31.0.9",
            "monitoring_bind_address": bind}
    targets = monitoring.host_targets("inf2-a", data, default_fleet="prod")
    exporters = {t.job: t.address for t in targets if t.job != "triton"}
    assert exporters == {"node": node, "neuron": "172.31.0.9:9010"}  # AWS's exporter listens everywhere
    gpu = monitoring.host_targets("g5-a", {**data, "instance_type": "g5.xlarge"}, default_fleet="prod")
    assert {t.job: t.address for t in gpu if t.job == "dcgm"} == {"dcgm": node.replace("9100", "9400")}


def test_the_lb_groups_hosts_get_a_haproxy_target_and_node_metrics(tmp_path):
    inv = tmp_path / "edge.py"
    lb = [("lb-a", {"instance_type": "c6i.large", "ssh_hostname": "10.0.0.9", "lb_prometheus_port": 9405}),
          ("lb-b", {"instance_type": "c6i.large", "ssh_hostname": "10.0.0.10", "lb_bind_address": "10.0.1.10"})]
    inv.write_text(f"triton = ({HOSTS[:1]!r}, {COMMON!r})\nlb = ({lb!r}, {COMMON!r})\n")
    out = tmp_path / "sd"
    counts = monitoring.write_targets(inv, out)
    assert counts["haproxy"] == 2
    haproxy = {g["labels"]["host"]: g for g in json.loads((out / "haproxy.json").read_text())}
    assert haproxy["lb-a"]["targets"] == ["10.0.0.9:9405"]  # lb_prometheus_port
    assert haproxy["lb-b"]["targets"] == ["10.0.1.10:8405"]  # HAProxy listens on lb_bind_address only
    assert haproxy["lb-a"]["labels"] == {"host": "lb-a", "instance_type": "c6i.large", "family": "c6i",
                                         "fleet": "edge"}
    node = {g["labels"]["host"] for g in json.loads((out / "node.json").read_text())}
    assert node == {"inf2-a", "lb-a", "lb-b"}  # deploys/monitoring.py gives the load balancers a node exporter
    assert "inf2-a" not in haproxy


def test_a_rerun_after_an_inventory_change_drops_the_gone_host(tmp_path):
    out = tmp_path / "sd"
    monitoring.write_targets(_inventory(tmp_path, HOSTS), out)
    monitoring.write_targets(_inventory(tmp_path, HOSTS[:1]), out)
    assert json.loads((out / "dcgm.json").read_text()) == []
    assert {g["labels"]["host"] for g in json.loads((out / "node.json").read_text())} == {"inf2-a"}


def test_scrape_config_reads_the_target_files_and_promtool_accepts_it(tmp_path):
    out = tmp_path / "sd"
    monitoring.write_targets(_inventory(tmp_path, HOSTS), out, with_config=True, interval="30s")
    text = (out / "prometheus.yml").read_text()
    assert "scrape_interval: 30s" in text and str(out / "neuron.json") in text
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool (Debian's prometheus package, make prereqs) is not installed")
    proc = subprocess.run([promtool, "check", "config", str(out / "prometheus.yml")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for job in monitoring.JOBS:
        assert f"{job}.json" in text


@pytest.mark.parametrize("data,expected", [
    ({"instance_type": "inf2.xlarge", "monitoring_neuron_exporter_port": 8000}, "h1: monitoring_neuron_exporter_port"),
    ({}, "h1: instance_type: needed for scrape targets"),
    ({"instance_type": "inf2.xlarge", "monitoring_fleet": "no spaces allowed"}, "h1: monitoring_fleet"),
])
def test_bad_data_is_one_line_naming_host_and_field(tmp_path, data, expected):
    result = CliRunner().invoke(main, ["monitoring", "targets", "--inventory", _inventory(tmp_path, [("h1", data)]),
                                       "--out", str(tmp_path / "sd")])
    assert result.exit_code == 1 and expected in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


class _Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        body = b"up 1\n" if self.path == "/metrics" else json.dumps(self.server.answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def loopback():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    server.answer = {}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_exporters_probed_from_here_when_no_prometheus_is_named(tmp_path, loopback):
    port = loopback.server_address[1]
    free = http.server.HTTPServer(("127.0.0.1", 0), _Metrics)
    dead = free.server_address[1]
    free.server_close()  # nothing listens there any more
    inv = _inventory(tmp_path, [("h1", {"instance_type": "g5.xlarge", "ssh_hostname": "127.0.0.1",
                                        "monitoring_node_exporter_port": port, "monitoring_dcgm_port": dead,
                                        "triton_metrics": False})])
    status = monitoring.exporters_status(inv, timeout=2)
    assert status == {"h1": {"node": True, "dcgm": False}}
    assert monitoring.exporters_cell(status["h1"]) == "node up dcgm DOWN"


def test_exporters_read_from_prometheus_up_series(tmp_path, loopback):
    loopback.answer = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"job": "node", "host": "h1"}, "value": [0, "1"]},
        {"metric": {"job": "triton", "host": "h1", "server": "a"}, "value": [0, "1"]},
        {"metric": {"job": "triton", "host": "h1", "server": "b"}, "value": [0, "0"]},
    ]}}
    inv = _inventory(tmp_path, [("h1", {"instance_type": "inf2.xlarge", "ssh_hostname": "10.9.9.9"})])
    status = monitoring.exporters_status(inv, f"http://127.0.0.1:{loopback.server_address[1]}")
    # one of two Triton servers down is down; the Neuron exporter is not scraped at all
    assert status == {"h1": {"triton": False, "node": True, "neuron": None}}
    assert monitoring.exporters_cell(status["h1"]) == "triton DOWN node up neuron ?"
