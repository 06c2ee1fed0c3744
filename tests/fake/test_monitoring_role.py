"""@fake runs of the monitoring role on every platform: which exporters a host gets, their config, and what
preflight refuses (AL2023 without a node exporter tarball)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyinfra.api.exceptions import PyinfraError

from roles.monitoring import monitoring
from tests.fake.fakehost import PLATFORMS
from tests.fake.fakehost import run_deploys as _run_deploys
from tritonfleet import wheelhouse

FPR = "0123456789ABCDEF0123456789ABCDEF01234567"
DATA = {"neuron_key_fingerprint": FPR, "nvidia_key_fingerprint": FPR, "triton_repository_secret": "s" * 24}
TARBALL = {"monitoring_node_exporter_url": "https://example.com/node_exporter-1.8.2.linux-amd64.tar.gz",
           "monitoring_node_exporter_sha256": "a" * 64}
DROPIN = "/etc/systemd/system/prometheus-node-exporter.service.d/tritonfleet.conf"
NEURON_UNIT = "/etc/systemd/system/tritonfleet-neuron-monitor.service"


def run_deploys(deploys, data, os_key, monkeypatch):
    """Neuron hosts want the host agent (its Python runs the Neuron exporter): preflight asks for its Python
    and builds the wheelhouse, here a stand-in (the real build is tested in tests/unit/test_wheelhouse)."""
    built = wheelhouse.Wheelhouse(Path("/nonexistent"), "d" * 64, "0.1.0+t")
    monkeypatch.setattr(wheelhouse, "build", lambda qa_for=None: built)
    return _run_deploys(deploys, data, os_key, monkeypatch, responses={"sys.version_info": ["3.11", "x86_64", "none"]})


def _extra(os_key: str) -> dict:
    return TARBALL if os_key == "al2023" else {}


@pytest.mark.parametrize("os_key", PLATFORMS)
def test_neuron_host_gets_node_exporter_and_neuron_monitor(monkeypatch, os_key):
    rec = run_deploys(monitoring, {**DATA, **_extra(os_key), "instance_type": "inf2.xlarge"}, os_key, monkeypatch)
    args = "--web.listen-address=0.0.0.0:9100 --collector.textfile.directory=/var/lib/prometheus/node-exporter"
    if os_key == "al2023":  # no package: the release tarball, checked, and a unit of ours
        unit = rec.uploads["/etc/systemd/system/prometheus-node-exporter.service"]
        assert f"ExecStart=/usr/local/bin/node_exporter {args}" in unit and "DynamicUser=yes" in unit
        assert any("a" * 64 in c for c in rec.commands), "the tarball's sha256 is checked"
        assert DROPIN not in rec.uploads
    else:
        assert "prometheus-node-exporter" in rec.text
        assert f"ExecStart=/usr/bin/prometheus-node-exporter {args}" in rec.uploads[DROPIN]
    unit = rec.uploads[NEURON_UNIT]
    assert ("{ /opt/aws/neuron/bin/neuron-monitor -c /etc/tritonfleet/neuron-monitor.json; kill $$; } | "
            "/opt/tritonfleet/venv/bin/python /opt/aws/neuron/bin/neuron-monitor-prometheus.py --port 9010") in unit
    config = json.loads(rec.uploads["/etc/tritonfleet/neuron-monitor.json"])
    assert config["period"] == "5s"
    assert [m["type"] for m in config["neuron_runtimes"][0]["metrics"]][0] == "neuroncore_counters"
    assert {m["type"] for m in config["system_metrics"]} == {"neuron_hw_counters", "vcpu_usage", "memory_info"}
    assert "systemctl daemon-reload" in rec.text
    # new settings: restarted, then running (the fake host's systemd knows neither unit: each is a start)
    assert rec.commands.count("systemctl start prometheus-node-exporter.service") == 2
    assert rec.commands.count("systemctl start tritonfleet-neuron-monitor.service") == 2
    assert "dcgm" not in rec.text


@pytest.mark.parametrize("os_key", PLATFORMS)
def test_gpu_host_gets_the_dcgm_exporter_with_its_gpus(monkeypatch, os_key):
    rec = run_deploys(monitoring, {**DATA, **_extra(os_key), "instance_type": "g5.xlarge",
                                   "monitoring_bind_address": "10.0.0.5", "monitoring_dcgm_port": 9500},
                      os_key, monkeypatch)
    run = next(c for c in rec.commands if c.startswith("docker run") and "tritonfleet-dcgm-exporter" in c)
    assert "--gpus '\"device=0\"'" in run and "-p 10.0.0.5:9500:9400" in run and "--restart unless-stopped" in run
    assert "--privileged" not in run and "SYS_ADMIN" not in run
    assert "docker pull -q nvcr.io/nvidia/k8s/dcgm-exporter:" in rec.text
    assert NEURON_UNIT not in rec.uploads


def test_profiling_metrics_add_only_sys_admin(monkeypatch):
    rec = run_deploys(monitoring, {**DATA, "instance_type": "g5.xlarge", "monitoring_dcgm_profiling": True},
                      "debian12", monkeypatch)
    run = next(c for c in rec.commands if c.startswith("docker run"))
    assert "--cap-add SYS_ADMIN" in run and "--privileged" not in run


def test_switched_off_exporters_are_removed(monkeypatch):
    rec = run_deploys(monitoring, {**DATA, "instance_type": "inf2.xlarge", "monitoring_neuron_exporter": False,
                                   "monitoring_node_exporter": False}, "debian12", monkeypatch)
    assert NEURON_UNIT not in rec.uploads and DROPIN not in rec.uploads
    assert "prometheus-node-exporter" not in rec.text


def test_al2023_without_a_tarball_is_refused_by_preflight(monkeypatch):
    with pytest.raises(PyinfraError) as exc:
        run_deploys(monitoring, {**DATA, "instance_type": "inf2.xlarge"}, "al2023", monkeypatch)
    text = str(exc.value)
    assert "monitoring_node_exporter_url" in text and "Amazon Linux 2023 has no node exporter package" in text


def test_textfile_directory_is_shared_with_qa(monkeypatch):
    from roles.qa import qa_schedule

    rec = run_deploys([monitoring, qa_schedule], {**DATA, "instance_type": "trn1.2xlarge",
                                                  "monitoring_textfile_dir": "/srv/textfiles",
                                                  "qa_suites": "tritonfleet/sandbox/qa"}, "debian12", monkeypatch)
    assert "--collector.textfile.directory=/srv/textfiles" in rec.uploads[DROPIN]
    assert "/srv/textfiles/tritonfleet_qa.prom" in rec.uploads["/opt/tritonfleet/qa/qa-scheduled.sh"]


def test_neuron_exporter_without_a_python_for_it_is_refused_before_anything_runs(monkeypatch):
    built = wheelhouse.Wheelhouse(Path("/nonexistent"), "d" * 64, "0.1.0+t")
    monkeypatch.setattr(wheelhouse, "build", lambda qa_for=None: built)
    with pytest.raises(PyinfraError) as exc:
        _run_deploys(monitoring, {**DATA, "instance_type": "inf2.xlarge"}, "debian12", monkeypatch,
                     responses={"sys.version_info": ["none", "x86_64", "none"]})
    text = str(exc.value)
    assert "@fake/h1: agent_python 'python3': the host agent needs Python 3.9 to 3.12" in text and "Traceback" not in text


@pytest.mark.parametrize("switch", [True, False])
def test_serve_includes_monitoring_only_behind_its_switch(monkeypatch, switch):
    from tests.fake.test_roles import SERVE_DEPLOY

    rec = run_deploys(SERVE_DEPLOY, {**DATA, "instance_type": "g5.xlarge", "monitoring_with_serve": switch},
                      "ubuntu2204", monkeypatch)
    assert (DROPIN in rec.uploads) is switch
    assert any(c.startswith("docker run") and "tritonfleet-dcgm-exporter" in c for c in rec.commands) is switch
